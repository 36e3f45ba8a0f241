import Dispatch
import Foundation
import GatewayTestSupport
import Glibc
import Synchronization
import Testing

@testable import GatewayStore

private let t0: Int64 = 1_700_000_000_000

/// What a key's counter window should accept: every counter above the highest; with a route window
/// of `width`, also one above `highest − width` never accepted (the attestation's counter 0 counts
/// as accepted).
struct WindowModel {
    var highest: UInt32 = 0
    var accepted: Set<UInt32> = [0]

    func accepts(_ c: UInt32, width: Int) -> Bool {
        if c > highest { return true }
        return width > 1 && Int(highest - c) < width && !accepted.contains(c)
    }

    /// The open counters a window of `width` still accepts below the highest.
    func open(width: Int) -> UInt64 {
        guard width > 1 else { return 0 }
        var bits: UInt64 = 0
        var c = highest
        while c > 0, Int(highest - (c - 1)) < width {
            c -= 1
            if !accepted.contains(c) { bits |= 1 << UInt64(highest - 1 - c) }
        }
        return bits
    }

    mutating func accept(_ c: UInt32) {
        accepted.insert(c)
        highest = max(highest, c)
    }
}

/// The key's counter window as the store holds it.
func window(_ store: MemoryAttestStore, _ id: KeyID) -> CounterWindow? {
    let key = KeyBits(id)
    return store.shards[store.shardIndex(key.w0)].state.withLock { s in s.find(key).map { s.record(at: $0).window } }
}

@Suite("Counter window: the bitmap, the memory store, its journal and snapshots")
struct CounterWindowTests {
    // MARK: - The pure window

    @Test("the window against a model: 20,000 random counters and widths, each accepted at most once")
    func pureWindowAgainstTheModel() {
        var rng = SeededRandom(seed: 1601)
        var w = CounterWindow(highest: 0)
        var model = WindowModel()
        for _ in 0..<20_000 {
            let width = [0, 1, 2, 5, 8, 33, 63, 64].randomElement(using: &rng)!
            let step = Int.random(in: -70...3, using: &rng) + (Int.random(in: 0..<50, using: &rng) == 0 ? 100 : 0)
            let c = UInt32(max(0, Int(w.highest) + step))
            let next = w.accepting(c, width: width)
            #expect((next != nil) == model.accepts(c, width: width), "counter \(c) width \(width) at \(w)")
            if next == nil { #expect(w.open(width: width) == model.open(width: width)) }
            if let next {
                w = next
                model.accept(c)
            }
        }
    }

    @Test("edges: highest − N refused, highest − N + 1 accepted once, duplicates refused, N = 64, jumps shift the bitmap")
    func edges() {
        var w = CounterWindow(highest: 0)
        #expect(w.accepting(0, width: 64) == nil)
        w = w.accepting(100, width: 0)!
        #expect(w.gaps == (UInt64(1) << 63) - 1)  // 37…99 open (63 counters), 0…36 forgotten
        #expect(w.accepting(36, width: 64) == nil)  // highest − 64
        let a = w.accepting(37, width: 64)!  // highest − 63
        #expect(a.accepting(37, width: 64) == nil)
        #expect(w.accepting(92, width: 8) == nil)  // highest − 8
        let b = w.accepting(93, width: 8)!  // highest − 7
        #expect(b.accepting(93, width: 8) == nil && b.accepting(93, width: 64) == nil)
        #expect(b.accepting(100, width: 64) == nil)  // the highest itself
        #expect(b.open(width: 8) == openBits(100, [94, 95, 96, 97, 98, 99]))
        #expect(w.accepting(99, width: 1) == nil && w.accepting(99, width: 0) == nil)
        // A jump of 3: the counters it skipped open, the old highest closed, the rest shifted.
        let c = b.accepting(103, width: 0)!
        #expect(c.highest == 103)
        #expect(c.openCounters(width: 11) == [94, 95, 96, 97, 98, 99, 101, 102])
        #expect(c.floor(width: 11) == 93 && c.floor(width: 0) == 104 && CounterWindow(highest: 5).floor(width: 8) == 1)
        // At the top of the range.
        let top = CounterWindow(highest: UInt32.max - 1).accepting(UInt32.max, width: 0)!
        #expect(top.accepting(UInt32.max - 1, width: 64) == nil && top.accepting(UInt32.max, width: 64) == nil)
    }

    @Test("merging windows closes what either closed, in any order, any number of times")
    func mergeIsAJoin() {
        var rng = SeededRandom(seed: 1602)
        for _ in 0..<2_000 {
            let a = CounterWindow(highest: UInt32.random(in: 0...200, using: &rng), gaps: rng.next())
            let b = CounterWindow(highest: UInt32.random(in: 0...200, using: &rng), gaps: rng.next())
            let c = CounterWindow(highest: UInt32.random(in: 0...200, using: &rng), gaps: rng.next())
            #expect(a.merged(with: b) == b.merged(with: a))
            #expect(a.merged(with: a) == a)
            #expect(a.merged(with: b).merged(with: c) == a.merged(with: b.merged(with: c)))
            // Never reopens: a counter a window of 64 refuses in a refuses in the merge too.
            let m = a.merged(with: b)
            for counter in UInt32(0)...200 where a.accepting(counter, width: 64) == nil && counter <= m.highest {
                #expect(m.accepting(counter, width: 64) == nil, "\(a) ⊔ \(b) reopened \(counter)")
            }
        }
        // A window merged with a later state of itself is that state (a journal record replayed
        // over a snapshot that already holds later records changes nothing).
        let early = CounterWindow(highest: 0).accepting(10, width: 0)!
        let late = early.accepting(5, width: 8)!.accepting(20, width: 0)!.accepting(15, width: 8)!
        #expect(late.merged(with: early) == late)
    }

    // MARK: - The memory store

    @Test("the store contract's counter window, memory only and with a data directory", arguments: [1, 64])
    func contract(shards: Int) throws {
        var rng = SeededRandom(seed: 1603)
        try checkCounterWindow(MemoryAttestStore(shards: shards), rng: &rng, t0: t0)
        let dir = TempDirectory()
        defer { dir.remove() }
        let store = try MemoryAttestStore.open(directory: dir.path, shards: shards)
        try checkCounterWindow(store, rng: &rng, t0: t0)
        try store.close()
    }

    @Test("16 threads racing one open counter (with and without a challenge): exactly one is accepted", arguments: [1, 64])
    func racingOneOpenCounter(shards: Int) throws {
        var rng = SeededRandom(seed: 1604)
        let store = MemoryAttestStore(shards: shards)
        for round in 0..<20 {
            let record = makeRecord(&rng)
            try store.registerFresh(record, now: t0)
            #expect(try store.commit(record.keyID, counter: 40, challenge: nil, now: t0) == .committed(previousCounter: 0))
            let challenges = try (0..<4).map { _ in try store.issue(.assert, key: record.keyID, now: t0).token }
            let committed = Atomic<Int>(0)
            DispatchQueue.concurrentPerform(iterations: 16) { i in
                let token: ChallengeToken? = round % 2 == 0 ? nil : challenges[i % 4]
                let outcome = try? store.commit(record.keyID, counter: 35, challenge: token, window: 8, now: t0)
                if case .committed? = outcome { committed.wrappingAdd(1, ordering: .relaxed) }
            }
            #expect(committed.load(ordering: .relaxed) == 1)
            #expect(
                try store.commit(record.keyID, counter: 35, challenge: nil, window: 8, now: t0)
                    == .counterReplay(stored: 40, open: openBits(40, [33, 34, 36, 37, 38, 39])))
        }
    }

