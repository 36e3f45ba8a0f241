import Foundation
import GatewayTestSupport
import Glibc
import Testing

@testable import GatewayStore

private let t0: Int64 = 1_700_000_000_000
private let day: Int64 = 86_400_000

/// The memory store's side of the risk refresher: the contract, and what survives a restart (clean,
/// after a crash, from a snapshot, through a receipt compaction, from a version 2 snapshot).
@Suite("Memory store: risk refresh")
struct RiskRefreshStoreTests {
    @Test("the risk refresh contract, on the memory store with a data directory")
    func contract() throws {
        let dir = TempDirectory()
        defer { dir.remove() }
        let store = try MemoryAttestStore.open(directory: dir.path, shards: 4)
        var rng = SeededRandom(seed: 71)
        try checkRiskRefresh(store, rng: &rng, t0: t0)
        try store.close()
    }

    @Test("a key record stays within the 256-byte budget per key: 168 bytes with its receipt's risk and counter window")
    func recordSize() {
        #expect(MemoryLayout<KeyRecord>.size == 168)
        #expect(MemoryLayout<KeyRecord>.stride == 168)
    }

    /// Registers `a` with a dated receipt and refreshes it once: receipt `[5, 5, 5]`, metric 7.
    private func refreshedKey(_ store: MemoryAttestStore, _ rng: inout SeededRandom) throws -> (DeviceKeyRecord, KeyRisk) {
        let a = withRisk(makeRecord(&rng, seen: t0), created: t0, expires: t0 + 90 * day, next: t0 + 1_000)
        try store.registerFresh(a, receipt: [1, 2, 3, 4], now: t0)
        let risk = KeyRisk(
            metric: 7, receiptCreatedMillis: t0 + 5_000, notBeforeMillis: t0 + day + 5_000, expiresMillis: t0 + 91 * day,
            nextRefreshMillis: t0 + day + 6_000)
        #expect(try store.record(RiskUpdate(keyID: a.keyID, basedOnCreatedMillis: t0, receipt: [5, 5, 5], risk: risk)) == .stored)
        return (a, risk)
    }

    @Test("receipts, metrics and the schedule survive a clean stop, a crash (journal replay) and a snapshot")
    func survivesRestarts() throws {
        let dir = TempDirectory()
        defer { dir.remove() }
        var rng = SeededRandom(seed: 72)
        let first = try MemoryAttestStore.open(directory: dir.path, shards: 4)
        let (a, risk) = try refreshedKey(first, &rng)
        // A crash: nothing but the journal (registration, then the refresh record and its receipt).
        let crashed = try openAfterCrash(dir.path)
        #expect(!crashed.lastStopWasClean)
        #expect(crashed.restoreReport.damage.isEmpty)
        #expect(try crashed.key(a.keyID)?.risk == risk)
        #expect(try crashed.candidate(a.keyID)?.receipt == [5, 5, 5])
        #expect(crashed.receiptBytes.live == 3)
        // A stale answer on top, then a snapshot and a clean stop.
        var stale = risk
        stale.stale = true
        stale.nextRefreshMillis = t0 + 4 * day
        #expect(try crashed.record(RiskUpdate(keyID: a.keyID, basedOnCreatedMillis: t0 + 5_000, receipt: nil, risk: stale)) == .stored)
        _ = try crashed.snapshot()
        try crashed.close()
        _ = first
        let reopened = try openAfterCrash(dir.path)
        #expect(reopened.lastStopWasClean)
        #expect(try reopened.key(a.keyID)?.risk == stale)
        #expect(try reopened.candidate(a.keyID)?.receipt == [5, 5, 5])
        // Due again only at the stale re-probe.
        #expect(try reopened.claim(now: t0 + 4 * day - 1_000).keys.isEmpty)
        #expect(try reopened.claim(now: t0 + 4 * day).keys == [a.keyID])
    }

