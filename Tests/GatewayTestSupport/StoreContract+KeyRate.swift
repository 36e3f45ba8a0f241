import GatewayStore
import Testing

/// Issue 27, `assertion.key_rate`, on any store (memory, Redis, Redis Cluster: key-bound challenges
/// only), with controlled time: the burst, the refill, `retryAfter` rounded up, nothing consumed by a
/// limited commit (challenge, counter, token), the very same challenge and counter accepted once a
/// token is back, other refusals taking precedence and no token, one bucket per (key, route), and
/// the gate's one-step commit (`commitAssertion(_:checked:issuing:)`) limited alike. `t0`: any time.
public func checkKeyRate(_ store: any AttestStore, rng: inout SeededRandom, t0: Int64) throws {
    let pay = KeyRateLimit(count: 2, periodMillis: 1_000, burst: 3, scope: "pay")
    let a = makeRecord(&rng, seen: t0)
    let b = makeRecord(&rng, seen: t0)
    for r in [a, b] {
        let reg = try store.issue(.register, key: r.keyID, now: t0)
        #expect(try store.registerNow(r, challenge: reg.token, now: t0) == .registered(existing: false))
    }
    func commit(
        _ r: DeviceKeyRecord, _ counter: UInt32, _ limit: KeyRateLimit? = pay, challenge: ChallengeToken? = nil, at now: Int64
    ) throws -> CommitOutcome {
        try wait {
            store.commitAssertion(
                AssertionCommit(keyID: r.keyID, counter: counter, challenge: challenge, keyRate: limit), nowMillis: now, completion: $0)
        }.get()
    }
    func bound(_ r: DeviceKeyRecord, at now: Int64 = t0) throws -> ChallengeToken { try store.issue(.assert, key: r.keyID, now: now).token }

    // The burst: 3 at one instant, with challenges.
    for counter in UInt32(1)...3 {
        #expect(try commit(a, counter, challenge: try bound(a), at: t0) == .committed(previousCounter: counter - 1))
    }
    // The fourth: limited, 0.5 s to a token at 2/s, rounded up; nothing consumed.
    let held = try bound(a)
    #expect(try commit(a, 4, challenge: held, at: t0) == .keyRateLimited(retryAfterSeconds: 1))
    #expect(try store.key(a.keyID)?.counter == 3)
    #expect(try store.key(a.keyID)?.lastSeenMillis == t0)
    #expect(try store.state(held, now: t0) == .valid(purpose: .assert, keyID: a.keyID, expiresAtMillis: t0 + 60_000))
    // Other refusals come first and are what they are (a replayed counter, another key's challenge).
    #expect(try commit(a, 3, challenge: held, at: t0) == .counterReplay(stored: 3))
    #expect(try commit(a, 4, challenge: try bound(b), at: t0) == .challengeRejected(.wrongKey))
    // Another key, another route, a route without key_rate: their own budgets.
    #expect(try commit(b, 1, challenge: try bound(b), at: t0) == .committed(previousCounter: 0))
    // 0.499 s refilled 0.998 of a token: still limited, and limiting took nothing.
    #expect(try commit(a, 4, challenge: held, at: t0 + 499) == .keyRateLimited(retryAfterSeconds: 1))
    // The very same challenge and counter once a token is back.
    #expect(try commit(a, 4, challenge: held, at: t0 + 500) == .committed(previousCounter: 3))
    #expect(try store.state(held, now: t0 + 500) == .consumed)
    #expect(try commit(a, 5, at: t0 + 500) == .keyRateLimited(retryAfterSeconds: 1))
    // Idle for 10 s: the bucket is full again, no fuller than its burst.
    for counter in UInt32(5)...7 { #expect(try commit(a, counter, at: t0 + 10_500) == .committed(previousCounter: counter - 1)) }
    #expect(try commit(a, 8, at: t0 + 10_500) == .keyRateLimited(retryAfterSeconds: 1))
    let other = KeyRateLimit(count: 2, periodMillis: 1_000, burst: 3, scope: "other")
    #expect(try commit(a, 8, other, at: t0 + 10_500) == .committed(previousCounter: 7))
    #expect(try commit(a, 9, nil, at: t0 + 10_500) == .committed(previousCounter: 8))
    // A clock that goes back refills nothing.
    #expect(try commit(a, 10, at: t0 + 5_000) == .keyRateLimited(retryAfterSeconds: 1))

    // Per hour, burst 1: a retry an hour away; the seconds are rounded up.
    let hourly = KeyRateLimit(count: 1, periodMillis: 3_600_000, burst: 1, scope: "hourly")
    #expect(try commit(b, 2, hourly, at: t0 + 1) == .committed(previousCounter: 1))
    #expect(try commit(b, 3, hourly, at: t0 + 1) == .keyRateLimited(retryAfterSeconds: 3_600))
    #expect(try commit(b, 3, hourly, at: t0 + 1_800_001) == .keyRateLimited(retryAfterSeconds: 1_800))
    #expect(try commit(b, 3, hourly, at: t0 + 3_599_500) == .keyRateLimited(retryAfterSeconds: 1))

    // The gate's one step (commit, check of the key's fields, next challenge): limited alike, no next
    // challenge issued, the presented one unconsumed; accepted once a token is back.
    let presented = try store.issue(.assert, key: b.keyID, ttl: 7_200_000, now: t0 + 1).token
    let next = ChallengeRequest(purpose: .assert, keyID: b.keyID, ttlMillis: 60_000, chained: true)
    func gateCommit(at now: Int64) throws -> CommitAndNext {
        try wait {
            store.commitAssertion(
                AssertionCommit(keyID: b.keyID, counter: 3, challenge: presented, keyRate: hourly), checked: CheckedKey(b), issuing: next,
                nowMillis: now, completion: $0)
        }.get()
    }
    let limited = try gateCommit(at: t0 + 2)
    #expect(limited.outcome == .keyRateLimited(retryAfterSeconds: 3_600) && limited.next == nil)
    #expect(try store.state(presented, now: t0 + 2) == .valid(purpose: .assert, keyID: b.keyID, expiresAtMillis: t0 + 7_200_001))
    #expect(try store.key(b.keyID)?.counter == 2)
    let passed = try gateCommit(at: t0 + 3_600_001)
    #expect(passed.outcome == .committed(previousCounter: 2) && passed.next != nil)
    #expect(try store.key(b.keyID)?.counter == 3)
}