    @Test("journal and snapshots keep the window exactly: 3,000 random commits with crashes, snapshots and clean stops")
    func journalAndSnapshotsAgainstTheModel() throws {
        let dir = TempDirectory()
        defer { dir.remove() }
        var rng = SeededRandom(seed: 1605)
        let keys = (0..<4).map { _ in makeRecord(&rng, seen: t0) }
        var models = [WindowModel](repeating: WindowModel(), count: keys.count)
        var store = try MemoryAttestStore.open(directory: dir.path, shards: 4)
        var abandoned: [MemoryAttestStore] = []  // "crashed": never closed
        for key in keys { try store.registerFresh(key, now: t0) }
        for step in 0..<3_000 {
            let k = Int.random(in: 0..<keys.count, using: &rng)
            let width = [0, 2, 8, 64].randomElement(using: &rng)!
            let c = UInt32(max(0, Int(models[k].highest) + Int.random(in: -66...4, using: &rng)))
            let outcome = try store.commit(keys[k].keyID, counter: c, challenge: nil, window: width, now: t0)
            if models[k].accepts(c, width: width) {
                #expect(outcome == .committed(previousCounter: models[k].highest), "step \(step)")
                models[k].accept(c)
            } else {
                #expect(outcome == .counterReplay(stored: models[k].highest, open: models[k].open(width: width)), "step \(step)")
            }
            switch Int.random(in: 0..<100, using: &rng) {
            case 0..<3:
                // A crash (kill -9): the store is never closed; its directory is opened again.
                let before = keys.map { window(store, $0.keyID) }
                abandoned.append(store)
                store = try openAfterCrash(dir.path)
                #expect(!store.lastStopWasClean)
                #expect(keys.map { window(store, $0.keyID) } == before, "step \(step)")
            case 3..<5:
                _ = try store.snapshot()
            case 5:
                let before = keys.map { window(store, $0.keyID) }
                try store.close()
                // (not exclusive: the "crashed" stores above still hold the directory's lock)
                store = try openAfterCrash(dir.path, shards: [1, 4, 16].randomElement(using: &rng)!)
                #expect(store.lastStopWasClean)
                #expect(keys.map { window(store, $0.keyID) } == before, "step \(step)")
            default:
                break
            }
        }
        // Every counter a window of 64 could reach: refused exactly when the model accepted it.
        let reopened = try openAfterCrash(dir.path)
        abandoned.append(store)
        for (k, key) in keys.enumerated() {
            let m = models[k]
            for c in UInt32(max(0, Int(m.highest) - 70))...m.highest {
                let outcome = try reopened.commit(key.keyID, counter: c, challenge: nil, window: 64, now: t0)
                if case .committed = outcome {
                    #expect(!m.accepted.contains(c) && Int(m.highest - c) < 64)
                } else {
                    #expect(m.accepted.contains(c) || Int(m.highest - c) >= 64, "counter \(c) refused")
                }
            }
        }
        try reopened.close()
        _ = abandoned
    }

