import Foundation
import GatewayTestSupport
import Glibc
import Synchronization
import Testing

@testable import GatewayStore

private let t0: Int64 = 1_700_000_000_000

/// A receipt that names its key and version, so one read back from the wrong offset or file
/// cannot pass for the right one.
private func receipt(_ record: DeviceKeyRecord, version: Int, bytes n: Int = 300) -> [UInt8] {
    let tag = Array("\(record.keyID) v\(version) ".utf8)
    return (0..<n).map { tag[$0 % tag.count] }
}

/// Write failures, compactions and take-backs, as the observer saw them.
final class BoundsLog: AttestStoreObserver, @unchecked Sendable {
    private let state = Mutex<(failures: [StoreWriteFailure], compacted: Int, compactionFailures: Int, snapshots: Int)>(
        ([], 0, 0, 0))

    var failures: [StoreWriteFailure] { state.withLock { $0.failures } }
    var compacted: Int { state.withLock { $0.compacted } }
    var compactionFailures: Int { state.withLock { $0.compactionFailures } }
    var snapshots: Int { state.withLock { $0.snapshots } }

    func storeWriteFailed(_ failure: StoreWriteFailure) { state.withLock { $0.failures.append(failure) } }
    func receiptsCompacted(_ report: ReceiptCompactionReport) { state.withLock { $0.compacted += 1 } }
    func receiptCompactionFailed(_ error: StoreError) { state.withLock { $0.compactionFailures += 1 } }
    func snapshotWritten(_ report: SnapshotReport) { state.withLock { $0.snapshots += 1 } }
}

/// The key bounds (issue 19 §2) on the fault seam and the journal-damage handling (§1, §4), and
/// the challenge budgets (issue 18 §3) on directories written before the key bounds: the parts
/// of the three that meet in the store.
@Suite("Memory store: key bounds, compaction, write faults and journal damage together")
struct BoundsUnderFaultsTests {
    static func open(
        _ dir: TempDirectory, _ calls: FaultyCalls, _ log: BoundsLog, limits: KeyLimits = KeyLimits(maxReregistrations: 100),
        retryMillis: Int = 10
    ) throws -> MemoryAttestStore {
        try MemoryAttestStore.open(
            directory: dir.path, shards: 4, challenges: ChallengeLimits(anonymous: 1_000, keyBound: 1_000), observer: log,
            exclusive: true, limits: limits, calls: calls, retry: Journal.Retry(initialMillis: retryMillis, maxMillis: retryMillis * 4))
    }

    /// 10 keys, the first 5 re-registered with a new receipt: returns the receipts expected now.
    static func fill(_ store: MemoryAttestStore, _ records: [DeviceKeyRecord]) throws -> [KeyID: [UInt8]] {
        var expected: [KeyID: [UInt8]] = [:]
        for r in records {
            expected[r.keyID] = receipt(r, version: 0)
            try store.registerFresh(r, receipt: expected[r.keyID]!, now: t0)
        }
        for r in records.prefix(records.count / 2) {
            expected[r.keyID] = receipt(r, version: 1)
            try store.registerFresh(r, receipt: expected[r.keyID]!, now: t0 + 1_000)
        }
        return expected
    }

