import Foundation
import GatewayTestSupport
import Synchronization
import Testing

@testable import GatewayStore

private let t0: Int64 = 1_700_000_000_000

/// Opens a store on a directory whose previous store "crashed": it was never closed and, being
/// still alive in this process, still holds the directory lock.
func openAfterCrash(_ path: String, shards: Int = 4, limits: KeyLimits = KeyLimits()) throws -> MemoryAttestStore {
    try MemoryAttestStore.open(
        directory: path, shards: shards, challenges: ChallengeLimits(), observer: nil, exclusive: false, limits: limits)
}

@Suite("Memory store: journal, snapshots, recovery")
struct PersistenceTests {
    @Test func openCreatesDirectoryAndMemoryOnlyHasNoSnapshots() throws {
        let dir = TempDirectory()
        defer { dir.remove() }
        let path = dir.file("data")
        let store = try MemoryAttestStore.open(directory: path, shards: 4)
        #expect(store.lastStopWasClean)
        #expect(FileManager.default.fileExists(atPath: path))
        try store.close()
        let memory = try MemoryAttestStore.open(directory: nil, shards: 4)
        #expect(storeError { _ = try memory.snapshot() }?.detail.contains("memory-only") == true)
    }

    @Test func badDirectoryAndShardCountAreRefusedClearly() throws {
        let dir = TempDirectory()
        defer { dir.remove() }
        writeBytes(dir.file("plain"), [1])
        let notDir = storeError { _ = try MemoryAttestStore.open(directory: dir.file("plain"), shards: 4) }
        #expect(notDir?.detail.contains("is not a directory") == true)
        let missingParent = storeError { _ = try MemoryAttestStore.open(directory: dir.file("a/b/c"), shards: 4) }
        #expect(missingParent?.detail.contains("cannot create data directory") == true)
        let shards = storeError { _ = try MemoryAttestStore.open(directory: nil, shards: 3) }
        #expect(shards?.detail.contains("power of two") == true)
    }

    @Test func aDirectoryIsOpenedByOneStoreAtATime() throws {
        let dir = TempDirectory()
        defer { dir.remove() }
        let first = try MemoryAttestStore.open(directory: dir.path, shards: 4)
        let busy = storeError { _ = try MemoryAttestStore.open(directory: dir.path, shards: 4) }
        #expect(busy?.detail.contains("is in use by another store") == true)
        try first.close()
        let second = try MemoryAttestStore.open(directory: dir.path, shards: 4)
        #expect(second.lastStopWasClean)
        try second.close()
    }

    @Test func snapshotRoundTripAndCleanStopKeepsChallenges() throws {
        let dir = TempDirectory()
        defer { dir.remove() }
        var rng = SeededRandom(seed: 20)
        var records: [DeviceKeyRecord] = []
        for i in 0..<50 {
            let app = i % 2 == 0 ? "A.a" : "B.b"
            let environment: KeyEnvironment = i % 3 == 0 ? .development : .production
            let category: UInt32? = i % 5 == 0 ? UInt32(i) : nil
            let bundle: String? = i % 4 == 0 ? "v\(i % 8)" : nil
            records.append(makeRecord(&rng, app: app, environment: environment, category: category, bundle: bundle, seen: t0))
        }
        let live: IssuedChallenge
        let consumed: IssuedChallenge
        let bound: IssuedChallenge
        do {
            let a = try MemoryAttestStore.open(directory: dir.path, shards: 8)
            for (i, r) in records.enumerated() { try a.registerFresh(r, receipt: [UInt8(i), 1, 2], now: t0) }
            for (i, r) in records.enumerated() where i % 2 == 0 {
                #expect(try a.commit(r.keyID, counter: UInt32(i + 1), challenge: nil, now: t0 + 3_000) == .committed(previousCounter: 0))
            }
            live = try a.issue(.assert, now: t0)
            bound = try a.issue(.register, key: records[0].keyID, now: t0)
            consumed = try a.issue(.assert, now: t0)
            #expect(try a.commit(records[1].keyID, counter: 9, challenge: consumed.token, now: t0) == .committed(previousCounter: 0))
            let report = try a.snapshot()
            #expect(report.keys == 50)
            #expect(report.bytes > 50 * 136)
            try a.close()
        }
        #expect(dir.files().contains(MemoryAttestStore.markerName))
        let b = try MemoryAttestStore.open(directory: dir.path, shards: 8)
        #expect(b.lastStopWasClean)
        #expect(!dir.files().contains(MemoryAttestStore.markerName))
        #expect(b.statistics.keys == 50)
        for (i, r) in records.enumerated() {
            var expected = r
            if i % 2 == 0 {
                expected.counter = UInt32(i + 1)
                expected.lastSeenMillis = t0 + 3_000
            }
            if i == 1 { expected.counter = 9 }
            #expect(try b.key(r.keyID) == expected)
            #expect(b.receipt(for: r.keyID) == [UInt8(i), 1, 2])
        }
        #expect(try b.state(live.token, now: t0) == .valid(purpose: .assert, keyID: nil, expiresAtMillis: t0 + 60_000))
        #expect(try b.state(bound.token, now: t0) == .valid(purpose: .register, keyID: records[0].keyID, expiresAtMillis: t0 + 60_000))
        #expect(try b.state(consumed.token, now: t0) == .consumed)
        // The two register challenges per key were consumed by registering; all come back.
        #expect(b.statistics.liveChallenges == 50 + 3)
        try b.close()
    }

