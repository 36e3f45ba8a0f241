// libFuzzer target: the memory store's restore (MemoryAttestStore.open) from damaged files that the
// store itself wrote. Once per process, in a private directory (on /dev/shm when there is one): a
// store registers keys, advances their counters (with and without a counter window), claims device
// tokens, snapshots, advances more, and "crashes" (is dropped without close()); a second store
// restores that, writes more and crashes too. That leaves snapshot.dat (covering segment 1),
// journal segments 2 and 3 (both replayed; 3 the last) and receipts.dat, and the counters the last
// store held: the truth. Each input is a list of damages to those files; the damaged copy is opened.
//
// Input: 4-byte operations [op] [offset high] [offset low] [argument]. op % 16 selects the file (in
// name order, among snapshot.dat, the two segments and receipts.dat: op % 16 % count), op / 16 the
// damage: 0-7 xor the byte at offset with the argument (0 as 1), 8-9 truncate at offset, 10 a length
// field pointing at the file's end (u32 at offset = size - offset - 8 + argument as Int8), 11 zero
// argument % 32 + 1 bytes, 12 delete the file, 13 u32 at offset = argument, 14-15 xor as 0-7. Offsets
// are taken modulo the file's size + 1.
//
// What the store guarantees (docs/store.md, "Journal damage"), checked (a violation traps):
//   1. Nothing crashes. open either restores or throws a StoreError naming the problem; damage only
//      in journal records (not a header, not the snapshot) never stops a start.
//   2. A changed or truncated snapshot is refused (SHA-256); a changed record is reported (damage or
//      a torn tail) unless it was cut off whole at a record boundary (indistinguishable from a crash).
//   3. No key appears that was never registered, and no key's public key changes.
//   4. Counters are never lowered: a restored key's counter is at least the snapshot's counter of
//      that key (when the snapshot is intact) and every intact replayed record's counter; a key the
//      intact snapshot or an intact registration record holds is restored.
//   5. Reported damage lies inside its segment.
//   Inputs whose damage makes a record whose checksum holds where none was written (a forged record:
//   CRC-32C is no MAC) are only held to 1 and 5.
import Dispatch
import Foundation
import FuzzSupport
import GatewayStore
import Glibc

let t0: Int64 = 1_700_000_000_000
let headerSize = 24

/// A store call made blocking (the memory store answers a registration after its fsync).
final class Box<T>: @unchecked Sendable { var value: T? }

func wait<T>(_ call: (@escaping @Sendable (T) -> Void) -> Void) -> T {
    let box = Box<T>()
    let done = DispatchSemaphore(value: 0)
    call { v in
        box.value = v
        done.signal()
    }
    guard done.wait(timeout: .now() + 30) == .success, let v = box.value else { fuzzFail("a store call did not answer") }
    return v
}

func key(_ store: MemoryAttestStore, _ id: KeyID) -> DeviceKeyRecord? {
    switch wait({ store.deviceKey(id, completion: $0) }) {
    case .success(let r): return r
    case .failure(let e): fuzzFail("deviceKey: \(e)")
    }
}

/// One record of an original segment.
struct Record {
    let file: Int
    let offset: Int
    let size: Int
    let key: [UInt8]?
    let counter: UInt32?
    let isRegistration: Bool
}

struct Origin {
    let directory: String
    let names: [String]
    let files: [[UInt8]]
    let records: [Record]
    let publicKeys: [[UInt8]: [UInt8]]
    let snapshotCounters: [[UInt8]: UInt32]
    let finalCounters: [[UInt8]: UInt32]
    var snapshotIndex: Int { names.firstIndex(of: "snapshot.dat")! }
    var segments: [Int] { names.indices.filter { names[$0].hasPrefix("journal-") } }
}

func makeTemp(_ name: String) -> String {
    let base = FileManager.default.fileExists(atPath: "/dev/shm") ? "/dev/shm" : NSTemporaryDirectory()
    var template = Array("\(base)/attest-fuzz-\(name)-XXXXXX".utf8CString)
    guard template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) != nil else { fuzzFail("mkdtemp failed") }
    return String(decoding: template.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
}

func open(_ dir: String) -> Result<MemoryAttestStore, Error> {
    do { return .success(try MemoryAttestStore.open(directory: dir, shards: 4)) } catch { return .failure(error) }
}

