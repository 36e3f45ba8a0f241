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
}

/// SHA-256 of a device public key: exactly 32 bytes.
public struct KeyID: Hashable, Sendable, CustomStringConvertible {
    public let bytes: [UInt8]

    public init?(_ bytes: [UInt8]) {
        guard bytes.count == 32 else { return nil }
        self.bytes = bytes
    }

    /// Standard base64 with padding (how Apple's APIs print key ids).
    public var description: String { Base64.encode(bytes) }

    /// The 32 bytes in one call (the synthesized hash feeds them to the hasher one at a time).
    public func hash(into hasher: inout Hasher) { bytes.withUnsafeBytes { hasher.combine(bytes: $0) } }
}

/// A challenge's bytes as issued (at least 16). Clients send them back base64url-encoded.
public struct ChallengeToken: Hashable, Sendable {
    public let bytes: [UInt8]

    public init?(_ bytes: [UInt8]) {
        guard (16...64).contains(bytes.count) else { return nil }
        self.bytes = bytes
    }

    /// The bytes and their count in two calls (the synthesized hash feeds them one at a time).
    public func hash(into hasher: inout Hasher) {
        hasher.combine(bytes.count)
        bytes.withUnsafeBytes { hasher.combine(bytes: $0) }
    }
}

public enum ChallengePurpose: String, Sendable, CaseIterable {
    case register
    case assert
}

public struct ChallengeRequest: Sendable, Equatable {
    /// nil: usable for either purpose.
    public var purpose: ChallengePurpose?
    /// nil: usable with any key.
    public var keyID: KeyID?
    public var ttlMillis: Int64
    /// Issued with the response to a verified assertion of `keyID` (`X-App-Attest-Next-Challenge`),
    /// not asked for at the challenge endpoint, where anyone can name any key. The memory store
    /// replaces such challenges last when a key reaches its per-key limit (docs/store.md).
    public var chained: Bool

    public init(purpose: ChallengePurpose?, keyID: KeyID?, ttlMillis: Int64, chained: Bool = false) {
        self.purpose = purpose
        self.keyID = keyID
        self.ttlMillis = ttlMillis
        self.chained = chained
    }
}

public struct IssuedChallenge: Sendable, Equatable {
    public let token: ChallengeToken
    public let expiresAtMillis: Int64

    public init(token: ChallengeToken, expiresAtMillis: Int64) {
        self.token = token
        self.expiresAtMillis = expiresAtMillis
    }
}

public enum ChallengeState: Sendable, Equatable {
    /// How long an expired challenge is still known as `.expired` before it is removed (then
    /// `.unknown`), in both stores: a client that used it late learns `challenge_expired` whatever
    /// moment the memory store's sweep ran or Redis expired the key (docs/client-contract.md).
    public static let expiredGraceMillis: Int64 = 10_000

    /// Never issued, removed `expiredGraceMillis` after expiry, or retired by a restart after an unclean stop.
    case unknown
    case expired(expiresAtMillis: Int64)
    case consumed
    case valid(purpose: ChallengePurpose?, keyID: KeyID?, expiresAtMillis: Int64)
}

/// Apple's attestation environment (the aaguid).
public enum KeyEnvironment: UInt8, Sendable, CaseIterable {
    case development = 0
    case production = 1

    public var name: String { self == .development ? "development" : "production" }
}

/// A registered device key. The receipt is kept by the store but not carried here (it is read
/// rarely, and at a million keys it would dominate memory).
public struct DeviceKeyRecord: Sendable, Equatable {
    public var keyID: KeyID
    /// Uncompressed X9.62 point, 65 bytes.
    public var publicKey: [UInt8]
    /// The highest accepted counter (0 right after attestation).
    public var counter: UInt32
    /// `TEAMID.bundle.id`.
    public var appID: String
    public var environment: KeyEnvironment
    /// iOS 27 `apple_validation_category_01`, raw value, when the attestation carried one.
    public var validationCategory: UInt32?
    /// iOS 27 `apple_bundle_version_01`, when the attestation carried one.
    public var bundleVersion: String?
    public var firstSeenMillis: Int64
    public var lastSeenMillis: Int64
    /// The key's receipt dates and Apple's risk metric (`KeyRisk`); nil when no verified receipt
    /// was stored with it (`apps[].receipts: ignore`, or a key registered before receipts were dated).
    public var risk: KeyRisk?

    public init(
        keyID: KeyID, publicKey: [UInt8], counter: UInt32, appID: String, environment: KeyEnvironment,
        validationCategory: UInt32?, bundleVersion: String?, firstSeenMillis: Int64, lastSeenMillis: Int64,
        risk: KeyRisk? = nil
    ) {
        self.keyID = keyID
        self.publicKey = publicKey
        self.counter = counter
        self.appID = appID
        self.environment = environment
        self.validationCategory = validationCategory
        self.bundleVersion = bundleVersion
        self.firstSeenMillis = firstSeenMillis
        self.lastSeenMillis = lastSeenMillis
        self.risk = risk
    }
}

