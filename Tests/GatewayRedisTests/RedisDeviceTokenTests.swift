import Foundation
import GatewayStore
import GatewayTestSupport
import GatewayWire
import Testing

@testable import GatewayRedis

/// The Redis store's DeviceCheck token claims (docs/redis.md, "Device token claims"): the contract
/// on a real server, the key `ag:dt:<hex SHA-256>` with its expiry, and two store instances (two
/// gateways of a fleet) sharing the claims.
@Suite("Redis store: DeviceCheck token claims", .serialized)
struct RedisDeviceTokenTests {
    @Test("the token claim contract, on one Redis server")
    func contract() throws {
        let f = try RedisFixture()
        defer { f.stop() }
        var rng = SeededRandom(seed: 61)
        try checkTokenClaims(f.store, rng: &rng)
    }

    @Test("a claim is the key ag:dt:<hex digest> with the ttl as its Redis expiry; a release deletes it")
    func keyLayout() throws {
        let f = try RedisFixture()
        defer { f.stop() }
        var rng = SeededRandom(seed: 62)
        let d = tokenDigest(&rng)
        #expect(try f.store.claim(d, ttl: 90_000) == .claimed)
        let name = "ag:dt:" + Hex.encode(d)
        #expect(try f.redis.cli(["GET", name]) == "1")
        let pttl = Int(try f.redis.cli(["PTTL", name])) ?? -1
        #expect(pttl > 80_000 && pttl <= 90_000)
        try f.store.release(d)
        #expect(try f.redis.cli(["EXISTS", name]) == "0")
    }

    @Test("two store instances on one Redis (two gateways): a token claimed by one is already claimed for the other")
    func sharedAcrossInstances() throws {
        let f = try RedisFixture()
        defer { f.stop() }
        let other = RedisAttestStore(options: f.store.options)
        defer { other.close() }
        #expect(other.waitUntilConnected(timeoutMillis: 10_000))
        var rng = SeededRandom(seed: 63)
        for _ in 0..<20 {
            let d = tokenDigest(&rng)
            #expect(try f.store.claim(d, ttl: 60_000) == .claimed)
            #expect(try other.claim(d, ttl: 60_000) == .alreadyClaimed)
        }
        let released = tokenDigest(&rng)
        #expect(try other.claim(released, ttl: 60_000) == .claimed)
        try other.release(released)
        #expect(try f.store.claim(released, ttl: 60_000) == .claimed)
    }

    @Test("Redis unreachable: a claim fails .unavailable at once")
    func unreachable() throws {
        let f = try RedisFixture()
        f.redis.stop()
        defer { f.store.close() }
        var rng = SeededRandom(seed: 64)
        let d = tokenDigest(&rng)
        var failed = false
        let deadline = Date().addingTimeInterval(10)
        while Date() < deadline, !failed {
            failed = unavailable(wait { f.store.claimToken(d, ttlMillis: 60_000, nowMillis: realMillis(), completion: $0) })
            if !failed { usleep(50_000) }
        }
        #expect(failed)
    }
}
