import Foundation
import GatewayTestSupport
import Synchronization
import Testing

@testable import GatewayStore

private let t0: Int64 = 1_700_000_000_000

@Suite("Memory store: challenges")
struct ChallengeTests {
    @Test func issuedChallengeIsValidThenExpiresThenIsSwept() throws {
        let store = MemoryAttestStore(shards: 4)
        let c = try store.issue(.assert, ttl: 5_000, now: t0)
        #expect(c.token.bytes.count >= 16)
        #expect(c.expiresAtMillis == t0 + 5_000)
        #expect(try store.state(c.token, now: t0) == .valid(purpose: .assert, keyID: nil, expiresAtMillis: t0 + 5_000))
        #expect(try store.state(c.token, now: t0 + 4_999) != .expired(expiresAtMillis: t0 + 5_000))
        #expect(try store.state(c.token, now: t0 + 5_000) == .expired(expiresAtMillis: t0 + 5_000))
        #expect(store.statistics.liveChallenges == 1)
        #expect(store.sweepExpired(nowMillis: t0 + 4_999) == 0)
        #expect(store.statistics.liveChallenges == 1)
        #expect(store.sweepExpired(nowMillis: t0 + 5_000) == 1)
        #expect(store.statistics.liveChallenges == 0)
        #expect(try store.state(c.token, now: t0 + 5_000) == .unknown)
    }

    @Test func boundKeyAndPurposeAreReported() throws {
        let store = MemoryAttestStore(shards: 2)
        var rng = SeededRandom(seed: 1)
        let id = makeRecord(&rng).keyID
        let c = try store.issue(.register, key: id, now: t0)
        #expect(try store.state(c.token, now: t0) == .valid(purpose: .register, keyID: id, expiresAtMillis: t0 + 60_000))
        let any = try store.issue(nil, now: t0)
        #expect(try store.state(any.token, now: t0) == .valid(purpose: nil, keyID: nil, expiresAtMillis: t0 + 60_000))
    }

    @Test func unknownTokensAreUnknown() throws {
        let store = MemoryAttestStore(shards: 2)
        #expect(try store.state(ChallengeToken([UInt8](repeating: 7, count: 16))!, now: t0) == .unknown)
        #expect(try store.state(ChallengeToken([UInt8](repeating: 7, count: 32))!, now: t0) == .unknown)
    }

    @Test func tokensAreDistinct() throws {
        let store = MemoryAttestStore(shards: 8)
        var seen = Set<[UInt8]>()
        for _ in 0..<2_000 { seen.insert(try store.issue(.assert, now: t0).token.bytes) }
        #expect(seen.count == 2_000)
        #expect(store.statistics.liveChallenges == 2_000)
    }

    @Test func sweepCountsOnlyUnconsumedAndKeepsConsumedUntilExpiry() throws {
        let store = MemoryAttestStore(shards: 4)
        var rng = SeededRandom(seed: 2)
        let record = makeRecord(&rng)
        try store.registerFresh(record, now: t0)  // consumes one register challenge
        let used = try store.issue(.assert, ttl: 10_000, now: t0)
        _ = try store.issue(.assert, ttl: 10_000, now: t0)  // never used
        #expect(try store.commit(record.keyID, counter: 1, challenge: used.token, now: t0) == .committed(previousCounter: 0))
        #expect(try store.state(used.token, now: t0 + 1) == .consumed)
        #expect(store.sweepExpired(nowMillis: t0 + 9_999) == 0)
        #expect(try store.state(used.token, now: t0 + 9_999) == .consumed)
        // register challenge (60 s) and the two assert ones: one consumed, one not, at 10 s.
        #expect(store.sweepExpired(nowMillis: t0 + 10_000) == 1)
        #expect(try store.state(used.token, now: t0 + 10_000) == .unknown)
        #expect(store.statistics.liveChallenges == 1)
    }

    @Test func observerSeesExpiredCount() throws {
        final class Counter: AttestStoreObserver {
            let expired = Atomic<Int>(0)
            func challengesExpired(_ count: Int) { expired.wrappingAdd(count, ordering: .relaxed) }
        }
        let counter = Counter()
        let store = MemoryAttestStore(shards: 2, observer: counter)
        for _ in 0..<3 { _ = try store.issue(nil, ttl: 1, now: t0) }
        store.sweepExpired(nowMillis: t0 + 1)
        #expect(counter.expired.load(ordering: .relaxed) == 3)
    }
}

