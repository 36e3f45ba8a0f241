import AppAttest
import Dispatch
import Foundation
import GatewayIO
import GatewayPolicy
import GatewayStore
import Testing

/// What the client contract (docs/client-contract.md, "Error codes") says of each code: the status
/// on the endpoints, the status on a protected route, the client action. Written out here, not read
/// from `GateError`, so that the decision tables check the code against the contract.
enum Contract {
    static let codes: [String: (endpoint: Int, route: Int, action: String)] = [
        "assertion_missing": (401, 401, "rechallenge"),
        "malformed": (400, 401, "none"),
        "bad_json": (400, 401, "none"),
        "missing_field": (400, 401, "none"),
        "method_not_allowed": (405, 405, "none"),
        "key_id_required": (400, 401, "none"),
        "key_unknown": (401, 401, "reattest"),
        "app_not_allowed": (403, 403, "none"),
        "environment_not_allowed": (403, 403, "reattest"),
        "validation_category_not_allowed": (403, 403, "none"),
        "bundle_version_too_old": (403, 403, "none"),
        "challenge_missing": (401, 401, "rechallenge"),
        "challenge_unknown": (401, 401, "rechallenge"),
        "challenge_expired": (401, 401, "rechallenge"),
        "challenge_consumed": (401, 401, "rechallenge"),
        "challenge_wrong_purpose": (401, 401, "rechallenge"),
        "challenge_wrong_key": (401, 401, "rechallenge"),
        "challenge_not_bound": (401, 401, "none"),
        "unsupported_format": (401, 401, "none"),
        "chain_untrusted": (401, 401, "none"),
        "certificate_expired": (401, 401, "reattest"),
        "certificate_not_yet_valid": (401, 401, "reattest"),
        "nonce_mismatch": (401, 401, "none"),
        "key_id_mismatch": (401, 401, "none"),
        "public_key_mismatch": (401, 401, "none"),
        "app_id_mismatch": (401, 401, "none"),
        "counter_not_zero": (401, 401, "none"),
        "environment_mismatch": (401, 401, "none"),
        "credential_id_mismatch": (401, 401, "none"),
        "bad_signature": (401, 401, "none"),
        "counter_replay": (401, 401, "none"),
        "invalid_public_key": (401, 401, "reattest"),
        "store_unavailable": (503, 503, "none"),
        "challenge_capacity": (503, 503, "none"),
        "rate_limited": (429, 429, "retry_later"),
        "receipt_too_large": (413, 413, "none"),
        "key_app_conflict": (409, 409, "reattest"),
        "reregistration_limited": (429, 429, "none"),
        "key_capacity": (503, 503, "none"),
        "receipt_invalid": (401, 401, "none"),
        "macos_security_required": (403, 403, "none"),
        "risk_metric_exceeded": (403, 403, "none"),
        "device_token_invalid": (401, 401, "none"),
        "device_token_replayed": (401, 401, "none"),
        "fallback_share_exceeded": (401, 401, "none"),
        "devicecheck_unavailable": (503, 503, "none"),
        "key_rate_limited": (429, 429, "retry_later"),
        "account_key_limit": (403, 403, "none"),
        "revoked": (401, 401, "reattest"),
        "challenge_mismatch": (401, 401, "rechallenge"),
        "software_key": (401, 401, "none"),
        "signing_cert_not_allowed": (403, 403, "none"),
        "security_level_too_low": (403, 403, "none"),
        "bootloader_unlocked": (403, 403, "none"),
        "verified_boot_required": (403, 403, "none"),
        "patch_level_too_old": (403, 403, "none"),
        "key_not_for_signing": (403, 403, "none"),
        "unsupported_key": (403, 403, "none"),
    ]

    /// Checks a refusal's code, status on `surface` and action against the contract.
    static func check(_ e: Explanation, on surface: RefusalSurface, _ name: String, sourceLocation: SourceLocation = #_sourceLocation) {
        guard let row = codes[e.error.code] else {
            Issue.record("\(name): \(e.error.code) is not in the contract table", sourceLocation: sourceLocation)
            return
        }
        #expect(e.error.status(on: surface) == (surface == .route ? row.route : row.endpoint), "\(name)", sourceLocation: sourceLocation)
        #expect(e.error.action.rawValue == row.action, "\(name)", sourceLocation: sourceLocation)
    }
}

/// Runs store continuations at once, on the calling thread: the event loop's executor when the
/// store answered on the loop (as the memory store does).
struct InlineExecutor: LoopExecutor {
    func run(_ work: @escaping @Sendable () -> Void) { work() }
}

