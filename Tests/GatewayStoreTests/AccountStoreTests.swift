import Foundation
import GatewayTestSupport
import Glibc
import Testing

@testable import GatewayStore

private let t0: Int64 = 1_700_000_000_000
private let hour: Int64 = 3_600_000

/// The memory store's keys per account (docs/store.md, "Keys per account"): the contract, the
/// bound, and what survives a clean stop (snapshot version 5) and a crash (journal type 6); a
/// version 4 snapshot (before associations) still loads.
@Suite("Memory store: keys per account")
struct AccountStoreTests {
    @Test("the keys-per-account contract, with 64 shards and with 1")
    func contract() throws {
        var rng = SeededRandom(seed: 271)
        try checkAccounts(MemoryAttestStore(shards: 64), rng: &rng, t0: t0)
        try checkAccounts(MemoryAttestStore(shards: 1), rng: &rng, t0: t0)
    }

    @Test("bounded by max_keys: a new key's association beyond it is .capacity until associations older than the window make room")
    func capacity() throws {
        var rng = SeededRandom(seed: 273)
        let keys = (0..<3).map { _ in makeRecord(&rng, seen: t0) }
        let store = MemoryAttestStore(shards: 1, limits: KeyLimits(maxKeys: 2, keyIdleTTLMillis: 1_000))
        #expect(store.accounts.maxAssociations == 2)
        for k in keys.prefix(2) { try store.registerFresh(k, now: t0) }
        let a = tokenDigest(&rng)
        #expect(try store.associateNow(keys[0].keyID, a, now: t0, window: hour) == .recorded(keyCount: 1, moved: false))
        #expect(try store.associateNow(keys[1].keyID, a, now: t0 + 60_000, window: hour) == .recorded(keyCount: 2, moved: false))
        // The keys go idle and are removed; their associations stay until the window drops them.
        #expect(try store.sweepIdleKeys(nowMillis: t0 + 60_000) == 2)
        try store.registerFresh(keys[2], now: t0 + 60_000)
        #expect(try store.associateNow(keys[2].keyID, a, now: t0 + 120_000, window: hour) == .capacity(maxAssociations: 2))
        // Once key 0's association is older than the window, it makes room.
        #expect(try store.associateNow(keys[2].keyID, a, now: t0 + hour + 1_000, window: hour) == .recorded(keyCount: 2, moved: false))
        #expect(try store.accountKeys(a, now: t0 + hour + 1_000, window: hour) == 2)
        #expect(store.accounts.live.load(ordering: .relaxed) == 2)
    }

    @Test("with a data directory, associations survive a clean stop (snapshot v5) and a crash (journal type 6), counts included")
    func survivesRestarts() throws {
        let dir = TempDirectory()
        defer { dir.remove() }
        let path = dir.file("data")
        var rng = SeededRandom(seed: 274)

        let first = try MemoryAttestStore.open(directory: path, shards: 4)
        let (keys, a, b) = try checkAccounts(first, rng: &rng, t0: t0)
        let later = t0 + 3_000 + hour + 1_000
        let before = try keys.map { try first.key($0.keyID)?.account }
        try first.close()

        // Clean stop: the final snapshot holds the associations; re-sharded too.
        let second = try MemoryAttestStore.open(directory: path, shards: 8)
        #expect(second.lastStopWasClean)
        #expect(try keys.map { try second.key($0.keyID)?.account } == before)
        #expect(try second.accountKeys(a, now: later + 1_000, window: hour) == 2)
        #expect(try second.accountKeys(b, now: later, window: 2 * hour) == 1)

        // Crash: the journal's association records are replayed over the last snapshot, and
        // counted again from their cutoffs (key 1 moves back to a: a has three keys).
        _ = try second.snapshot()
        #expect(try second.associateNow(keys[1].keyID, a, now: later + 2_000, window: hour) == .recorded(keyCount: 3, moved: true))
        let third = try openAfterCrash(path)
        #expect(!third.lastStopWasClean)
        #expect(third.restoreReport.damage.isEmpty)
        #expect(try third.key(keys[1].keyID)?.account == KeyAccount(digest: a, keyCount: 3, associatedMillis: later + 2_000))
        #expect(try third.accountKeys(a, now: later + 2_000, window: hour) == 3)
        #expect(try third.accountKeys(b, now: later + 2_000, window: 2 * hour) == 0)

        // Again without a snapshot in between.
        let fourth = try openAfterCrash(path)
        #expect(try keys.map { try fourth.key($0.keyID)?.account } == keys.map { try? third.key($0.keyID)?.account })
    }

    @Test("a version 4 snapshot (written before keys per account) still loads: its keys, no associations")
    func version4SnapshotLoads() throws {
        let dir = TempDirectory()
        defer { dir.remove() }
        let path = dir.file("data")
        var rng = SeededRandom(seed: 275)
        let k = makeRecord(&rng, seen: t0)
        let first = try MemoryAttestStore.open(directory: path, shards: 2)
        try first.registerFresh(k, now: t0)
        try first.close()
        // Rewrite snapshot.dat as version 4: the same bytes without the associations' count (0).
        let file = "\(path)/\(SnapshotFormat.fileName)"
        var bytes = readBytes(file)
        #expect(bytes.count > 40)
        let body = Array(bytes[0..<(bytes.count - 32 - 8)])
        #expect(bytes[(bytes.count - 40)..<(bytes.count - 32)].allSatisfy { $0 == 0 })
        bytes = body
        bytes[8] = 4
        let out = BufferedHashingWriter(fd: try FileIO.open(file, O_WRONLY | O_CREAT | O_TRUNC), path: file)
        try out.write(bytes)
        try out.finish()
        Glibc.close(out.fd)

        let second = try MemoryAttestStore.open(directory: path, shards: 2)
        #expect(second.lastStopWasClean)
        #expect(try second.key(k.keyID)?.counter == k.counter)
        #expect(try second.key(k.keyID)?.account == nil)
        let a = tokenDigest(&rng)
        #expect(try second.associateNow(k.keyID, a, now: t0, window: hour) == .recorded(keyCount: 1, moved: false))
    }
}