@Suite("Memory store: register and commit")
struct CommitTests {
    @Test func registerStoresEveryField() throws {
        let store = MemoryAttestStore(shards: 4)
        var rng = SeededRandom(seed: 3)
        let record = makeRecord(
            &rng, counter: 0, environment: .development, category: 7, bundle: "27.1 (300)",
            seen: t0 + 1_234)
        #expect(try store.key(record.keyID) == nil)
        #expect(try store.registerFresh(record, receipt: [5, 6, 7], now: t0) == .registered(existing: false))
        let stored = try #require(try store.key(record.keyID))
        var expected = record
        expected.firstSeenMillis = t0 + 1_000  // stored with second resolution
        expected.lastSeenMillis = t0 + 1_000
        #expect(stored == expected)
        #expect(store.receipt(for: record.keyID) == nil)  // a memory-only store keeps no receipts (KeyBoundsTests)
        #expect(store.statistics.keys == 1)
    }

    @Test func reRegistrationKeepsHigherCounterAndFirstSeen() throws {
        let store = MemoryAttestStore(shards: 4)
        var rng = SeededRandom(seed: 4)
        let record = makeRecord(&rng, seen: t0)
        try store.registerFresh(record, now: t0)
        #expect(try store.commit(record.keyID, counter: 5, challenge: nil, now: t0 + 5_000) == .committed(previousCounter: 0))
        var again = record
        again.firstSeenMillis = t0 + 9_000
        again.lastSeenMillis = t0 + 9_000
        again.bundleVersion = "2.0"
        #expect(try store.registerFresh(again, receipt: [42], now: t0 + 9_000) == .registered(existing: true))
        let stored = try #require(try store.key(record.keyID))
        #expect(stored.counter == 5)
        #expect(stored.firstSeenMillis == t0)
        #expect(stored.lastSeenMillis == t0 + 9_000)
        #expect(stored.bundleVersion == "2.0")
        #expect(store.statistics.keys == 1)
    }

    @Test func registerRejectsEveryBadChallenge() throws {
        let store = MemoryAttestStore(shards: 4)
        var rng = SeededRandom(seed: 5)
        let record = makeRecord(&rng)
        let other = makeRecord(&rng).keyID
        let unknown = ChallengeToken([UInt8](repeating: 1, count: 16))!
        #expect(try store.registerNow(record, challenge: unknown, now: t0) == .challengeRejected(.unknown))
        let expired = try store.issue(.register, ttl: 10, now: t0)
        #expect(try store.registerNow(record, challenge: expired.token, now: t0 + 10) == .challengeRejected(.expired))
        let assertOnly = try store.issue(.assert, now: t0)
        #expect(try store.registerNow(record, challenge: assertOnly.token, now: t0) == .challengeRejected(.wrongPurpose))
        let otherKey = try store.issue(.register, key: other, now: t0)
        #expect(try store.registerNow(record, challenge: otherKey.token, now: t0) == .challengeRejected(.wrongKey))
        #expect(try store.key(record.keyID) == nil)
        #expect(store.statistics.keys == 0)
        // Unbound, purpose-free challenge works once, then is consumed.
        let any = try store.issue(nil, key: record.keyID, now: t0)
        #expect(try store.registerNow(record, challenge: any.token, now: t0) == .registered(existing: false))
        #expect(try store.registerNow(record, challenge: any.token, now: t0) == .challengeRejected(.consumed))
        #expect(try store.state(any.token, now: t0) == .consumed)
    }

    @Test func registerRefusesMalformedPublicKey() throws {
        let store = MemoryAttestStore(shards: 4)
        var rng = SeededRandom(seed: 6)
        var record = makeRecord(&rng)
        record.publicKey = Array(record.publicKey.prefix(33))
        let c = try store.issue(.register, now: t0)
        let result = wait {
            store.register(Registration(record: record, receipt: [], challenge: c.token), nowMillis: t0, completion: $0)
        }
        guard case .failure(let error) = result else {
            Issue.record("a 33-byte key was stored")
            return
        }
        #expect(error.detail.contains("65-byte"))
        #expect(try store.state(c.token, now: t0) == .valid(purpose: .register, keyID: nil, expiresAtMillis: t0 + 60_000))
    }

