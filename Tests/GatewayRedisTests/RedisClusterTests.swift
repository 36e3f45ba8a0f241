import Foundation
import GatewayCrypto
import GatewayStore
import GatewayTestSupport
import GatewayWire
import Synchronization
import Testing

@testable import GatewayRedis

private let t0: Int64 = 1_700_000_000_000

@Suite("Redis Cluster: slots, replies and maps without a server")
struct RedisClusterPiecesTests {
    @Test func crc16IsXModem() {
        #expect(RedisSlot.crc16(Array("123456789".utf8)) == 0x31C3)
        #expect(RedisSlot.crc16([UInt8]()) == 0)
    }

    /// Slots from Redis' own documentation and `CLUSTER KEYSLOT` answers.
    @Test func keySlotsAndHashTags() {
        #expect(RedisSlot.of("foo") == 12_182)
        #expect(RedisSlot.of("bar") == 5_061)
        #expect(RedisSlot.of("hello") == 866)
        #expect(RedisSlot.of("{user1000}.following") == RedisSlot.of("{user1000}.followers"))
        #expect(RedisSlot.of("{user1000}.following") == RedisSlot.of("user1000"))
        #expect(RedisSlot.of("foo{}{bar}") == Int(RedisSlot.crc16(Array("foo{}{bar}".utf8))) % 16_384)
        #expect(RedisSlot.of("foo{{bar}}zap") == RedisSlot.of("{bar"))
        #expect(RedisSlot.of("foo{bar}{zap}") == RedisSlot.of("bar"))
        #expect(RedisSlot.of("ag:k:{00010203}0405") == RedisSlot.of("ag:c:{00010203}ffff"))
    }

    @Test func redirectionsAndRefusalsAreParsed() {
        #expect(
            RedisClusterReply(.error("MOVED 3999 127.0.0.1:6381")) == .moved(slot: 3999, RedisNodeAddress(host: "127.0.0.1", port: 6381)))
        #expect(RedisClusterReply(.error("ASK 12 [::1]:7000")) == .ask(slot: 12, RedisNodeAddress(host: "::1", port: 7000)))
        #expect(RedisClusterReply(.error("TRYAGAIN Multiple keys request during rehashing of slot")) != nil)
        #expect(RedisClusterReply(.error("CLUSTERDOWN The cluster is down")) != nil)
        #expect(RedisClusterReply(.error("ERR unknown command")) == nil)
        #expect(RedisClusterReply(.error("MOVED x 127.0.0.1:1")) == nil)
        #expect(RedisClusterReply(.error("MOVED 1 127.0.0.1")) == nil)
        #expect(RedisClusterReply(.string(Array("MOVED 1 a:1".utf8))) == nil)
    }

    @Test func clusterSlotsReplyBecomesAMap() throws {
        let me = RedisNodeAddress(host: "10.0.0.1", port: 7000)
        func node(_ host: String, _ port: Int64) -> RedisValue {
            .array([.string(Array(host.utf8)), .integer(port), .string(Array("id".utf8))])
        }
        let reply = RedisValue.array([
            .array([.integer(0), .integer(5460), node("", 7000), node("10.0.0.9", 7100)]),
            .array([.integer(5461), .integer(10922), node("10.0.0.2", 7000)]),
            .array([.integer(10923), .integer(16000), node("10.0.0.3", 7000)]),
        ])
        let map = try #require(RedisSlotMap(clusterSlots: reply, answeredBy: me))
        #expect(map.nodes == [me, RedisNodeAddress(host: "10.0.0.2", port: 7000), RedisNodeAddress(host: "10.0.0.3", port: 7000)])
        #expect(map.node(for: 0) == me)
        #expect(map.node(for: 5461)?.host == "10.0.0.2")
        #expect(map.node(for: 16000)?.host == "10.0.0.3")
        #expect(map.node(for: 16001) == nil)
        #expect(map.coveredSlots == 16001)
        #expect(RedisSlotMap(clusterSlots: .array([.array([.integer(0), .integer(20000), node("a", 1)])]), answeredBy: me) == nil)
        #expect(RedisSlotMap(clusterSlots: .error("ERR This instance has cluster support disabled"), answeredBy: me) == nil)
    }

    /// A cluster store refuses unbound challenges before anything is sent.
    @Test func unboundChallengeRefusedInClusterMode() throws {
        let port = try RedisProcess.freePort()
        let store = RedisAttestStore(
            options: .init(endpoint: RedisEndpoint(host: "127.0.0.1", port: port, timeoutMillis: 200), cluster: true))
        defer { store.close() }
        #expect(store.requiresKeyBoundChallenges)
        let result = wait {
            store.issueChallenge(ChallengeRequest(purpose: .register, keyID: nil, ttlMillis: 1_000), nowMillis: t0, completion: $0)
        }
        guard case .failure(let e) = result else {
            Issue.record("an unbound challenge was issued on a cluster store: \(result)")
            return
        }
        #expect(e.detail.contains("bound to a key"))
        #expect(!store.isHealthy)
    }
}