    /// Commits 10 (from 0: 1…9 open), then 5 and 7 with a window of 8: three advances that carry the
    /// window (57-byte frames). Returns the store, the key and the three frames' offsets.
    func threeWindowAdvances(_ dir: TempDirectory, seed: UInt64) throws -> (MemoryAttestStore, DeviceKeyRecord, [Int]) {
        var rng = SeededRandom(seed: seed)
        let record = makeRecord(&rng)
        let store = try MemoryAttestStore.open(directory: dir.path, shards: 4)
        try store.registerFresh(record, now: t0)
        var offsets: [Int] = []
        for (c, width) in [(UInt32(10), 0), (5, 8), (7, 8)] {
            offsets.append(readBytes(dir.lastSegment).count)
            #expect(
                try store.commit(record.keyID, counter: c, challenge: nil, window: width, now: t0)
                    == .committed(previousCounter: c == 10 ? 0 : 10))
        }
        #expect(readBytes(dir.lastSegment).count == offsets[2] + AdvanceLayout.windowSize)
        return (store, record, offsets)
    }

    @Test("journal damage cannot reopen a counter: the damaged acceptance of an open counter closes the key's window")
    func damagedGapAcceptanceClosesTheWindow() throws {
        let dir = TempDirectory()
        defer { dir.remove() }
        let (a, record, offsets) = try threeWindowAdvances(dir, seed: 1606)
        // The last record (7 accepted) damaged in its last-seen bytes: its key is intact.
        var bytes = readBytes(dir.lastSegment)
        bytes[offsets[2] + AdvanceLayout.lastSeen] ^= 0x10
        writeBytes(dir.lastSegment, bytes)
        let b = try openAfterCrash(dir.path)
        let damage = b.restoreReport.damage
        #expect(damage.count == 1 && damage.first?.kind == .checksum && damage.first?.keyID == record.keyID)
        #expect(damage.first?.windowClosed == 8)  // 1…4, 6…9 were open after 5
        #expect(damage.first?.description.hasSuffix("(8 open counters of its window closed)") == true)
        #expect(window(b, record.keyID) == CounterWindow(highest: 10))
        for c in UInt32(0)...10 {
            #expect(try b.commit(record.keyID, counter: c, challenge: nil, window: 64, now: t0) == .counterReplay(stored: 10))
        }
        // A later jump opens only the counters it skips.
        #expect(try b.commit(record.keyID, counter: 13, challenge: nil, now: t0) == .committed(previousCounter: 10))
        #expect(try b.commit(record.keyID, counter: 12, challenge: nil, window: 8, now: t0) == .committed(previousCounter: 13))
        #expect(
            try b.commit(record.keyID, counter: 9, challenge: nil, window: 8, now: t0)
                == .counterReplay(stored: 13, open: openBits(13, [11])))
        _ = a
    }

    @Test("journal damage in the middle: a later record of the key carries its whole window, so the lost acceptance stays closed")
    func laterRecordCarriesTheWindow() throws {
        let dir = TempDirectory()
        defer { dir.remove() }
        let (a, record, offsets) = try threeWindowAdvances(dir, seed: 1607)
        // The middle record (5 accepted): its key bytes damaged, so it names no key at all.
        var bytes = readBytes(dir.lastSegment)
        bytes[offsets[1] + AdvanceLayout.key] ^= 0xFF
        writeBytes(dir.lastSegment, bytes)
        let b = try openAfterCrash(dir.path)
        #expect(b.restoreReport.damage.map(\.kind) == [.checksum])
        #expect(b.restoreReport.damage.first?.keyID == nil)
        // 7's record says 5 and 7 are accepted: both refused; 1…4, 6, 8, 9 still open.
        #expect(window(b, record.keyID) == CounterWindow(highest: 10, gaps: openBits(10, [1, 2, 3, 4, 6, 8, 9])))
        #expect(
            try b.commit(record.keyID, counter: 5, challenge: nil, window: 64, now: t0)
                == .counterReplay(stored: 10, open: openBits(10, [1, 2, 3, 4, 6, 8, 9])))
        #expect(try b.commit(record.keyID, counter: 6, challenge: nil, window: 8, now: t0) == .committed(previousCounter: 10))
        _ = a
    }

    @Test("a damaged registration or removal of a key closes its window and reopens nothing")
    func damagedRegistrationClosesTheWindow() throws {
        let dir = TempDirectory()
        defer { dir.remove() }
        var rng = SeededRandom(seed: 1608)
        let record = makeRecord(&rng)
        let a = try MemoryAttestStore.open(directory: dir.path, shards: 4)
        try a.registerFresh(record, now: t0)
        #expect(try a.commit(record.keyID, counter: 10, challenge: nil, now: t0) == .committed(previousCounter: 0))
        _ = try a.snapshot()  // the key and its window (1…9 open) in the snapshot
        let start = readBytes(dir.lastSegment).count
        try a.registerFresh(record, now: t0 + 1_000)  // re-registration: closes 1…9
        var bytes = readBytes(dir.lastSegment)
        bytes[start + 9 + 40] ^= 0x01  // inside the point: the key stays readable
        writeBytes(dir.lastSegment, bytes)
        let b = try openAfterCrash(dir.path)
        #expect(b.restoreReport.damage.first?.keyID == record.keyID)
        #expect(b.restoreReport.damage.first?.windowClosed == 9)
        #expect(try b.commit(record.keyID, counter: 5, challenge: nil, window: 64, now: t0) == .counterReplay(stored: 10))
        _ = a
    }

    @Test(
        "a version 2 directory (144-byte records, version 2 journal) opens with every window closed; the next snapshot is the current version, the journal version 3"
    )
    func version2DirectoryConverts() throws {
        let dir = TempDirectory()
        defer { dir.remove() }
        var rng = SeededRandom(seed: 1609)
        let key = makeRecord(&rng, seen: t0)
        #expect(MemoryLayout<KeyRecordV2>.stride == 144 && MemoryLayout<KeyRecord>.stride == 168)
        let path = dir.file("snapshot.dat")
        try writeVersion2Snapshot(path, key, counter: 7, seenMillis: t0, sequence: 0x2222)
        // journal segment 1, version 2: the key's counter advanced to 10 (a 41-byte advance).
        var segment = JournalFormat.header(1)
        segment.replaceSubrange(8..<12, with: [2, 0, 0, 0])
        segment += advanceFrame(key.keyID, counter: 10)
        writeBytes(dir.file(JournalFormat.segmentName(1)), segment)
        writeBytes(dir.file("receipts.dat"), [])

        let store = try MemoryAttestStore.open(directory: dir.path, shards: 4)
        #expect(store.restoreReport.damage.isEmpty && store.restoreReport.replayedRecords == 1)
        #expect(window(store, key.keyID) == CounterWindow(highest: 10))  // 8 and 9 were never acceptable
        #expect(try store.commit(key.keyID, counter: 9, challenge: nil, window: 64, now: t0) == .counterReplay(stored: 10))
        #expect(try store.commit(key.keyID, counter: 12, challenge: nil, now: t0) == .committed(previousCounter: 10))
        #expect(try store.commit(key.keyID, counter: 11, challenge: nil, window: 2, now: t0) == .committed(previousCounter: 12))
        // The re-registration window came across.
        #expect(
            store.shards[store.shardIndex(KeyBits(key.keyID).w0)].state.withLock { s in
                s.record(at: s.find(KeyBits(key.keyID))!).reregistrations
            } == 1)
        try store.close()
        let written = readBytes(path)
        // The current snapshot version (4 added DeviceCheck token claims, 5 keys' account associations).
        #expect(Array(written[8..<12]) == [UInt8(SnapshotFormat.version), 0, 0, 0])
        #expect(SnapshotFormat.version == 5)
        #expect(Array(readBytes(dir.lastSegment)[8..<12]) == [3, 0, 0, 0])
        let again = try MemoryAttestStore.open(directory: dir.path, shards: 4)
        #expect(again.lastStopWasClean)
        #expect(window(again, key.keyID) == CounterWindow(highest: 12))
        try again.close()
    }
}
