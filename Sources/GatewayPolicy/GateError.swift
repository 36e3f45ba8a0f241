import AndroidAttest
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
/// `error`, metric `reason`, log and `explain`), an HTTP status and a client action, in one table
/// (`entry`). Apple's algorithm's own codes are the verifier's (`AppAttestError.Code`), wrapped in
/// `verification`, not copied: a code added there gets a row here by the compiler's exhaustiveness
/// check. docs/errors.md lists every code (`ErrorsDocTests` holds it to `allCases`).
public enum GateError: Hashable, Sendable, Error, CaseIterable, RawRepresentable, CustomStringConvertible {
    // The request itself.
    case assertionMissing
    case badJSON
    case missingField
    case methodNotAllowed
    /// The challenge endpoint on a Redis Cluster store: the request must name the key (`keyId`).
    case keyIDRequired
    // Keys and apps.
    case keyUnknown
    case appNotAllowed
    case environmentNotAllowed
    case validationCategoryNotAllowed
    case bundleVersionTooOld
    /// `apps[].require_macos_security`: the key's credential certificate does not carry macOS 27's
    /// key access-control policy (Full Security mode and System Integrity Protection).
    case macOSSecurityRequired
    /// Registration: the attestation's receipt failed Apple's receipt checks (`apps[].receipts: verify`);
    /// which one is in `explain` (`reason`, `detail`).
    case receiptInvalid
    // Challenges.
    case challengeMissing
    case challengeUnknown
    case challengeExpired
    case challengeConsumed
    case challengeWrongPurpose
    case challengeWrongKey
    /// `bind: body` with a challenge: the signed body does not contain the challenge it presents.
    case challengeNotBound
    /// Apple's algorithm failed a step: the verifier's code, its spelling (`malformed`,
    /// `bad_signature`, `counter_replay`, `chain_untrusted`, …).
    case verification(AppAttestError.Code)
    // The store.
    case storeUnavailable
    case challengeCapacity
    // Admission (`attest.challenge_rate`, `attest.registration_rate`).
    case rateLimited
    // Registration bounds (issue 19: receipts and keys are bounded).
    /// The attestation's `attStmt.receipt` is larger than `limits.max_receipt` (real ones are ≈ 4 KB).
    case receiptTooLarge
    /// The key id is registered to another app id.
    case keyAppConflict
    /// The key was re-registered `store.max_reregistrations` times in its window (`Retry-After`).
    case reregistrationLimited
    /// The store holds `store.max_keys` keys: a new key is refused (`Retry-After`); known keys work.
    case keyCapacity
    // Apple's fraud assessment (issue 13).
    /// A protected route with `max_risk_metric` and `on_risk: refuse`: the key's latest risk metric
    /// (Apple's data service) is above it. The assertion itself verified.
    case riskMetricExceeded
    // The DeviceCheck fallback (issue 14).
    /// Apple's DeviceCheck refused the `X-Apple-Device-Token` (not a token of a genuine device of
    /// the team's apps), or it is not base64 of a plausible size.
    case deviceTokenInvalid
    /// The `X-Apple-Device-Token` was already presented within the route's `token_ttl`.
    case deviceTokenReplayed
    /// The route's share of fallback requests over its `window` is above `max_share`.
    case fallbackShareExceeded
    /// DeviceCheck could not answer (unreachable, `429`, `5xx`, or refused the gateway's own token or
    /// clock): a fallback request is treated as when the store cannot answer (`on_store_error`).
    case deviceCheckUnavailable
    // Budgets per attested key (issue 27).
    /// The assertion verified, but its key is over the route's `assertion.key_rate`: nothing was
    /// consumed; the same request passes after `Retry-After` seconds.
    case keyRateLimited
    // Keys per account (issue 27).
    /// A protected route with `max_keys_per_account` and `on_keys: refuse`: the account the upstream
    /// named for the key has more distinct keys within the window. The assertion itself verified.
    case accountKeyLimit
    /// An Android attestation's verdict or the app's Android policy refused it (docs/android.md),
    /// for the codes App Attest has no equal of (`init(_: AndroidAttestError)` maps the others onto
    /// `verification`: one code means one thing on both platforms).
    case android(AndroidAttestError.Code)

