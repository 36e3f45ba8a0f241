import Foundation
import GatewayTestSupport
import Synchronization
import Testing

@testable import GatewayStore

private let t0: Int64 = 1_700_000_000_000

/// Issue 19, "Receipts and keys are bounded": the re-registration window, the key's app, the key
/// cap, idle eviction, and receipts (not kept without a data directory).
@Suite("Memory store: key bounds")
struct KeyBoundsTests {
    @Test func contractWithoutDataDirectory() throws {
        var rng = SeededRandom(seed: 190)
        let store = MemoryAttestStore(shards: 4, limits: contractKeyLimits)
        try checkKeyBounds(store, rng: &rng, t0: t0)
        #expect(store.statistics.keys == 3)
    }

    @Test func contractWithDataDirectoryAndTheWindowSurvivesACrashAndACleanStop() throws {
        let dir = TempDirectory()
        defer { dir.remove() }
        var rng = SeededRandom(seed: 191)
        let a = try MemoryAttestStore.open(directory: dir.path, shards: 4, limits: contractKeyLimits)
        try checkKeyBounds(a, rng: &rng, t0: t0)
        #expect(a.statistics.keys == 3)
        let record = makeRecord(&rng, seen: t0)
        // The three keys of the contract are at the cap; a store with room takes the window from the journal.
        let roomy = KeyLimits(maxKeys: 10, maxReregistrations: 2, reregistrationWindowMillis: 60_000)
        let b = try openAfterCrash(dir.path, shards: 4, limits: roomy)
        #expect(b.statistics.keys == 3)
        try b.registerFresh(record, now: t0 + 100_000)
        try b.registerFresh(record, now: t0 + 101_000)
        try b.registerFresh(record, now: t0 + 102_000)
        let held = try b.issue(.register, key: record.keyID, now: t0 + 103_000)
        #expect(try b.registerNow(record, challenge: held.token, now: t0 + 103_000) == .reregistrationLimited(retryAfterMillis: 58_000))
        // Journal replay after a crash keeps the window...
        let c = try openAfterCrash(dir.path, shards: 8, limits: roomy)
        let again = try c.issue(.register, key: record.keyID, now: t0 + 104_000)
        #expect(try c.registerNow(record, challenge: again.token, now: t0 + 104_000) == .reregistrationLimited(retryAfterMillis: 57_000))
        try c.close()
        // ... and so does a snapshot (the crashed stores still hold the directory's lock).
        let d = try openAfterCrash(dir.path, shards: 2, limits: roomy)
        let third = try d.issue(.register, key: record.keyID, now: t0 + 105_000)
        #expect(try d.registerNow(record, challenge: third.token, now: t0 + 105_000) == .reregistrationLimited(retryAfterMillis: 56_000))
        #expect(try d.registerNow(record, challenge: third.token, now: t0 + 161_000) == .registered(existing: true))
        try d.close()
        _ = (a, b)
    }

    /// Sixteen threads register sixteen new keys against a cap of five: exactly five are stored.
    @Test(arguments: [1, 16])
    func theCapHoldsUnderRacingRegistrations(shards: Int) throws {
        var rng = SeededRandom(seed: 192)
        let store = MemoryAttestStore(shards: shards, limits: KeyLimits(maxKeys: 5))
        let records = (0..<16).map { _ in makeRecord(&rng) }
        let challenges = try records.map { try store.issue(.register, key: $0.keyID, now: t0).token }
        let stored = Atomic<Int>(0)
        let capped = Atomic<Int>(0)
        DispatchQueue.concurrentPerform(iterations: records.count) { i in
            store.register(Registration(record: records[i], receipt: [1], challenge: challenges[i]), nowMillis: t0) {
                switch $0 {
                case .success(.registered(existing: false)): stored.wrappingAdd(1, ordering: .relaxed)
                case .success(.keyCapacity(maxKeys: 5)): capped.wrappingAdd(1, ordering: .relaxed)
                default: Issue.record("unexpected \($0)")
                }
            }
        }
        #expect(stored.load(ordering: .relaxed) == 5)
        #expect(capped.load(ordering: .relaxed) == 11)
        #expect(store.statistics.keys == 5)
    }

