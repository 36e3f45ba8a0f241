import Foundation
import GatewayTestSupport
import Synchronization
import Testing

@testable import GatewayStore

#if canImport(Glibc)
    import Glibc
#endif

private let t0: Int64 = 1_700_000_000_000

/// A receipt of `n` bytes that names its key and version, so a receipt read back from the wrong
/// offset or the wrong file cannot pass for the right one.
private func receipt(_ record: DeviceKeyRecord, version: Int, bytes n: Int = 600) -> [UInt8] {
    let tag = Array("\(record.keyID) v\(version) ".utf8)
    return (0..<n).map { tag[$0 % tag.count] }
}

/// Issue 19: `receipts.dat` is compacted with the snapshot, and a crash at any step of a compaction
/// leaves a store whose every key has its latest receipt and counter.
@Suite("Memory store: receipt compaction")
struct ReceiptCompactionTests {
    static let roomy = KeyLimits(maxReregistrations: 100)

    /// 30 keys, a third re-registered twice with new receipts: returns the receipts expected now.
    static func fill(_ store: MemoryAttestStore, _ records: [DeviceKeyRecord]) throws -> [KeyID: [UInt8]] {
        var expected: [KeyID: [UInt8]] = [:]
        for r in records {
            expected[r.keyID] = receipt(r, version: 0)
            try store.registerFresh(r, receipt: expected[r.keyID]!, now: t0)
        }
        for version in 1...2 {
            for r in records.prefix(10) {
                expected[r.keyID] = receipt(r, version: version)
                #expect(
                    try store.registerFresh(r, receipt: expected[r.keyID]!, now: t0 + Int64(version) * 1_000) == .registered(existing: true)
                )
            }
        }
        for (i, r) in records.enumerated() {
            #expect(try store.commit(r.keyID, counter: UInt32(i + 1), challenge: nil, now: t0 + 5_000) == .committed(previousCounter: 0))
        }
        return expected
    }

    static func check(
        _ store: MemoryAttestStore, _ records: [DeviceKeyRecord], _ expected: [KeyID: [UInt8]],
        sourceLocation: SourceLocation = #_sourceLocation
    ) throws {
        #expect(store.statistics.keys == expected.count, sourceLocation: sourceLocation)
        for (i, r) in records.enumerated() where expected[r.keyID] != nil {
            #expect(store.receipt(for: r.keyID) == expected[r.keyID], "key \(i)", sourceLocation: sourceLocation)
            #expect(try store.key(r.keyID)?.counter == UInt32(i + 1), "key \(i)", sourceLocation: sourceLocation)
        }
    }

    static func receiptFiles(_ dir: TempDirectory) -> [String] { dir.files().filter { $0.hasPrefix("receipts") } }

    @Test func aSnapshotCompactsSupersededReceipts() throws {
        let dir = TempDirectory()
        defer { dir.remove() }
        var rng = SeededRandom(seed: 300)
        let records = (0..<30).map { _ in makeRecord(&rng, seen: t0) }
        final class Compactions: AttestStoreObserver {
            let reports = Mutex<[ReceiptCompactionReport]>([])
            func receiptsCompacted(_ report: ReceiptCompactionReport) { reports.withLock { $0.append(report) } }
        }
        let observer = Compactions()
        let a = try MemoryAttestStore.open(directory: dir.path, shards: 4, observer: observer, limits: Self.roomy)
        a.compactionMinimumGarbage.store(0, ordering: .relaxed)
        var expected = try Self.fill(a, records)
        #expect(a.receiptBytes == (30 * 600, 50 * 600))
        _ = try a.snapshot()
        #expect(a.receiptBytes == (30 * 600, 30 * 600))
        #expect(Self.receiptFiles(dir) == ["receipts-0000000000000001.dat"])
        #expect(readBytes(dir.file("receipts-0000000000000001.dat")).count == 30 * 600)
        let report = try #require(observer.reports.withLock { $0.first })
        #expect(report.receipts == 30 && report.liveBytes == 30 * 600 && report.reclaimedBytes == 20 * 600)
        try Self.check(a, records, expected)
        // Registrations after the compaction go to the new file; a snapshot without enough garbage
        // leaves it alone.
        let late = makeRecord(&rng, seen: t0)
        expected[late.keyID] = receipt(late, version: 0)
        try a.registerFresh(late, receipt: expected[late.keyID]!, now: t0 + 6_000)
        #expect(try a.commit(late.keyID, counter: 31, challenge: nil, now: t0 + 6_000) == .committed(previousCounter: 0))
        let all = records + [late]
        _ = try a.snapshot()
        #expect(Self.receiptFiles(dir) == ["receipts-0000000000000001.dat"])
        try Self.check(a, all, expected)
        // A crash, then a clean stop, restore them all.
        let b = try openAfterCrash(dir.path, shards: 8, limits: Self.roomy)
        try Self.check(b, all, expected)
        try b.close()
        let c = try openAfterCrash(dir.path, shards: 4, limits: Self.roomy)
        #expect(c.lastStopWasClean)
        try Self.check(c, all, expected)
        try c.close()
        _ = a
    }

    @Test func registrationsDuringTheCopyAreCarriedOver() throws {
        let dir = TempDirectory()
        defer { dir.remove() }
        var rng = SeededRandom(seed: 301)
        let records = (0..<30).map { _ in makeRecord(&rng, seen: t0) }
        let a = try MemoryAttestStore.open(directory: dir.path, shards: 4, limits: Self.roomy)
        a.compactionMinimumGarbage.store(0, ordering: .relaxed)
        var expected = try Self.fill(a, records)
        let newcomer = makeRecord(&rng, seen: t0)
        let updates = Mutex<[KeyID: [UInt8]]>([:])
        // After the live receipts were copied and before the registrations stop: one key is
        // re-registered (its copied receipt is superseded) and a new one arrives.
        a.compactionHook.withLock {
            $0 = { step in
                guard step == .receiptsCopied else { return }
                let changed = receipt(records[3], version: 9)
                try a.registerFresh(records[3], receipt: changed, now: t0 + 7_000)
                let fresh = receipt(newcomer, version: 0)
                try a.registerFresh(newcomer, receipt: fresh, now: t0 + 7_000)
                _ = try a.commit(newcomer.keyID, counter: 31, challenge: nil, now: t0 + 7_000)
                updates.withLock { $0 = [records[3].keyID: changed, newcomer.keyID: fresh] }
            }
        }
        _ = try a.snapshot()
        expected.merge(updates.withLock { $0 }) { $1 }
        let all = records + [newcomer]
        try Self.check(a, all, expected)
        let b = try openAfterCrash(dir.path, shards: 4)
        try Self.check(b, all, expected)
        _ = (a, b)
    }

    struct Stop: Error {}

    /// A crash at each step of a compaction (the hook throws there and the store is abandoned, as
    /// a killed process would leave it; a partly written temporary file is also tried): the next
    /// open restores every key with its latest receipt, removes what the compaction left behind,
    /// and compacts again.
    @Test(arguments: [
        MemoryAttestStore.CompactionStep.receiptsCopied, .receiptsRenamed, .snapshotWritten, .switched,
    ])
    func aCrashAtAnyStepLeavesAConsistentStore(step: MemoryAttestStore.CompactionStep) throws {
        let dir = TempDirectory()
        defer { dir.remove() }
        var rng = SeededRandom(seed: 302)
        let records = (0..<30).map { _ in makeRecord(&rng, seen: t0) }
        let a = try MemoryAttestStore.open(directory: dir.path, shards: 4, limits: Self.roomy)
        a.compactionMinimumGarbage.store(0, ordering: .relaxed)
        var expected = try Self.fill(a, records)
        a.compactionHook.withLock { $0 = { if $0 == step { throw Stop() } } }
        // The hook's error is not taken for a failed compaction (which would remove its files and
        // write the snapshot without it): it reaches `snapshot()`, which throws every error as a StoreError.
        #expect(storeError { _ = try a.snapshot() }?.detail == "\(Stop())")
        if step == .receiptsCopied {
            // Killed while the copy was being written: a torn temporary file.
            writeBytes(dir.file("receipts-0000000000000001.dat.tmp"), [UInt8](repeating: 0xAB, count: 1_234))
        }
        // Work after the interrupted compaction (it reached the journal, and the receipts file the
        // store is on at that point).
        if step == .switched {
            expected[records[5].keyID] = receipt(records[5], version: 7)
            try a.registerFresh(records[5], receipt: expected[records[5].keyID]!, now: t0 + 8_000)
        }
        let b = try openAfterCrash(dir.path, shards: 4, limits: Self.roomy)
        try Self.check(b, records, expected)
        let kept =
            step == .snapshotWritten || step == .receiptsCopied || step == .receiptsRenamed
            ? "receipts.dat" : "receipts-0000000000000001.dat"
        #expect(Self.receiptFiles(dir) == [kept], "\(step)")
        #expect(!dir.files().contains("snapshot.dat.tmp") || step == .snapshotWritten)
        // The store goes on: more superseded receipts, and a compaction that completes.
        b.compactionMinimumGarbage.store(0, ordering: .relaxed)
        for r in records.suffix(10) {
            expected[r.keyID] = receipt(r, version: 3)
            try b.registerFresh(r, receipt: expected[r.keyID]!, now: t0 + 9_000)
        }
        _ = try b.snapshot()
        try Self.check(b, records, expected)
        try b.close()
        let c = try openAfterCrash(dir.path, shards: 2, limits: Self.roomy)
        #expect(c.lastStopWasClean)
        try Self.check(c, records, expected)
        #expect(Self.receiptFiles(dir).count == 1)
        try c.close()
        _ = a
    }

    /// A compaction that cannot write its copy (here: its temporary file's path is a directory; in
    /// production, a disk too full for a copy of the live receipts) changes nothing: the snapshot is
    /// written without it, the failure is reported, and it is tried again once the file has grown.
    @Test func aFailedCompactionStillWritesTheSnapshot() throws {
        let dir = TempDirectory()
        defer { dir.remove() }
        var rng = SeededRandom(seed: 306)
        let records = (0..<30).map { _ in makeRecord(&rng, seen: t0) }
        final class Failures: AttestStoreObserver {
            let failed = Mutex<[StoreError]>([])
            let compacted = Atomic<Int>(0)
            let snapshots = Atomic<Int>(0)
            func receiptCompactionFailed(_ error: StoreError) { failed.withLock { $0.append(error) } }
            func receiptsCompacted(_ report: ReceiptCompactionReport) { compacted.wrappingAdd(1, ordering: .relaxed) }
            func snapshotWritten(_ report: SnapshotReport) { snapshots.wrappingAdd(1, ordering: .relaxed) }
        }
        let observer = Failures()
        let a = try MemoryAttestStore.open(directory: dir.path, shards: 4, observer: observer, limits: Self.roomy)
        a.compactionMinimumGarbage.store(0, ordering: .relaxed)
        var expected = try Self.fill(a, records)
        let blocker = dir.file("receipts-0000000000000001.dat.tmp")
        try FileManager.default.createDirectory(atPath: blocker, withIntermediateDirectories: false)
        _ = try a.snapshot()
        #expect(observer.failed.withLock { $0.count } == 1)
        #expect(observer.snapshots.load(ordering: .relaxed) == 1)
        #expect(a.receiptBytes == (30 * 600, 50 * 600))
        #expect(Self.receiptFiles(dir) == ["receipts-0000000000000001.dat.tmp", "receipts.dat"])
        try Self.check(a, records, expected)
        // Not tried again until the file grows; then it completes.
        _ = try a.commit(records[0].keyID, counter: 100, challenge: nil, now: t0 + 6_000)
        _ = try a.snapshot()
        #expect(observer.failed.withLock { $0.count } == 1)
        try FileManager.default.removeItem(atPath: blocker)
        expected[records[1].keyID] = receipt(records[1], version: 5)
        try a.registerFresh(records[1], receipt: expected[records[1].keyID]!, now: t0 + 7_000)
        _ = try a.snapshot()
        #expect(observer.compacted.load(ordering: .relaxed) == 1)
        #expect(a.receiptBytes == (30 * 600, 30 * 600))
        #expect(Self.receiptFiles(dir) == ["receipts-0000000000000001.dat"])
        #expect(try a.key(records[0].keyID)?.counter == 100)
        try a.close()
    }

    /// A receipt written without its journal record (a crash between the two writes) is garbage
    /// at the end of the file: it is reclaimed by the next compaction, never read.
    @Test func aTornReceiptTailIsReclaimed() throws {
        let dir = TempDirectory()
        defer { dir.remove() }
        var rng = SeededRandom(seed: 303)
        let records = (0..<30).map { _ in makeRecord(&rng, seen: t0) }
        let a = try MemoryAttestStore.open(directory: dir.path, shards: 4, limits: Self.roomy)
        let expected = try Self.fill(a, records)
        appendBytes(dir.file("receipts.dat"), [UInt8](repeating: 0xEE, count: 5_000))
        let b = try openAfterCrash(dir.path, shards: 4)
        #expect(b.receiptBytes == (30 * 600, 50 * 600 + 5_000))
        b.compactionMinimumGarbage.store(0, ordering: .relaxed)
        _ = try b.snapshot()
        #expect(b.receiptBytes == (30 * 600, 30 * 600))
        try Self.check(b, records, expected)
        try b.close()
        _ = a
    }

    @Test func aSnapshotNamingAMissingReceiptsFileIsRefused() throws {
        let dir = TempDirectory()
        defer { dir.remove() }
        var rng = SeededRandom(seed: 304)
        let records = (0..<30).map { _ in makeRecord(&rng, seen: t0) }
        let a = try MemoryAttestStore.open(directory: dir.path, shards: 4, limits: Self.roomy)
        a.compactionMinimumGarbage.store(0, ordering: .relaxed)
        _ = try Self.fill(a, records)
        try a.close()
        try FileManager.default.removeItem(atPath: dir.file("receipts-0000000000000001.dat"))
        let error = storeError { _ = try MemoryAttestStore.open(directory: dir.path, shards: 4) }
        #expect(error?.detail.contains("lacks receipts-0000000000000001.dat") == true)
    }

    /// A data directory written before this version (snapshot version 1 with the 136-byte records,
    /// journal version 1) opens with every key, counter and receipt; its keys start with no
    /// re-registration window.
    @Test func aVersion1DataDirectoryOpens() throws {
        let dir = TempDirectory()
        defer { dir.remove() }
        var rng = SeededRandom(seed: 305)
        let inSnapshot = (0..<5).map { _ in makeRecord(&rng, app: "TEAM.one", bundle: "1.0", seen: t0) }
        let inJournal = makeRecord(&rng, app: "TEAM.two", category: 3, seen: t0 + 1_000)
        var receipts: [UInt8] = []
        var v1Records: [KeyRecordV1] = []
        for (i, r) in inSnapshot.enumerated() {
            let bytes = receipt(r, version: 0, bytes: 100)
            v1Records.append(
                KeyRecordV1(
                    key: KeyBits(r.keyID), point: PointBits(r.publicKey)!, receiptOffset: UInt64(receipts.count), counter: UInt32(10 + i),
                    receiptLength: 100, appIndex: 0, bundleIndex: 1, category: 0, firstSeen: UInt32(t0 / 1000), lastSeen: UInt32(t0 / 1000),
                    flags: KeyRecord.flagProduction))
            receipts += bytes
        }
        // snapshot.dat, version 1: one shard, two strings, five records, no challenges.
        let out = BufferedHashingWriter(fd: try FileIO.open(dir.file("snapshot.dat"), O_WRONLY | O_CREAT | O_TRUNC), path: "v1")
        var h = ByteWriter()
        h.bytes += SnapshotFormat.magic
        h.u32(1)
        h.u32(1)
        h.u32(UInt32(MemoryLayout<KeyRecordV1>.stride))
        h.u32(UInt32(MemoryLayout<ChallengeEntry>.stride))
        h.u64(SnapshotFormat.layoutFingerprintV1)
        h.u64(99)
        h.u64(1)
        h.u64(5)
        h.u64(0)
        h.i64(t0)
        #expect(h.bytes.count == SnapshotFormat.headerSizeV1)
        h.u32(2)
        h.string("TEAM.one")
        h.string("1.0")
        h.u64(5)
        try out.write(h.bytes)
        try v1Records.withUnsafeBytes { (raw) throws in try out.write(raw) }
        var tail = ByteWriter()
        tail.u64(0)
        try out.write(tail.bytes)
        try out.finish()
        Glibc.close(out.fd)
        // journal segment 1, version 1: one registration without the window fields.
        let journalReceipt = receipt(inJournal, version: 0, bytes: 100)
        let reg = JournalRecord.Registration(
            key: KeyBits(inJournal.keyID), point: PointBits(inJournal.publicKey)!, counter: 4, firstSeen: UInt32((t0 + 1_000) / 1000),
            lastSeen: UInt32((t0 + 1_000) / 1000), flags: KeyRecord.flagProduction | KeyRecord.flagCategory, category: 3,
            receiptOffset: UInt64(receipts.count), receiptLength: 100, appID: "TEAM.two", bundleVersion: nil)
        receipts += journalReceipt
        var payload = JournalRecord.encodeRegistration(reg)
        payload.removeLast(5)  // version 1 had no re-registration window
        var segment = JournalFormat.header(1)
        segment.replaceSubrange(8..<12, with: [1, 0, 0, 0])
        var frame = ByteWriter()
        frame.u32(UInt32(payload.count))
        frame.u32(payload.withUnsafeBytes { CRC32C.checksum($0) })
        segment += frame.bytes + payload
        writeBytes(dir.file(JournalFormat.segmentName(1)), segment)
        writeBytes(dir.file("receipts.dat"), receipts)

        let store = try MemoryAttestStore.open(directory: dir.path, shards: 4, limits: KeyLimits(maxReregistrations: 1))
        #expect(store.statistics.keys == 6)
        for (i, r) in inSnapshot.enumerated() {
            #expect(try store.key(r.keyID)?.counter == UInt32(10 + i))
            #expect(try store.key(r.keyID)?.bundleVersion == "1.0")
            #expect(store.receipt(for: r.keyID) == receipt(r, version: 0, bytes: 100))
        }
        #expect(try store.key(inJournal.keyID)?.validationCategory == 3)
        #expect(try store.key(inJournal.keyID)?.counter == 4)
        #expect(store.receipt(for: inJournal.keyID) == journalReceipt)
        // No window yet: one re-registration passes, the second is limited.
        #expect(try store.registerFresh(inSnapshot[0], now: t0 + 10_000) == .registered(existing: true))
        let held = try store.issue(.register, key: inSnapshot[0].keyID, now: t0 + 11_000)
        #expect(
            try store.registerNow(inSnapshot[0], challenge: held.token, now: t0 + 11_000)
                == .reregistrationLimited(retryAfterMillis: 3_599_000))
        try store.close()
        let again = try MemoryAttestStore.open(directory: dir.path, shards: 4)
        #expect(again.statistics.keys == 6)
        #expect(again.receipt(for: inJournal.keyID) == journalReceipt)
        try again.close()
    }
}