/// A fresh 3-node cluster and a store on it (seeded with node 0 only: the others come from the map).
/// Counts what the store reports to its observer (the gateway's metrics hook).
final class RedirectRecorder: RedisStoreObserver, @unchecked Sendable {
    private let counts = Mutex<[RedisClusterRedirect: Int]>([:])
    func operation(_ operation: RedisStoreOperation, seconds: Double, error: StoreError?) {}
    func connectionChanged(up: Bool) {}
    func clusterRedirect(_ kind: RedisClusterRedirect) { counts.withLock { $0[kind, default: 0] += 1 } }
    func count(_ kind: RedisClusterRedirect) -> Int { counts.withLock { $0[kind] ?? 0 } }
}

final class ClusterFixture: Sendable {
    let cluster: RedisClusterProcess
    let store: RedisAttestStore
    let redirects = RedirectRecorder()

    init(timeoutMillis: Int64 = 1_000, limits: KeyLimits = KeyLimits()) throws {
        cluster = try RedisClusterProcess(nodes: 3)
        store = Self.store(on: cluster, timeoutMillis: timeoutMillis, observer: redirects, limits: limits)
        guard store.waitUntilConnected(timeoutMillis: 10_000), store.clusterNodes.count == 3 else {
            let why = store.lastError
            stop()
            throw NSError(domain: "ClusterFixture", code: 1, userInfo: [NSLocalizedDescriptionKey: "store did not connect: \(why)"])
        }
    }

    static func store(
        on cluster: RedisClusterProcess, timeoutMillis: Int64 = 1_000, seed: Int = 0,
        observer: (any RedisStoreObserver)? = nil, limits: KeyLimits = KeyLimits()
    ) -> RedisAttestStore {
        RedisAttestStore(
            options: .init(
                endpoint: RedisEndpoint(host: "127.0.0.1", port: cluster.ports[seed], timeoutMillis: timeoutMillis), cluster: true,
                limits: limits),
            observer: observer)
    }

    /// The cluster node (index) that serves `name`, from the store's map.
    func node(of name: [UInt8]) -> Int? {
        guard let address = store.cluster?.node(forKey: name) else { return nil }
        return cluster.ports.firstIndex(of: address.port)
    }

    func stop() {
        store.close()
        cluster.stop()
    }
}

extension AttestStore {
    /// Registers `record` with a registration challenge bound to it (the only kind on Cluster).
    @discardableResult
    func registerBound(_ record: DeviceKeyRecord, now: Int64) throws -> RegistrationOutcome {
        let c = try issue(.register, key: record.keyID, now: now)
        return try registerNow(record, challenge: c.token, now: now)
    }
}

/// A record whose key id starts with `prefix`'s first 4 bytes (same hash tag, same slot).
private func sibling(of record: DeviceKeyRecord, _ rng: inout SeededRandom) -> DeviceKeyRecord {
    var other = makeRecord(&rng)
    other.keyID = KeyID(Array(record.keyID.bytes.prefix(4)) + Array(other.keyID.bytes.dropFirst(4)))!
    return other
}

