import Foundation
import GatewayCrypto
import GatewayStore
import GatewayTestSupport
import GatewayWire
import Synchronization
import Testing

@testable import GatewayRedis

private let t0: Int64 = 1_700_000_000_000

/// A fresh redis-server and a connected store on it; both ended by `stop()`.
final class RedisFixture: Sendable {
    let redis: RedisProcess
    let store: RedisAttestStore

    init(
        durable: Bool = false, connections: Int = 2, timeoutMillis: Int64 = 1_000, waitReplicas: Int = 0,
        limits: KeyLimits = KeyLimits(), expiredGraceMillis: Int64 = ChallengeState.expiredGraceMillis
    ) throws {
        redis = try RedisProcess(durable: durable)
        store = RedisAttestStore(
            options: .init(
                endpoint: RedisEndpoint(host: "127.0.0.1", port: redis.port, timeoutMillis: timeoutMillis),
                waitReplicas: waitReplicas, connections: connections, expiredGraceMillis: expiredGraceMillis, limits: limits))
        guard store.waitUntilConnected(timeoutMillis: 10_000) else {
            stop()
            throw NSError(
                domain: "RedisFixture", code: 1, userInfo: [NSLocalizedDescriptionKey: "store did not connect: \(store.lastError)"])
        }
    }

    func stop() {
        store.close()
        redis.stop()
    }

    /// A second store on the same Redis (another gateway instance), connected; the caller closes it.
    func secondInstance() -> RedisAttestStore {
        let second = RedisAttestStore(options: .init(endpoint: RedisEndpoint(host: "127.0.0.1", port: redis.port)))
        #expect(second.waitUntilConnected(timeoutMillis: 10_000))
        return second
    }
}

func unavailable<T>(_ result: Result<T, StoreError>) -> Bool {
    if case .failure(let e) = result { return e.code == .unavailable }
    return false
}

/// How the store names its scripts: hex SHA-1 (GatewayCrypto, OpenSSL).
func sha1Hex(_ text: String) -> String { Hex.encode(SHA1.hash(text)) }

@Suite("Redis store: pieces without a server")
struct RedisPiecesTests {
    @Test func sha1MatchesKnownVectors() {
        #expect(sha1Hex("") == "da39a3ee5e6b4b0d3255bfef95601890afd80709")
        #expect(sha1Hex("abc") == "a9993e364706816aba3e25717850c26c9cd0d89d")
        #expect(sha1Hex(String(repeating: "a", count: 1000)) == "291e9a6c66994949b57ba5e650361e98fc36b1ba")
    }

    @Test func counterWindowFieldParses() {
        #expect(RedisAttestStore.windowBits("") == 0)
        #expect(RedisAttestStore.windowBits("101") == 0b101)
        #expect(RedisAttestStore.windowBits(String(repeating: "1", count: 70)) == (UInt64(1) << 63) - 1)
        #expect(RedisAttestStore.counterWindow(ctr: 10, cw: "10:011") == CounterWindow(highest: 10, gaps: 0b110))
        #expect(RedisAttestStore.counterWindow(ctr: 12, cw: "10:011") == CounterWindow(highest: 12))
        #expect(RedisAttestStore.counterWindow(ctr: 10, cw: nil) == CounterWindow(highest: 10))
        #expect(RedisAttestStore.counterWindow(ctr: 10, cw: "garbage") == CounterWindow(highest: 10))
    }

