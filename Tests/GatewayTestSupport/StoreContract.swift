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

    /// `window`: the route's `counter_window` (0: none).
    public func commit(_ id: KeyID, counter: UInt32, challenge: ChallengeToken?, window: Int = 0, now: Int64) throws -> CommitOutcome {
        try wait {
            commitAssertion(
                AssertionCommit(keyID: id, counter: counter, challenge: challenge, counterWindow: window), nowMillis: now,
                completion: $0)
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

/// The limits `checkKeyBounds` expects its store to be made with.
public let contractKeyLimits = KeyLimits(maxKeys: 3, maxReregistrations: 2, reregistrationWindowMillis: 60_000)

/// The key bounds (issue 19), on any store made with `contractKeyLimits` and holding no key: the
/// re-registration window, the app a key is registered to, and the key cap. Every refusal changes
/// nothing: the key keeps its record and the challenge stays usable. `t0` must be a whole second.
/// `beforeCap` runs once the store holds 3 keys (Redis Cluster: the count is read, not scripted).
public func checkKeyBounds(
    _ store: any AttestStore, rng: inout SeededRandom, t0: Int64, beforeCap: () throws -> Void = {}
) throws {
    let a = makeRecord(&rng, seen: t0)
    func fresh(_ r: DeviceKeyRecord, at now: Int64) throws -> RegistrationOutcome {
        try store.registerNow(r, challenge: try store.issue(.register, key: r.keyID, now: now).token, now: now)
    }
    #expect(try fresh(a, at: t0) == .registered(existing: false))
    // Re-registrations: 2 per 60 s window, the window starting with the first one (t0 + 1 s).
    #expect(try fresh(a, at: t0 + 1_000) == .registered(existing: true))
    #expect(try fresh(a, at: t0 + 30_000) == .registered(existing: true))
    let held = try store.issue(.register, key: a.keyID, now: t0 + 31_000)
    #expect(try store.registerNow(a, challenge: held.token, now: t0 + 31_000) == .reregistrationLimited(retryAfterMillis: 30_000))
    #expect(try store.registerNow(a, challenge: held.token, now: t0 + 60_999) == .reregistrationLimited(retryAfterMillis: 1))
    #expect(try store.state(held.token, now: t0 + 31_000) == .valid(purpose: .register, keyID: a.keyID, expiresAtMillis: t0 + 91_000))
    #expect(try store.commit(a.keyID, counter: 1, challenge: nil, now: t0 + 31_000) == .committed(previousCounter: 0))
    // The window is over at t0 + 61 s: the same challenge now registers.
    #expect(try store.registerNow(a, challenge: held.token, now: t0 + 61_000) == .registered(existing: true))
    #expect(try store.key(a.keyID)?.counter == 1)

    // Another app id than the one the key is registered to: refused, nothing changes.
    var stolen = a
    stolen.appID = "TEAM999999.com.example.other"
    let conflict = try store.issue(.register, key: a.keyID, now: t0 + 62_000)
    #expect(
        try store.registerNow(stolen, challenge: conflict.token, now: t0 + 62_000)
            == .appConflict(registeredAppID: a.appID))
    #expect(try store.key(a.keyID)?.appID == a.appID)
    #expect(try store.state(conflict.token, now: t0 + 62_000) == .valid(purpose: .register, keyID: a.keyID, expiresAtMillis: t0 + 122_000))

    // The cap: 3 keys. A fourth is refused; the known keys still register and commit.
    let b = makeRecord(&rng, seen: t0)
    let c = makeRecord(&rng, seen: t0)
    #expect(try fresh(b, at: t0 + 62_000) == .registered(existing: false))
    #expect(try fresh(c, at: t0 + 62_000) == .registered(existing: false))
    try beforeCap()
    let d = makeRecord(&rng, seen: t0)
    let refused = try store.issue(.register, key: d.keyID, now: t0 + 62_000)
    #expect(try store.registerNow(d, challenge: refused.token, now: t0 + 62_000) == .keyCapacity(maxKeys: 3))
    #expect(try store.key(d.keyID) == nil)
    #expect(try store.state(refused.token, now: t0 + 62_000) == .valid(purpose: .register, keyID: d.keyID, expiresAtMillis: t0 + 122_000))
    #expect(try fresh(b, at: t0 + 63_000) == .registered(existing: true))
    #expect(try store.commit(c.keyID, counter: 1, challenge: nil, now: t0 + 63_000) == .committed(previousCounter: 0))
    #expect(try store.commit(a.keyID, counter: 2, challenge: nil, now: t0 + 63_000) == .committed(previousCounter: 1))
}

/// `CounterWindow.gaps` with the counters `open` set, below `highest`.
public func openBits(_ highest: UInt32, _ open: [UInt32]) -> UInt64 {
    open.reduce(UInt64(0)) { $0 | 1 << UInt64(highest - 1 - $1) }
}

/// The counter window (issue 16 §2), on any store, with key-bound challenges only (Redis Cluster
/// takes no other): the window's edge, each counter accepted once, jumps ahead shifting the
/// bitmap, a width of 64, a key used on routes with and without a window, the challenge rule
/// unchanged, refusals changing nothing, and a re-registration closing the window.
public func checkCounterWindow(_ store: any AttestStore, rng: inout SeededRandom, t0: Int64) throws {
    let record = makeRecord(&rng, seen: t0)
    let id = record.keyID
    let reg = try store.issue(.register, key: id, now: t0)
    #expect(try store.registerNow(record, challenge: reg.token, now: t0) == .registered(existing: false))
    func commit(_ c: UInt32, _ width: Int, _ challenge: ChallengeToken? = nil) throws -> CommitOutcome {
        try store.commit(id, counter: c, challenge: challenge, window: width, now: t0)
    }
    // The attestation's counter (0) is never accepted, not even by a window.
    #expect(try commit(0, 64) == .counterReplay(stored: 0))
    // A jump ahead opens the counters it skipped (1…9).
    #expect(try commit(10, 8) == .committed(previousCounter: 0))
    // The edge of a window of 8 at 10: 10 − 8 = 2 refused, 10 − 8 + 1 = 3 accepted, once.
    #expect(try commit(2, 8) == .counterReplay(stored: 10, open: openBits(10, Array(3...9))))
    #expect(try commit(3, 8) == .committed(previousCounter: 10))
    #expect(try commit(3, 8) == .counterReplay(stored: 10, open: openBits(10, Array(4...9))))
    #expect(try commit(10, 8) == .counterReplay(stored: 10, open: openBits(10, Array(4...9))))
    // A route without a window accepts only counters above the highest; its refusals name no open counter.
    #expect(try commit(5, 0) == .counterReplay(stored: 10))
    #expect(try commit(5, 1) == .counterReplay(stored: 10))
    // ... and its jumps open counters for the windowed routes (a key used on both: they accept the gaps).
    #expect(try commit(12, 0) == .committed(previousCounter: 10))
    #expect(try commit(11, 2) == .committed(previousCounter: 12))
    // The jump shifted the bitmap: 3 stays accepted, 1, 2 and 4…9 stay open (1 and 2 were below the
    // window of 8, not below the bitmap); at 12 a window of 8 reaches 5.
    #expect(try commit(3, 16) == .counterReplay(stored: 12, open: openBits(12, [1, 2] + Array(4...9))))
    #expect(try commit(4, 8) == .counterReplay(stored: 12, open: openBits(12, Array(5...9))))
    #expect(try commit(9, 8) == .committed(previousCounter: 12))
    #expect(try commit(4, 16) == .committed(previousCounter: 12))

    // The challenge rule is unchanged: a refused challenge leaves the open counter open and the
    // challenge unconsumed; the accepted one consumes its challenge with the counter.
    let other = makeRecord(&rng, seen: t0)
    let otherReg = try store.issue(.register, key: other.keyID, now: t0)
    #expect(try store.registerNow(other, challenge: otherReg.token, now: t0) == .registered(existing: false))
    let forOther = try store.issue(.assert, key: other.keyID, now: t0)
    #expect(try commit(8, 8, forOther.token) == .challengeRejected(.wrongKey))
    let mine = try store.issue(.assert, key: id, now: t0)
    #expect(try commit(8, 8, mine.token) == .committed(previousCounter: 12))
    #expect(try commit(7, 8, mine.token) == .challengeRejected(.consumed))
    #expect(try store.state(mine.token, now: t0) == .consumed)
    #expect(try commit(8, 8) == .counterReplay(stored: 12, open: openBits(12, [5, 6, 7])))
    // A counter refused for the window leaves the challenge as it was.
    let fresh = try store.issue(.assert, key: id, now: t0)
    #expect(try commit(8, 8, fresh.token) == .counterReplay(stored: 12, open: openBits(12, [5, 6, 7])))
    #expect(try store.state(fresh.token, now: t0) == .valid(purpose: .assert, keyID: id, expiresAtMillis: t0 + 60_000))
    #expect(try store.key(id)?.counter == 12)

    // Width 64 at the top of the range: a jump of 64 skips 63 counters, all open; H − 64 refused,
    // H − 63 accepted once; a jump of more than 63 forgets everything below.
    #expect(try commit(76, 64, fresh.token) == .committed(previousCounter: 12))
    #expect(try commit(12, 64) == .counterReplay(stored: 76, open: openBits(76, Array(13...75))))
    #expect(try commit(13, 64) == .committed(previousCounter: 76))
    #expect(try commit(13, 64) == .counterReplay(stored: 76, open: openBits(76, Array(14...75))))
    #expect(try commit(14, 62) == .counterReplay(stored: 76, open: openBits(76, Array(15...75))))
    #expect(try commit(14, 63) == .committed(previousCounter: 76))
    #expect(try commit(75, 64) == .committed(previousCounter: 76))
    #expect(try commit(200, 64) == .committed(previousCounter: 76))
    #expect(try commit(100, 64) == .counterReplay(stored: 200, open: openBits(200, Array(137...199))))
    #expect(try commit(136, 64) == .counterReplay(stored: 200, open: openBits(200, Array(137...199))))
    #expect(try commit(137, 64) == .committed(previousCounter: 200))

    // A re-registration of the key closes its window: every counter up to the highest is closed.
    let again = try store.issue(.register, key: id, now: t0 + 1_000)
    #expect(try store.registerNow(record, challenge: again.token, now: t0 + 1_000) == .registered(existing: true))
    #expect(try store.key(id)?.counter == 200)
    #expect(try commit(199, 64) == .counterReplay(stored: 200))
    #expect(try commit(202, 64) == .committed(previousCounter: 200))
    #expect(try commit(201, 64) == .committed(previousCounter: 202))
    #expect(try commit(199, 64) == .counterReplay(stored: 202))
}