    static func checkReceipts(
        _ store: MemoryAttestStore, _ expected: [KeyID: [UInt8]], sourceLocation: SourceLocation = #_sourceLocation
    ) {
        #expect(store.statistics.keys == expected.count, sourceLocation: sourceLocation)
        for (id, bytes) in expected { #expect(store.receipt(for: id) == bytes, "\(id)", sourceLocation: sourceLocation) }
    }

    static func receiptFiles(_ dir: TempDirectory) -> [String] { dir.files().filter { $0.hasPrefix("receipts") } }

    /// A compaction whose copy cannot be opened, written or renamed goes through the fault seam:
    /// the failed call is reported (counted by the gateway as a store write error of the receipts
    /// file), the compaction's files are removed, the snapshot is written without it, and writes go
    /// on (a snapshot failure never puts the store in a write fault). Once the receipts file grew,
    /// the next snapshot compacts.
    @Test(arguments: [StoreWriteFailure.Operation.open, .write, .rename], faultErrnos)
    func aCompactionThatCannotWriteItsCopyIsCountedAndWritesGoOn(_ operation: StoreWriteFailure.Operation, _ code: Int32) throws {
        let dir = TempDirectory()
        defer { dir.remove() }
        var rng = SeededRandom(seed: 501)
        let calls = FaultyCalls()
        let log = BoundsLog()
        let store = try Self.open(dir, calls, log)
        store.compactionMinimumGarbage.store(0, ordering: .relaxed)
        let records = (0..<10).map { _ in makeRecord(&rng, seen: t0) }
        var expected = try Self.fill(store, records)
        settle()

        calls.fail(operation, .receipts, errno: code, times: 1)
        let report = try store.snapshot()
        #expect(report.keys == 10)
        #expect(log.snapshots == 1 && log.compactionFailures == 1 && log.compacted == 0)
        #expect(
            log.failures.contains {
                $0.operation == operation && $0.file == .receipts && $0.errno == code
                    && $0.path == dir.file("receipts-0000000000000001.dat" + (operation == .rename ? "" : ".tmp"))
            })
        #expect(store.writeFailure == nil)
        #expect(Self.receiptFiles(dir) == ["receipts.dat"])
        #expect(!dir.files().contains("snapshot.dat.tmp"))
        Self.checkReceipts(store, expected)

        // Writes go on; the deferred compaction runs once the file has grown.
        let late = makeRecord(&rng, seen: t0)
        expected[late.keyID] = receipt(late, version: 0)
        try store.registerFresh(late, receipt: expected[late.keyID]!, now: t0 + 2_000)
        for r in records[5..<7] {
            expected[r.keyID] = receipt(r, version: 2)
            #expect(try store.registerFresh(r, receipt: expected[r.keyID]!, now: t0 + 2_000) == .registered(existing: true))
        }
        #expect(try store.commit(records[0].keyID, counter: 1, challenge: nil, now: t0 + 2_000) == .committed(previousCounter: 0))
        _ = try store.snapshot()
        #expect(log.compacted == 1)
        #expect(Self.receiptFiles(dir) == ["receipts-0000000000000001.dat"])
        Self.checkReceipts(store, expected)
        let after = try openAfterCrash(dir.path)
        Self.checkReceipts(after, expected)
        #expect(try after.key(records[0].keyID)?.counter == 1)
        _ = store
    }

    /// The one compaction failure past the point of no return: the directory fsync after the new
    /// snapshot was renamed into place. Memory already follows the new snapshot; which one a crash
    /// would find is unknown, so writes are refused (a suspect write fault) and the old snapshot's
    /// receipts file stays until a snapshot is durable again, which ends the fault and removes it.
    @Test func aDirectoryFsyncFailureAfterTheSwitchRefusesWritesUntilASnapshotIsDurable() throws {
        let dir = TempDirectory()
        defer { dir.remove() }
        var rng = SeededRandom(seed: 502)
        let calls = FaultyCalls()
        let log = BoundsLog()
        // No recovery of its own during the test: the snapshot below is the one that ends the fault.
        let store = try Self.open(dir, calls, log, retryMillis: 600_000)
        store.compactionMinimumGarbage.store(0, ordering: .relaxed)
        let records = (0..<10).map { _ in makeRecord(&rng, seen: t0) }
        let expected = try Self.fill(store, records)
        settle()

        // Directory fsyncs of a compaction: the new segment's, the copy's rename, the snapshot's rename.
        calls.fail(.fsync, .directory, errno: EIO, skip: 2, times: 1)
        #expect(failure { try store.snapshot() }?.code == .unavailable)
        #expect(store.writeFailure?.file == .directory && store.writeFailure?.operation == .fsync)
        #expect(log.compacted == 0)
        Self.checkReceipts(store, expected)  // read from the new file, at the relocated offsets
        #expect(failure { try store.commit(records[0].keyID, counter: 1, challenge: nil, now: t0) }?.code == .unavailable)
        #expect(Self.receiptFiles(dir) == ["receipts-0000000000000001.dat", "receipts.dat"])

        // A crash now restores a consistent store from the directory as it is.
        let copy = TempDirectory()
        defer { copy.remove() }
        for name in dir.files() where name != "lock" {
            try FileManager.default.copyItem(atPath: dir.file(name), toPath: copy.file(name))
        }
        let crashed = try openAfterCrash(copy.path)
        Self.checkReceipts(crashed, expected)
        #expect(Self.receiptFiles(copy) == ["receipts-0000000000000001.dat"])

        _ = try store.snapshot()
        #expect(store.writeFailure == nil)
        #expect(Self.receiptFiles(dir) == ["receipts-0000000000000001.dat"])
        #expect(try store.commit(records[0].keyID, counter: 1, challenge: nil, now: t0) == .committed(previousCounter: 0))
        Self.checkReceipts(store, expected)
        let after = try openAfterCrash(dir.path)
        Self.checkReceipts(after, expected)
        _ = (crashed, store)
    }