    @Test func keyLayoutTagsBoundChallengesWithTheKeysSlot() {
        let store = RedisAttestStore(options: .init(endpoint: RedisEndpoint(host: "127.0.0.1", port: 1)))
        defer { store.close() }
        let id = KeyID((0..<32).map { UInt8($0) })!
        #expect(
            String(decoding: store.keyName(id), as: UTF8.self)
                == "ag:k:{00010203}0405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f")
        let token = ChallengeToken([0, 1, 2, 3] + [UInt8](repeating: 0xAB, count: 16))!
        #expect(String(decoding: store.challengeName(token), as: UTF8.self) == "ag:c:{00010203}" + String(repeating: "ab", count: 16))
    }

    /// Nothing listens: every call fails promptly with `unavailable`.
    @Test func unreachableServerAnswersUnavailable() throws {
        let port = try RedisProcess.freePort()
        let store = RedisAttestStore(options: .init(endpoint: RedisEndpoint(host: "127.0.0.1", port: port, timeoutMillis: 200)))
        defer { store.close() }
        #expect(!store.waitUntilConnected(timeoutMillis: 300))
        #expect(!store.isHealthy)
        var rng = SeededRandom(seed: 1)
        let record = makeRecord(&rng)
        #expect(
            unavailable(
                wait { store.issueChallenge(ChallengeRequest(purpose: nil, keyID: nil, ttlMillis: 1_000), nowMillis: t0, completion: $0) }))
        #expect(unavailable(wait { store.deviceKey(record.keyID, completion: $0) }))
        #expect(
            unavailable(
                wait {
                    store.commitAssertion(AssertionCommit(keyID: record.keyID, counter: 1, challenge: nil), nowMillis: t0, completion: $0)
                }))
        let c = ChallengeToken([UInt8](repeating: 1, count: 20))!
        #expect(
            unavailable(wait { store.register(Registration(record: record, receipt: [], challenge: c), nowMillis: t0, completion: $0) }))
    }
}

@Suite(
    "Redis store: outcomes on a real redis-server", .serialized,
    .enabled(if: RedisProcess.testsEnabled, Comment(rawValue: RedisProcess.skipMessage)))
struct RedisStoreTests {
    @Test func challengesAreValidExpiredConsumedAndBound() throws {
        let f = try RedisFixture()
        defer { f.stop() }
        let store = f.store
        var rng = SeededRandom(seed: 2)
        let id = makeRecord(&rng).keyID
        let c = try store.issue(.assert, ttl: 5_000, now: t0)
        #expect(c.token.bytes.count == 20)
        #expect(c.expiresAtMillis == t0 + 5_000)
        #expect(try store.state(c.token, now: t0) == .valid(purpose: .assert, keyID: nil, expiresAtMillis: t0 + 5_000))
        #expect(try store.state(c.token, now: t0 + 5_000) == .expired(expiresAtMillis: t0 + 5_000))
        let bound = try store.issue(.register, key: id, now: t0)
        #expect(Array(bound.token.bytes.prefix(4)) == Array(id.bytes.prefix(4)))
        #expect(try store.state(bound.token, now: t0) == .valid(purpose: .register, keyID: id, expiresAtMillis: t0 + 60_000))
        let any = try store.issue(nil, now: t0)
        #expect(try store.state(any.token, now: t0) == .valid(purpose: nil, keyID: nil, expiresAtMillis: t0 + 60_000))
        #expect(try store.state(ChallengeToken([UInt8](repeating: 7, count: 16))!, now: t0) == .unknown)
        var seen = Set<[UInt8]>()
        for _ in 0..<500 { seen.insert(try store.issue(.assert, now: t0).token.bytes) }
        #expect(seen.count == 500)
        #expect(store.statistics.liveChallenges >= 500)
    }

    /// The Redis expiry removes a challenge (consumed or not) shortly after its expiry.
    @Test func redisExpiryRemovesChallenges() throws {
        let f = try RedisFixture(expiredGraceMillis: 1_000)  // a shorter grace than the default 10 s: a quick test
        defer { f.stop() }
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        let c = try f.store.issue(.assert, ttl: 50, now: now)
        // The challenge's ttl plus the expired grace (1 s here): at most 1,050 ms left, however slow this machine.
        let pttl = Int(
            try f.redis.cli(["PTTL", String(decoding: f.store.challengeName(c.token), as: UTF8.self)]).trimmingCharacters(
                in: .whitespacesAndNewlines))
        #expect(pttl.map { $0 > 0 && $0 <= 1_050 } == true, "PTTL \(String(describing: pttl))")
        #expect(try f.store.state(c.token, now: now + 50) == .expired(expiresAtMillis: now + 50))
        let deadline = Date().addingTimeInterval(5)
        var state = try f.store.state(c.token, now: now + 50)
        while state != .unknown && Date() < deadline {
            usleep(100_000)
            state = try f.store.state(c.token, now: now + 50)
        }
        #expect(state == .unknown)
    }