    /// Bad encoding anywhere: the gate's own reading of headers and bodies fails with the verifier's
    /// `malformed`, so that one code means one thing.
    public static let malformed = GateError.verification(.malformed)

    /// The table: code, status (on the endpoints; `routeStatus` on protected routes), action.
    private var entry: (code: String, status: Int, action: ClientAction) {
        switch self {
        case .assertionMissing: ("assertion_missing", 401, .rechallenge)
        case .badJSON: ("bad_json", 400, .none)
        case .missingField: ("missing_field", 400, .none)
        case .methodNotAllowed: ("method_not_allowed", 405, .none)
        case .keyIDRequired: ("key_id_required", 400, .none)
        case .keyUnknown: ("key_unknown", 401, .reattest)
        case .appNotAllowed: ("app_not_allowed", 403, .none)
        case .environmentNotAllowed: ("environment_not_allowed", 403, .reattest)
        case .validationCategoryNotAllowed: ("validation_category_not_allowed", 403, .none)
        case .bundleVersionTooOld: ("bundle_version_too_old", 403, .none)
        case .macOSSecurityRequired: ("macos_security_required", 403, .none)
        case .receiptInvalid: ("receipt_invalid", 401, .none)
        case .challengeMissing: ("challenge_missing", 401, .rechallenge)
        case .challengeUnknown: ("challenge_unknown", 401, .rechallenge)
        case .challengeExpired: ("challenge_expired", 401, .rechallenge)
        case .challengeConsumed: ("challenge_consumed", 401, .rechallenge)
        case .challengeWrongPurpose: ("challenge_wrong_purpose", 401, .rechallenge)
        case .challengeWrongKey: ("challenge_wrong_key", 401, .rechallenge)
        case .challengeNotBound: ("challenge_not_bound", 401, .none)
        case .verification(let code): (code.rawValue, Self.status(of: code), Self.action(of: code))
        case .storeUnavailable: ("store_unavailable", 503, .none)
        case .challengeCapacity: ("challenge_capacity", 503, .none)
        case .rateLimited: ("rate_limited", 429, .retryLater)
        case .receiptTooLarge: ("receipt_too_large", 413, .none)
        case .keyAppConflict: ("key_app_conflict", 409, .reattest)
        case .reregistrationLimited: ("reregistration_limited", 429, .none)
        case .keyCapacity: ("key_capacity", 503, .none)
        case .riskMetricExceeded: ("risk_metric_exceeded", 403, .none)
        case .deviceTokenInvalid: ("device_token_invalid", 401, .none)
        case .deviceTokenReplayed: ("device_token_replayed", 401, .none)
        case .fallbackShareExceeded: ("fallback_share_exceeded", 401, .none)
        case .deviceCheckUnavailable: ("devicecheck_unavailable", 503, .none)
        case .keyRateLimited: ("key_rate_limited", 429, .retryLater)
        case .accountKeyLimit: ("account_key_limit", 403, .none)
        case .android(let code): (code.rawValue, Self.status(of: code), Self.action(of: code))
        }
    }

    /// Android's own codes: the app's policy refuses with 403 like `app_not_allowed`; a failed
    /// verdict is 401.
    private static func status(of code: AndroidAttestError.Code) -> Int {
        switch code {
        case .malformed: 400
        case .packageNotAllowed, .signingCertNotAllowed, .securityLevelTooLow, .bootloaderUnlocked, .verifiedBootRequired,
            .patchLevelTooOld, .keyNotForSigning, .unsupportedKey:
            403
        case .badSignature, .chainUntrusted, .certificateExpired, .certificateNotYetValid, .revoked, .challengeMismatch,
            .softwareKey, .counterReplay:
            401
        }
    }