    /// A recovery's snapshot may compact (it writes memory either way): a registration whose fsync
    /// failed is taken back, the recovery snapshot compacts the receipts (the taken-back one is
    /// not copied) and ends the fault.
    @Test func aRecoverySnapshotThatCompactsEndsTheFault() throws {
        let dir = TempDirectory()
        defer { dir.remove() }
        var rng = SeededRandom(seed: 503)
        let calls = FaultyCalls()
        let log = BoundsLog()
        let store = try Self.open(dir, calls, log)
        store.compactionMinimumGarbage.store(0, ordering: .relaxed)
        let records = (0..<10).map { _ in makeRecord(&rng, seen: t0) }
        let expected = try Self.fill(store, records)
        settle()

        calls.fail(.fsync, .journal, errno: EIO, times: 1)
        let refused = makeRecord(&rng, seen: t0)
        let c = try store.issue(.register, now: t0)
        #expect(
            failure { try store.registerNow(refused, receipt: receipt(refused, version: 0), challenge: c.token, now: t0) }?.code
                == .unavailable)
        #expect(eventually { store.writeFailure == nil })
        // The fault ends when the snapshot is durable; the compaction's old file goes right after.
        #expect(eventually { log.compacted == 1 })
        #expect(log.snapshots == 1)  // the compacting snapshot ended the fault: no second one was needed
        #expect(try store.key(refused.keyID) == nil)
        #expect(Self.receiptFiles(dir) == ["receipts-0000000000000001.dat"])
        #expect(store.receiptBytes.live == store.receiptBytes.file)
        Self.checkReceipts(store, expected)
        let after = try openAfterCrash(dir.path)
        Self.checkReceipts(after, expected)
        #expect(try after.key(refused.keyID) == nil)
        _ = store
    }

    /// A registration taken back after its fsync failed leaves the key bounds as they were: a
    /// re-registration does not count in the key's window, and a new key gives its place under
    /// `max_keys` back.
    @Test func aRegistrationTakenBackLeavesTheWindowAndTheCapAsTheyWere() throws {
        let dir = TempDirectory()
        defer { dir.remove() }
        var rng = SeededRandom(seed: 504)
        let calls = FaultyCalls()
        let log = BoundsLog()
        let store = try Self.open(dir, calls, log, limits: KeyLimits(maxKeys: 2, maxReregistrations: 1))
        let known = makeRecord(&rng, seen: t0)
        try store.registerFresh(known, now: t0)
        settle()

        calls.fail(.fsync, .journal, errno: ENOSPC, times: 1)
        let c1 = try store.issue(.register, now: t0 + 1_000)
        #expect(failure { try store.registerNow(known, challenge: c1.token, now: t0 + 1_000) }?.code == .unavailable)
        #expect(eventually { store.writeFailure == nil })
        #expect(try store.registerFresh(known, now: t0 + 2_000) == .registered(existing: true))  // the window's one
        let c2 = try store.issue(.register, now: t0 + 3_000)
        #expect(try store.registerNow(known, challenge: c2.token, now: t0 + 3_000) == .reregistrationLimited(retryAfterMillis: 3_599_000))

        settle()
        calls.fail(.fsync, .journal, errno: ENOSPC, times: 1)
        let fresh = makeRecord(&rng, seen: t0)
        let c3 = try store.issue(.register, now: t0 + 4_000)
        #expect(failure { try store.registerNow(fresh, challenge: c3.token, now: t0 + 4_000) }?.code == .unavailable)
        #expect(eventually { store.writeFailure == nil })
        #expect(store.statistics.keys == 1)
        let second = makeRecord(&rng, seen: t0)
        #expect(try store.registerFresh(second, now: t0 + 5_000) == .registered(existing: false))
        let third = makeRecord(&rng, seen: t0)
        let c4 = try store.issue(.register, now: t0 + 6_000)
        #expect(try store.registerNow(third, challenge: c4.token, now: t0 + 6_000) == .keyCapacity(maxKeys: 2))
        _ = store
    }

    /// A take-back (a registration whose fsync failed) that comes after a receipt compaction does
    /// nothing: the compaction's rotation made the record durable and moved its receipt, so the key
    /// stays with the receipt it has now. (With the same receipts file it is taken back.)
    @Test func aTakeBackAfterACompactionChangesNothing() throws {
        let dir = TempDirectory()
        defer { dir.remove() }
        var rng = SeededRandom(seed: 508)
        let store = try MemoryAttestStore.open(directory: dir.path, shards: 4, limits: KeyLimits(maxReregistrations: 100))
        store.compactionMinimumGarbage.store(0, ordering: .relaxed)
        let first = makeRecord(&rng, seen: t0)
        let other = makeRecord(&rng, seen: t0)
        try store.registerFresh(first, receipt: receipt(first, version: 0), now: t0)  // at offset 0, before and after
        try store.registerFresh(other, receipt: receipt(other, version: 0), now: t0)
        try store.registerFresh(other, receipt: receipt(other, version: 1), now: t0 + 1_000)
        let key = KeyBits(first.keyID)
        func current() -> KeyRecord { store.shard(key.w0).state.withLock { s in s.record(at: s.find(key)!) } }
        let before = MemoryAttestStore.StoredRegistration(
            key: key, existing: false, previous: nil, applied: current(), receiptsGeneration: 0)
        _ = try store.snapshot()
        #expect(store.receipts.withLock { $0.generation } == 1)
        #expect(current().sameRegistration(as: before.applied))  // its receipt did not move
        store.withdraw(before)
        #expect(store.statistics.keys == 2)
        #expect(store.receipt(for: first.keyID) == receipt(first, version: 0))
        store.withdraw(
            MemoryAttestStore.StoredRegistration(
                key: key, existing: false, previous: nil, applied: current(), receiptsGeneration: 1))
        #expect(store.statistics.keys == 1)
        #expect(try store.key(first.keyID) == nil)
        try store.close()
    }

    /// A removal record (idle eviction, journal version 2) whose checksum fails is damage like any
    /// other: reported with its key (it carries no counter) and not applied, so the key stays with
    /// its counter; an advance before an intact removal is not damage.
    @Test func aDamagedRemovalIsReportedWithItsKeyAndRemovesNothing() throws {
        let dir = TempDirectory()
        defer { dir.remove() }
        var rng = SeededRandom(seed: 505)
        let a = try MemoryAttestStore.open(directory: dir.path, shards: 4, limits: KeyLimits(keyIdleTTLMillis: 5_000))
        let gone = makeRecord(&rng, seen: t0)
        let kept = makeRecord(&rng, seen: t0)
        try a.registerFresh(gone, now: t0)
        try a.registerFresh(kept, now: t0)
        #expect(try a.commit(gone.keyID, counter: 4, challenge: nil, now: t0) == .committed(previousCounter: 0))
        #expect(try a.commit(kept.keyID, counter: 1, challenge: nil, now: t0 + 5_000) == .committed(previousCounter: 0))
        #expect(try a.sweepIdleKeys(nowMillis: t0 + 5_000) == 1)
        let segment = dir.lastSegment
        var bytes = readBytes(segment)
        let at = bytes.count - (8 + JournalRecord.removalPayloadSize)
        #expect(bytes[at + 8] == JournalRecord.removalType)

        let intact = try openAfterCrash(dir.path)
        #expect(intact.restoreReport.damage.isEmpty)
        #expect(try intact.key(gone.keyID) == nil)

        bytes[at + 4] ^= 0x01  // its checksum
        writeBytes(segment, bytes)
        let b = try openAfterCrash(dir.path)
        let damage = b.restoreReport.damage
        #expect(damage.map(\.kind) == [.checksum])
        #expect(damage.first?.offset == at && damage.first?.length == 8 + JournalRecord.removalPayloadSize)
        #expect(damage.first?.keyID == gone.keyID)
        #expect(damage.first?.recordedCounter == nil && damage.first?.counterRaised == nil)
        #expect(try b.key(gone.keyID)?.counter == 4)
        #expect(try b.commit(gone.keyID, counter: 4, challenge: nil, now: t0 + 6_000) == .counterReplay(stored: 4))
        #expect(try b.key(kept.keyID)?.counter == 1)
        _ = (a, intact)
    }

    // MARK: - Directories written before the key bounds (snapshot and journal version 1)

    /// Writes a version 1 `snapshot.dat` (the format of builds before the key bounds, the challenge
    /// budgets' included): one shard, strings `[app]`, `records`, `challenges`.
    static func writeVersion1Snapshot(
        _ dir: TempDirectory, app: String, records: [KeyRecordV1], challenges: [ChallengeEntry], generation: UInt64,
        journalSeq: UInt64
    ) throws {
        let path = dir.file("snapshot.dat")
        let out = BufferedHashingWriter(fd: try FileIO.open(path, O_WRONLY | O_CREAT | O_TRUNC), path: path)
        var h = ByteWriter()
        h.bytes += SnapshotFormat.magic
        h.u32(1)
        h.u32(1)
        h.u32(UInt32(MemoryLayout<KeyRecordV1>.stride))
        h.u32(UInt32(MemoryLayout<ChallengeEntry>.stride))
        h.u64(SnapshotFormat.layoutFingerprintV1)
        h.u64(generation)
        h.u64(journalSeq)
        h.u64(UInt64(records.count))
        h.u64(UInt64(challenges.count))
        h.i64(t0)
        h.u32(1)
        h.string(app)
        h.u64(UInt64(records.count))
        try out.write(h.bytes)
        try records.withUnsafeBytes { (raw) throws in try out.write(raw) }
        var c = ByteWriter()
        c.u64(UInt64(challenges.count))
        for entry in challenges {
            var e = entry
            withUnsafeBytes(of: &e) { raw in
                c.bytes.append(contentsOf: raw)
                c.bytes.append(contentsOf: repeatElement(0, count: MemoryLayout<ChallengeEntry>.stride - raw.count))
            }
        }
        try out.write(c.bytes)
        try out.finish()
        Glibc.close(out.fd)
    }

    static func v1Record(_ r: DeviceKeyRecord, counter: UInt32) -> KeyRecordV1 {
        KeyRecordV1(
            key: KeyBits(r.keyID), point: PointBits(r.publicKey)!, receiptOffset: 0, counter: counter, receiptLength: 0,
            appIndex: 0, bundleIndex: KeyRecord.noString, category: 0, firstSeen: UInt32(t0 / 1000),
            lastSeen: UInt32(t0 / 1000), flags: KeyRecord.flagProduction)
    }

    /// A version 1 directory stopped cleanly by a build with the challenge budgets: its challenges
    /// come back and are classified into the budgets (one bound to a registered key: key-bound; one
    /// without a key: anonymous), its key is converted (no re-registration window yet).
    @Test func aCleanVersion1DirectoryKeepsItsChallengesInTheirBudgets() throws {
        let dir = TempDirectory()
        defer { dir.remove() }
        var rng = SeededRandom(seed: 506)
        let key = makeRecord(&rng, seen: t0)
        let bound = ChallengeEntry(
            token: ChallengeBits(a: 0x1111, b: 0x2222), boundKey: KeyBits(key.keyID), expiresAt: t0 + 60_000, purpose: 2,
            hasBoundKey: true, consumed: false)
        let anonymous = ChallengeEntry(
            token: ChallengeBits(a: 0x3333, b: 0x4444), boundKey: KeyBits(w0: 0, w1: 0, w2: 0, w3: 0), expiresAt: t0 + 60_000,
            purpose: 1, hasBoundKey: false, consumed: false)
        try Self.writeVersion1Snapshot(
            dir, app: key.appID, records: [Self.v1Record(key, counter: 7)], challenges: [bound, anonymous], generation: 0xC1EA,
            journalSeq: 1)
        var marker = ByteWriter()
        marker.bytes += MemoryAttestStore.markerMagic
        marker.u64(0xC1EA)
        writeBytes(dir.file(MemoryAttestStore.markerName), marker.bytes)

        let store = try MemoryAttestStore.open(directory: dir.path, shards: 4, limits: KeyLimits(maxReregistrations: 1))
        #expect(store.lastStopWasClean)
        #expect(store.challengeCounts == (anonymous: 1, keyBound: 1))
        #expect(try store.state(bound.token.token, now: t0) == .valid(purpose: .assert, keyID: key.keyID, expiresAtMillis: t0 + 60_000))
        #expect(try store.commit(key.keyID, counter: 8, challenge: bound.token.token, now: t0) == .committed(previousCounter: 7))
        #expect(try store.registerFresh(key, now: t0 + 1_000) == .registered(existing: true))
        try store.close()
        let again = try MemoryAttestStore.open(directory: dir.path, shards: 4)
        #expect(again.lastStopWasClean)
        #expect(try again.key(key.keyID)?.counter == 8)
        try again.close()
    }

    /// Journal damage in a version 1 segment (registrations without the window) is handled as in
    /// version 2: a damaged registration of a known key is attributed and raises its counter.
    @Test func damageInAVersion1SegmentIsAttributed() throws {
        let dir = TempDirectory()
        defer { dir.remove() }
        var rng = SeededRandom(seed: 507)
        let key = makeRecord(&rng, seen: t0)
        try Self.writeVersion1Snapshot(
            dir, app: key.appID, records: [Self.v1Record(key, counter: 10)], challenges: [], generation: 5, journalSeq: 1)
        let reg = JournalRecord.Registration(
            key: KeyBits(key.keyID), point: PointBits(key.publicKey)!, counter: 20, firstSeen: UInt32(t0 / 1000),
            lastSeen: UInt32(t0 / 1000), flags: KeyRecord.flagProduction, category: 0, receiptOffset: 0, receiptLength: 0,
            appID: key.appID, bundleVersion: nil)
        var payload = JournalRecord.encodeRegistration(reg)
        payload.removeLast(5)  // version 1: no re-registration window
        var segment = JournalFormat.header(1)
        segment.replaceSubrange(8..<12, with: [1, 0, 0, 0])
        var frame = ByteWriter()
        frame.u32(UInt32(payload.count))
        frame.u32(payload.withUnsafeBytes { CRC32C.checksum($0) } ^ 1)
        let at = segment.count
        segment += frame.bytes + payload
        writeBytes(dir.file(JournalFormat.segmentName(1)), segment)
        writeBytes(dir.file("receipts.dat"), [])

        let store = try MemoryAttestStore.open(directory: dir.path, shards: 4)
        let damage = store.restoreReport.damage
        #expect(damage.map(\.kind) == [.checksum])
        #expect(damage.first?.offset == at)
        #expect(damage.first?.keyID == key.keyID)
        #expect(damage.first?.recordedCounter == 20)
        #expect(damage.first?.counterRaised == .init(from: 10, to: 20))
        #expect(try store.key(key.keyID)?.counter == 20)
        try store.close()
    }
}