    /// A failed journal write gives back the reserved place under the cap.
    @Test func aFailedRegistrationDoesNotTakeAPlaceUnderTheCap() throws {
        let dir = TempDirectory()
        defer { dir.remove() }
        var rng = SeededRandom(seed: 193)
        let store = try MemoryAttestStore.open(directory: dir.path, shards: 2, limits: KeyLimits(maxKeys: 1))
        let record = makeRecord(&rng)
        let challenge = try store.issue(.register, key: record.keyID, now: t0)
        // Closing the journal (not the store) makes the next append fail.
        try store.journal!.close()
        let failed = wait {
            store.register(Registration(record: record, receipt: [1], challenge: challenge.token), nowMillis: t0, completion: $0)
        }
        guard case .failure(let error) = failed else {
            Issue.record("registered on a closed journal: \(failed)")
            return
        }
        #expect(error.code == .unavailable)
        #expect(store.statistics.keys == 0)
        #expect(store.keyCount.load(ordering: .relaxed) == 0)
    }

    @Test func aMemoryOnlyStoreKeepsNoReceipts() throws {
        var rng = SeededRandom(seed: 194)
        let store = MemoryAttestStore(shards: 2)
        let record = makeRecord(&rng)
        try store.registerFresh(record, receipt: [UInt8](repeating: 7, count: 30 * 1024), now: t0)
        #expect(store.receipt(for: record.keyID) == nil)
        #expect(store.receiptBytes == (0, 0))
        #expect(try store.key(record.keyID) != nil)
    }

    // MARK: - Idle eviction

