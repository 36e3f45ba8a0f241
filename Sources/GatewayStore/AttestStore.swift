import GatewayWire

/// The state the assertion gateway keeps: attested device keys and one-time challenges.
///
/// Every operation answers through a completion, so that a store on a network engine (Redis) can
/// plug in behind the same calls; the memory store answers inline except where it must wait for
/// durability (a registration is answered only once its journal record is on disk).
///
/// Completions may run on any thread. Times are Unix milliseconds passed in by the caller (no
/// clock is read inside a decision, so tests control time).
public protocol AttestStore: AnyObject, Sendable {
    /// Issues a fresh challenge (at least 16 random bytes) bound to `request`'s purpose and key.
    func issueChallenge(
        _ request: ChallengeRequest, nowMillis: Int64,
        completion: @escaping @Sendable (Result<IssuedChallenge, StoreError>) -> Void)

    /// What the store knows of a challenge, without changing it (pre-checks and `explain`).
    func challengeState(
        _ token: ChallengeToken, nowMillis: Int64,
        completion: @escaping @Sendable (Result<ChallengeState, StoreError>) -> Void)

    /// The registered key, or nil.
    func deviceKey(_ id: KeyID, completion: @escaping @Sendable (Result<DeviceKeyRecord?, StoreError>) -> Void)

    /// One atomic step: the challenge is checked (known, unexpired, unconsumed, purpose `register`
    /// or unbound, bound key nil or `registration.record.keyID`) and consumed, and the key stored.
    /// A key registered already keeps the higher of the two counters (a registration never rolls a
    /// counter back) and its first-seen time. Completes after the record is durable. The store's
    /// `KeyLimits` are checked in the same step, after the challenge: a key registered to another
    /// app id (`.appConflict`), a re-registration beyond the key's window (`.reregistrationLimited`)
    /// and a new key at the cap (`.keyCapacity`) change nothing.
    func register(
        _ registration: Registration, nowMillis: Int64,
        completion: @escaping @Sendable (Result<RegistrationOutcome, StoreError>) -> Void)

    /// One atomic step, taken only after every other check passed: the key must exist, `counter`
    /// must be strictly greater than the stored one (with `commit.counterWindow` N > 1: or an open
    /// counter of the key's `CounterWindow` above the stored one minus N, never accepted before),
    /// and the challenge (when given) must be known, unexpired, unconsumed, purpose `assert` or
    /// unbound, bound to this key or to none. Then the challenge is consumed and the counter window
    /// advanced together; otherwise nothing changes. Two parallel commits with the same challenge or
    /// the same counter give exactly one `.committed`.
    func commitAssertion(
        _ commit: AssertionCommit, nowMillis: Int64,
        completion: @escaping @Sendable (Result<CommitOutcome, StoreError>) -> Void)

    /// The DeviceCheck fallback's replay cache (docs/verification.md, "Devices without App Attest"):
    /// claims the device token whose SHA-256 is `digest` (32 bytes) for `ttlMillis` from
    /// `nowMillis`, in one atomic step across every gateway on the store. `.claimed` once per token
    /// per ttl, `.alreadyClaimed` while a claim lives (a replay), `.capacity` when the memory store's
    /// bound is reached (nothing changed). A claim survives what the store's other state survives:
    /// a restart with a data directory (journaled like a counter advance, in snapshots), Redis.
    func claimToken(
        _ digest: [UInt8], ttlMillis: Int64, nowMillis: Int64,
        completion: @escaping @Sendable (Result<TokenClaimOutcome, StoreError>) -> Void)

    /// Gives a claimed token back (DeviceCheck could not judge it: the device may send it again).
    func releaseToken(_ digest: [UInt8], completion: @escaping @Sendable (Result<Void, StoreError>) -> Void)

    /// Sizes for metrics and readiness.
    var statistics: StoreStatistics { get }
    /// The key as the assertion gate reads it (default: `deviceKey`; see the extension below).
    func assertionKey(_ id: KeyID, completion: @escaping @Sendable (Result<DeviceKeyRecord?, StoreError>) -> Void)
    /// The gate's commit and next challenge together (default: `commitAssertion`, then
    /// `issueChallenge`; see the extension below).
    func commitAssertion(
        _ commit: AssertionCommit, checked: CheckedKey?, issuing next: ChallengeRequest?, nowMillis: Int64,
        completion: @escaping @Sendable (Result<CommitAndNext, StoreError>) -> Void)

    /// `assertionKey` answered on the caller's thread, or nil when this store answers only through
    /// the completion (default: nil). A store that answers inline anyway (the memory store) saves
    /// the gate the completion, its boxes and the hop back to the loop on every protected request.
    func assertionKeyNow(_ id: KeyID) -> Result<DeviceKeyRecord?, StoreError>?

    /// `commitAssertion(_:checked:issuing:nowMillis:completion:)` answered on the caller's thread,
    /// with the same guarantees, or nil when this store answers only through the completion
    /// (default: nil; then nothing was done and the caller uses the completion form).
    func commitAssertionNow(_ commit: AssertionCommit, checked: CheckedKey?, issuing next: ChallengeRequest?, nowMillis: Int64)
        -> Result<CommitAndNext, StoreError>?
}

extension AttestStore {
    public func assertionKeyNow(_ id: KeyID) -> Result<DeviceKeyRecord?, StoreError>? { nil }

    public func commitAssertionNow(
        _ commit: AssertionCommit, checked: CheckedKey?, issuing next: ChallengeRequest?, nowMillis: Int64
    ) -> Result<CommitAndNext, StoreError>? { nil }

    /// The key as the assertion gate needs it. A store may answer from a cache of what it read or
    /// committed before (public keys never change for a key id; the counter, the policy fields and
    /// the risk are checked or returned again by the commit): the Redis store does, so that a key's
    /// requests after its first cost one round trip. By default: `deviceKey`.
    public func assertionKey(_ id: KeyID, completion: @escaping @Sendable (Result<DeviceKeyRecord?, StoreError>) -> Void) {
        deviceKey(id, completion: completion)
    }

    /// The gate's commit and, when it is `.committed` and `next` is given, the next challenge, in as
    /// few steps as the store can: by default `commitAssertion` then `issueChallenge` (a next challenge
    /// that cannot be issued is nil; the commit stands). `checked`: the policy fields the gate decided
    /// on, for a store that answered `assertionKey` from a cache (ignored by the default).
    public func commitAssertion(
        _ commit: AssertionCommit, checked: CheckedKey?, issuing next: ChallengeRequest?, nowMillis: Int64,
        completion: @escaping @Sendable (Result<CommitAndNext, StoreError>) -> Void
    ) {
        commitAssertion(commit, nowMillis: nowMillis) { [self] result in
            switch result {
            case .failure(let e):
                completion(.failure(e))
            case .success(let outcome):
                guard case .committed = outcome, let next else { return completion(.success(CommitAndNext(outcome: outcome))) }
                issueChallenge(next, nowMillis: nowMillis) { issued in
                    completion(.success(CommitAndNext(outcome: outcome, next: try? issued.get())))
                }
            }
        }
    }
}