    @Test func commitOutcomes() throws {
        let store = MemoryAttestStore(shards: 4)
        var rng = SeededRandom(seed: 7)
        try checkCommitOutcomes(store, rng: &rng, t0: t0)
    }

    @Test func closedStoreRefusesWork() throws {
        let store = MemoryAttestStore(shards: 1)
        try store.close()
        let result = wait { store.issueChallenge(ChallengeRequest(purpose: nil, keyID: nil, ttlMillis: 1), nowMillis: t0, completion: $0) }
        guard case .failure(let error) = result else {
            Issue.record("a closed store issued a challenge")
            return
        }
        #expect(error.code == .unavailable)
    }
}

@Suite("Memory store: concurrency")
struct ConcurrencyTests {
    /// Many threads race one key with the same challenge or the same counter: exactly one wins.
    @Test(arguments: [1, 64])
    func exactlyOneCommitWins(shards: Int) throws {
        let store = MemoryAttestStore(shards: shards)
        var rng = SeededRandom(seed: 8)
        let record = makeRecord(&rng)
        try store.registerFresh(record, now: t0)
        for round in 1...20 {
            let challenge = try store.issue(.assert, now: t0)
            let wins = Atomic<Int>(0)
            // Same challenge, different counters.
            DispatchQueue.concurrentPerform(iterations: 16) { i in
                let counter = UInt32(round * 100 + i)
                store.commitAssertion(AssertionCommit(keyID: record.keyID, counter: counter, challenge: challenge.token), nowMillis: t0) {
                    if case .success(.committed) = $0 { wins.wrappingAdd(1, ordering: .relaxed) }
                }
            }
            #expect(wins.load(ordering: .relaxed) == 1)
            // Same counter, no challenge.
            let sameCounter = Atomic<Int>(0)
            let counter = UInt32(round * 100 + 50)
            DispatchQueue.concurrentPerform(iterations: 16) { _ in
                store.commitAssertion(AssertionCommit(keyID: record.keyID, counter: counter, challenge: nil), nowMillis: t0) {
                    if case .success(.committed) = $0 { sameCounter.wrappingAdd(1, ordering: .relaxed) }
                }
            }
            #expect(sameCounter.load(ordering: .relaxed) == 1)
        }
    }

    @Test func exactlyOneRegistrationPerChallenge() throws {
        let store = MemoryAttestStore(shards: 16)
        var rng = SeededRandom(seed: 9)
        let records = (0..<16).map { _ in makeRecord(&rng) }
        for _ in 0..<10 {
            let challenge = try store.issue(.register, now: t0)
            let wins = Atomic<Int>(0)
            DispatchQueue.concurrentPerform(iterations: records.count) { i in
                store.register(Registration(record: records[i], receipt: [], challenge: challenge.token), nowMillis: t0) {
                    if case .success(.registered) = $0 { wins.wrappingAdd(1, ordering: .relaxed) }
                }
            }
            #expect(wins.load(ordering: .relaxed) == 1)
        }
    }

    /// Parallel commits on many keys, each thread its own counters: all commit, none lost.
    @Test func parallelCommitsOnManyKeys() throws {
        let store = MemoryAttestStore(shards: 8)
        var rng = SeededRandom(seed: 10)
        let records = (0..<8).map { _ in makeRecord(&rng) }
        for r in records { try store.registerFresh(r, now: t0) }
        let committed = Atomic<Int>(0)
        DispatchQueue.concurrentPerform(iterations: records.count) { i in
            for c in 1...500 {
                store.commitAssertion(AssertionCommit(keyID: records[i].keyID, counter: UInt32(c), challenge: nil), nowMillis: t0) {
                    if case .success(.committed) = $0 { committed.wrappingAdd(1, ordering: .relaxed) }
                }
            }
        }
        #expect(committed.load(ordering: .relaxed) == 8 * 500)
        for r in records { #expect(try store.key(r.keyID)?.counter == 500) }
    }
}