@Suite(
    "Redis Cluster store on a real 3-node cluster", .serialized, .timeLimit(.minutes(3)),
    .enabled(if: RedisProcess.testsEnabled, Comment(rawValue: RedisProcess.skipMessage)))
struct RedisClusterStoreTests {
    /// The memory store's outcome list (with key-bound challenges), keys spread over all three
    /// primaries, every script on every node, slots as the server computes them.
    @Test func outcomesOnTheCluster() throws {
        let f = try ClusterFixture()
        defer { f.stop() }
        let store = f.store
        var rng = SeededRandom(seed: 21)

        // Slots: ours against the server's CLUSTER KEYSLOT, for our key names and odd keys.
        let cluster = try #require(store.cluster)
        let asked = cluster.nodes[0]
        var names: [[UInt8]] = ["foo", "{a}b", "x{}y", "{{z}}", "ag:keys", ""].map { Array($0.utf8) }
        for _ in 0..<40 {
            let r = makeRecord(&rng)
            names.append(store.keyName(r.keyID))
            names.append(store.challengeName(ChallengeToken(Array(r.keyID.bytes.prefix(20)))!))
        }
        for name in names {
            let answer = cluster.call(asked, RedisCommand([Array("CLUSTER".utf8), Array("KEYSLOT".utf8), name]), timeoutMillis: 5_000)
            #expect(try answer.get() == .integer(Int64(RedisSlot.of(name))), "\(String(decoding: name, as: UTF8.self))")
        }

        // Challenges: unbound refused; bound ones valid, expired, consumed, unknown.
        let record = makeRecord(&rng)
        #expect(
            unavailable(
                wait { store.issueChallenge(ChallengeRequest(purpose: nil, keyID: nil, ttlMillis: 1_000), nowMillis: t0, completion: $0) }))
        let c = try store.issue(.assert, key: record.keyID, ttl: 5_000, now: t0)
        #expect(Array(c.token.bytes.prefix(4)) == Array(record.keyID.bytes.prefix(4)))
        #expect(try store.state(c.token, now: t0) == .valid(purpose: .assert, keyID: record.keyID, expiresAtMillis: t0 + 5_000))
        #expect(try store.state(c.token, now: t0 + 5_000) == .expired(expiresAtMillis: t0 + 5_000))
        #expect(try store.state(ChallengeToken([UInt8](repeating: 7, count: 16))!, now: t0) == .unknown)

