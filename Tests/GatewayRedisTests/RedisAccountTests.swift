import Foundation
import GatewayStore
import GatewayTestSupport
import GatewayWire
import Testing

@testable import GatewayRedis

private let t0: Int64 = 1_700_000_000_000
private let hour: Int64 = 3_600_000

/// The Redis store's keys per account (docs/redis.md, "Keys per account"): the contract on a real
/// server, the key layout (the account's sorted set, the record's `ah an at`), the count returned by
/// the gate's one-round-trip commit, and two store instances (two gateways) sharing associations.
@Suite("Redis store: keys per account", .serialized)
struct RedisAccountTests {
    @Test("the keys-per-account contract, on one Redis server")
    func contract() throws {
        let f = try RedisFixture()
        defer { f.stop() }
        var rng = SeededRandom(seed: 281)
        try checkAccounts(f.store, rng: &rng, t0: t0)
    }

    @Test("an account is the sorted set ag:a:{8 hex}56 hex of key ids by time, expiring with the window; the key record holds ah an at")
    func keyLayout() throws {
        let f = try RedisFixture()
        defer { f.stop() }
        var rng = SeededRandom(seed: 282)
        let k = makeRecord(&rng, seen: t0)
        try f.store.registerFresh(k, now: t0)
        let a = tokenDigest(&rng)
        #expect(try f.store.associateNow(k.keyID, a, now: t0, window: hour) == .recorded(keyCount: 1, moved: false))
        let hex = Hex.encode(a)
        let name = "ag:a:{" + hex.prefix(8) + "}" + hex.dropFirst(8)
        #expect(try f.redis.cli(["ZCARD", name]) == "1")
        let pttl = Int(try f.redis.cli(["PTTL", name])) ?? -1
        #expect(pttl > hour - 60_000 && pttl <= hour)
        let keyName = "ag:k:{" + Hex.encode(k.keyID.bytes).prefix(8) + "}" + Hex.encode(k.keyID.bytes).dropFirst(8)
        #expect(try f.redis.cli(["HGET", keyName, "an"]) == "1")
        #expect(try f.redis.cli(["HGET", keyName, "at"]) == String(t0))
        #expect(try f.redis.cli(["HSTRLEN", keyName, "ah"]) == "32")
    }

    @Test("the gate's commit returns the key's account count with the record (no extra round trip), fresh after an association")
    func commitCarriesTheCount() throws {
        let f = try RedisFixture()
        defer { f.stop() }
        var rng = SeededRandom(seed: 283)
        let k = makeRecord(&rng, seen: t0)
        try f.store.registerFresh(k, now: t0)
        func commit(_ counter: UInt32) throws -> CommitAndNext {
            try wait {
                f.store.commitAssertion(
                    AssertionCommit(keyID: k.keyID, counter: counter, challenge: nil), checked: CheckedKey(k),
                    issuing: ChallengeRequest(purpose: .assert, keyID: k.keyID, ttlMillis: 5_000, chained: true), nowMillis: t0,
                    completion: $0)
            }.get()
        }
        let before = try commit(1)
        #expect(before.outcome == .committed(previousCounter: 0))
        #expect(before.current != nil)
        #expect(before.current?.account == nil)
        let a = tokenDigest(&rng)
        let other = makeRecord(&rng, seen: t0)
        try f.store.registerFresh(other, now: t0)
        #expect(try f.store.associateNow(other.keyID, a, now: t0, window: hour) == .recorded(keyCount: 1, moved: false))
        #expect(try f.store.associateNow(k.keyID, a, now: t0 + 1_000, window: hour) == .recorded(keyCount: 2, moved: false))
        let after = try commit(2)
        #expect(after.current?.account == KeyAccount(digest: a, keyCount: 2, associatedMillis: t0 + 1_000))
        #expect(try wait { f.store.assertionKey(k.keyID, completion: $0) }.get()?.account?.keyCount == 2)
    }

    @Test("two store instances on one Redis (two gateways): associations recorded through one count on the other")
    func sharedAcrossInstances() throws {
        let f = try RedisFixture()
        defer { f.stop() }
        let other = f.secondInstance()
        defer { other.close() }
        var rng = SeededRandom(seed: 284)
        let keys = (0..<3).map { _ in makeRecord(&rng, seen: t0) }
        for k in keys { try f.store.registerFresh(k, now: t0) }
        let a = tokenDigest(&rng)
        #expect(try f.store.associateNow(keys[0].keyID, a, now: t0, window: hour) == .recorded(keyCount: 1, moved: false))
        #expect(try other.associateNow(keys[1].keyID, a, now: t0 + 1_000, window: hour) == .recorded(keyCount: 2, moved: false))
        #expect(try f.store.associateNow(keys[2].keyID, a, now: t0 + 2_000, window: hour) == .recorded(keyCount: 3, moved: false))
        #expect(try other.key(keys[2].keyID)?.account?.keyCount == 3)
        #expect(try other.accountKeys(a, now: t0 + 2_000, window: hour) == 3)
    }
}

/// The same contract on a real 3-node Redis Cluster: the account's set and the key record live in
/// different slots (separate steps), the commit still returns the count with the record.
@Suite(
    "Redis Cluster store: keys per account", .serialized, .timeLimit(.minutes(3)),
    .enabled(if: RedisProcess.testsEnabled, Comment(rawValue: RedisProcess.skipMessage)))
struct RedisClusterAccountTests {
    @Test("the keys-per-account contract on the cluster")
    func contract() throws {
        let f = try ClusterFixture()
        defer { f.stop() }
        var rng = SeededRandom(seed: 285)
        let store = f.store
        let (keys, a, _) = try checkAccounts(store, rng: &rng, t0: t0) { k in _ = try store.registerBound(k, now: t0) }
        #expect(RedisSlot.of(store.accountName(a)) != RedisSlot.of(store.keyName(keys[0].keyID)))  // two slots, two steps
    }
}
