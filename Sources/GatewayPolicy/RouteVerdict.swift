import GatewayStore

/// What a protected route does with one request: forward it as verified, forward it unverified (a
/// shadowed refusal, or a store failure on an `on_store_error: fail_open` route), or refuse it with
/// a status; and the labels the verdict metric (`attest_gateway_assertion_verdicts_total`) and the
/// explain log carry. The one home of enforce vs shadow, rollout and fail-open: a pure decision over
/// the route's `RoutePolicy`, the request's key id and the gate's outcome. The composition root
/// (`Gateway/Attest/AttestEndpoints.swift`) only carries it out.
///
/// Two moments, one rule: `mode(route:keyID:)` is decided once from the head (before any body is
/// read), then `init(route:mode:outcome:)` from the gate's outcome. A refusal the head alone already
/// decides (`AssertionGate.readHeaders`) is the refusal the gate would give after the body, so
/// `beforeBody(route:mode:refusal:)` answers it at once exactly when the verdict is a refusal.
public struct RouteVerdict: Sendable, Equatable {
    /// The `mode` label: how this request is treated. An enforce route whose `rollout` leaves the
    /// key out treats it as `shadow`.
    public enum Mode: String, Sendable, CaseIterable {
        case enforce
        case shadow
    }

    /// The `verdict` label.
    public enum Label: String, Sendable, CaseIterable {
        case accepted
        case refused
        /// Shadowed: counted, logged and recorded for explain, and forwarded.
        case wouldRefuse = "would_refuse"
        /// Enforced, the store could not answer, and the route fails open: forwarded unverified.
        case failOpen = "fail_open"
        /// Verified, and the key's risk metric is above the route's `max_risk_metric` with
        /// `on_risk: flag`: forwarded as verified, counted, logged and recorded for explain.
        case flagged
    }

    public enum Action: Sendable, Equatable {
        /// To the upstream without the assertion headers, with the verified-key header (and the next
        /// challenge to the client).
        case forwardVerified
        /// To the upstream without the assertion headers and without the verified-key header; the
        /// refusal is logged and recorded for explain with `recordedStatus`, the status enforcement
        /// would send.
        case forwardUnverified(recordedStatus: Int)
        /// The JSON refusal, with this status, recorded for explain.
        case refuse(status: Int)
        /// As `forwardVerified` (the assertion verified), and the risk refusal it stands for is
        /// logged and recorded for explain with `recordedStatus`: a flagged key (`on_risk: flag`), or
        /// a shadowed `on_risk: refuse`.
        case forwardVerifiedRecorded(recordedStatus: Int)
    }

    /// Whether carrying the verdict out records a refusal (for `/explain` and the log): every
    /// verdict but a plain `forwardVerified`.
    public var recordsRefusal: Bool {
        if case .forwardVerified = action { return false }
        return true
    }

    /// What the gate decided of the request (`GateOutcome`, without its values).
    public enum Outcome: Sendable, Equatable {
        case accepted
        case refused(GateError)
    }

    public let mode: Mode
    public let verdict: Label
    public let action: Action
    /// The `reason` label: `ok`, or the refusal's code.
    public let reason: String

    /// Decided from the head: `enforce` when the route enforces and its rollout share takes the key
    /// (`Rollout.enforces`: a stable share picked from the key id's bytes; a request without a
    /// usable key id only at 100 %), `shadow` otherwise; nil on a route without assertion checks.
    /// The key id is decoded only on a partial rollout (the gate decodes it anyway).
    public static func mode(route: RoutePolicy, keyID: String?) -> Mode? {
        switch route.mode {
        case .off: return nil
        case .shadow: return .shadow
        case .enforce:
            let share = route.rolloutBasisPoints
            if share >= 10_000 { return .enforce }
            return Rollout.enforces(keyID: keyID.flatMap { BinaryEncoding.decode($0).bytes }, basisPoints: share) ? .enforce : .shadow
        }
    }

    /// The verdict on the gate's outcome for a request treated as `mode`. Enforced refusals are
    /// refused with their route status (`GateError.status(on: .route)`), except `store_unavailable`
    /// (and, for the DeviceCheck fallback, `devicecheck_unavailable`) on a `fail_open` route, which is forwarded unverified; shadowed refusals are forwarded
    /// unverified (`on_store_error` only matters where a refusal would be enforced); an accepted
    /// assertion is forwarded as verified in either mode, unless its key's risk metric
    /// (`riskMetric`, nil while the key has none) is above the route's `max_risk_metric`: then
    /// `on_risk: refuse` refuses it `403 risk_metric_exceeded` where the route enforces (shadowed:
    /// forwarded, counted `would_refuse`), and `on_risk: flag` forwards it counted `flagged`.
    ///
    /// Keys per account (issue 27), the same way: a key whose account has more keys (`accountKeys`,
    /// nil while no account is known for it) than the route's `max_keys_per_account` is flagged
    /// (`on_keys: flag`) or refused `403 account_key_limit` (`on_keys: refuse`, enforced). A key over
    /// both limits is judged by its risk metric.
    public init(route: RoutePolicy, mode: Mode, outcome: Outcome, riskMetric: UInt32? = nil, accountKeys: Int? = nil) {
        self.mode = mode
        let over: (GateError, RoutePolicy.RiskAction)? =
            if Self.exceeds(route, riskMetric) {
                (.riskMetricExceeded, route.onRisk)
            } else if Self.exceedsKeys(route, accountKeys) {
                (.accountKeyLimit, route.onKeys)
            } else {
                nil
            }
        switch outcome {
        case .accepted where over != nil:
            let (error, onOver) = over!
            let status = error.status(on: .route)
            reason = error.code
            switch (onOver, mode) {
            case (.flag, _):
                verdict = .flagged
                action = .forwardVerifiedRecorded(recordedStatus: status)
            case (.refuse, .enforce):
                verdict = .refused
                action = .refuse(status: status)
            case (.refuse, .shadow):
                verdict = .wouldRefuse
                action = .forwardVerifiedRecorded(recordedStatus: status)
            }
        case .accepted:
            verdict = .accepted
            action = .forwardVerified
            reason = "ok"
        case .refused(let error):
            let status = error.status(on: .route)
            reason = error.code
            switch mode {
            case .enforce where error.isUnavailable && route.onStoreError == .failOpen:
                verdict = .failOpen
                action = .forwardUnverified(recordedStatus: status)
            case .enforce:
                verdict = .refused
                action = .refuse(status: status)
            case .shadow:
                verdict = .wouldRefuse
                action = .forwardUnverified(recordedStatus: status)
            }
        }
    }