    @Test func idleKeysAreRemovedAndStayRemovedAfterACrashAndARestart() throws {
        let dir = TempDirectory()
        defer { dir.remove() }
        var rng = SeededRandom(seed: 195)
        let limits = KeyLimits(keyIdleTTLMillis: 10_000)
        final class Evictions: AttestStoreObserver {
            let count = Atomic<Int>(0)
            func keysEvicted(_ n: Int) { count.wrappingAdd(n, ordering: .relaxed) }
        }
        let evictions = Evictions()
        let a = try MemoryAttestStore.open(directory: dir.path, shards: 4, observer: evictions, limits: limits)
        let records = (0..<40).map { _ in makeRecord(&rng, seen: t0) }
        for r in records { try a.registerFresh(r, receipt: [UInt8](repeating: 1, count: 100), now: t0) }
        _ = try a.snapshot()
        // Half of the keys are used at t0 + 5 s (and one advance each lands in the journal).
        for r in records.prefix(20) {
            #expect(try a.commit(r.keyID, counter: 1, challenge: nil, now: t0 + 5_000) == .committed(previousCounter: 0))
        }
        #expect(try a.sweepIdleKeys(nowMillis: t0 + 9_999) == 0)
        #expect(try a.sweepIdleKeys(nowMillis: t0 + 10_000) == 20)
        #expect(evictions.count.load(ordering: .relaxed) == 20)
        #expect(a.statistics.keys == 20)
        #expect(a.receiptBytes.live == 2_000)
        for r in records.dropFirst(20) {
            #expect(try a.key(r.keyID) == nil)
            #expect(try a.commit(r.keyID, counter: 2, challenge: nil, now: t0 + 10_000) == .unknownKey)
        }
        for r in records.prefix(20) { #expect(try a.key(r.keyID)?.counter == 1) }
        // A removed key registers again as a new key.
        #expect(try a.registerFresh(records[39], now: t0 + 11_000) == .registered(existing: false))

        let b = try openAfterCrash(dir.path, shards: 8)
        #expect(b.statistics.keys == 21)
        for r in records.dropFirst(20).dropLast() { #expect(try b.key(r.keyID) == nil) }
        #expect(try b.key(records[39].keyID)?.counter == 0)
        #expect(try b.key(records[0].keyID)?.counter == 1)
        try b.close()
        let c = try openAfterCrash(dir.path, shards: 4, limits: limits)
        #expect(c.lastStopWasClean)
        #expect(c.statistics.keys == 21)
        #expect(try c.key(records[25].keyID) == nil)
        try c.close()
        _ = a
    }

    @Test func withoutATTLNothingIsEvicted() throws {
        var rng = SeededRandom(seed: 196)
        let store = MemoryAttestStore(shards: 2)
        try store.registerFresh(makeRecord(&rng, seen: t0), now: t0)
        #expect(try store.sweepIdleKeys(nowMillis: t0 + 1_000_000_000) == 0)
        #expect(store.statistics.keys == 1)
    }

    /// A snapshot copied after a removal lacks the key, while the segment it replays from holds an
    /// advance of that key before the removal: the advance is matched by the removal, not an error.
    @Test func anAdvanceBeforeARemovalReplaysOverASnapshotWithoutTheKey() throws {
        let dir = TempDirectory()
        defer { dir.remove() }
        var rng = SeededRandom(seed: 197)
        let a = try MemoryAttestStore.open(directory: dir.path, shards: 2, limits: KeyLimits(keyIdleTTLMillis: 5_000))
        let gone = makeRecord(&rng, seen: t0)
        let kept = makeRecord(&rng, seen: t0)
        try a.registerFresh(gone, now: t0)
        try a.registerFresh(kept, now: t0)
        _ = try a.snapshot()
        #expect(try a.commit(gone.keyID, counter: 1, challenge: nil, now: t0) == .committed(previousCounter: 0))
        #expect(try a.commit(kept.keyID, counter: 1, challenge: nil, now: t0 + 5_000) == .committed(previousCounter: 0))
        #expect(try a.sweepIdleKeys(nowMillis: t0 + 5_000) == 1)
        // The snapshot a rotation before the advance and a copy after the removal would give.
        let seq = a.journal!.state.withLock { $0.seq }
        let copies = a.shards.map { shard in
            shard.state.withLock { s in
                SnapshotFormat.ShardCopy(strings: s.strings, chunks: s.chunks, count: s.count, challenges: [:])
            }
        }
        _ = try SnapshotFormat.write(
            directory: dir.path,
            header: SnapshotFormat.Header(shardCount: 2, generation: 7, journalSeq: seq, keyCount: 1, challengeCount: 0, createdMillis: t0),
            shards: copies)
        let b = try openAfterCrash(dir.path, shards: 2)
        #expect(try b.key(gone.keyID) == nil)
        #expect(try b.key(kept.keyID)?.counter == 1)
        #expect(b.restoreReport.damage.isEmpty)
        // Without the removal the same advance is journal damage: an advance of a key that is not
        // registered (`unknown_key`), reported with its key and counter; the key is not created.
        let segment = dir.file(JournalFormat.segmentName(seq))
        let bytes = readBytes(segment)
        let removal = 8 + JournalRecord.removalPayloadSize
        writeBytes(segment, Array(bytes.dropLast(removal)))
        let c = try openAfterCrash(dir.path, shards: 2)
        #expect(c.restoreReport.damage.map(\.kind) == [.unknownKey])
        #expect(c.restoreReport.damage.first?.keyID == gone.keyID)
        #expect(c.restoreReport.damage.first?.recordedCounter == 1)
        #expect(try c.key(gone.keyID) == nil)
        #expect(try c.key(kept.keyID)?.counter == 1)
        _ = (a, b, c)
    }

    /// Backward-shift deletion keeps every other key findable: random inserts and removals against
    /// a set, one shard (long probe runs, wrap-around), every key looked up after each step.
    @Test func removalKeepsTheTableConsistent() throws {
        var rng = SeededRandom(seed: 198)
        var state = ShardState(seed: 42)
        var present: [KeyBits] = []
        var removed: [KeyBits] = []
        func bits() -> KeyBits { KeyBits(makeRecord(&rng).keyID) }
        for step in 0..<3_000 {
            if present.isEmpty || UInt8.random(in: 0...9, using: &rng) < 6 {
                let key = bits()
                var record = KeyRecord(
                    key: key, point: PointBits([4] + [UInt8](repeating: 1, count: 64))!, receiptOffset: 0, counter: UInt32(step),
                    receiptLength: 0, appIndex: 0, bundleIndex: KeyRecord.noString, category: 0, firstSeen: 0, lastSeen: 0, flags: 0)
                record.reregistrations = 1
                let added = state.appendIfAbsent(record)
                #expect(added)
                present.append(key)
            } else {
                let i = Int.random(in: 0..<present.count, using: &rng)
                let key = present.remove(at: i)
                state.remove(at: try #require(state.find(key)))
                removed.append(key)
            }
            if step % 97 == 0 || step > 2_900 {
                #expect(state.count == present.count)
                for key in present { #expect(state.find(key).map { state.record(at: $0).key } == key) }
                for key in removed.suffix(50) { #expect(state.find(key) == nil) }
            }
        }
        #expect(state.chunks.count == (state.count + ShardState.chunkSize - 1) / ShardState.chunkSize)
    }
}
