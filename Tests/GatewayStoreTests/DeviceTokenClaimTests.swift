import Foundation
import GatewayTestSupport
import Testing

@testable import GatewayStore

private let t0: Int64 = 1_700_000_000_000

/// The memory store's DeviceCheck token claims (docs/store.md, "Device token claims"): the
/// contract, the bound, the sweep, and what survives a clean stop and a crash with a data directory.
@Suite("Memory store: DeviceCheck token claims")
struct DeviceTokenClaimTests {
    @Test("the token claim contract, with 64 shards and with 1")
    func contract() throws {
        var rng = SeededRandom(seed: 51)
        try checkTokenClaims(MemoryAttestStore(shards: 64), rng: &rng)
        try checkTokenClaims(MemoryAttestStore(shards: 1), rng: &rng)
    }

    @Test("262,144 live claims at most: then .capacity, no live claim forgotten early; expired ones make room; the sweep drops them")
    func bounded() throws {
        var rng = SeededRandom(seed: 52)
        let store = MemoryAttestStore(shards: 1)
        #expect(store.maxDeviceTokens == 262_144)
        var first: [UInt8] = []
        for i in 0..<262_144 {
            let d = tokenDigest(&rng)
            if i == 0 { first = d }
            guard try store.claim(d, ttl: 60_000, now: t0 + Int64(i / 1000)) == .claimed else {
                Issue.record("claim \(i) refused")
                return
            }
        }
        #expect(store.liveDeviceTokens == 262_144)
        let late = tokenDigest(&rng)
        #expect(try store.claim(late, ttl: 60_000, now: t0 + 1_000) == .capacity(maxTokens: 262_144))
        #expect(try store.claim(first, ttl: 60_000, now: t0 + 1_000) == .alreadyClaimed)
        #expect(store.liveDeviceTokens == 262_144)
        // Once the first thousand claims expired, the full shard drops them and takes the new one.
        #expect(try store.claim(late, ttl: 60_000, now: t0 + 60_000) == .claimed)
        #expect(store.liveDeviceTokens == 262_144 - 1_000 + 1)
        #expect(try store.claim(first, ttl: 60_000, now: t0 + 60_000) == .claimed)
        store.sweepExpired(nowMillis: t0 + 200_000)
        #expect(store.liveDeviceTokens == 0)
        #expect(try store.claim(late, ttl: 60_000, now: t0 + 200_000) == .claimed)
    }

    @Test("with a data directory, a claim survives a clean stop (snapshot) and a crash (journal, type 5), within its ttl only")
    func survivesRestarts() throws {
        let dir = TempDirectory()
        defer { dir.remove() }
        let path = dir.file("data")
        var rng = SeededRandom(seed: 53)
        let a = tokenDigest(&rng)
        let b = tokenDigest(&rng)
        let released = tokenDigest(&rng)

        // Clean stop: the final snapshot holds the claims memory holds.
        let first = try MemoryAttestStore.open(directory: path, shards: 4)
        #expect(try first.claim(a, ttl: 3_600_000, now: t0) == .claimed)
        #expect(try first.claim(released, ttl: 3_600_000, now: t0) == .claimed)
        try first.release(released)
        try first.close()
        let second = try MemoryAttestStore.open(directory: path, shards: 8)  // re-sharded too
        #expect(second.lastStopWasClean)
        #expect(try second.claim(a, ttl: 3_600_000, now: t0 + 1_000) == .alreadyClaimed)
        #expect(try second.claim(released, ttl: 3_600_000, now: t0 + 1_000) == .claimed)

        // Crash (never closed): the journal's claim records are replayed, over the last snapshot.
        #expect(try second.claim(b, ttl: 600_000, now: t0 + 2_000) == .claimed)
        _ = try second.snapshot()
        let c = tokenDigest(&rng)
        #expect(try second.claim(c, ttl: 600_000, now: t0 + 3_000) == .claimed)
        try second.release(b)  // not journaled: after a crash the token stays claimed (the safe direction)
        let third = try openAfterCrash(path)
        #expect(!third.lastStopWasClean)
        #expect(third.restoreReport.damage.isEmpty)
        for d in [a, released, c] { #expect(try third.claim(d, ttl: 3_600_000, now: t0 + 4_000) == .alreadyClaimed) }
        #expect(try third.claim(b, ttl: 3_600_000, now: t0 + 4_000) == .alreadyClaimed)

        // Again without a snapshot in between, then past the ttls.
        let fourth = try openAfterCrash(path)
        #expect(try fourth.claim(c, ttl: 3_600_000, now: t0 + 5_000) == .alreadyClaimed)
        #expect(try fourth.claim(b, ttl: 3_600_000, now: t0 + 603_000) == .claimed)  // b's ttl (10 min) ended
        #expect(try fourth.claim(a, ttl: 3_600_000, now: t0 + 3_600_001) == .claimed)
    }

    @Test(
        "a claim whose journal record cannot be written (ENOSPC) is refused .unavailable and not stored, so it claims nothing after a restart either"
    )
    func failedWriteClaimsNothing() throws {
        let dir = TempDirectory()
        defer { dir.remove() }
        let calls = FaultyCalls()
        let log = FaultLog()
        let store = try openFaulty(dir, calls, log)
        var rng = SeededRandom(seed: 54)
        let a = tokenDigest(&rng)
        calls.fail(.write, .journal, errno: ENOSPC)
        let failed = wait { store.claimToken(a, ttlMillis: 60_000, nowMillis: t0, completion: $0) }
        #expect(throws: StoreError.self) { try failed.get() }
        #expect(store.liveDeviceTokens == 0)
        calls.clear()
        let after = try openAfterCrash(dir.path)
        #expect(try after.claim(a, ttl: 60_000, now: t0) == .claimed)
    }
}
