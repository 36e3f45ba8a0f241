/// How a route checks App Attest assertions. A route without an `assertion` block is `.off`.
public struct AssertionPolicy: Sendable, Equatable {
    public enum Mode: String, Sendable, CaseIterable {
        /// Requests without a valid assertion are rejected.
        case enforce
        /// Assertions are verified and counted, but failures are forwarded anyway.
        case shadow
        /// No verification.
        case off
    }

    /// What the client data of an assertion covers.
    public enum Binding: String, Sendable, CaseIterable {
        /// The request itself (method, path, and a server challenge).
        case request
        /// The request body.
        case body
    }

    /// Whether a server-issued challenge must be part of the client data. With `bind: request` it is
    /// always `.required`; `.optional` and `.off` only make sense with `bind: body`.
    public enum Challenge: String, Sendable, CaseIterable {
        case required
        case optional
        case off
    }

    /// The format of a `bind: request` client data the route verifies (docs/client-contract.md). Set
    /// by the route, never chosen by the client: a client cannot downgrade a route.
    public enum ClientData: String, Sendable, CaseIterable {
        /// Challenge, method, request-target and body hash: not bound to the host.
        case v1
        /// Version 1 plus the request's normalised authority (host and non-default port).
        case v2
    }

    /// What to do when the key store cannot be reached.
    public enum StoreErrorPolicy: String, Sendable, CaseIterable {
        case failClosed = "fail_closed"
        case failOpen = "fail_open"
    }

    /// What a verified request from a key whose risk metric is above `maxRiskMetric` gets.
    public enum RiskAction: String, Sendable, CaseIterable {
        /// Forwarded (as verified, with its metric), and counted: Apple calls the metric an
        /// investigation signal.
        case flag
        /// Refused `403 risk_metric_exceeded` where the route enforces (counted only where it shadows).
        case refuse
    }

    /// Required in YAML when the block is present.
    public var mode: Mode
    /// Default `.request`.
    public var bind: Binding
    /// Default `.required`.
    public var challenge: Challenge
    /// With `.enforce`: the stable share of keys enforced; the rest are shadowed. Default 100%.
    public var rollout: Percentage
    /// Default `.failClosed`.
    public var onStoreError: StoreErrorPolicy
    /// With `bind: request`: the client data format. Default `.v2`.
    public var clientData: ClientData
    /// A key whose latest risk metric is above this is flagged or refused (`onRisk`); a key with no
    /// metric yet passes. nil (default): no limit.
    public var maxRiskMetric: Int?
    /// Default `.flag`.
    public var onRisk: RiskAction
    /// `counter_window: N` (1…64): a counter below the key's highest accepted one is also accepted
    /// if it is above that minus N and was never accepted (requests of one key arriving out of
    /// order over HTTP/2 or several connections). 0: off (the default), only a counter above the
    /// highest is accepted.
    public var counterWindow: Int
    /// The DeviceCheck fallback for devices without App Attest (`fallback: {devicecheck: …}`); nil
    /// (default): none, a request without App Attest headers is refused as before.
    public var fallback: DeviceCheckFallback?
    /// `key_rate: {rate, burst}` (issue 27): a budget per attested key on this route; nil (default): none.
    public var keyRate: KeyRateConfig?
    /// `verdict_header: true`: each forwarded request carries `X-App-Attest-Verdict`, the gateway's
    /// signed verdict (needs the top-level `verdict`). Default false.
    public var verdictHeader: Bool = false
    /// Keys per account: a key whose account (named by the upstream, `X-App-Attest-Account`) has
    /// more distinct keys than this within `accounts.window` is flagged or refused (`onKeys`); a key
    /// without a known account passes. nil (default): no limit.
    public var maxKeysPerAccount: Int?
    /// Default `.flag`.
    public var onKeys: RiskAction

    public init(
        mode: Mode,
        bind: Binding = .request,
        challenge: Challenge = .required,
        rollout: Percentage = .hundred,
        onStoreError: StoreErrorPolicy = .failClosed,
        clientData: ClientData = .v2,
        maxRiskMetric: Int? = nil,
        onRisk: RiskAction = .flag,
        counterWindow: Int = 0,
        fallback: DeviceCheckFallback? = nil,
        keyRate: KeyRateConfig? = nil,
        maxKeysPerAccount: Int? = nil,
        onKeys: RiskAction = .flag
    ) {
        self.maxKeysPerAccount = maxKeysPerAccount
        self.onKeys = onKeys
        self.fallback = fallback
        self.keyRate = keyRate
        self.mode = mode
        self.bind = bind
        self.challenge = challenge
        self.rollout = rollout
        self.onStoreError = onStoreError
        self.clientData = clientData
        self.maxRiskMetric = maxRiskMetric
        self.onRisk = onRisk
        self.counterWindow = counterWindow
    }

    /// The largest `max_risk_metric` accepted.
    public static let maxRiskMetricRange = 0...1_000_000

    /// `max_keys_per_account`'s range.
    public static let maxKeysPerAccountRange = 1...1_000_000

    /// `counter_window`'s range (a window of 64 counters: the highest and the 63 below it).
    public static let counterWindowRange = 1...64

    /// The policy of a route without an `assertion` block.
    public static let off = AssertionPolicy(mode: .off)
}

/// A route's DeviceCheck fallback (docs/verification.md, "Devices without App Attest"): a request
/// without App Attest headers but with `X-Apple-Device-Token` is checked with Apple's DeviceCheck,
/// each token once, while the route's share of such requests stays under `maxShare` over `window`.
public struct DeviceCheckFallback: Sendable, Equatable {
    /// What the route does with the device's two bits (`devicecheck: {bits: …}`).
    public enum Bits: String, Sendable, CaseIterable {
        /// `validate_device_token` only (`devicecheck: true`).
        case off
        /// `query_two_bits` (which validates the token too), the bits forwarded as `X-Device-Check-Bits`.
        case read
        /// As `read`, and an upstream's `X-Device-Check-Update` makes the gateway call `update_two_bits`.
        case write
    }

    /// Default `.off`.
    public var bits: Bits
    /// Fallback requests above this share of the route's requests over `window` are refused
    /// (`fallback_share_exceeded`). Default 5%.
    public var maxShare: Percentage
    /// The span the share is measured over. Default 10m.
    public var window: Duration
    /// The cap applies once the window has seen this many requests on the route (below it a share
    /// means little: the first request of a quiet minute would be 100 %). Default 20.
    public var minRequests: Int
    /// How long a token is remembered as used (a replay is refused). Default 1h.
    public var tokenTTL: Duration

    public init(
        bits: Bits = .off, maxShare: Percentage = Percentage(basisPoints: 500), window: Duration = .seconds(600), minRequests: Int = 20,
        tokenTTL: Duration = .seconds(3600)
    ) {
        self.bits = bits
        self.maxShare = maxShare
        self.window = window
        self.minRequests = minRequests
        self.tokenTTL = tokenTTL
    }

    public static let windowRange = Duration.seconds(1)...Duration.seconds(86_400)
    public static let minRequestsRange = 1...1_000_000
    public static let tokenTTLRange = Duration.seconds(1)...Duration.seconds(7 * 86_400)
}
