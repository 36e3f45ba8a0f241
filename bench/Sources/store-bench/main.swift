// store-bench: the memory store at scale, release build, one process.
//
//   store-bench [--keys N] [--shards S] [--commits M] [--receipt-bytes B] [--dir PATH]
//
// 1. Opens a store on a fresh data directory (default: a new directory under /tmp, removed at the end).
// 2. Registers N keys (default 1,000,000) through the real path: issueChallenge(.register), then
//    register (receipt of B bytes, default 64, to the receipts file; journal record; group-committed
//    fsync), from one thread, sweeping consumed challenges as the gateway would. Resident memory is read from /proc/self/statm before and after
//    (freed temporaries stay counted if malloc keeps them): bytes per key = RSS delta / N.
// 3. snapshot() of the N keys: seconds and bytes.
// 4. commitAssertion on one thread, M times (default 1,000,000), over the N keys (each commit a
//    journal write(2)); and deviceKey lookups on one thread.
// 5. close() (final snapshot + clean-stop marker), then open() again: restore seconds.
// Prints a markdown table on stdout.
import Dispatch
import Foundation
import GatewayStore
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

struct Options {
    var keys = 1_000_000
    var shards = 64
    var commits = 1_000_000
    var receiptBytes = 64
    var dir: String?
    /// Only time open() of an existing data directory (e.g. one kept with --dir).
    var restoreOnly: String?
}

func parse() -> Options {
    var o = Options()
    var args = CommandLine.arguments.dropFirst().makeIterator()
    while let a = args.next() {
        func value() -> String {
            guard let v = args.next() else { fail("\(a) needs a value") }
            return v
        }
        func int() -> Int {
            let v = value()
            guard let n = Int(v.replacingOccurrences(of: "_", with: "")), n > 0 else { fail("\(a): not a positive integer: \(v)") }
            return n
        }
        switch a {
        case "--keys": o.keys = int()
        case "--shards": o.shards = int()
        case "--commits": o.commits = int()
        case "--receipt-bytes": o.receiptBytes = int()
        case "--dir": o.dir = value()
        case "--restore-only": o.restoreOnly = value()
        case "-h", "--help":
            print("usage: store-bench [--keys N] [--shards S] [--commits M] [--receipt-bytes B] [--dir PATH] | --restore-only PATH")
            exit(0)
        default: fail("unknown option \(a)")
        }
    }
    return o
}

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("store-bench: \(message)\n".utf8))
    exit(2)
}

func log(_ message: String) { FileHandle.standardError.write(Data("store-bench: \(message)\n".utf8)) }

func residentBytes() -> Int {
    guard let text = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return 0 }
    let fields = text.split(separator: " ")
    return (Int(fields[1]) ?? 0) * Int(sysconf(Int32(_SC_PAGESIZE)))
}

func seconds(_ body: () throws -> Void) rethrows -> Double {
    let start = ContinuousClock.now
    try body()
    let d = ContinuousClock.now - start
    return Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18
}

/// splitmix64: the bench's key ids and points (random-looking, reproducible, no allocation).
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
        out.reserveCapacity(n)
        while out.count < n { withUnsafeBytes(of: next()) { out.append(contentsOf: $0.prefix(n - out.count)) } }
        return out
    }
}

func keyID(_ i: Int) -> KeyID {
    var m = Mix(state: UInt64(i) &* 0x2545_F491_4F6C_DD1D)
    return KeyID(m.bytes(32))!
}