let origin: Origin = {
    let dir = makeTemp("store")
    atexit { if let d = getenv("ATTEST_FUZZ_STORE_DIR") { _ = try? FileManager.default.removeItem(atPath: String(cString: d)) } }
    setenv("ATTEST_FUZZ_STORE_DIR", dir, 1)
    let data = "\(dir)/origin"
    var rng = FuzzRandom(seed: 0x5107e)
    func record(_ i: Int) -> DeviceKeyRecord {
        let id = KeyID((0..<32).map { _ in UInt8(truncatingIfNeeded: rng.next()) })!
        let point = [0x04] + (0..<64).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
        let risk =
            i % 2 == 0
            ? KeyRisk(
                receiptCreatedMillis: t0, notBeforeMillis: t0 + 86_400_000, expiresMillis: t0 + 90 * 86_400_000,
                nextRefreshMillis: t0 + 86_400_000) : nil
        return DeviceKeyRecord(
            keyID: id, publicKey: point, counter: 0, appID: "TEAM123456.com.example.app\(i % 2)",
            environment: i % 3 == 0 ? .development : .production,
            validationCategory: i % 2 == 0 ? 4 : nil, bundleVersion: i % 2 == 0 ? "4.2" : nil, firstSeenMillis: t0, lastSeenMillis: t0,
            risk: risk)
    }
    func register(_ s: MemoryAttestStore, _ r: DeviceKeyRecord) {
        guard
            case .success(let c) = wait({
                s.issueChallenge(ChallengeRequest(purpose: .register, keyID: nil, ttlMillis: 60_000), nowMillis: t0, completion: $0)
            })
        else {
            fuzzFail("issue")
        }
        let receipt = (0..<(40 + Int(r.keyID.bytes[0]))).map { UInt8(truncatingIfNeeded: $0) }
        guard
            case .success(.registered) = wait({
                s.register(Registration(record: r, receipt: receipt, challenge: c.token), nowMillis: t0, completion: $0)
            })
        else {
            fuzzFail("register")
        }
    }
    func commit(_ s: MemoryAttestStore, _ r: DeviceKeyRecord, _ counter: UInt32, window: Int = 0) {
        guard
            case .success(.committed) = wait({
                s.commitAssertion(
                    AssertionCommit(keyID: r.keyID, counter: counter, challenge: nil, counterWindow: window), nowMillis: t0, completion: $0)
            })
        else {
            fuzzFail("commit \(counter)")
        }
    }
    func claim(_ s: MemoryAttestStore, _ n: UInt8) {
        guard case .success = wait({ s.claimToken([UInt8](repeating: n, count: 32), ttlMillis: 3_600_000, nowMillis: t0, completion: $0) })
        else { fuzzFail("claim") }
    }
    let records = (0..<8).map(record)
    var snapshotCounters: [[UInt8]: UInt32] = [:]
    do {
        guard case .success(let a) = open(data) else { fuzzFail("open origin") }
        for r in records[0..<6] { register(a, r) }
        for (i, r) in records[0..<6].enumerated() { for c in 1...UInt32(1 + i % 3) { commit(a, r, c) } }
        commit(a, records[1], 10, window: 8)
        commit(a, records[1], 7, window: 8)
        claim(a, 1)
        for r in records[0..<6] { snapshotCounters[r.keyID.bytes] = key(a, r.keyID)!.counter }
        guard (try? a.snapshot()) != nil else { fuzzFail("snapshot") }
        commit(a, records[0], 4)
        commit(a, records[2], 6)
        register(a, records[6])
        commit(a, records[6], 5)
        commit(a, records[1], 12, window: 8)
        claim(a, 2)
    }  // a crashes: dropped without close()
    var finalCounters: [[UInt8]: UInt32] = [:]
    do {
        guard case .success(let b) = open(data) else { fuzzFail("reopen origin") }
        commit(b, records[3], 7)
        commit(b, records[6], 9)
        register(b, records[7])
        commit(b, records[7], 2)
        commit(b, records[0], 5, window: 4)
        commit(b, records[0], 30, window: 40)
        claim(b, 3)
        for r in records { finalCounters[r.keyID.bytes] = key(b, r.keyID)!.counter }
    }  // b crashes
    let names = ((try? FileManager.default.contentsOfDirectory(atPath: data)) ?? []).filter { $0 != "lock" }.sorted()
    guard names.count == 4, names.contains("snapshot.dat"), names.contains("receipts.dat") else { fuzzFail("origin files: \(names)") }
    let files = names.map { [UInt8](FileManager.default.contents(atPath: "\(data)/\($0)") ?? Data()) }
    var parsed: [Record] = []
    let keys = Set(records.map(\.keyID.bytes))
    for (i, name) in names.enumerated() where name.hasPrefix("journal-") {
        let f = files[i]
        var at = headerSize
        while at + 8 <= f.count {
            let length = Int(u32(f, at))
            guard at + 8 + length <= f.count, length > 0 else { fuzzFail("origin segment \(name) does not frame at \(at)") }
            let type = f[at + 8]
            let keyBytes = type == 1 || type == 2 || type == 3 || type == 4 ? Array(f[(at + 9)..<(at + 41)]) : nil
            let counterAt: Int? = type == 2 ? at + 8 + 33 : type == 1 ? at + 8 + 97 : nil
            if let keyBytes, !keys.contains(keyBytes) { fuzzFail("origin record at \(at) of \(name) names an unknown key") }
            parsed.append(
                Record(
                    file: i, offset: at, size: 8 + length, key: keyBytes, counter: counterAt.map { u32(f, $0) }, isRegistration: type == 1))
            at += 8 + length
        }
        guard at == f.count else { fuzzFail("origin segment \(name) has a tail") }
    }
    let origin = Origin(
        directory: dir, names: names, files: files, records: parsed,
        publicKeys: Dictionary(uniqueKeysWithValues: records.map { ($0.keyID.bytes, $0.publicKey) }),
        snapshotCounters: snapshotCounters, finalCounters: finalCounters)
    // The undamaged copy restores exactly what the last store held.
    let work = prepare(origin, origin.files, deleted: [])
    guard case .success(let s) = open(work) else { fuzzFail("the undamaged copy does not open") }
    guard s.restoreReport.damage.isEmpty, s.restoreReport.tornTail == nil else { fuzzFail("the undamaged copy reports damage") }
    for r in records where key(s, r.keyID)?.counter != finalCounters[r.keyID.bytes] {
        fuzzFail("the undamaged copy restores another counter")
    }
    return origin
}()