        // Registration: every rejection (the foreign-slot ones answered by a read), then new, existing, consumed.
        let other = makeRecord(&rng)
        let twin = sibling(of: record, &rng)
        #expect(
            try store.registerNow(record, challenge: ChallengeToken([UInt8](repeating: 1, count: 16))!, now: t0)
                == .challengeRejected(.unknown))
        let expired = try store.issue(.register, key: record.keyID, ttl: 10, now: t0)
        #expect(try store.registerNow(record, challenge: expired.token, now: t0 + 10) == .challengeRejected(.expired))
        let assertOnly = try store.issue(.assert, key: record.keyID, now: t0)
        #expect(try store.registerNow(record, challenge: assertOnly.token, now: t0) == .challengeRejected(.wrongPurpose))
        let forOther = try store.issue(.register, key: other.keyID, now: t0)
        #expect(try store.registerNow(record, challenge: forOther.token, now: t0) == .challengeRejected(.wrongKey))
        let forTwin = try store.issue(.register, key: twin.keyID, now: t0)  // same slot: the script decides
        #expect(try store.registerNow(record, challenge: forTwin.token, now: t0) == .challengeRejected(.wrongKey))
        let assertForOther = try store.issue(.assert, key: other.keyID, now: t0)
        #expect(try store.registerNow(record, challenge: assertForOther.token, now: t0) == .challengeRejected(.wrongPurpose))
        #expect(try store.key(record.keyID) == nil)
        let good = try store.issue(nil, key: record.keyID, now: t0)
        #expect(try store.registerNow(record, receipt: [5, 6], challenge: good.token, now: t0) == .registered(existing: false))
        #expect(try store.registerNow(record, challenge: good.token, now: t0) == .challengeRejected(.consumed))
        #expect(try store.key(record.keyID) == record)
        #expect(try store.registerBound(record, now: t0) == .registered(existing: true))
        #expect(try store.state(forOther.token, now: t0) == .valid(purpose: .register, keyID: other.keyID, expiresAtMillis: t0 + 60_000))

        // Commits: the same list as checkCommitOutcomes, with key-bound challenges.
        #expect(try store.registerBound(other, now: t0) == .registered(existing: false))
        #expect(try store.commit(makeRecord(&rng).keyID, counter: 1, challenge: nil, now: t0) == .unknownKey)
        #expect(try store.commit(makeRecord(&rng).keyID, counter: 1, challenge: forOther.token, now: t0) == .unknownKey)
        #expect(try store.commit(record.keyID, counter: 0, challenge: nil, now: t0) == .counterReplay(stored: 0))
        #expect(try store.commit(record.keyID, counter: 3, challenge: nil, now: t0 + 2_000) == .committed(previousCounter: 0))
        #expect(try store.commit(record.keyID, counter: 3, challenge: nil, now: t0) == .counterReplay(stored: 3))
        #expect(try store.commit(record.keyID, counter: 2, challenge: assertForOther.token, now: t0) == .counterReplay(stored: 3))
        #expect(try store.key(record.keyID)?.lastSeenMillis == t0 + 2_000)
        #expect(
            try store.commit(record.keyID, counter: 4, challenge: ChallengeToken([UInt8](repeating: 3, count: 16))!, now: t0)
                == .challengeRejected(.unknown))
        #expect(
            try store.commit(record.keyID, counter: 4, challenge: ChallengeToken([UInt8](repeating: 3, count: 40))!, now: t0)
                == .challengeRejected(.unknown))
        let shortLived = try store.issue(.assert, key: record.keyID, ttl: 5, now: t0)
        #expect(try store.commit(record.keyID, counter: 4, challenge: shortLived.token, now: t0 + 5) == .challengeRejected(.expired))
        let registerOnly = try store.issue(.register, key: record.keyID, now: t0)
        #expect(try store.commit(record.keyID, counter: 4, challenge: registerOnly.token, now: t0) == .challengeRejected(.wrongPurpose))
        #expect(try store.commit(record.keyID, counter: 4, challenge: assertForOther.token, now: t0) == .challengeRejected(.wrongKey))
        let assertForTwin = try store.issue(.assert, key: twin.keyID, now: t0)
        #expect(try store.commit(record.keyID, counter: 4, challenge: assertForTwin.token, now: t0) == .challengeRejected(.wrongKey))
        #expect(try store.key(record.keyID)?.counter == 3)
        #expect(
            try store.state(assertForOther.token, now: t0) == .valid(purpose: .assert, keyID: other.keyID, expiresAtMillis: t0 + 60_000))
        let next = try store.issue(.assert, key: record.keyID, now: t0)
        #expect(try store.commit(record.keyID, counter: 3, challenge: next.token, now: t0) == .counterReplay(stored: 3))
        #expect(try store.commit(record.keyID, counter: 4, challenge: next.token, now: t0) == .committed(previousCounter: 3))
        #expect(try store.commit(record.keyID, counter: 5, challenge: next.token, now: t0) == .challengeRejected(.consumed))
        #expect(try store.state(next.token, now: t0) == .consumed)
        #expect(try store.key(record.keyID)?.counter == 4)

        // Keys spread over the three primaries; the key count (INCR after each new key) adds up.
        var registered = 2
        for _ in 0..<40 {
            #expect(try store.registerBound(makeRecord(&rng), now: t0) == .registered(existing: false))
            registered += 1
        }
        var perNode: [Int] = []
        for i in 0..<3 { perNode.append(try f.cluster.dbsize(i)) }
        #expect(perNode.allSatisfy { $0 > 5 }, "keys per node: \(perNode)")
        let countNode = try #require(f.node(of: Array("ag:keys".utf8)))
        let deadline = Date().addingTimeInterval(5)
        var count = try f.cluster.cli(countNode, ["GET", "ag:keys"])
        while count != String(registered) && Date() < deadline {
            usleep(20_000)
            count = try f.cluster.cli(countNode, ["GET", "ag:keys"])
        }
        #expect(count == String(registered))
        store.refreshStatistics()
        let statsDeadline = Date().addingTimeInterval(5)
        while store.statistics.keys != registered && Date() < statsDeadline { usleep(20_000) }
        #expect(store.statistics.keys == registered)
        // Every node ran scripts, and holds all three (loaded on connect).
        for i in 0..<3 {
            for script in RedisScripts.all { #expect(try f.cluster.cli(i, ["SCRIPT", "EXISTS", sha1Hex(script)]) == "1") }
            #expect(try f.cluster.cli(i, ["INFO", "commandstats"]).contains("cmdstat_evalsha"))
        }
        #expect(f.redirects.count(.moved) == 0)
        // Script caches flushed on every node (as after a failover): NOSCRIPT, reload, success.
        for i in 0..<3 { try f.cluster.cli(i, ["SCRIPT", "FLUSH"]) }
        #expect(try store.commit(record.keyID, counter: 5, challenge: nil, now: t0) == .committed(previousCounter: 4))
        #expect(try store.registerBound(makeRecord(&rng), now: t0) == .registered(existing: false))
    }

    /// Two stores (two gateway instances) on one cluster race one challenge, one counter, one
    /// registration challenge: exactly one accept each time.
    /// Issue 19: the key bounds on the cluster. The re-registration window and the app check are
    /// in the register script (the key's slot); the cap is checked against the key count read
    /// every second (another slot), here read before the fourth key.
    @Test func keyBoundsOnTheCluster() throws {
        let f = try ClusterFixture(limits: contractKeyLimits)
        defer { f.stop() }
        var rng = SeededRandom(seed: 190)
        try checkKeyBounds(f.store, rng: &rng, t0: t0) {
            let deadline = Date().addingTimeInterval(10)
            repeat {
                f.store.refreshStatistics()
                usleep(20_000)
            } while f.store.statistics.keys < 3 && Date() < deadline
            #expect(f.store.statistics.keys == 3)
        }
    }

    /// Issue 16 §2: the contract's counter window on the cluster; a commit whose challenge is in
    /// another slot is decided by reads in the script's order (the window first, then the challenge).
    @Test func counterWindowOnTheCluster() throws {
        let f = try ClusterFixture()
        defer { f.stop() }
        var rng = SeededRandom(seed: 1613)
        try checkCounterWindow(f.store, rng: &rng, t0: t0)
        let record = makeRecord(&rng)
        let other = makeRecord(&rng)
        try f.store.registerBound(record, now: t0)
        try f.store.registerBound(other, now: t0)
        #expect(try f.store.commit(record.keyID, counter: 10, challenge: nil, now: t0) == .committed(previousCounter: 0))
        let elsewhere = try f.store.issue(.assert, key: other.keyID, now: t0)
        #expect(!RedisAttestStore.sameSlot(record.keyID, elsewhere.token))
        #expect(
            try f.store.commit(record.keyID, counter: 7, challenge: elsewhere.token, window: 8, now: t0) == .challengeRejected(.wrongKey))
        #expect(try f.store.commit(record.keyID, counter: 7, challenge: elsewhere.token, window: 0, now: t0) == .counterReplay(stored: 10))
        #expect(try f.store.commit(record.keyID, counter: 7, challenge: nil, window: 8, now: t0) == .committed(previousCounter: 10))
        #expect(
            try f.store.commit(record.keyID, counter: 7, challenge: elsewhere.token, window: 8, now: t0)
                == .counterReplay(stored: 10, open: openBits(10, [3, 4, 5, 6, 8, 9])))
    }

    @Test func exactlyOneCommitWinsAcrossInstances() throws {
        let f = try ClusterFixture()
        defer { f.stop() }
        let second = ClusterFixture.store(on: f.cluster, seed: 2)
        defer { second.close() }
        #expect(second.waitUntilConnected(timeoutMillis: 10_000))
        let stores: [RedisAttestStore] = [f.store, second]
        var rng = SeededRandom(seed: 22)
        let records = (0..<3).map { _ in makeRecord(&rng) }
        for r in records { try f.store.registerBound(r, now: t0) }
        for round in 1...9 {
            let record = records[round % records.count]
            let challenge = try stores[round % 2].issue(.assert, key: record.keyID, now: t0)
            let wins = raceCommits(stores, 16) {
                AssertionCommit(keyID: record.keyID, counter: UInt32(round * 100 + $0), challenge: challenge.token)
            }
            #expect(wins == 1, "round \(round)")
            let sameCounter = raceCommits(stores, 16) { _ in
                AssertionCommit(keyID: record.keyID, counter: UInt32(round * 100 + 50), challenge: nil)
            }
            #expect(sameCounter == 1, "round \(round)")
        }
        let fresh = makeRecord(&rng)
        let challenge = try second.issue(.register, key: fresh.keyID, now: t0)
        #expect(raceRegistrations(stores, 8) { _ in Registration(record: fresh, receipt: [], challenge: challenge.token) } == 1)
    }

    /// A key's slot migrated from node A to node B while in use: `ASK` during the migration (a new
    /// challenge lands on B), `TRYAGAIN` while the key and its challenge are on two nodes (the commit
    /// fails, nothing written), the commit once both moved, then `MOVED` after the hand-over. No
    /// request is accepted twice.
    @Test func slotMigratedMidUse() throws {
        let f = try ClusterFixture()
        defer { f.stop() }
        let store = f.store
        let cluster = try #require(store.cluster)
        var rng = SeededRandom(seed: 23)
        let record = makeRecord(&rng)
        try store.registerBound(record, now: t0)
        let first = try store.issue(.assert, key: record.keyID, now: t0)
        #expect(try store.commit(record.keyID, counter: 1, challenge: first.token, now: t0) == .committed(previousCounter: 0))

        let keyName = store.keyName(record.keyID)
        let slot = RedisSlot.of(keyName)
        let a = try #require(f.node(of: keyName))
        let b = (a + 1) % 3
        let idA = try f.cluster.nodeID(a), idB = try f.cluster.nodeID(b)
        #expect(try f.cluster.cli(b, ["CLUSTER", "SETSLOT", String(slot), "IMPORTING", idA]) == "OK")
        #expect(try f.cluster.cli(a, ["CLUSTER", "SETSLOT", String(slot), "MIGRATING", idB]) == "OK")

        // A new challenge: not on A, so A answers ASK and the challenge is created on B.
        let asks = f.redirects.count(.ask)
        let second = try store.issue(.assert, key: record.keyID, now: t0)
        #expect(f.redirects.count(.ask) > asks)
        // The key, its registration challenge, the first challenge:
        #expect(try f.cluster.cli(a, ["CLUSTER", "COUNTKEYSINSLOT", String(slot)]) == "3")
        #expect(try f.cluster.cli(b, ["CLUSTER", "COUNTKEYSINSLOT", String(slot)]) == "1")  // the second challenge
        // Key on A, challenge on B: no node can run the commit atomically: refused, nothing written.
        let split = wait {
            store.commitAssertion(AssertionCommit(keyID: record.keyID, counter: 2, challenge: second.token), nowMillis: t0, completion: $0)
        }
        #expect(unavailable(split), "\(split)")
        #expect(f.redirects.count(.tryAgain) > 0)
        // Move the key too: A has neither record now, ASK sends the commit to B, which has both.
        let migrated = try f.cluster.cli(
            a, ["MIGRATE", "127.0.0.1", String(f.cluster.ports[b]), "", "0", "5000", "KEYS", String(decoding: keyName, as: UTF8.self)])
        #expect(migrated == "OK")
        #expect(try store.commit(record.keyID, counter: 2, challenge: second.token, now: t0) == .committed(previousCounter: 1))
        #expect(try store.commit(record.keyID, counter: 3, challenge: second.token, now: t0) == .challengeRejected(.consumed))
        #expect(try store.commit(record.keyID, counter: 2, challenge: nil, now: t0) == .counterReplay(stored: 2))

        // Hand-over: every node learns B serves the slot; the store's map still says A → MOVED.
        for i in 0..<3 { #expect(try f.cluster.cli(i, ["CLUSTER", "SETSLOT", String(slot), "NODE", idB]) == "OK") }
        let moved = f.redirects.count(.moved)
        #expect(cluster.node(forKey: keyName)?.port == f.cluster.ports[a])
        let third = try store.issue(.assert, key: record.keyID, now: t0)
        #expect(f.redirects.count(.moved) > moved)
        #expect(cluster.node(forKey: keyName)?.port == f.cluster.ports[b])
        // Replays of everything accepted so far: refused; the next request passes once.
        #expect(try store.commit(record.keyID, counter: 1, challenge: first.token, now: t0) == .counterReplay(stored: 2))
        #expect(try store.commit(record.keyID, counter: 2, challenge: second.token, now: t0) == .counterReplay(stored: 2))
        #expect(try store.commit(record.keyID, counter: 3, challenge: third.token, now: t0) == .committed(previousCounter: 2))
        #expect(try store.commit(record.keyID, counter: 4, challenge: third.token, now: t0) == .challengeRejected(.consumed))
        #expect(try store.key(record.keyID)?.counter == 3)
        #expect(try f.cluster.cli(b, ["CLUSTER", "COUNTKEYSINSLOT", String(slot)]) == "3")  // key, second, third
        // A second store started after the hand-over routes straight to B.
        let laterRedirects = RedirectRecorder()
        let later = ClusterFixture.store(on: f.cluster, seed: a, observer: laterRedirects)
        defer { later.close() }
        #expect(later.waitUntilConnected(timeoutMillis: 10_000))
        #expect(try later.commit(record.keyID, counter: 3, challenge: nil, now: t0) == .counterReplay(stored: 3))
        #expect(laterRedirects.count(.moved) == 0)
        // The observer (the gateway's attest_gateway_store_redis_cluster_redirects_total) saw each kind.
        #expect(f.redirects.count(.ask) > 0 && f.redirects.count(.moved) > 0 && f.redirects.count(.tryAgain) > 0)
    }

    /// A slot no node serves (`CLUSTER DELSLOTS` everywhere): `CLUSTERDOWN` retried with back-off,
    /// then `unavailable`; other slots unaffected; served again once a node takes the slot back.
    @Test func unservedSlotIsRetriedThenUnavailable() throws {
        let f = try ClusterFixture()
        defer { f.stop() }
        let store = f.store
        _ = try #require(store.cluster)
        var rng = SeededRandom(seed: 25)
        let record = makeRecord(&rng), other = makeRecord(&rng)
        try store.registerBound(record, now: t0)
        try store.registerBound(other, now: t0)
        let slot = RedisSlot.of(store.keyName(record.keyID))
        try #require(RedisSlot.of(store.keyName(other.keyID)) != slot)
        let owner = try #require(f.node(of: store.keyName(record.keyID)))
        for i in 0..<3 { try f.cluster.cli(i, ["CLUSTER", "DELSLOTS", String(slot)]) }
        let retries = f.redirects.count(.tryAgain)
        let refused = wait {
            store.commitAssertion(AssertionCommit(keyID: record.keyID, counter: 1, challenge: nil), nowMillis: t0, completion: $0)
        }
        #expect(unavailable(refused), "\(refused)")
        if case .failure(let e) = refused {
            #expect(e.detail.contains("CLUSTERDOWN") || e.detail.contains("no node serves slot \(slot)"), "\(e.detail)")
        }
        #expect(f.redirects.count(.tryAgain) > retries)
        #expect(try store.commit(other.keyID, counter: 1, challenge: nil, now: t0) == .committed(previousCounter: 0))
        // The slot comes back on its owner; the client's map follows (MOVED or the next map read).
        try f.cluster.cli(owner, ["CLUSTER", "ADDSLOTS", String(slot)])
        let deadline = Date().addingTimeInterval(20)
        var outcome = wait {
            store.commitAssertion(AssertionCommit(keyID: record.keyID, counter: 1, challenge: nil), nowMillis: t0, completion: $0)
        }
        while case .failure = outcome, Date() < deadline {
            usleep(100_000)
            outcome = wait {
                store.commitAssertion(AssertionCommit(keyID: record.keyID, counter: 1, challenge: nil), nowMillis: t0, completion: $0)
            }
        }
        #expect(outcome == .success(.committed(previousCounter: 0)))
        #expect(try store.commit(record.keyID, counter: 1, challenge: nil, now: t0) == .counterReplay(stored: 1))
    }

    /// One primary killed: its keys fail at once with `unavailable`, the other slots keep working,
    /// the store stays ready.
    @Test func nodeKilled() throws {
        let f = try ClusterFixture(timeoutMillis: 500)
        defer { f.stop() }
        let store = f.store
        var rng = SeededRandom(seed: 24)
        var byNode: [Int: [DeviceKeyRecord]] = [:]
        while (0..<3).contains(where: { (byNode[$0]?.count ?? 0) < 2 }) {
            let r = makeRecord(&rng)
            try store.registerBound(r, now: t0)
            byNode[try #require(f.node(of: store.keyName(r.keyID))), default: []].append(r)
        }
        f.cluster.kill(2)
        for r in byNode[2]! {
            // The first call may be the one that finds the connection broken; every call fails.
            for n in 1...3 {
                #expect(
                    unavailable(
                        wait {
                            store.commitAssertion(
                                AssertionCommit(keyID: r.keyID, counter: UInt32(n), challenge: nil), nowMillis: t0, completion: $0)
                        }))
            }
            #expect(
                unavailable(
                    wait {
                        store.issueChallenge(
                            ChallengeRequest(purpose: .assert, keyID: r.keyID, ttlMillis: 1_000), nowMillis: t0, completion: $0)
                    }))
        }
        for i in 0..<2 {
            for r in byNode[i]! {
                let c = try store.issue(.assert, key: r.keyID, now: t0)
                #expect(try store.commit(r.keyID, counter: 1, challenge: c.token, now: t0) == .committed(previousCounter: 0))
                #expect(try store.commit(r.keyID, counter: 1, challenge: c.token, now: t0) == .counterReplay(stored: 1))
            }
        }
        #expect(store.isHealthy)
        #expect(store.lastError.contains("127.0.0.1:\(f.cluster.ports[2])"), "\(store.lastError)")

        // A store whose first seed is the dead node reads the map from the next seed.
        let late = RedisAttestStore(
            options: .init(
                endpoint: RedisEndpoint(host: "127.0.0.1", port: f.cluster.ports[2], timeoutMillis: 500), cluster: true,
                seeds: [RedisEndpoint(host: "127.0.0.1", port: f.cluster.ports[1])]))
        defer { late.close() }
        let deadline = Date().addingTimeInterval(10)
        while !late.isHealthy && Date() < deadline { usleep(10_000) }
        #expect(late.isHealthy)
        #expect(late.clusterNodes.count == 3)
        let r = try #require(byNode[1]?.first)
        #expect(try late.commit(r.keyID, counter: 1, challenge: nil, now: t0) == .counterReplay(stored: 1))
        #expect(unavailable(wait { late.deviceKey(byNode[2]![0].keyID, completion: $0) }))
    }
}