    /// Another shard count reads the same snapshot (records are re-sharded on restore).
    @Test func restoreWithAnotherShardCount() throws {
        let dir = TempDirectory()
        defer { dir.remove() }
        var rng = SeededRandom(seed: 21)
        let records = (0..<40).map { _ in makeRecord(&rng, bundle: "1.0") }
        let a = try MemoryAttestStore.open(directory: dir.path, shards: 16)
        for r in records { try a.registerFresh(r, now: t0) }
        try a.close()
        let b = try MemoryAttestStore.open(directory: dir.path, shards: 2)
        for r in records { #expect(try b.key(r.keyID)?.bundleVersion == "1.0") }
        #expect(b.statistics.keys == 40)
        try b.close()
    }

    /// A crash (the first store is never closed): a second store on the same directory sees every
    /// completed registration and every committed counter (written with write(2)), and no challenge.
    @Test func crashRecoveryKeepsKeysAndCountersAndRetiresChallenges() throws {
        let dir = TempDirectory()
        defer { dir.remove() }
        var rng = SeededRandom(seed: 22)
        let records = (0..<30).map { _ in makeRecord(&rng) }
        let a = try MemoryAttestStore.open(directory: dir.path, shards: 4)
        for r in records.prefix(10) { try a.registerFresh(r, now: t0) }
        _ = try a.snapshot()  // some keys in the snapshot, the rest only in the journal
        for r in records.dropFirst(10) { try a.registerFresh(r, receipt: [7], now: t0) }
        for (i, r) in records.enumerated() {
            #expect(try a.commit(r.keyID, counter: UInt32(100 + i), challenge: nil, now: t0) == .committed(previousCounter: 0))
        }
        let pending = try a.issue(.assert, now: t0)
        let used = try a.issue(.assert, now: t0)
        #expect(try a.commit(records[0].keyID, counter: 500, challenge: used.token, now: t0) == .committed(previousCounter: 100))

        let b = try openAfterCrash(dir.path, shards: 4)
        #expect(!b.lastStopWasClean)
        #expect(b.statistics.keys == 30)
        #expect(b.statistics.liveChallenges == 0)
        for (i, r) in records.enumerated() {
            #expect(try b.key(r.keyID)?.counter == (i == 0 ? 500 : UInt32(100 + i)))
        }
        #expect(b.receipt(for: records[20].keyID) == [7])
        // Every field of a registration that exists only in the journal comes back.
        let rich = makeRecord(&rng, app: "TEAM.rich", environment: .development, category: 3, bundle: "9.9 (1)", seen: t0)
        try a.registerFresh(rich, receipt: [1, 2, 3, 4], now: t0)
        let c = try openAfterCrash(dir.path, shards: 4)
        #expect(try c.key(rich.keyID) == rich)
        #expect(c.receipt(for: rich.keyID) == [1, 2, 3, 4])
        #expect(try b.state(pending.token, now: t0) == .unknown)
        #expect(try b.state(used.token, now: t0) == .unknown)
        // A replayed assertion is still refused: the counter did not roll back.
        #expect(try b.commit(records[0].keyID, counter: 500, challenge: nil, now: t0) == .counterReplay(stored: 500))
        try b.close()
        _ = (a, c)
    }

    /// A clean stop followed by more work and then a crash is unclean: challenges go.
    @Test func workAfterCleanRestartThenCrashIsUnclean() throws {
        let dir = TempDirectory()
        defer { dir.remove() }
        var rng = SeededRandom(seed: 23)
        let record = makeRecord(&rng)
        let a = try MemoryAttestStore.open(directory: dir.path, shards: 4)
        try a.registerFresh(record, now: t0)
        let challenge = try a.issue(.assert, now: t0)
        try a.close()
        let b = try MemoryAttestStore.open(directory: dir.path, shards: 4)
        #expect(b.lastStopWasClean)
        #expect(try b.state(challenge.token, now: t0) != .unknown)
        #expect(try b.commit(record.keyID, counter: 1, challenge: challenge.token, now: t0) == .committed(previousCounter: 0))
        // b crashes (never closed).
        let c = try openAfterCrash(dir.path, shards: 4)
        #expect(!c.lastStopWasClean)
        #expect(try c.state(challenge.token, now: t0) == .unknown)
        #expect(try c.key(record.keyID)?.counter == 1)
        try c.close()
        _ = b
    }

    /// A record journaled after the clean snapshot (an operation in flight during close) makes the
    /// stop unclean even though the marker is there: its counter counts, challenges are retired.
    @Test func recordAfterCleanSnapshotMakesTheStopUnclean() throws {
        let dir = TempDirectory()
        defer { dir.remove() }
        var rng = SeededRandom(seed: 29)
        let record = makeRecord(&rng)
        let a = try MemoryAttestStore.open(directory: dir.path, shards: 4)
        try a.registerFresh(record, now: t0)
        let challenge = try a.issue(.assert, now: t0)
        try a.close()
        #expect(dir.files().contains(MemoryAttestStore.markerName))
        var payload: [UInt8] = [JournalRecord.advanceType] + record.keyID.bytes
        withUnsafeBytes(of: UInt32(9).littleEndian) { payload += $0 }
        withUnsafeBytes(of: UInt32(1_700_000_000).littleEndian) { payload += $0 }
        var frame: [UInt8] = []
        withUnsafeBytes(of: UInt32(payload.count).littleEndian) { frame += $0 }
        let crc = payload.withUnsafeBytes { CRC32C.checksum($0) }
        withUnsafeBytes(of: crc.littleEndian) { frame += $0 }
        appendBytes(dir.lastSegment, frame + payload)
        let b = try MemoryAttestStore.open(directory: dir.path, shards: 4)
        #expect(!b.lastStopWasClean)
        #expect(try b.state(challenge.token, now: t0) == .unknown)
        #expect(try b.key(record.keyID)?.counter == 9)
        try b.close()
    }

    @Test func tornJournalTailIsDropped() throws {
        let dir = TempDirectory()
        defer { dir.remove() }
        var rng = SeededRandom(seed: 24)
        let record = makeRecord(&rng)
        let a = try MemoryAttestStore.open(directory: dir.path, shards: 4)
        try a.registerFresh(record, now: t0)
        #expect(try a.commit(record.keyID, counter: 7, challenge: nil, now: t0) == .committed(previousCounter: 0))
        // A crash in the middle of the next record: its header and part of its payload.
        let segment = dir.lastSegment
        let before = readBytes(segment).count
        appendBytes(segment, [41, 0, 0, 0, 0xAA, 0xBB, 0xCC, 0xDD, 2, 1, 2, 3])
        let b = try openAfterCrash(dir.path, shards: 4)
        #expect(try b.key(record.keyID)?.counter == 7)
        #expect(readBytes(segment).count == before)  // cut back to the last whole record
        try b.close()
        _ = a
    }

    /// A segment whose header is damaged cannot be trusted at all: an error naming the file.
    @Test func segmentWithADamagedHeaderIsAnError() throws {
        let dir = TempDirectory()
        defer { dir.remove() }
        var rng = SeededRandom(seed: 25)
        let record = makeRecord(&rng)
        let a = try MemoryAttestStore.open(directory: dir.path, shards: 4)
        try a.registerFresh(record, now: t0)
        let segment = dir.lastSegment
        var bytes = readBytes(segment)
        bytes[2] ^= 0xFF
        writeBytes(segment, bytes)
        let error = storeError { _ = try openAfterCrash(dir.path, shards: 4) }
        #expect(error?.detail == "journal \(segment) is corrupt: bad magic")
        _ = a
    }

    @Test func corruptSnapshotIsRefusedWithAClearMessage() throws {
        let dir = TempDirectory()
        defer { dir.remove() }
        var rng = SeededRandom(seed: 26)
        let a = try MemoryAttestStore.open(directory: dir.path, shards: 4)
        for _ in 0..<5 { try a.registerFresh(makeRecord(&rng), now: t0) }
        try a.close()
        let path = dir.file(SnapshotFormat.fileName)
        let good = readBytes(path)

        var flipped = good
        flipped[SnapshotFormat.headerSize + 40] ^= 0x01
        writeBytes(path, flipped)
        let checksum = storeError { _ = try MemoryAttestStore.open(directory: dir.path, shards: 4) }
        #expect(checksum?.detail.contains("checksum mismatch") == true)
        #expect(checksum?.detail.contains(path) == true)

        var version = good
        version[8] = 9
        writeBytes(path, version)
        let unknown = storeError { _ = try MemoryAttestStore.open(directory: dir.path, shards: 4) }
        #expect(unknown?.detail.contains("unknown version 9") == true)

        writeBytes(path, Array("not a snapshot at all, clearly".utf8) + [UInt8](repeating: 0, count: 100))
        let magic = storeError { _ = try MemoryAttestStore.open(directory: dir.path, shards: 4) }
        #expect(magic?.detail.contains("bad magic") == true)

        writeBytes(path, Array(good.prefix(50)))
        let short = storeError { _ = try MemoryAttestStore.open(directory: dir.path, shards: 4) }
        #expect(short?.detail.contains("corrupt") == true)

        writeBytes(path, good)
        let restored = try MemoryAttestStore.open(directory: dir.path, shards: 4)
        #expect(restored.statistics.keys == 5)
        #expect(restored.lastStopWasClean)
        try restored.close()
    }

    @Test func lostSnapshotOrSegmentIsAnError() throws {
        let dir = TempDirectory()
        defer { dir.remove() }
        var rng = SeededRandom(seed: 31)
        let a = try MemoryAttestStore.open(directory: dir.path, shards: 4)
        try a.registerFresh(makeRecord(&rng), now: t0)
        _ = try a.snapshot()
        try a.registerFresh(makeRecord(&rng), now: t0)
        let snapshot = readBytes(dir.file(SnapshotFormat.fileName))
        try FileManager.default.removeItem(atPath: dir.file(SnapshotFormat.fileName))
        let noSnapshot = storeError { _ = try openAfterCrash(dir.path) }
        #expect(noSnapshot?.detail.contains("no snapshot.dat") == true)
        writeBytes(dir.file(SnapshotFormat.fileName), snapshot)
        _ = try a.snapshot()  // covers the segment the first snapshot named: now delete the newest's predecessor
        try a.registerFresh(makeRecord(&rng), now: t0)
        let segments = dir.files().filter { $0.hasPrefix("journal-") }
        #expect(segments.count == 1)
        // Put the old snapshot back: it names a segment that no longer exists.
        writeBytes(dir.file(SnapshotFormat.fileName), snapshot)
        let gap = storeError { _ = try openAfterCrash(dir.path) }
        #expect(gap?.detail.contains("lacks journal segment") == true)
        _ = a
    }

    @Test func snapshotDeletesCoveredSegmentsAndObserverIsTold() throws {
        final class Seen: AttestStoreObserver {
            let syncs = Atomic<Int>(0)
            let snapshots = Atomic<Int>(0)
            let restores = Atomic<Int>(0)
            func journalSynced(seconds: Double) { syncs.wrappingAdd(1, ordering: .relaxed) }
            func snapshotWritten(_ report: SnapshotReport) { snapshots.wrappingAdd(1, ordering: .relaxed) }
            func restored(keys: Int, seconds: Double) { restores.wrappingAdd(1, ordering: .relaxed) }
        }
        let dir = TempDirectory()
        defer { dir.remove() }
        var rng = SeededRandom(seed: 27)
        let seen = Seen()
        let a = try MemoryAttestStore.open(directory: dir.path, shards: 4, observer: seen)
        try a.registerFresh(makeRecord(&rng), now: t0)
        _ = try a.snapshot()
        _ = try a.snapshot()
        #expect(dir.files().filter { $0.hasPrefix("journal-") }.count == 1)
        #expect(seen.syncs.load(ordering: .relaxed) >= 1)
        #expect(seen.snapshots.load(ordering: .relaxed) == 2)
        #expect(seen.restores.load(ordering: .relaxed) == 1)
        try a.close()
    }

    @Test func periodicSnapshotsRunWhenKeysChangeAndSkipIdleRounds() throws {
        final class Count: AttestStoreObserver {
            let snapshots = Atomic<Int>(0)
            func snapshotWritten(_ report: SnapshotReport) { snapshots.wrappingAdd(1, ordering: .relaxed) }
        }
        let dir = TempDirectory()
        defer { dir.remove() }
        var rng = SeededRandom(seed: 30)
        let count = Count()
        let store = try MemoryAttestStore.open(directory: dir.path, shards: 4, observer: count)
        store.startPeriodicSnapshots(every: .milliseconds(20)) { Issue.record("snapshot failed: \($0)") }
        let record = makeRecord(&rng)
        try store.registerFresh(record, now: t0)
        var waited = 0
        while count.snapshots.load(ordering: .relaxed) == 0 && waited < 1_000 {
            usleep(10_000)
            waited += 1
        }
        let taken = count.snapshots.load(ordering: .relaxed)
        #expect(taken >= 1)
        usleep(200_000)  // ten rounds without a key change
        #expect(count.snapshots.load(ordering: .relaxed) == taken)
        try store.close()
        let again = try MemoryAttestStore.open(directory: dir.path, shards: 4)
        #expect(try again.key(record.keyID) != nil)
        try again.close()
    }

    /// One million keys: snapshot, then restore into a new store; sampled records compare equal.
    @Test func millionKeySnapshotAndRestore() throws {
        let dir = TempDirectory()
        defer { dir.remove() }
        let n = 1_000_000
        let a = try MemoryAttestStore.open(directory: dir.path, shards: 64)
        var rng = SeededRandom(seed: 28)
        let fill = ContinuousClock.now
        var byShard = [[KeyRecord]](repeating: [], count: 64)
        for i in 0..<n {
            let key = KeyBits(w0: rng.next(), w1: rng.next(), w2: rng.next(), w3: UInt64(i))
            var record = KeyRecord(
                key: key, point: PointBits([0x04] + [UInt8](repeating: UInt8(i & 0xFF), count: 64))!,
                receiptOffset: 0, counter: UInt32(i), receiptLength: 0, appIndex: 0, bundleIndex: KeyRecord.noString,
                category: 0, firstSeen: 1_700_000_000, lastSeen: 1_700_000_000, flags: KeyRecord.flagProduction)
            if i == 0 { record.point = PointBits([0x04] + [UInt8](repeating: 0xEE, count: 64))! }
            byShard[Int(key.w0 & 63)].append(record)
        }
        for (i, records) in byShard.enumerated() {
            a.shards[i].state.withLock { s in
                _ = s.intern("TEAM.app")
                s.reserve(records.count)
                for r in records { _ = s.appendIfAbsent(r) }
            }
        }
        a.keyCount.wrappingAdd(n, ordering: .relaxed)
        let filled = seconds(since: fill)
        let report = try a.snapshot()
        #expect(report.keys == n)
        let restoreStart = ContinuousClock.now
        let b = try openAfterCrash(dir.path, shards: 64)
        let restored = seconds(since: restoreStart)
        #expect(b.statistics.keys == n)
        for records in byShard.prefix(8) {
            for r in records.prefix(50) {
                let found = try #require(try b.key(r.key.keyID))
                #expect(found.counter == r.counter)
                #expect(found.publicKey == r.point.publicKey)
                #expect(found.appID == "TEAM.app")
            }
        }
        print("1M keys (debug build): fill \(filled) s, snapshot \(report.seconds) s (\(report.bytes) bytes), restore \(restored) s")
        try b.close()
        _ = a
    }
}
