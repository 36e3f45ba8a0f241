import AppAttest
import GatewayStore

/// What the app should do after a refusal, sent as `"action"` so that a client knows whether to
/// fetch a new challenge, attest a new key, or give up.
public enum ClientAction: String, Sendable {
    /// Fetch a new challenge and sign again.
    case rechallenge
    /// Generate and attest a new key (the gateway does not know this one, or no longer accepts it).
    case reattest
    /// Nothing the app can do by retrying (tampering, replay, a disallowed app or version).
    case none
    /// Send the same request again after `Retry-After` seconds, plus random jitter.
    case retryLater = "retry_later"
}

/// Where a refusal is answered: the App Attest endpoints (challenge, register), or a protected route.
public enum RefusalSurface: String, Sendable, CaseIterable {
    case endpoint
    case route
}

/// Every reason the gateway refuses a registration or a protected request: a stable code (JSON
/// `error`, metric `reason`, log and `explain`), an HTTP status and a client action.
public enum GateError: String, Sendable, CaseIterable, Error {
    // The request itself.
    case assertionMissing = "assertion_missing"
    case malformed
    case badJSON = "bad_json"
    case missingField = "missing_field"
    case methodNotAllowed = "method_not_allowed"
    /// The challenge endpoint on a Redis Cluster store: the request must name the key (`keyId`).
    case keyIDRequired = "key_id_required"
    // Keys and apps.
    case keyUnknown = "key_unknown"
    case appNotAllowed = "app_not_allowed"
    case environmentNotAllowed = "environment_not_allowed"
    case validationCategoryNotAllowed = "validation_category_not_allowed"
    case bundleVersionTooOld = "bundle_version_too_old"
    /// `apps[].require_macos_security`: the key's credential certificate does not carry macOS 27's
    /// key access-control policy (Full Security mode and System Integrity Protection).
    case macOSSecurityRequired = "macos_security_required"
    /// Registration: the attestation's receipt failed Apple's receipt checks (`apps[].receipts: verify`);
    /// which one is in `explain` (`reason`, `detail`).
    case receiptInvalid = "receipt_invalid"
    // Challenges.
    case challengeMissing = "challenge_missing"
    case challengeUnknown = "challenge_unknown"
    case challengeExpired = "challenge_expired"
    case challengeConsumed = "challenge_consumed"
    case challengeWrongPurpose = "challenge_wrong_purpose"
    case challengeWrongKey = "challenge_wrong_key"
    /// `bind: body` with a challenge: the signed body does not contain the challenge it presents.
    case challengeNotBound = "challenge_not_bound"
    // Apple's algorithm (AppAttestError codes, same spelling).
    case unsupportedFormat = "unsupported_format"
    case chainUntrusted = "chain_untrusted"
    case certificateExpired = "certificate_expired"
    case certificateNotYetValid = "certificate_not_yet_valid"
    case nonceMismatch = "nonce_mismatch"
    case keyIDMismatch = "key_id_mismatch"
    case publicKeyMismatch = "public_key_mismatch"
    case appIDMismatch = "app_id_mismatch"
    case counterNotZero = "counter_not_zero"
    case environmentMismatch = "environment_mismatch"
    case credentialIDMismatch = "credential_id_mismatch"
    case badSignature = "bad_signature"
    case counterReplay = "counter_replay"
    case invalidPublicKey = "invalid_public_key"
    // The store.
    case storeUnavailable = "store_unavailable"
    case challengeCapacity = "challenge_capacity"
    // Admission (`attest.challenge_rate`, `attest.registration_rate`).
    case rateLimited = "rate_limited"
    // Registration bounds (issue 19: receipts and keys are bounded).
    /// The attestation's `attStmt.receipt` is larger than `limits.max_receipt` (real ones are ≈ 4 KB).
    case receiptTooLarge = "receipt_too_large"
    /// The key id is registered to another app id.
    case keyAppConflict = "key_app_conflict"
    /// The key was re-registered `store.max_reregistrations` times in its window (`Retry-After`).
    case reregistrationLimited = "reregistration_limited"
    /// The store holds `store.max_keys` keys: a new key is refused (`Retry-After`); known keys work.
    case keyCapacity = "key_capacity"

    public var code: String { rawValue }

    public var status: Int {
        switch self {
        case .malformed, .badJSON, .missingField, .keyIDRequired: 400
        case .methodNotAllowed: 405
        case .appNotAllowed, .environmentNotAllowed, .validationCategoryNotAllowed, .bundleVersionTooOld, .macOSSecurityRequired: 403
        case .storeUnavailable, .challengeCapacity, .keyCapacity: 503
        case .rateLimited, .reregistrationLimited: 429
        case .receiptTooLarge: 413
        case .keyAppConflict: 409
        default: 401
        }
    }

    /// On a protected route every refusal is 401 (403 for a disallowed app or environment, 503 for
    /// the store): a malformed assertion is an authentication failure there, not a bad request.
    public var routeStatus: Int { status == 400 ? 401 : status }

    /// The status of a refusal answered on `surface` (docs/client-contract.md, "Error codes"): what
    /// the client is sent and what `explain` records.
    public func status(on surface: RefusalSurface) -> Int {
        switch surface {
        case .endpoint: status
        case .route: routeStatus
        }
    }

    public var action: ClientAction {
        switch self {
        case .assertionMissing, .challengeMissing, .challengeUnknown, .challengeExpired, .challengeConsumed,
            .challengeWrongPurpose, .challengeWrongKey:
            .rechallenge
        case .keyUnknown, .environmentNotAllowed, .invalidPublicKey, .certificateExpired, .certificateNotYetValid,
            .keyAppConflict:
            .reattest
        case .rateLimited:
            .retryLater
        default:
            .none
        }
    }

    public init(_ error: AppAttestError) {
        self = GateError(rawValue: error.code.rawValue) ?? .malformed
    }

    public init(_ rejection: ChallengeRejection) {
        switch rejection {
        case .unknown: self = .challengeUnknown
        case .expired: self = .challengeExpired
        case .consumed: self = .challengeConsumed
        case .wrongPurpose: self = .challengeWrongPurpose
        case .wrongKey: self = .challengeWrongKey
        }
    }

    public init(_ error: StoreError) {
        switch error.code {
        case .unavailable: self = .storeUnavailable
        case .challengeCapacity: self = .challengeCapacity
        }
    }
}