/// `record.risk`, when given, holds the verified `ATTEST` receipt's dates and the first refresh of
/// the risk metric (`nextRefreshMillis`); its metric is ignored: a key registered again keeps the
/// metric it had (the store clears only `stale`).
public struct Registration: Sendable, Equatable {
    public var record: DeviceKeyRecord
    public var receipt: [UInt8]
    public var challenge: ChallengeToken

    public init(record: DeviceKeyRecord, receipt: [UInt8], challenge: ChallengeToken) {
        self.record = record
        self.receipt = receipt
        self.challenge = challenge
    }
}

public enum RegistrationOutcome: Sendable, Equatable {
    /// Stored and durable. `existing`: the key had been registered before (its counter kept).
    case registered(existing: Bool)
    case challengeRejected(ChallengeRejection)
    /// The key id is registered to another app id (`registeredAppID`); nothing changed.
    case appConflict(registeredAppID: String)
    /// The key was re-registered `KeyLimits.maxReregistrations` times in its current window;
    /// nothing changed. The window ends in `retryAfterMillis`.
    case reregistrationLimited(retryAfterMillis: Int64)
    /// A new key, and the store holds `KeyLimits.maxKeys` keys already; nothing changed. Keys
    /// registered before keep working and may re-register.
    case keyCapacity(maxKeys: Int)
}

/// What bounds the keys of a store (config `store.max_keys`, `store.max_reregistrations`,
/// `store.reregistration_window`, `store.key_idle_ttl`). Checked inside the registration's atomic
/// step, after the challenge: a refusal changes nothing (the challenge stays unconsumed).
public struct KeyLimits: Sendable, Equatable {
    /// Registered keys the store accepts; a new key beyond it is refused (`.keyCapacity`).
    public var maxKeys: Int
    /// Registrations of a key already registered, per window (1 to 255).
    public var maxReregistrations: Int
    /// The re-registration window: it starts with a key's first re-registration after the previous
    /// window ended (the memory store keeps it with one-second resolution).
    public var reregistrationWindowMillis: Int64
    /// Keys whose last registration or accepted assertion is this old are removed by
    /// `MemoryAttestStore.sweepIdleKeys` (journaled). nil: never (the default).
    public var keyIdleTTLMillis: Int64?

    public init(
        maxKeys: Int = KeyLimits.defaultMaxKeys, maxReregistrations: Int = 3,
        reregistrationWindowMillis: Int64 = 3_600_000, keyIdleTTLMillis: Int64? = nil
    ) {
        self.maxKeys = max(0, maxKeys)
        self.maxReregistrations = min(255, max(1, maxReregistrations))
        self.reregistrationWindowMillis = max(1_000, reregistrationWindowMillis)
        self.keyIdleTTLMillis = keyIdleTTLMillis.map { max(1_000, $0) }
    }

    /// The memory the default key cap is derived from: 1 GiB.
    public static let defaultMemoryBudget = 1 << 30
    /// What one key costs the memory store, rounded up from the measured 185.6 B per key at
    /// 1,000,000 keys with the 168-byte record (`bench/key-memory`; receipts are on disk or, without
    /// a data directory, not kept).
    public static let memoryBytesPerKey = 192
    /// `defaultMemoryBudget / memoryBytesPerKey` = 5,592,405 keys.
    public static let defaultMaxKeys = defaultMemoryBudget / memoryBytesPerKey

    /// What a key costs Redis besides its receipt: `MEMORY USAGE` of a key record is 928 B with a
    /// 1-byte receipt (a hash in `hashtable` encoding: the 65-byte point is over
    /// `hash-max-listpack-value`), plus its entry in the keyspace; rounded up.
    public static let redisBytesPerKeyWithoutReceipt = 1_280
    /// What a key costs Redis with a receipt of `receipt` bytes: the allocator rounds the
    /// receipt up by less than a quarter (jemalloc size classes); measured 21,400 B at 16 KiB.
    /// Operators size `store.max_keys` with it: what their `maxmemory` holds (docs/redis.md).
    public static func redisBytesPerKey(receipt: Int) -> Int {
        redisBytesPerKeyWithoutReceipt + max(0, receipt) * 5 / 4
    }
    /// The size Apple's attestation receipts have (3.6–4.0 KB), rounded up.
    public static let typicalReceiptBytes = 4_096
    /// The Redis memory the Redis store's default cap is derived from: 64 GiB. Larger than the
    /// memory store's budget on purpose: a fleet that upgrades without setting `store.max_keys`
    /// must not find registrations refused at a cap below what its Redis already holds; the cap
    /// that matters is `maxmemory`, which the operator sizes (and then sets `max_keys` from).
    public static let defaultRedisMemoryBudget = 64 << 30
    /// The Redis store's default cap: `defaultRedisMemoryBudget` over what a key with a real-size
    /// receipt costs Redis (1,280 B + 1.25 × 4,096 B = 6,400 B): 10,737,418 keys. It does not
    /// depend on `limits.max_receipt` (which bounds each receipt, not the fleet).
    public static let defaultRedisMaxKeys = defaultRedisMemoryBudget / redisBytesPerKey(receipt: typicalReceiptBytes)
}

