// key-memory: what one registered key costs, with a real-size receipt, in each store (issue 19).
//
//   key-memory --store memory|data-dir|redis [--keys N] [--receipt-bytes B] [--shards S] [--redis-port P]
//
// Registers N keys (default 1,000,000; receipts of B bytes, default 3,900, the size of Apple's
// 3.6–4.0 KB receipts) through the store's real path: issueChallenge(.register) then register, from
// one thread, consumed challenges swept as the gateway does.
//   memory    MemoryAttestStore without a data directory (receipts are not kept).
//   data-dir  MemoryAttestStore on a fresh data directory under /tmp (receipts on disk).
//   redis     RedisAttestStore on a redis-server at 127.0.0.1:P (bench/key-memory starts one);
//             Redis' memory is read by the script (INFO memory), not here.
// For the memory stores: resident memory from /proc/self/statm before the first and after the last
// registration, RSS delta / N; with a data directory also the bytes on disk per key. Prints one
// JSON line.
import Dispatch
import Foundation
import GatewayRedis
import GatewayStore
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

enum Kind: String { case memory, dataDir = "data-dir", redis }

struct Options {
    var kind = Kind.memory
    var keys = 1_000_000
    var receiptBytes = 3_900
    var shards = 64
    var redisPort: UInt16 = 6379
}

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("key-memory: \(message)\n".utf8))
    exit(2)
}

func parse() -> Options {
    var o = Options()
    var args = CommandLine.arguments.dropFirst().makeIterator()
    while let a = args.next() {
        guard let v = args.next() else { fail("\(a) needs a value") }
        func int() -> Int {
            guard let n = Int(v.replacingOccurrences(of: "_", with: "")), n > 0 else { fail("\(a): not a positive integer: \(v)") }
            return n
        }
        switch a {
        case "--store": o.kind = Kind(rawValue: v) ?? { fail("--store: memory, data-dir or redis, not \(v)") }()
        case "--keys": o.keys = int()
        case "--receipt-bytes": o.receiptBytes = int()
        case "--shards": o.shards = int()
        case "--redis-port": o.redisPort = UInt16(int())
        default: fail("unknown option \(a)")
        }
    }
    return o
}

func residentBytes() -> Int {
    guard let text = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return 0 }
    let fields = text.split(separator: " ")
    return (Int(fields[1]) ?? 0) * Int(sysconf(Int32(_SC_PAGESIZE)))
}

/// splitmix64: reproducible key ids, points and receipt bytes.
struct Mix {
    var state: UInt64
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
    mutating func bytes(_ n: Int) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(n + 8)
        while out.count < n { withUnsafeBytes(of: next()) { out.append(contentsOf: $0) } }
        return Array(out.prefix(n))
    }
}

func directorySize(_ path: String) -> Int {
    let names = (try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []
    return names.reduce(0) { sum, name in
        sum + ((try? FileManager.default.attributesOfItem(atPath: "\(path)/\(name)")[.size] as? Int) ?? 0)
    }
}

let o = parse()
let now: Int64 = 1_750_000_000_000
var dir: String?
let store: any AttestStore
var memoryStore: MemoryAttestStore?
var redisStore: RedisAttestStore?
switch o.kind {
case .memory:
    memoryStore = MemoryAttestStore(shards: o.shards)
    store = memoryStore!
case .dataDir:
    var template = Array("/tmp/key-memory-XXXXXX".utf8CString)
    guard template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) != nil else { fail("mkdtemp failed") }
    dir = String(decoding: template.prefix(while: { $0 != 0 }).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    do {
        memoryStore = try MemoryAttestStore.open(directory: dir, shards: o.shards)
    } catch {
        fail("\(error)")
    }
    store = memoryStore!
case .redis:
    redisStore = RedisAttestStore(
        options: .init(
            endpoint: RedisEndpoint(host: "127.0.0.1", port: o.redisPort, timeoutMillis: 5_000), connections: 2,
            limits: KeyLimits(maxKeys: 1_000_000_000)))
    guard redisStore!.waitUntilConnected(timeoutMillis: 10_000) else { fail("redis at port \(o.redisPort): \(redisStore!.lastError)") }
    store = redisStore!
}
defer { if let dir { try? FileManager.default.removeItem(atPath: dir) } }

let rssBefore = residentBytes()
let done = Atomic<Int>(0)
let failures = Atomic<Int>(0)
let inFlight = DispatchSemaphore(value: 256)
let start = ContinuousClock.now
var m = Mix(state: 7)
var t = now
for i in 0..<o.keys {
    let id = KeyID(m.bytes(32))!
    let record = DeviceKeyRecord(
        keyID: id, publicKey: [0x04] + m.bytes(64), counter: 0, appID: "TEAM123456.com.example.app", environment: .production,
        validationCategory: 7, bundleVersion: "27.0 (1)", firstSeenMillis: t, lastSeenMillis: t)
    let receipt = m.bytes(o.receiptBytes)
    let at = t
    inFlight.wait()
    store.issueChallenge(ChallengeRequest(purpose: .register, keyID: id, ttlMillis: 60_000), nowMillis: at) { issued in
        guard case .success(let challenge) = issued else { fail("issue failed: \(issued)") }
        store.register(Registration(record: record, receipt: receipt, challenge: challenge.token), nowMillis: at) { result in
            if case .success(.registered(existing: false)) = result {} else { failures.wrappingAdd(1, ordering: .relaxed) }
            done.wrappingAdd(1, ordering: .relaxed)
            inFlight.signal()
        }
    }
    if i % 4096 == 4095 {
        t += 60_000
        _ = memoryStore?.sweepExpired(nowMillis: t)
    }
}
while done.load(ordering: .relaxed) < o.keys { usleep(1_000) }
let elapsed = (ContinuousClock.now - start).components
let seconds = ((Double(elapsed.seconds) + Double(elapsed.attoseconds) / 1e18) * 1000).rounded() / 1000
guard failures.load(ordering: .relaxed) == 0 else { fail("\(failures.load(ordering: .relaxed)) registrations failed") }
_ = memoryStore?.sweepExpired(nowMillis: .max)
let rssAfter = residentBytes()

var out: [String: Any] = ["store": o.kind.rawValue, "keys": o.keys, "receipt_bytes": o.receiptBytes, "register_seconds": seconds]
if o.kind != .redis {
    out["rss_bytes_per_key"] = (Double(rssAfter - rssBefore) / Double(o.keys) * 10).rounded() / 10
}
if let dir, let memoryStore {
    _ = try? memoryStore.snapshot()
    out["disk_bytes_per_key"] = (Double(directorySize(dir)) / Double(o.keys) * 10).rounded() / 10
    out["receipt_file_bytes"] = memoryStore.receiptBytes.file
    try? memoryStore.close()
}
redisStore?.close()
let json = try JSONSerialization.data(withJSONObject: out, options: [.sortedKeys])
print(String(decoding: json, as: UTF8.self))