    @Test("a receipt compaction keeps each key's latest receipt: the refreshed one, not the attestation's")
    func compactionKeepsRefreshedReceipts() throws {
        let dir = TempDirectory()
        defer { dir.remove() }
        var rng = SeededRandom(seed: 73)
        let store = try MemoryAttestStore.open(directory: dir.path, shards: 4)
        store.compactionMinimumGarbage.store(1, ordering: .relaxed)
        var keys: [(DeviceKeyRecord, [UInt8])] = []
        for i in 0..<20 {
            let a = withRisk(makeRecord(&rng, seen: t0), created: t0, expires: nil, next: t0 + 1_000)
            try store.registerFresh(a, receipt: [UInt8](repeating: UInt8(i), count: 400), now: t0)
            let fresh = [UInt8](repeating: UInt8(100 + i), count: 50 + i)
            let risk = KeyRisk(metric: UInt32(i), receiptCreatedMillis: t0 + 1_000, nextRefreshMillis: t0 + day)
            #expect(try store.record(RiskUpdate(keyID: a.keyID, basedOnCreatedMillis: t0, receipt: fresh, risk: risk)) == .stored)
            keys.append((a, fresh))
        }
        let before = store.receiptBytes
        #expect(before.live == keys.reduce(0) { $0 + $1.1.count })
        #expect(before.file == 20 * 400 + before.live)
        _ = try store.snapshot()
        #expect(store.receiptBytes.file == before.live)
        for (a, fresh) in keys { #expect(try store.candidate(a.keyID)?.receipt == fresh) }
        try store.close()
        let reopened = try openAfterCrash(dir.path)
        for (i, (a, fresh)) in keys.enumerated() {
            #expect(try reopened.candidate(a.keyID)?.receipt == fresh)
            #expect(try reopened.key(a.keyID)?.risk?.metric == UInt32(i))
        }
    }

    @Test("a journal risk record is read back exactly, and a damaged one is reported with its key")
    func journalRecord() throws {
        let risk = JournalRecord.Risk(
            key: KeyBits(w0: 1, w1: 2, w2: 3, w3: 4), metric: 12, stale: true, receiptCreated: 10, receiptNotBefore: 20,
            receiptExpires: 30, nextRefresh: 40, receiptOffset: 500, receiptLength: 60)
        let payload = JournalRecord.encodeRisk(risk)
        #expect(payload.count == JournalRecord.riskPayloadSize)
        let decoded = payload.withUnsafeBytes { JournalRecord.decode($0) }
        guard case .risk(let back)? = decoded else {
            Issue.record("not decoded as a risk record: \(String(describing: decoded))")
            return
        }
        #expect(back == risk)
        var bad = payload
        bad[37] = 2  // stale is 0 or 1
        #expect(bad.withUnsafeBytes { JournalRecord.decode($0) } == nil)

        // On disk: a refresh record whose checksum fails is skipped and attributed to its key.
        let dir = TempDirectory()
        defer { dir.remove() }
        var rng = SeededRandom(seed: 74)
        let store = try MemoryAttestStore.open(directory: dir.path, shards: 4)
        let (a, _) = try refreshedKey(store, &rng)
        var bytes = readBytes(dir.lastSegment)
        let at = bytes.count - (8 + JournalRecord.riskPayloadSize)
        #expect(bytes[at + 8] == JournalRecord.riskType)
        bytes[at + 4] ^= 0x01
        writeBytes(dir.lastSegment, bytes)
        let damaged = try openAfterCrash(dir.path)
        #expect(damaged.restoreReport.damage.map(\.kind) == [.checksum])
        #expect(damaged.restoreReport.damage.first?.keyID == a.keyID)
        // The registration stands: its receipt and first refresh, no metric.
        #expect(try damaged.key(a.keyID)?.risk?.metric == nil)
        #expect(try damaged.candidate(a.keyID)?.receipt == [1, 2, 3, 4])
        _ = store
    }

    @Test("a version 2 snapshot (before the receipt's risk fields) still restores: its keys have no dated receipt")
    func version2Snapshot() throws {
        let dir = TempDirectory()
        defer { dir.remove() }
        var rng = SeededRandom(seed: 75)
        let r = makeRecord(&rng, seen: t0)
        try writeVersion2Snapshot(dir.file("snapshot.dat"), r, counter: 9, seenMillis: t0, sequence: 42)

        let store = try MemoryAttestStore.open(directory: dir.path, shards: 1)
        let key = try #require(try store.key(r.keyID))
        #expect(key.counter == 9 && key.appID == r.appID && key.environment == .production)
        #expect(key.risk == nil)
        #expect(try store.claim(now: t0 + 365 * day).keys.isEmpty)
        try store.close()
    }
}