    /// Whether a key with `metric` is above the route's `max_risk_metric` (a key without a metric
    /// yet, or a route without a maximum, never is).
    public static func exceeds(_ route: RoutePolicy, _ metric: UInt32?) -> Bool {
        guard let max = route.maxRiskMetric, let metric else { return false }
        return Int(metric) > max
    }

    /// Whether an account with `keys` keys is over the route's `max_keys_per_account` (no account
    /// known, or no maximum: never).
    public static func exceedsKeys(_ route: RoutePolicy, _ keys: Int?) -> Bool {
        guard let max = route.maxKeysPerAccount, let keys else { return false }
        return keys > max
    }

    /// The same, with the gate's outcome as it gives it (an accepted assertion carries its key's
    /// risk metric and, when `accountWindowMillis` is given, its account's key count, unless the
    /// association is older than that window at `nowMillis`).
    public init(route: RoutePolicy, mode: Mode, outcome: GateOutcome, accountWindowMillis: Int64? = nil, nowMillis: Int64 = 0) {
        switch outcome {
        case .accepted(let a):
            self.init(
                route: route, mode: mode, outcome: Outcome.accepted, riskMetric: a.risk?.metric,
                accountKeys: Self.accountKeys(a.account, windowMillis: accountWindowMillis, nowMillis: nowMillis))
        case .refused(let e): self.init(route: route, mode: mode, outcome: Outcome.refused(e.error))
        }
    }

    /// The key count of `account` that counts at `nowMillis`: nil without an account, a window, or
    /// when the association is older than the window.
    public static func accountKeys(_ account: KeyAccount?, windowMillis: Int64?, nowMillis: Int64) -> Int? {
        guard let account, let windowMillis, nowMillis - account.associatedMillis <= windowMillis else { return nil }
        return account.keyCount
    }

    /// Both moments at once (the head's `mode`, then the outcome): nil on a route without checks.
    public init?(route: RoutePolicy, keyID: String?, outcome: Outcome, riskMetric: UInt32? = nil) {
        guard let mode = Self.mode(route: route, keyID: keyID) else { return nil }
        self.init(route: route, mode: mode, outcome: outcome, riskMetric: riskMetric)
    }

    /// A refusal of step 1 read from the head alone (`AssertionGate.readHeaders`): its verdict when it
    /// is answered now, before any of the body is read (a refusal); nil when the body is read and the
    /// request goes on (shadowed: the gate refuses it the same after the body, and it is forwarded).
    public static func beforeBody(route: RoutePolicy, mode: Mode, refusal: GateError) -> RouteVerdict? {
        let verdict = RouteVerdict(route: route, mode: mode, outcome: .refused(refusal))
        guard case .refuse = verdict.action else { return nil }
        return verdict
    }
}

extension RouteVerdict {
    /// The modes a route treats requests in: `enforce` when it enforces (for the keys its rollout
    /// takes), `shadow` when it shadows or its rollout leaves keys out.
    public static func modes(route: RoutePolicy) -> [Mode] {
        var out: [Mode] = []
        if route.mode == .enforce { out.append(.enforce) }
        if route.mode == .shadow || (route.mode == .enforce && route.rolloutBasisPoints < 10_000) { out.append(.shadow) }
        return out
    }

    /// Every verdict the route can reach with these refusals (and an accepted assertion, and, with
    /// a `max_risk_metric`, a key over it), each once: the series the verdict metric declares at 0,
    /// decided by the same rules as a request's (`init(route:mode:outcome:)`), not restated.
    public static func space(route: RoutePolicy, refusals: [GateError]) -> [RouteVerdict] {
        var out: [RouteVerdict] = []
        func add(_ v: RouteVerdict) { if !out.contains(v) { out.append(v) } }
        for mode in modes(route: route) {
            add(RouteVerdict(route: route, mode: mode, outcome: .accepted))
            for e in refusals { add(RouteVerdict(route: route, mode: mode, outcome: .refused(e))) }
            if let max = route.maxRiskMetric, max < Int(UInt32.max) {
                add(RouteVerdict(route: route, mode: mode, outcome: .accepted, riskMetric: UInt32(max + 1)))
            }
            if let max = route.maxKeysPerAccount, max < Int.max {
                add(RouteVerdict(route: route, mode: mode, outcome: .accepted, accountKeys: max + 1))
            }
        }
        return out
    }
}

extension GateError {
    /// What the route's `on_store_error` decides: the store, or (a fallback request) DeviceCheck,
    /// could not answer.
    public var isUnavailable: Bool { self == .storeUnavailable || self == .deviceCheckUnavailable }
}
