import Foundation
import GatewayStore
import GatewayTestSupport
import Testing

@testable import GatewayRedis

private let t0: Int64 = 1_700_000_000_000

/// The Redis store's side of the risk refresher: the contract on one server, a key claimed by one
/// gateway of two, and the schedule on a cluster (where it is another slot than the keys).
@Suite("Redis store: risk refresh", .serialized)
struct RedisRiskTests {
    @Test("the risk refresh contract, on one Redis server; the schedule is the sorted set ag:riskdue")
    func contract() throws {
        let f = try RedisFixture()
        defer { f.stop() }
        var rng = SeededRandom(seed: 81)
        let a = try checkRiskRefresh(f.store, rng: &rng, t0: t0)
        #expect(try f.redis.cli(["ZCARD", "ag:riskdue"]) == "2")
        let fields = try f.redis.cli(["HMGET", String(decoding: f.store.keyName(a.keyID), as: UTF8.self), "rm", "rcr"])
        #expect(fields.split(separator: "\n").map(String.init) == ["3", String(a.risk!.receiptCreatedMillis)])
    }

    @Test("two gateways on one Redis: each due key is claimed by one of them while its lease runs")
    func oneClaimPerKeyAcrossInstances() throws {
        let f = try RedisFixture()
        defer { f.stop() }
        let other = RedisAttestStore(options: f.store.options)
        defer { other.close() }
        #expect(other.waitUntilConnected(timeoutMillis: 10_000))
        var rng = SeededRandom(seed: 82)
        var ids: Set<KeyID> = []
        for _ in 0..<20 {
            let r = withRisk(makeRecord(&rng, seen: t0), created: t0, expires: nil, next: t0 + 1_000)
            #expect(
                try f.store.registerNow(r, challenge: try f.store.issue(.register, key: r.keyID, now: t0).token, now: t0)
                    == .registered(existing: false))
            ids.insert(r.keyID)
        }
        let one = try f.store.claim(now: t0 + 2_000, lease: 30_000, limit: 12)
        let two = try other.claim(now: t0 + 2_000, lease: 30_000, limit: 12)
        #expect(one.keys.count == 12 && two.keys.count == 8)
        #expect(Set(one.keys).isDisjoint(with: two.keys))
        #expect(Set(one.keys).union(two.keys) == ids)
        #expect(one.oldestDueMillis == t0 + 1_000)
        #expect(try other.claim(now: t0 + 31_000).keys.isEmpty)
        #expect(try other.claim(now: t0 + 32_000, limit: 100).keys.count == 20)
    }

    @Test("on a cluster the schedule is its own slot: set after the registration and after each refresh")
    func cluster() throws {
        let f = try ClusterFixture()
        defer { f.stop() }
        var rng = SeededRandom(seed: 83)
        let a = withRisk(makeRecord(&rng, seen: t0), created: t0, expires: nil, next: t0 + 10_000)
        #expect(
            try f.store.registerNow(a, receipt: [1, 2], challenge: try f.store.issue(.register, key: a.keyID, now: t0).token, now: t0)
                == .registered(existing: false))
        // The schedule is written by its own command after the registration's answer: poll for it.
        func claimed(at now: Int64) throws -> [KeyID] {
            let deadline = Date().addingTimeInterval(5)
            while true {
                let keys = try f.store.claim(now: now).keys
                if !keys.isEmpty || Date() > deadline { return keys }
                usleep(20_000)
            }
        }
        #expect(try claimed(at: t0 + 10_000) == [a.keyID])
        #expect(try f.store.candidate(a.keyID)?.receipt == [1, 2])
        let risk = KeyRisk(metric: 2, receiptCreatedMillis: t0 + 20_000, nextRefreshMillis: t0 + 500_000)
        #expect(try f.store.record(RiskUpdate(keyID: a.keyID, basedOnCreatedMillis: t0, receipt: [3], risk: risk)) == .stored)
        #expect(try f.store.key(a.keyID)?.risk == risk)
        #expect(try claimed(at: t0 + 500_000) == [a.keyID])
    }
}