    /// Issue 19: the memory store's key bounds, in the register script.
    @Test func keyBounds() throws {
        let f = try RedisFixture(limits: contractKeyLimits)
        defer { f.stop() }
        var rng = SeededRandom(seed: 190)
        try checkKeyBounds(f.store, rng: &rng, t0: t0)
        #expect(try f.redis.cli(["GET", "ag:keys"]) == "3")
    }

    /// Sixteen new keys race a cap of five through two store instances: the script admits exactly five.
    @Test func theCapHoldsUnderRacingRegistrations() throws {
        let f = try RedisFixture(limits: KeyLimits(maxKeys: 5))
        defer { f.stop() }
        let second = RedisAttestStore(
            options: .init(
                endpoint: RedisEndpoint(host: "127.0.0.1", port: f.redis.port), limits: KeyLimits(maxKeys: 5)))
        defer { second.close() }
        #expect(second.waitUntilConnected(timeoutMillis: 10_000))
        var rng = SeededRandom(seed: 192)
        let records = (0..<16).map { _ in makeRecord(&rng) }
        let challenges = try records.map { try f.store.issue(.register, key: $0.keyID, now: t0).token }
        let outcomes = Mutex<[RegistrationOutcome]>([])
        let done = DispatchGroup()
        DispatchQueue.concurrentPerform(iterations: records.count) { i in
            done.enter()
            (i % 2 == 0 ? f.store : second).register(
                Registration(record: records[i], receipt: [1], challenge: challenges[i]), nowMillis: t0
            ) {
                if case .success(let o) = $0 { outcomes.withLock { $0.append(o) } }
                done.leave()
            }
        }
        #expect(done.wait(timeout: .now() + 30) == .success)
        let all = outcomes.withLock { $0 }
        #expect(all.filter { $0 == .registered(existing: false) }.count == 5)
        #expect(all.filter { $0 == .keyCapacity(maxKeys: 5) }.count == 11)
        #expect(try f.redis.cli(["GET", "ag:keys"]) == "5")
    }

    @Test func registerStoresEveryFieldAndReRegistrationKeepsTheHigherCounter() throws {
        let f = try RedisFixture()
        defer { f.stop() }
        let store = f.store
        var rng = SeededRandom(seed: 3)
        let record = makeRecord(&rng, environment: .development, category: 7, bundle: "27.1 (300)", seen: t0 + 1_234)
        #expect(try store.key(record.keyID) == nil)
        #expect(try store.registerFresh(record, receipt: [5, 6, 7, 0, 255], now: t0) == .registered(existing: false))
        #expect(try store.key(record.keyID) == record)
        #expect(wait { store.receipt(for: record.keyID, completion: $0) } == .success([5, 6, 7, 0, 255]))
        store.refreshStatistics()
        #expect(try store.commit(record.keyID, counter: 5, challenge: nil, now: t0 + 5_000) == .committed(previousCounter: 0))
        var again = record
        again.firstSeenMillis = t0 + 9_000
        again.lastSeenMillis = t0 + 9_000
        again.bundleVersion = nil
        again.validationCategory = nil
        #expect(try store.registerFresh(again, receipt: [42], now: t0 + 9_000) == .registered(existing: true))
        let stored = try #require(try store.key(record.keyID))
        #expect(stored.counter == 5)
        #expect(stored.firstSeenMillis == t0 + 1_234)
        #expect(stored.lastSeenMillis == t0 + 9_000)
        #expect(stored.bundleVersion == nil)
        #expect(stored.validationCategory == nil)
        #expect(try f.redis.cli(["GET", "ag:keys"]) == "1")
    }

