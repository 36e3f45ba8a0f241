import Foundation
import GatewayTestSupport
import Synchronization
import Testing

@testable import GatewayStore

private let t0: Int64 = 1_700_000_000_000

/// Issues a challenge; `chained`: as the gate does after a verified assertion.
private func issue(
    _ store: MemoryAttestStore, _ purpose: ChallengePurpose? = .assert, key: KeyID? = nil, chained: Bool = false,
    ttl: Int64 = 60_000, now: Int64 = t0
) throws -> ChallengeToken {
    try wait {
        store.issueChallenge(
            ChallengeRequest(purpose: purpose, keyID: key, ttlMillis: ttl, chained: chained), nowMillis: now, completion: $0)
    }.get().token
}

private func isValid(_ store: MemoryAttestStore, _ token: ChallengeToken, now: Int64 = t0) throws -> Bool {
    if case .valid = try store.state(token, now: now) { return true }
    return false
}

@Suite("Memory store: challenge budgets (a flood of anonymous challenges denies no one)")
struct ChallengeBudgetTests {
    @Test("a full anonymous budget replaces its oldest challenge instead of refusing")
    func fullAnonymousBudgetReplacesTheOldest() throws {
        let store = MemoryAttestStore(shards: 1, challenges: ChallengeLimits(anonymous: 10, keyBound: 10))
        let tokens = try (0..<10).map { try issue(store, ttl: 60_000, now: t0 + Int64($0)) }
        let eleventh = try issue(store, now: t0 + 10)
        #expect(try isValid(store, eleventh))
        #expect(try store.state(tokens[0], now: t0 + 10) == .unknown)  // the oldest: the flood's cost
        for t in tokens.dropFirst() { #expect(try isValid(store, t)) }
        #expect(store.statistics.liveChallenges == 10)
        #expect(store.challengeEvictions == ChallengeEvictions(anonymous: 1))
        // A flood of 1,000 more keeps the budget at 10, and the newest ten valid.
        var last: [ChallengeToken] = []
        for i in 0..<1_000 { last.append(try issue(store, now: t0 + 11 + Int64(i))) }
        for t in last.suffix(10) { #expect(try isValid(store, t)) }
        #expect(store.statistics.liveChallenges == 10)
        #expect(store.challengeCounts == (anonymous: 10, keyBound: 0))
    }

    @Test("challenges bound to a registered key never wait behind anonymous ones")
    func keyBoundSurvivesAnAnonymousFlood() throws {
        let store = MemoryAttestStore(shards: 4, challenges: ChallengeLimits(anonymous: 8, keyBound: 8))
        var rng = SeededRandom(seed: 11)
        let record = makeRecord(&rng)
        try store.registerFresh(record, now: t0)
        let next = try issue(store, key: record.keyID, chained: true)  // X-App-Attest-Next-Challenge
        let rechallenge = try issue(store, key: record.keyID)  // the endpoint, naming the key
        for _ in 0..<2_000 { _ = try issue(store, nil) }  // the flood
        for _ in 0..<2_000 { _ = try issue(store, .register, key: makeRecord(&rng).keyID) }  // naming unregistered keys
        #expect(try isValid(store, next))
        #expect(try isValid(store, rechallenge))
        #expect(store.challengeCounts.keyBound == 2)
        #expect(store.challengeCounts.anonymous <= 8)
        #expect(try store.commit(record.keyID, counter: 1, challenge: next, now: t0) == .committed(previousCounter: 0))
        #expect(try store.commit(record.keyID, counter: 2, challenge: rechallenge, now: t0) == .committed(previousCounter: 1))
    }

    @Test("a challenge bound to a key lives in the key's shard, so a commit takes one lock")
    func boundTokensShareTheKeysShard() throws {
        let store = MemoryAttestStore(shards: 64)
        var rng = SeededRandom(seed: 12)
        for _ in 0..<50 {
            let id = makeRecord(&rng).keyID
            let token = try issue(store, .register, key: id)
            let bits = try #require(ChallengeBits(token))
            #expect(store.shardIndex(bits.a) == store.shardIndex(KeyBits(id).w0))
        }
    }

    @Test("per key: at most N live; the oldest consumed goes first, then the oldest asked for at the endpoint, then the oldest")
    func perKeyLimitReplaces() throws {
        let store = MemoryAttestStore(shards: 2, challenges: ChallengeLimits(anonymous: 100, keyBound: 100, perKey: 2))
        var rng = SeededRandom(seed: 13)
        let record = makeRecord(&rng)
        try store.registerFresh(record, now: t0)
        let c1 = try issue(store, key: record.keyID, chained: true)
        let n1 = try issue(store, key: record.keyID)
        let n2 = try issue(store, key: record.keyID)  // full: n1 (endpoint) goes, c1 (chained) stays
        #expect(try store.state(n1, now: t0) == .unknown)
        #expect(try isValid(store, c1) && isValid(store, n2))
        #expect(try store.commit(record.keyID, counter: 1, challenge: c1, now: t0) == .committed(previousCounter: 0))
        let c2 = try issue(store, key: record.keyID, chained: true)  // full: consumed c1 goes
        #expect(try store.state(c1, now: t0) == .unknown)
        #expect(try isValid(store, n2) && isValid(store, c2))
        // Someone naming the key at the endpoint, again and again, replaces only endpoint challenges.
        for _ in 0..<200 { _ = try issue(store, key: record.keyID) }
        #expect(try isValid(store, c2))
        #expect(try store.state(n2, now: t0) == .unknown)
        #expect(store.challengeCounts.keyBound == 2)
        #expect(store.challengeEvictions.perKey == 201)  // n1 and 200 endpoint ones; consumed c1 is not counted
        // Two chained ones fill the ring: an endpoint request then replaces the oldest chained one.
        let c3 = try issue(store, key: record.keyID, chained: true)
        #expect(try isValid(store, c2) && isValid(store, c3))
        _ = try issue(store, key: record.keyID)
        #expect(try store.state(c2, now: t0) == .unknown)
        #expect(try isValid(store, c3))
    }

    @Test("a full key-bound budget replaces its oldest challenge")
    func keyBoundBudgetReplacesItsOldest() throws {
        let store = MemoryAttestStore(shards: 1, challenges: ChallengeLimits(anonymous: 100, keyBound: 4))
        var rng = SeededRandom(seed: 14)
        var tokens: [ChallengeToken] = []
        for i in 0..<6 {
            let record = makeRecord(&rng)
            try store.registerFresh(record, now: t0)
            tokens.append(try issue(store, key: record.keyID, chained: true, now: t0 + Int64(i)))
        }
        #expect(try store.state(tokens[0], now: t0 + 6) == .unknown)
        #expect(try store.state(tokens[1], now: t0 + 6) == .unknown)
        for t in tokens.suffix(4) { #expect(try isValid(store, t, now: t0 + 6)) }
        #expect(store.challengeEvictions.keyBound == 2)
        #expect(store.challengeCounts.keyBound == 4)
    }

    @Test("a sweep empties both budgets and the per-key rings; stale heap items are compacted")
    func sweepAndCompaction() throws {
        let limits = ChallengeLimits(anonymous: 50, keyBound: 50, perKey: 1)
        let store = MemoryAttestStore(shards: 1, challenges: limits)
        var rng = SeededRandom(seed: 15)
        let record = makeRecord(&rng)
        try store.registerFresh(record, now: t0)
        // perKey 1: every issue replaces the previous one, leaving a stale heap item behind.
        for _ in 0..<10_000 { _ = try issue(store, key: record.keyID, ttl: 1_000) }
        for _ in 0..<100 { _ = try issue(store, nil, ttl: 1_000) }
        store.shards[0].state.withLock { s in
            #expect(s.boundCount == 1)
            #expect(s.boundExpiries.count <= 2 * s.boundCount + 65)
            #expect(s.rings.count == 1)
        }
        // Left: the consumed registration challenge and 49 of the 100 (the budget replaced the
        // challenge closest to expiry first), and the key's one: 50 expire unused.
        #expect(store.sweepExpired(nowMillis: t0 + 60_000) == 50)
        #expect(store.challengeCounts == (anonymous: 0, keyBound: 0))
        #expect(store.statistics.liveChallenges == 0)
        store.shards[0].state.withLock { s in
            #expect(s.rings.isEmpty)
            #expect(s.boundExpiries.count == 0)
        }
    }

    @Test("restoring: challenges bound to a registered key rejoin its budget (ring overflow goes anonymous)")
    func restoreClassifies() throws {
        var rng = SeededRandom(seed: 16)
        let record = makeRecord(&rng)
        let stranger = makeRecord(&rng).keyID
        var states = (0..<4).map { _ in ShardState(seed: 1) }
        let key = KeyBits(record.keyID)
        _ = MemoryAttestStore.apply(
            &states[Int(key.w0 & 3)],
            JournalRecord.Registration(
                key: key, point: PointBits(record.publicKey)!, counter: 0, firstSeen: 0, lastSeen: 0, flags: 1, category: 0,
                receiptOffset: 0, receiptLength: 0, appID: record.appID, bundleVersion: nil))
        func entry(_ i: UInt64, _ bound: KeyID?) -> ChallengeEntry {
            ChallengeEntry(
                token: ChallengeBits(a: i << 2 | (key.w0 & 3), b: i),
                boundKey: bound.map(KeyBits.init) ?? KeyBits(w0: 0, w1: 0, w2: 0, w3: 0),
                expiresAt: t0, purpose: 2, hasBoundKey: bound != nil, consumed: false)
        }
        let entries = (1...10).map { entry($0, record.keyID) } + [entry(11, stranger), entry(12, nil)]
        MemoryAttestStore.restoreChallenges(entries, into: &states)
        let s = states[Int(key.w0 & 3)]
        #expect(s.boundCount == KeyRing.maxSlots)
        #expect(s.rings[key]?.count == 8)
        #expect(states.reduce(0) { $0 + $1.expiries.count } == 4)
    }

    @Test("a clean restart keeps each challenge in its budget")
    func cleanRestartKeepsBudgets() throws {
        let dir = TempDirectory()
        defer { dir.remove() }
        var rng = SeededRandom(seed: 18)
        let record = makeRecord(&rng)
        let store = try MemoryAttestStore.open(directory: dir.path, shards: 4)
        try store.registerFresh(record, now: t0)
        let next = try issue(store, key: record.keyID, chained: true)
        _ = try issue(store, nil)
        try store.close()
        let reopened = try MemoryAttestStore.open(directory: dir.path, shards: 4)
        defer { try? reopened.close() }
        #expect(reopened.challengeCounts == (anonymous: 2, keyBound: 1))  // the consumed registration challenge too
        #expect(try reopened.commit(record.keyID, counter: 1, challenge: next, now: t0) == .committed(previousCounter: 0))
    }

    @Test("memory stays within the stated bound under a flood of every kind", arguments: [4, 8])
    func memoryIsBounded(perKey: Int) throws {
        let limits = ChallengeLimits(anonymous: 4_000, keyBound: 2_000, perKey: perKey)
        let shards = 8
        let store = MemoryAttestStore(shards: shards, challenges: limits)
        var rng = SeededRandom(seed: 17)
        var keys: [KeyID] = []
        for _ in 0..<1_500 {
            let record = makeRecord(&rng)
            try store.registerFresh(record, now: t0)
            keys.append(record.keyID)
        }
        for i in 0..<40_000 {
            switch i % 4 {
            case 0: _ = try issue(store, nil)
            case 1: _ = try issue(store, .register, key: makeRecord(&rng).keyID)
            case 2: _ = try issue(store, key: keys[Int.random(in: 0..<keys.count, using: &rng)], chained: true)
            default: _ = try issue(store, key: keys[i % keys.count])
            }
        }
        let counts = store.challengeCounts
        #expect(counts.anonymous <= shards * limits.anonymousPerShard(shards))
        #expect(counts.keyBound <= shards * limits.keyBoundPerShard(shards))
        #expect(store.statistics.liveChallenges == counts.anonymous + counts.keyBound)
        let bound = ChallengeMemory.bound(limits, shards: shards)
        #expect(store.challengeMemoryBytes <= bound, "accounted \(store.challengeMemoryBytes) > bound \(bound)")
        // The documented worst case per challenge of budget (docs/store.md): at most 400 bytes.
        #expect(bound <= 400 * (limits.anonymous + limits.keyBound), "bound \(bound)")
        // The default budgets' bound, as docs/store.md and docs/configuration.md state it (220.4 MB;
        // 186.8 MB before key rings held 8 challenges), whatever `perKey`.
        #expect(ChallengeMemory.bound(ChallengeLimits(), shards: 64) == 220_368_896)
        #expect(ChallengeMemory.bound(ChallengeLimits(perKey: 8), shards: 64) == 220_368_896)
    }
}
