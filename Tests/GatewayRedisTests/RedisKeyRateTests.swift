import Foundation
import GatewayStore
import GatewayTestSupport
import Testing

@testable import GatewayRedis

private let t0: Int64 = 1_700_000_000_000

/// Issue 27: `assertion.key_rate` in the Redis commit scripts: the contract on one server and on a
/// Cluster, the bucket next to the key (same hash tag, a TTL), and one budget shared by instances.
@Suite("Redis store: key_rate buckets in the commit scripts")
struct RedisKeyRateTests {
    @Test func contract() throws {
        let f = try RedisFixture()
        defer { f.stop() }
        var rng = SeededRandom(seed: 2710)
        try checkKeyRate(f.store, rng: &rng, t0: t0)
    }

    @Test func contractOnTheCluster() throws {
        let f = try ClusterFixture()
        defer { f.stop() }
        var rng = SeededRandom(seed: 2711)
        try checkKeyRate(f.store, rng: &rng, t0: t0)
    }

    /// The bucket: `ag:r:{tag}…:<route>`, the key record's hash tag (one slot), `<tokens> <last ms>`,
    /// expiring once it would be full; a limited commit leaves it as it was; nothing when no route
    /// limits the key.
    @Test func theBucketLivesNextToTheKeyAndExpires() throws {
        let f = try RedisFixture()
        defer { f.stop() }
        var rng = SeededRandom(seed: 2712)
        let record = makeRecord(&rng)
        try f.store.registerFresh(record, now: t0)
        let limit = KeyRateLimit(count: 10, periodMillis: 60_000, burst: 2, scope: "pay")
        func commit(_ counter: UInt32, _ limit: KeyRateLimit?) throws -> CommitOutcome {
            try wait {
                f.store.commitAssertion(
                    AssertionCommit(keyID: record.keyID, counter: counter, challenge: nil, keyRate: limit), nowMillis: t0,
                    completion: $0)
            }.get()
        }
        let name = String(decoding: f.store.keyRateName(record.keyID, limit), as: UTF8.self)
        #expect(try commit(1, nil) == .committed(previousCounter: 0))
        #expect(try f.redis.cli(["EXISTS", name]) == "0")
        #expect(try commit(2, limit) == .committed(previousCounter: 1))
        let keyName = String(decoding: f.store.keyName(record.keyID), as: UTF8.self)
        #expect(name.hasPrefix("ag:r:{") && name.hasSuffix(":pay"))
        #expect(RedisSlot.of(Array(name.utf8)) == RedisSlot.of(Array(keyName.utf8)))
        #expect(try f.redis.cli(["GET", name]) == "1 \(t0)")
        // Refilled from empty in 2 / (10 per minute) = 12 s; a second more.
        #expect(limit.idleMillis == 13_000)
        let ttl = Int(try f.redis.cli(["PTTL", name])) ?? -1
        #expect(ttl > 10_000 && ttl <= 13_000)
        #expect(try commit(3, limit) == .committed(previousCounter: 2))
        #expect(try f.redis.cli(["GET", name]) == "0 \(t0)")
        #expect(try commit(4, limit) == .keyRateLimited(retryAfterSeconds: 6))
        #expect(try f.redis.cli(["GET", name]) == "0 \(t0)")
        #expect(try f.redis.cli(["HGET", keyName, "ctr"]) == "3")
    }

    /// Two instances on one Redis: one budget. Requests of one key alternate between them; exactly
    /// the burst is accepted at one instant, and 16 racing commits split the same way.
    @Test func instancesShareTheBudget() throws {
        let f = try RedisFixture()
        defer { f.stop() }
        let second = f.secondInstance()
        defer { second.close() }
        let stores: [RedisAttestStore] = [f.store, second]
        var rng = SeededRandom(seed: 2713)
        let record = makeRecord(&rng)
        try f.store.registerFresh(record, now: t0)
        let limit = KeyRateLimit(count: 1, periodMillis: 60_000, burst: 3, scope: "fleet")
        var outcomes: [CommitOutcome] = []
        for counter in UInt32(1)...6 {
            outcomes.append(
                try wait {
                    stores[Int(counter) % 2].commitAssertion(
                        AssertionCommit(keyID: record.keyID, counter: counter, challenge: nil, keyRate: limit), nowMillis: t0,
                        completion: $0)
                }.get())
        }
        #expect(outcomes.filter { if case .committed = $0 { true } else { false } }.count == 3)
        #expect(Array(outcomes.suffix(3)) == Array(repeating: .keyRateLimited(retryAfterSeconds: 60), count: 3))
        let raced = makeRecord(&rng)
        try f.store.registerFresh(raced, now: t0)
        let wins = raceCommits(stores, 16) { i in
            AssertionCommit(keyID: raced.keyID, counter: UInt32(i + 1), challenge: nil, counterWindow: 64, keyRate: limit)
        }
        #expect(wins == 3)
    }
}