/// User + system CPU seconds of this process so far.
func cpuSeconds() -> Double {
    var u = rusage()
    getrusage(RUSAGE_SELF.rawValue, &u)
    return Double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + Double(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6
}

/// Wall and CPU seconds of `body`.
func timed(_ body: () throws -> Void) rethrows -> (wall: Double, cpu: Double) {
    let cpu0 = cpuSeconds()
    let wall = try seconds(body)
    return (wall, cpuSeconds() - cpu0)
}

let options = parse()
if let path = options.restoreOnly {
    do {
        var keys = 0
        let t = try timed {
            let store = try MemoryAttestStore.open(directory: path, shards: options.shards)
            keys = store.statistics.keys
        }
        print("restore of \(keys) keys: \(t.wall) s wall, \(t.cpu) s CPU")
        exit(0)
    } catch {
        fail("\(error)")
    }
}
let now: Int64 = 1_750_000_000_000
let dir =
    options.dir
    ?? {
        var template = Array("/tmp/store-bench-XXXXXX".utf8CString)
        guard template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) != nil else { fail("mkdtemp failed") }
        return String(decoding: template.prefix(while: { $0 != 0 }).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }()
defer { if options.dir == nil { try? FileManager.default.removeItem(atPath: dir) } }

do {
    let store = try MemoryAttestStore.open(directory: dir, shards: options.shards, challenges: ChallengeLimits())
    let rssBefore = residentBytes()
    let receipt = [UInt8](repeating: 0x5A, count: options.receiptBytes)
    let done = Atomic<Int>(0)
    let failures = Atomic<Int>(0)
    let allDone = DispatchSemaphore(value: 0)
    let n = options.keys
    log("registering \(n) keys in \(dir)")
    // One producer thread (completions arrive on the journal's sync queue); as in the gateway, the
    // consumed registration challenges are swept as their expiry passes (here: every 4096 keys,
    // with the clock moved past their TTL).
    let registerSeconds = seconds {
        var m = Mix(state: 1 << 40)
        var t = now
        for i in 0..<n {
            let id = keyID(i)
            let record = DeviceKeyRecord(
                keyID: id, publicKey: [0x04] + m.bytes(64), counter: 0, appID: "TEAM123456.com.example.app",
                environment: .production, validationCategory: i % 2 == 0 ? 1 : nil,
                bundleVersion: i % 2 == 0 ? "27.0 (1)" : nil, firstSeenMillis: t, lastSeenMillis: t)
            let at = t
            store.issueChallenge(ChallengeRequest(purpose: .register, keyID: id, ttlMillis: 60_000), nowMillis: at) { issued in
                guard case .success(let challenge) = issued else { fatalError("issue failed: \(issued)") }
                store.register(Registration(record: record, receipt: receipt, challenge: challenge.token), nowMillis: at) { result in
                    if case .success(.registered(existing: false)) = result {} else { failures.wrappingAdd(1, ordering: .relaxed) }
                    if done.wrappingAdd(1, ordering: .relaxed).newValue == n { allDone.signal() }
                }
            }
            if i % 4096 == 4095 {
                t += 60_000
                _ = store.sweepExpired(nowMillis: t)
            }
        }
        allDone.wait()
    }
    guard failures.load(ordering: .relaxed) == 0 else { fail("\(failures.load(ordering: .relaxed)) registrations failed") }
    _ = store.sweepExpired(nowMillis: Int64.max)
    let rssAfter = residentBytes()
    let perKey = Double(rssAfter - rssBefore) / Double(n)
    log("registered in \(registerSeconds) s; \(perKey) B/key")

    var report = SnapshotReport(keys: 0, challenges: 0, bytes: 0, seconds: 0)
    let snapshotTime = try timed { report = try store.snapshot() }
    log("snapshot \(report.seconds) s, \(report.bytes) bytes")

    let commits = options.commits
    var committed = 0
    let ids = (0..<min(n, 65_536)).map(keyID)
    let commitSeconds = seconds {
        let box = Mutex(0)
        for c in 0..<commits {
            let id = ids[c % ids.count]
            let counter = UInt32(c / ids.count + 1)
            store.commitAssertion(AssertionCommit(keyID: id, counter: counter, challenge: nil), nowMillis: now) { r in
                if case .success(.committed) = r { box.withLock { $0 += 1 } }
            }
        }
        committed = box.withLock { $0 }
    }
    guard committed == commits else { fail("only \(committed) of \(commits) commits committed") }

    let challengeCommits = min(commits, 200_000)
    let challengeSeconds = seconds {
        for c in 0..<challengeCommits {
            let id = ids[c % ids.count]
            store.issueChallenge(ChallengeRequest(purpose: .assert, keyID: id, ttlMillis: 60_000), nowMillis: now) { issued in
                guard case .success(let ch) = issued else { fatalError("issue failed") }
                store.commitAssertion(AssertionCommit(keyID: id, counter: UInt32(1_000_000 + c), challenge: ch.token), nowMillis: now) {
                    r in
                    guard case .success(.committed) = r else { fatalError("commit with challenge failed: \(r)") }
                }
            }
        }
    }
    _ = store.sweepExpired(nowMillis: now + 60_000)

    let lookups = 1_000_000
    let lookupSeconds = seconds {
        let found = Mutex(0)
        for c in 0..<lookups {
            store.deviceKey(ids[c % ids.count]) { r in if case .success(.some) = r { found.withLock { $0 += 1 } } }
        }
        guard found.withLock({ $0 }) == lookups else { fail("lookups missed keys") }
    }

    try store.close()
    var restoredKeys = 0
    var again: MemoryAttestStore?
    let restoreTime = try timed {
        again = try MemoryAttestStore.open(directory: dir, shards: options.shards)
        restoredKeys = again?.statistics.keys ?? 0
    }
    try again?.close()
    guard restoredKeys == n else { fail("restored \(restoredKeys) keys, expected \(n)") }

    func f(_ x: Double, _ digits: Int = 2) -> String { String(format: "%.\(digits)f", x) }
    print(
        """
        | store-bench (\(n) keys, \(options.shards) shards, release) | measured | goal |
        | --- | ---: | ---: |
        | memory per key (RSS delta / keys) | \(f(perKey, 1)) B | ≤ 256 B |
        | snapshot (\(f(Double(report.bytes) / 1e6, 1)) MB, write + fsync + rename), wall | \(f(snapshotTime.wall, 3)) s | ≤ 1 s |
        | snapshot, CPU (user + system) | \(f(snapshotTime.cpu, 3)) s | |
        | restore (open: snapshot read, checked, loaded), wall | \(f(restoreTime.wall, 3)) s | ≤ 1 s |
        | restore, CPU (user + system) | \(f(restoreTime.cpu, 3)) s | |
        | commitAssertion, one thread, journaled (write(2) each) | \(f(Double(commits) / commitSeconds, 0)) ops/s | |
        | issueChallenge + commitAssertion with challenge, one thread | \(f(Double(challengeCommits) / challengeSeconds, 0)) pairs/s | |
        | deviceKey, one thread | \(f(Double(lookups) / lookupSeconds, 0)) ops/s | |
        | register (issue + register, one thread, group-committed fsync) | \(f(Double(n) / registerSeconds, 0)) keys/s | |
        """)
} catch {
    fail("\(error)")
}
