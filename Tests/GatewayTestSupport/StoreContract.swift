import Dispatch
import GatewayStore
import Synchronization
import Testing

/// Blocking forms of the `AttestStore` calls, for the tests of every store (memory and Redis): one
/// copy of how a test waits for a completion and builds a record.

/// Runs a completion-style call and waits for its answer (bounded: 30 s, then the test fails).
public func wait<T: Sendable>(_ call: (@escaping @Sendable (T) -> Void) -> Void) -> T {
    let box = Mutex<T?>(nil)
    let done = DispatchSemaphore(value: 0)
    call { value in
        box.withLock { $0 = value }
        done.signal()
    }
    let answered = done.wait(timeout: .now() + 30) == .success
    precondition(answered, "store call did not complete within 30 s")
    return box.withLock { $0! }
}

extension AttestStore {
    public func issue(_ purpose: ChallengePurpose?, key: KeyID? = nil, ttl: Int64 = 60_000, now: Int64) throws -> IssuedChallenge {
        try wait { issueChallenge(ChallengeRequest(purpose: purpose, keyID: key, ttlMillis: ttl), nowMillis: now, completion: $0) }
            .get()
    }

    public func state(_ token: ChallengeToken, now: Int64) throws -> ChallengeState {
        try wait { challengeState(token, nowMillis: now, completion: $0) }.get()
    }

    public func key(_ id: KeyID) throws -> DeviceKeyRecord? {
        try wait { deviceKey(id, completion: $0) }.get()
    }

    public func registerNow(_ record: DeviceKeyRecord, receipt: [UInt8] = [1, 2, 3], challenge: ChallengeToken, now: Int64)
        throws -> RegistrationOutcome
    {
        try wait {
            register(Registration(record: record, receipt: receipt, challenge: challenge), nowMillis: now, completion: $0)
        }.get()
    }

    public func commit(_ id: KeyID, counter: UInt32, challenge: ChallengeToken?, now: Int64) throws -> CommitOutcome {
        try wait {
            commitAssertion(AssertionCommit(keyID: id, counter: counter, challenge: challenge), nowMillis: now, completion: $0)
        }.get()
    }

    /// Registers `record` with a fresh registration challenge; fails the test unless it is stored.
    @discardableResult
    public func registerFresh(_ record: DeviceKeyRecord, receipt: [UInt8] = [9, 9], now: Int64) throws -> RegistrationOutcome {
        let c = try issue(.register, now: now)
        let outcome = try registerNow(record, receipt: receipt, challenge: c.token, now: now)
        #expect(outcome == .registered(existing: false) || outcome == .registered(existing: true))
        return outcome
    }
}

/// A device key record with random key id and point (stores check the point's shape only).
public func makeRecord(
    _ rng: inout SeededRandom, counter: UInt32 = 0, app: String = "TEAM123456.com.example.app",
    environment: KeyEnvironment = .production, category: UInt32? = nil, bundle: String? = nil, seen: Int64 = 1_700_000_000_000
) -> DeviceKeyRecord {
    let id = KeyID((0..<32).map { _ in UInt8.random(in: 0...255, using: &rng) })!
    let point = [0x04] + (0..<64).map { _ in UInt8.random(in: 0...255, using: &rng) }
    return DeviceKeyRecord(
        keyID: id, publicKey: point, counter: counter, appID: app, environment: environment,
        validationCategory: category, bundleVersion: bundle, firstSeenMillis: seen, lastSeenMillis: seen)
}

/// The contract's commit outcomes, on any store: an unknown key, counter replays, every challenge
/// rejection (none of which moves the counter or consumes a challenge), then a replay, a commit and a
/// reuse of one challenge.
public func checkCommitOutcomes(_ store: any AttestStore, rng: inout SeededRandom, t0: Int64) throws {
    let record = makeRecord(&rng)
    let other = makeRecord(&rng)
    try store.registerFresh(record, now: t0)
    try store.registerFresh(other, now: t0)

    #expect(try store.commit(makeRecord(&rng).keyID, counter: 1, challenge: nil, now: t0) == .unknownKey)
    #expect(try store.commit(record.keyID, counter: 0, challenge: nil, now: t0) == .counterReplay(stored: 0))
    #expect(try store.commit(record.keyID, counter: 3, challenge: nil, now: t0 + 2_000) == .committed(previousCounter: 0))
    #expect(try store.commit(record.keyID, counter: 3, challenge: nil, now: t0) == .counterReplay(stored: 3))
    #expect(try store.commit(record.keyID, counter: 2, challenge: nil, now: t0) == .counterReplay(stored: 3))
    #expect(try store.key(record.keyID)?.lastSeenMillis == t0 + 2_000)

    let unknown = ChallengeToken([UInt8](repeating: 3, count: 16))!
    #expect(try store.commit(record.keyID, counter: 4, challenge: unknown, now: t0) == .challengeRejected(.unknown))
    let long = ChallengeToken([UInt8](repeating: 3, count: 40))!
    #expect(try store.commit(record.keyID, counter: 4, challenge: long, now: t0) == .challengeRejected(.unknown))
    let expired = try store.issue(.assert, ttl: 5, now: t0)
    #expect(try store.commit(record.keyID, counter: 4, challenge: expired.token, now: t0 + 5) == .challengeRejected(.expired))
    let registerOnly = try store.issue(.register, now: t0)
    #expect(try store.commit(record.keyID, counter: 4, challenge: registerOnly.token, now: t0) == .challengeRejected(.wrongPurpose))
    let forOther = try store.issue(.assert, key: other.keyID, now: t0)
    #expect(try store.commit(record.keyID, counter: 4, challenge: forOther.token, now: t0) == .challengeRejected(.wrongKey))
    // None of the rejections moved the counter or consumed a challenge.
    #expect(try store.key(record.keyID)?.counter == 3)
    #expect(try store.state(forOther.token, now: t0) == .valid(purpose: .assert, keyID: other.keyID, expiresAtMillis: t0 + 60_000))

    let good = try store.issue(.assert, key: record.keyID, now: t0)
    // A counter replay leaves the challenge unconsumed.
    #expect(try store.commit(record.keyID, counter: 3, challenge: good.token, now: t0) == .counterReplay(stored: 3))
    #expect(try store.commit(record.keyID, counter: 4, challenge: good.token, now: t0) == .committed(previousCounter: 3))
    #expect(try store.commit(record.keyID, counter: 5, challenge: good.token, now: t0) == .challengeRejected(.consumed))
    #expect(try store.state(good.token, now: t0) == .consumed)
    #expect(try store.key(record.keyID)?.counter == 4)
}