/// One answer delivered through a completion (the memory store answers inline; a registration may
/// complete on another thread), waited for with a bound.
final class Answer<T>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: T?
    private let done = DispatchSemaphore(value: 0)

    func set(_ v: T) {
        lock.withLock { value = v }
        done.signal()
    }

    func wait() throws -> T {
        guard done.wait(timeout: .now() + 30) == .success, let v = lock.withLock({ value }) else {
            throw TableError.noAnswer
        }
        return v
    }
}

enum TableError: Error {
    case noAnswer
    case setup(String)
}

/// A store in front of a memory store: the operations named in `failures` fail with their
/// `StoreError` (a store that cannot be reached), and key lookups of the keys in `snapshot` answer
/// the record as it was read earlier (a key evicted, or its counter advanced by another request,
/// between the gate's lookup and its commit). Everything else goes to `inner`.
final class StubStore: AttestStore {
    enum Operation: Hashable, Sendable {
        case issueChallenge, challengeState, deviceKey, register, commitAssertion, claimToken
    }

    let inner: MemoryAttestStore
    let failures: [Operation: StoreError]
    let snapshot: [KeyID: DeviceKeyRecord]

    init(_ inner: MemoryAttestStore, failing failures: [Operation: StoreError] = [:], snapshot: [KeyID: DeviceKeyRecord] = [:]) {
        self.inner = inner
        self.failures = failures
        self.snapshot = snapshot
    }

    static let unreachable = StoreError(.unavailable, "connection refused (test)")

    func issueChallenge(
        _ request: ChallengeRequest, nowMillis: Int64, completion: @escaping @Sendable (Result<IssuedChallenge, StoreError>) -> Void
    ) {
        if let e = failures[.issueChallenge] { return completion(.failure(e)) }
        inner.issueChallenge(request, nowMillis: nowMillis, completion: completion)
    }

    func challengeState(
        _ token: ChallengeToken, nowMillis: Int64, completion: @escaping @Sendable (Result<ChallengeState, StoreError>) -> Void
    ) {
        if let e = failures[.challengeState] { return completion(.failure(e)) }
        inner.challengeState(token, nowMillis: nowMillis, completion: completion)
    }

    func deviceKey(_ id: KeyID, completion: @escaping @Sendable (Result<DeviceKeyRecord?, StoreError>) -> Void) {
        if let e = failures[.deviceKey] { return completion(.failure(e)) }
        if let r = snapshot[id] { return completion(.success(r)) }
        inner.deviceKey(id, completion: completion)
    }

    func register(
        _ registration: Registration, nowMillis: Int64, completion: @escaping @Sendable (Result<RegistrationOutcome, StoreError>) -> Void
    ) {
        if let e = failures[.register] { return completion(.failure(e)) }
        inner.register(registration, nowMillis: nowMillis, completion: completion)
    }

    func commitAssertion(
        _ commit: AssertionCommit, nowMillis: Int64, completion: @escaping @Sendable (Result<CommitOutcome, StoreError>) -> Void
    ) {
        if let e = failures[.commitAssertion] { return completion(.failure(e)) }
        inner.commitAssertion(commit, nowMillis: nowMillis, completion: completion)
    }

    func claimToken(
        _ digest: [UInt8], ttlMillis: Int64, nowMillis: Int64,
        completion: @escaping @Sendable (Result<TokenClaimOutcome, StoreError>) -> Void
    ) {
        if let e = failures[.claimToken] { return completion(.failure(e)) }
        inner.claimToken(digest, ttlMillis: ttlMillis, nowMillis: nowMillis, completion: completion)
    }

    func releaseToken(_ digest: [UInt8], completion: @escaping @Sendable (Result<Void, StoreError>) -> Void) {
        inner.releaseToken(digest, completion: completion)
    }

    var statistics: StoreStatistics { inner.statistics }
}

extension Explanation {
    /// The value of the first detail named `name`.
    func detail(_ name: String) -> String? { fields.first { $0.0 == name }?.1 }
}

extension MemoryAttestStore {
    /// A challenge's state, its completion waited for (the decision tables' fixtures); nil on a store error.
    func waitedChallengeState(_ token: ChallengeToken, at nowMillis: Int64) -> ChallengeState? {
        let answer = Answer<Result<ChallengeState, StoreError>>()
        challengeState(token, nowMillis: nowMillis) { answer.set($0) }
        return try? answer.wait().get()
    }
}