    @Test func registerRejectsEveryBadChallenge() throws {
        let f = try RedisFixture()
        defer { f.stop() }
        let store = f.store
        var rng = SeededRandom(seed: 5)
        let record = makeRecord(&rng)
        let other = makeRecord(&rng).keyID
        #expect(
            try store.registerNow(record, challenge: ChallengeToken([UInt8](repeating: 1, count: 16))!, now: t0)
                == .challengeRejected(.unknown))
        let expired = try store.issue(.register, ttl: 10, now: t0)
        #expect(try store.registerNow(record, challenge: expired.token, now: t0 + 10) == .challengeRejected(.expired))
        let assertOnly = try store.issue(.assert, now: t0)
        #expect(try store.registerNow(record, challenge: assertOnly.token, now: t0) == .challengeRejected(.wrongPurpose))
        let otherKey = try store.issue(.register, key: other, now: t0)
        #expect(try store.registerNow(record, challenge: otherKey.token, now: t0) == .challengeRejected(.wrongKey))
        #expect(try store.key(record.keyID) == nil)
        let any = try store.issue(nil, key: record.keyID, now: t0)
        #expect(try store.registerNow(record, challenge: any.token, now: t0) == .registered(existing: false))
        #expect(try store.registerNow(record, challenge: any.token, now: t0) == .challengeRejected(.consumed))
        #expect(try store.state(any.token, now: t0) == .consumed)
    }

    @Test func registerRefusesMalformedPublicKeyAndKeepsTheChallenge() throws {
        let f = try RedisFixture()
        defer { f.stop() }
        var rng = SeededRandom(seed: 6)
        var record = makeRecord(&rng)
        record.publicKey = Array(record.publicKey.prefix(33))
        let c = try f.store.issue(.register, now: t0)
        let result = wait { f.store.register(Registration(record: record, receipt: [], challenge: c.token), nowMillis: t0, completion: $0) }
        guard case .failure(let error) = result else {
            Issue.record("a 33-byte key was stored")
            return
        }
        #expect(error.detail.contains("65-byte"))
        #expect(try f.store.state(c.token, now: t0) == .valid(purpose: .register, keyID: nil, expiresAtMillis: t0 + 60_000))
    }

    @Test func commitOutcomes() throws {
        let f = try RedisFixture()
        defer { f.stop() }
        let store = f.store
        var rng = SeededRandom(seed: 7)
        try checkCommitOutcomes(store, rng: &rng, t0: t0)
    }

    /// Issue 16 §2: the contract's counter window, in the commit script.
    @Test func counterWindow() throws {
        let f = try RedisFixture()
        defer { f.stop() }
        var rng = SeededRandom(seed: 1610)
        try checkCounterWindow(f.store, rng: &rng, t0: t0)
    }

    /// Two instances on one Redis race the same open counter of a key's window (and one challenge):
    /// exactly one accepts it; the window as the key's hash holds it names the counters still open.
    @Test func exactlyOneAcceptsAnOpenCounterAcrossInstances() throws {
        let f = try RedisFixture()
        defer { f.stop() }
        let second = f.secondInstance()
        defer { second.close() }
        let stores: [RedisAttestStore] = [f.store, second]
        var rng = SeededRandom(seed: 1611)
        let record = makeRecord(&rng)
        try f.store.registerFresh(record, now: t0)
        #expect(try f.store.commit(record.keyID, counter: 64, challenge: nil, now: t0) == .committed(previousCounter: 0))
        for counter in stride(from: UInt32(63), through: 2, by: -7) {
            let challenge = try stores[Int(counter) % 2].issue(.assert, key: record.keyID, now: t0)
            let wins = raceCommits(stores, 16) { i in
                AssertionCommit(keyID: record.keyID, counter: counter, challenge: i % 2 == 0 ? challenge.token : nil, counterWindow: 64)
            }
            #expect(wins == 1, "counter \(counter)")
        }
        let accepted = Set(stride(from: UInt32(63), through: 2, by: -7))
        let open = (1...63).map(UInt32.init).filter { !accepted.contains($0) }
        let name = String(decoding: f.store.keyName(record.keyID), as: UTF8.self)
        #expect(
            try f.redis.cli(["HGET", name, "cw"])
                == "64:"
                + String((0..<63).map { open.contains(63 - UInt32($0)) ? "1" : "0" }).replacingOccurrences(
                    of: "0+$", with: "", options: .regularExpression))
        #expect(
            try second.commit(record.keyID, counter: 63, challenge: nil, window: 64, now: t0)
                == .counterReplay(stored: 64, open: openBits(64, open)))
    }

    /// A `cw` written for another counter than `ctr` (a build without windows moved `ctr` during a
    /// rolling upgrade) is stale: no counter is open, none is reopened.
    @Test func staleWindowOpensNothing() throws {
        let f = try RedisFixture()
        defer { f.stop() }
        var rng = SeededRandom(seed: 1612)
        let record = makeRecord(&rng)
        try f.store.registerFresh(record, now: t0)
        #expect(try f.store.commit(record.keyID, counter: 10, challenge: nil, now: t0) == .committed(previousCounter: 0))
        #expect(try f.store.commit(record.keyID, counter: 8, challenge: nil, window: 8, now: t0) == .committed(previousCounter: 10))
        let name = String(decoding: f.store.keyName(record.keyID), as: UTF8.self)
        #expect(try f.redis.cli(["HGET", name, "cw"]) == "10:101111111")  // 9 open, 8 accepted, 7…1 open
        // The old build's commit script: it accepted 9 and 12 (ctr moved), leaving cw as it was.
        _ = try f.redis.cli(["HSET", name, "ctr", "12"])
        #expect(try f.store.commit(record.keyID, counter: 9, challenge: nil, window: 8, now: t0) == .counterReplay(stored: 12))
        #expect(try f.store.commit(record.keyID, counter: 11, challenge: nil, window: 8, now: t0) == .counterReplay(stored: 12))
        #expect(try f.store.commit(record.keyID, counter: 14, challenge: nil, now: t0) == .committed(previousCounter: 12))
        #expect(try f.redis.cli(["HGET", name, "cw"]) == "14:1")
        #expect(try f.store.commit(record.keyID, counter: 13, challenge: nil, window: 2, now: t0) == .committed(previousCounter: 14))
        #expect(try f.redis.cli(["HEXISTS", name, "cw"]) == "0")
    }

    /// Two stores (two gateway instances) on one Redis race the same challenge and counter.
    @Test func exactlyOneCommitWinsAcrossInstances() throws {
        let f = try RedisFixture()
        defer { f.stop() }
        let second = f.secondInstance()
        defer { second.close() }
        let stores: [RedisAttestStore] = [f.store, second]
        var rng = SeededRandom(seed: 8)
        let record = makeRecord(&rng)
        try f.store.registerFresh(record, now: t0)
        for round in 1...10 {
            let challenge = try stores[round % 2].issue(.assert, now: t0)
            let wins = raceCommits(stores, 16) {
                AssertionCommit(keyID: record.keyID, counter: UInt32(round * 100 + $0), challenge: challenge.token)
            }
            #expect(wins == 1)
            let sameCounter = raceCommits(stores, 16) { _ in
                AssertionCommit(keyID: record.keyID, counter: UInt32(round * 100 + 50), challenge: nil)
            }
            #expect(sameCounter == 1)
        }
        // And one registration per challenge.
        let records = (0..<8).map { _ in makeRecord(&rng) }
        let challenge = try second.issue(.register, now: t0)
        #expect(
            raceRegistrations(stores, records.count) { Registration(record: records[$0], receipt: [], challenge: challenge.token) } == 1)
    }

    /// Many requests in flight at once (pipelined): all answered, none lost.
    @Test func pipelinedCommitsOnManyKeys() throws {
        let f = try RedisFixture(connections: 1)
        defer { f.stop() }
        var rng = SeededRandom(seed: 10)
        let records = (0..<8).map { _ in makeRecord(&rng) }
        for r in records { try f.store.registerFresh(r, now: t0) }
        let committed = Atomic<Int>(0)
        let answered = DispatchGroup()
        DispatchQueue.concurrentPerform(iterations: records.count) { i in
            for c in 1...300 {
                answered.enter()
                f.store.commitAssertion(AssertionCommit(keyID: records[i].keyID, counter: UInt32(c), challenge: nil), nowMillis: t0) {
                    if case .success(.committed) = $0 { committed.wrappingAdd(1, ordering: .relaxed) }
                    answered.leave()
                }
            }
        }
        #expect(answered.wait(timeout: .now() + 60) == .success)
        #expect(committed.load(ordering: .relaxed) == 8 * 300)
        for r in records { #expect(try f.store.key(r.keyID)?.counter == 300) }
    }

    /// SCRIPT FLUSH (as after a failover): the next call gets NOSCRIPT, reloads and succeeds.
    @Test func reloadsScriptsOnNoScript() throws {
        let f = try RedisFixture(connections: 1)
        defer { f.stop() }
        var rng = SeededRandom(seed: 11)
        let record = makeRecord(&rng)
        try f.store.registerFresh(record, now: t0)
        try f.redis.cli(["SCRIPT", "FLUSH"])
        #expect(try f.store.commit(record.keyID, counter: 1, challenge: nil, now: t0) == .committed(previousCounter: 0))
        #expect(try f.redis.cli(["SCRIPT", "EXISTS", sha1Hex(RedisScripts.commit)]) == "1")
    }

    /// Redis killed: calls fail promptly with `unavailable`; restarted with its AOF: the store
    /// reconnects, state survived, and a replay is still refused.
    @Test func survivesARestartAndRefusesReplaysAfterIt() throws {
        let f = try RedisFixture(durable: true, timeoutMillis: 500)
        defer { f.stop() }
        var rng = SeededRandom(seed: 12)
        let record = makeRecord(&rng)
        try f.store.registerFresh(record, now: t0)
        let c = try f.store.issue(.assert, key: record.keyID, now: t0)
        #expect(try f.store.commit(record.keyID, counter: 1, challenge: c.token, now: t0) == .committed(previousCounter: 0))
        f.redis.kill()
        // The first call may be the one that finds the connection broken; every call fails.
        for _ in 0..<3 {
            #expect(
                unavailable(
                    wait {
                        f.store.commitAssertion(
                            AssertionCommit(keyID: record.keyID, counter: 2, challenge: nil), nowMillis: t0, completion: $0)
                    }))
        }
        let deadline = Date().addingTimeInterval(5)  // idle connections notice by their PING
        while f.store.isHealthy && Date() < deadline { usleep(20_000) }
        #expect(!f.store.isHealthy)
        try f.redis.start()
        #expect(f.store.waitUntilConnected(timeoutMillis: 10_000))
        #expect(try f.store.commit(record.keyID, counter: 1, challenge: nil, now: t0) == .counterReplay(stored: 1))
        #expect(try f.store.commit(record.keyID, counter: 2, challenge: c.token, now: t0) == .challengeRejected(.consumed))
        #expect(try f.store.commit(record.keyID, counter: 2, challenge: nil, now: t0) == .committed(previousCounter: 1))
    }

    /// `wait_replicas` without replicas: the registration is written but not acknowledged, so it is
    /// not reported as registered.
    @Test func waitReplicasRefusesUnacknowledgedRegistrations() throws {
        let f = try RedisFixture(timeoutMillis: 400, waitReplicas: 1)
        defer { f.stop() }
        var rng = SeededRandom(seed: 13)
        let record = makeRecord(&rng)
        let c = try f.store.issue(.register, now: t0)
        let result = wait { f.store.register(Registration(record: record, receipt: [], challenge: c.token), nowMillis: t0, completion: $0) }
        guard case .failure(let e) = result else {
            Issue.record("registered without the replica's acknowledgement: \(result)")
            return
        }
        #expect(e.code == .unavailable)
        #expect(e.detail.contains("0 of 1 replicas"))
    }
}