public struct AssertionCommit: Sendable, Equatable {
    public var keyID: KeyID
    public var counter: UInt32
    /// nil on routes whose challenge policy lets a request go without one.
    public var challenge: ChallengeToken?
    /// The route's `assertion.counter_window` (1…64), or 0 without one: a counter below the stored
    /// one is accepted if it is above the stored one minus this and has never been accepted
    /// (`CounterWindow`).
    public var counterWindow: Int

    public init(keyID: KeyID, counter: UInt32, challenge: ChallengeToken?, counterWindow: Int = 0) {
        self.keyID = keyID
        self.counter = counter
        self.challenge = challenge
        self.counterWindow = counterWindow
    }
}

public enum CommitOutcome: Sendable, Equatable {
    /// `previousCounter`: the highest accepted counter before (unchanged when an open counter of the
    /// window was accepted).
    case committed(previousCounter: UInt32)
    case unknownKey
    /// `counter` was not strictly greater than `stored` (the highest accepted counter) and, with a
    /// counter window, not one of the open counters it still accepted: `open` (bit i: counter
    /// `stored − 1 − i`; `CounterWindow.open(width:)` of the commit's window, 0 without one).
    case counterReplay(stored: UInt32, open: UInt64 = 0)
    case challengeRejected(ChallengeRejection)
}

public enum ChallengeRejection: String, Sendable, Equatable, CaseIterable {
    case unknown = "challenge_unknown"
    case expired = "challenge_expired"
    case consumed = "challenge_consumed"
    /// Issued for the other purpose.
    case wrongPurpose = "challenge_wrong_purpose"
    /// Issued for another key.
    case wrongKey = "challenge_wrong_key"
}

public struct StoreError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Code: String, Sendable {
        /// The store cannot be reached or cannot write (disk full, Redis down).
        case unavailable = "store_unavailable"
        /// Too many live challenges; try later. (The memory store no longer answers it: when a
        /// challenge budget is full it replaces the oldest challenge instead, docs/store.md.)
        case challengeCapacity = "challenge_capacity"
    }

    public let code: Code
    public let detail: String

    public init(_ code: Code, _ detail: String) {
        self.code = code
        self.detail = detail
    }

    public var description: String { "\(code.rawValue): \(detail)" }
}

public struct StoreStatistics: Sendable, Equatable {
    public var keys: Int
    public var liveChallenges: Int

    public init(keys: Int, liveChallenges: Int) {
        self.keys = keys
        self.liveChallenges = liveChallenges
    }
}

// MARK: - The protected request's store calls (one round trip on a network store)

/// What the assertion gate decided on of a key record besides its public key: a store that answers
/// `assertionKey` from a cache commits only while these are still the key's (else `.keyChanged`).
public struct CheckedKey: Sendable, Equatable {
    public var appID: String
    public var environment: KeyEnvironment
    public var validationCategory: UInt32?
    public var bundleVersion: String?

    public init(_ record: DeviceKeyRecord) {
        appID = record.appID
        environment = record.environment
        validationCategory = record.validationCategory
        bundleVersion = record.bundleVersion
    }
}

/// The outcome of `commitAssertion(_:checked:issuing:…)`.
public struct CommitAndNext: Sendable, Equatable {
    public var outcome: CommitOutcome
    /// The next challenge, when one was asked for, the commit went through and it could be issued.
    public var next: IssuedChallenge?
    /// The key's record as the commit left it, when the store read it in the same step (its counter,
    /// receipt risk); nil: the record the gate read stands.
    public var current: DeviceKeyRecord?
    /// The key's policy fields were no longer those `checked` named: nothing changed; the gate reads
    /// the key again and decides afresh.
    public var keyChanged: Bool

    public init(outcome: CommitOutcome, next: IssuedChallenge? = nil, current: DeviceKeyRecord? = nil, keyChanged: Bool = false) {
        self.outcome = outcome
        self.next = next
        self.current = current
        self.keyChanged = keyChanged
    }
}

extension AttestStore {
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