func u32(_ b: [UInt8], _ at: Int) -> UInt32 {
    UInt32(b[at]) | UInt32(b[at + 1]) << 8 | UInt32(b[at + 2]) << 16 | UInt32(b[at + 3]) << 24
}

/// Writes `files` (nil: deleted) into a fresh work directory and returns its path.
func prepare(_ o: Origin, _ files: [[UInt8]], deleted: Set<Int>) -> String {
    let work = "\(o.directory)/work"
    if let names = try? FileManager.default.contentsOfDirectory(atPath: work) {
        for n in names { unlink("\(work)/\(n)") }
    } else {
        mkdir(work, 0o700)
    }
    for (i, name) in o.names.enumerated() where !deleted.contains(i) {
        let fd = Glibc.open("\(work)/\(name)", O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        guard fd >= 0 else { fuzzFail("cannot write \(name)") }
        files[i].withUnsafeBytes { b in
            var done = 0
            while done < b.count {
                let n = Glibc.write(fd, b.baseAddress! + done, b.count - done)
                guard n > 0 else { fuzzFail("write failed") }
                done += n
            }
        }
        close(fd)
    }
    return work
}

// CRC-32C (Castagnoli), to recognise a record whose checksum holds.
let crcTable: [UInt32] = (0..<256).map { i -> UInt32 in
    var c = UInt32(i)
    for _ in 0..<8 { c = c & 1 != 0 ? 0x82F6_3B78 ^ (c >> 1) : c >> 1 }
    return c
}

func crc32c(_ b: ArraySlice<UInt8>) -> UInt32 {
    var c: UInt32 = 0xFFFF_FFFF
    for x in b { c = crcTable[Int((c ^ UInt32(x)) & 0xff)] ^ (c >> 8) }
    return c ^ 0xFFFF_FFFF
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let o = origin
    let input = FuzzInput.bytes(data, size)
    var files = o.files
    var deleted: Set<Int> = []
    var changed = Array(repeating: Set<Int>(), count: files.count)  // byte offsets that differ, per file
    for k in stride(from: 0, to: input.count - 3, by: 4) {
        let op = input[k], arg = input[k + 3]
        let f = Int(op % 16) % files.count
        let offset = (Int(input[k + 1]) << 8 | Int(input[k + 2])) % (files[f].count + 1)
        func set(_ at: Int, _ byte: UInt8) {
            guard at < files[f].count else { return }
            files[f][at] = byte
        }
        switch op / 16 {
        case 8, 9: files[f].removeSubrange(offset...)
        case 10:
            let v = UInt32(truncatingIfNeeded: files[f].count - offset - 8 + Int(Int8(bitPattern: arg)))
            for j in 0..<4 { set(offset + j, UInt8(truncatingIfNeeded: v >> (8 * UInt32(j)))) }
        case 11: for j in 0...(Int(arg) % 32) { set(offset + j, 0) }
        case 12: deleted.insert(f)
        case 13: for j in 0..<4 { set(offset + j, j == 0 ? arg : 0) }
        default: if offset < files[f].count { set(offset, files[f][offset] ^ (arg == 0 ? 1 : arg)) }
        }
    }
    for f in files.indices {
        let n = min(files[f].count, o.files[f].count)
        for j in 0..<n where files[f][j] != o.files[f][j] { changed[f].insert(j) }
    }
    let work = prepare(o, files, deleted: deleted)
    let result = open(work)

    let snapshotIntact = !deleted.contains(o.snapshotIndex) && files[o.snapshotIndex] == o.files[o.snapshotIndex]
    let segments = o.segments
    /// A segment header that reads as written (bytes 12..<16 are not read).
    func headerIntact(_ s: Int) -> Bool {
        !deleted.contains(s) && files[s].count >= headerSize && !changed[s].contains { $0 < 12 || ($0 >= 16 && $0 < headerSize) }
    }
    // The last segment may be gone or shorter than its header (a crash right after creating it).
    let last = segments.last!
    let lastUsable = deleted.contains(last) || files[last].count < headerSize || headerIntact(last)
    let mustStart = snapshotIntact && segments.dropLast().allSatisfy(headerIntact) && lastUsable
    let store: MemoryAttestStore
    switch result {
    case .failure(let error):
        guard let e = error as? StoreError, !e.detail.isEmpty else { fuzzFail("open threw \(error)") }
        // Property 1: damage in journal records only never stops a start.
        if mustStart { fuzzFail("damage in journal records stopped a start: \(e)") }
        return 0
    case .success(let s):
        store = s
    }
    // Property 2: a damaged snapshot is refused.
    if !snapshotIntact && !deleted.contains(o.snapshotIndex) { fuzzFail("a damaged snapshot was restored") }
    let report = store.restoreReport
    // Property 5.
    for d in report.damage {
        guard let i = o.names.firstIndex(where: { d.segment.hasSuffix("/\($0)") }) else { fuzzFail("damage in \(d.segment)") }
        guard d.offset >= headerSize, d.length > 0, d.offset + d.length <= files[i].count else {
            fuzzFail("damage \(d) outside its segment of \(files[i].count) bytes")
        }
    }
    if forged(o, files, deleted: deleted) { return 0 }

    // Which original records are intact (every byte there and unchanged), and which are changed.
    var intact: [Record] = []
    var damagedRecord = false
    for r in o.records where !deleted.contains(r.file) {
        let end = r.offset + r.size
        if files[r.file].count >= end && !changed[r.file].contains(where: { $0 >= r.offset && $0 < end }) {
            intact.append(r)
        } else if files[r.file].count > r.offset {
            damagedRecord = true  // changed, or cut inside (a record cut off whole at its start is gone silently)
        }
    }
    if damagedRecord && report.damage.isEmpty && report.tornTail == nil { fuzzFail("a damaged record was not reported") }

    // Properties 3 and 4.
    var found = 0
    for (id, point) in o.publicKeys {
        let k = key(store, KeyID(id)!)
        var floor: UInt32? = snapshotIntact ? o.snapshotCounters[id] : nil
        var mustExist = floor != nil
        for r in intact where r.key == id {
            if let c = r.counter { floor = max(floor ?? 0, c) }
            if r.isRegistration { mustExist = true }
        }
        guard let k else {
            if mustExist { fuzzFail("a key the intact snapshot or an intact registration holds was not restored") }
            continue
        }
        found += 1
        guard k.publicKey == point else { fuzzFail("a key's public key changed") }
        if let floor, k.counter < floor {
            fuzzFail("counter lowered: \(k.counter), intact records and snapshot say at least \(floor) (truth \(o.finalCounters[id]!))")
        }
    }
    guard store.statistics.keys == found else { fuzzFail("\(store.statistics.keys) keys restored, \(found) of them registered") }
    return 0
}

/// Whether the damage left a record whose checksum holds where the store wrote none (or a different
/// one): then the journal says what it says, and only crashes and bounds are checked.
func forged(_ o: Origin, _ files: [[UInt8]], deleted: Set<Int>) -> Bool {
    for s in o.segments where !deleted.contains(s) {
        let f = files[s]
        let originals = Dictionary(uniqueKeysWithValues: o.records.filter { $0.file == s }.map { ($0.offset, $0) })
        var p = headerSize
        while p + 8 <= f.count {
            let length = Int(u32(f, p))
            if length > 0, length <= 64 * 1024, p + 8 + length <= f.count, crc32c(f[(p + 8)..<(p + 8 + length)]) == u32(f, p + 4) {
                guard let r = originals[p], r.size == 8 + length, f[p..<(p + r.size)] == o.files[s][p..<(p + r.size)] else { return true }
            }
            p += 1
        }
    }
    return false
}