    /// A revoked certificate or an expired one: a new key (a new attestation) may pass; a wrong
    /// challenge: a new challenge; anything else is the device or the app, which a retry does not change.
    private static func action(of code: AndroidAttestError.Code) -> ClientAction {
        switch code {
        case .revoked, .certificateExpired, .certificateNotYetValid: .reattest
        case .challengeMismatch: .rechallenge
        default: .none
        }
    }

    /// The Android codes App Attest has too (the same names), which `init(_: AndroidAttestError)`
    /// reports as `verification`.
    static let sharedAndroidCodes: [AndroidAttestError.Code: AppAttestError.Code] = [
        .malformed: .malformed, .badSignature: .badSignature, .chainUntrusted: .chainUntrusted,
        .certificateExpired: .certificateExpired, .certificateNotYetValid: .certificateNotYetValid, .counterReplay: .counterReplay,
    ]

    /// `package_not_allowed` is `app_not_allowed` here: the gateway picks the app by the attested
    /// package, so a package no app lists is an app not allowed, as for App Attest.
    public init(_ error: AndroidAttestError) {
        if error.code == .packageNotAllowed {
            self = .appNotAllowed
            return
        }
        self = Self.sharedAndroidCodes[error.code].map(GateError.verification) ?? .android(error.code)
    }

    /// The verifier's codes: a malformed input is a bad request (400), any other failed step 401.
    private static func status(of code: AppAttestError.Code) -> Int {
        switch code {
        case .malformed: 400
        case .unsupportedFormat, .chainUntrusted, .certificateExpired, .certificateNotYetValid, .nonceMismatch, .keyIDMismatch,
            .publicKeyMismatch, .appIDMismatch, .counterNotZero, .environmentMismatch, .credentialIDMismatch, .badSignature,
            .counterReplay, .invalidPublicKey:
            401
        }
    }

    /// A new key helps when a certificate's dates or the key itself are the problem; nothing else
    /// the app can retry fixes a failed step (tampering, replay, another app).
    private static func action(of code: AppAttestError.Code) -> ClientAction {
        switch code {
        case .certificateExpired, .certificateNotYetValid, .invalidPublicKey: .reattest
        case .malformed, .unsupportedFormat, .chainUntrusted, .nonceMismatch, .keyIDMismatch, .publicKeyMismatch, .appIDMismatch,
            .counterNotZero, .environmentMismatch, .credentialIDMismatch, .badSignature, .counterReplay:
            .none
        }
    }

    public var code: String { entry.code }
    public var status: Int { entry.status }
    public var action: ClientAction { entry.action }
    public var description: String { code }

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

    /// Every code, in the order docs/errors.md lists them.
    public static let allCases: [GateError] =
        [
            .assertionMissing, .badJSON, .missingField, .methodNotAllowed, .keyIDRequired,
            .keyUnknown, .appNotAllowed, .environmentNotAllowed, .validationCategoryNotAllowed, .bundleVersionTooOld,
            .macOSSecurityRequired, .receiptInvalid,
            .challengeMissing, .challengeUnknown, .challengeExpired, .challengeConsumed, .challengeWrongPurpose,
            .challengeWrongKey, .challengeNotBound,
        ] + AppAttestError.Code.allCases.map(GateError.verification) + [
            .storeUnavailable, .challengeCapacity, .rateLimited, .receiptTooLarge, .keyAppConflict,
            .reregistrationLimited, .keyCapacity, .riskMetricExceeded,
            .deviceTokenInvalid, .deviceTokenReplayed, .fallbackShareExceeded, .deviceCheckUnavailable,
            .keyRateLimited,
            .accountKeyLimit,
        ] + AndroidAttestError.Code.allCases.filter { sharedAndroidCodes[$0] == nil && $0 != .packageNotAllowed }.map(GateError.android)

    /// The error whose code is `rawValue` (a metric reason, a code read back from a log).
    public init?(rawValue: String) {
        guard let e = Self.allCases.first(where: { $0.code == rawValue }) else { return nil }
        self = e
    }

    public var rawValue: String { code }

    public init(_ error: AppAttestError) {
        self = .verification(error.code)
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