/// `n` commits sent at once, commit `i` through `stores[i % stores.count]`: how many were `.committed`
/// (nil when not all were answered within 30 s). For the one-accept races of both store suites.
func raceCommits(_ stores: [RedisAttestStore], _ n: Int, _ commit: (Int) -> AssertionCommit) -> Int? {
    race(n) { i, answer in
        stores[i % stores.count].commitAssertion(commit(i), nowMillis: t0) {
            if case .success(.committed) = $0 { answer(true) } else { answer(false) }
        }
    }
}

/// The same for registrations (`.registered`).
func raceRegistrations(_ stores: [RedisAttestStore], _ n: Int, _ registration: (Int) -> Registration) -> Int? {
    race(n) { i, answer in
        stores[i % stores.count].register(registration(i), nowMillis: t0) {
            if case .success(.registered) = $0 { answer(true) } else { answer(false) }
        }
    }
}

/// Starts `n` requests at once (`send(i, answer)`; each request calls `answer` once, with whether it
/// was accepted) and counts the accepted ones; nil when not all answered within 30 s.
private func race(_ n: Int, _ send: (Int, @escaping @Sendable (Bool) -> Void) -> Void) -> Int? {
    let accepted = Atomic<Int>(0)
    let answered = DispatchGroup()
    for i in 0..<n {
        answered.enter()
        send(i) { ok in
            if ok { accepted.wrappingAdd(1, ordering: .relaxed) }
            answered.leave()
        }
    }
    guard answered.wait(timeout: .now() + 30) == .success else { return nil }
    return accepted.load(ordering: .relaxed)
}
