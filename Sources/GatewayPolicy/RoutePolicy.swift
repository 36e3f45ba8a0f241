import AndroidAttest
import GatewayStore
import GatewayWire

/// How a protected route checks requests: the policy's own model of a route's `assertion` block,
/// made by the composition root from the configuration (`GatewayConfig.RoutePolicy`), so that
/// the policy layer reads no configuration type. The same fields, in the units the policy works in.
public struct RoutePolicy: Sendable, Equatable {
    public enum Mode: String, Sendable, CaseIterable {
        /// Requests without a valid assertion are refused.
        case enforce
        /// Assertions are verified and counted, refusals forwarded anyway.
        case shadow
        /// No verification.
        case off
    }

    /// What the client data of an assertion covers.
    public enum Binding: String, Sendable, CaseIterable {
        /// The request itself (method, target, body hash, a server challenge, the authority).
        case request
        /// The request body.
        case body
    }

    /// Whether a server-issued challenge must be part of the client data (`.optional` and `.off`
    /// only with `bind: body`).
    public enum Challenge: String, Sendable, CaseIterable {
        case required
        case optional
        case off
    }

    /// The format of a `bind: request` client data (docs/client-contract.md): set by the route,
    /// never chosen by the client.
    public enum ClientData: String, Sendable, CaseIterable {
        case v1
        case v2
    }

    /// What an enforced request gets when the store (or DeviceCheck) cannot answer.
    public enum StoreErrorPolicy: String, Sendable, CaseIterable {
        case failClosed = "fail_closed"
        case failOpen = "fail_open"
    }

    /// What a verified request of a key over `maxRiskMetric` gets.
    public enum RiskAction: String, Sendable, CaseIterable {
        /// Forwarded as verified, counted `flagged`.
        case flag
        /// Refused `403 risk_metric_exceeded` where the route enforces.
        case refuse
    }

    /// What a verified request of a key whose account has more than `maxKeysPerAccount` keys gets
    /// (the same choice as `RiskAction`).
    public typealias KeysAction = RiskAction

    public var mode: Mode
    public var bind: Binding
    public var challenge: Challenge
    /// With `.enforce`: the stable share of keys enforced, in basis points (10 000: all).
    public var rolloutBasisPoints: Int
    public var onStoreError: StoreErrorPolicy
    public var clientData: ClientData
    /// A key whose latest risk metric is above this is flagged or refused; nil: no limit.
    public var maxRiskMetric: Int?
    public var onRisk: RiskAction
    /// `counter_window` (0: off).
    public var counterWindow: Int
    /// The DeviceCheck fallback; nil: none.
    public var fallback: FallbackPolicy?
    /// `key_rate` (issue 27): the budget of each attested key on this route, checked in the
    /// store's commit; nil: none.
    public var keyRate: KeyRateLimit?
    /// Keys per account (issue 27): a key whose account has more distinct keys than this within the
    /// window is flagged or refused (`onKeys`); nil: no limit.
    public var maxKeysPerAccount: Int?
    public var onKeys: KeysAction

    public init(
        mode: Mode, bind: Binding = .request, challenge: Challenge = .required, rolloutBasisPoints: Int = 10_000,
        onStoreError: StoreErrorPolicy = .failClosed, clientData: ClientData = .v2, maxRiskMetric: Int? = nil, onRisk: RiskAction = .flag,
        counterWindow: Int = 0, fallback: FallbackPolicy? = nil, keyRate: KeyRateLimit? = nil, maxKeysPerAccount: Int? = nil,
        onKeys: KeysAction = .flag
    ) {
        self.keyRate = keyRate
        self.maxKeysPerAccount = maxKeysPerAccount
        self.onKeys = onKeys
        self.mode = mode
        self.bind = bind
        self.challenge = challenge
        self.rolloutBasisPoints = rolloutBasisPoints
        self.onStoreError = onStoreError
        self.clientData = clientData
        self.maxRiskMetric = maxRiskMetric
        self.onRisk = onRisk
        self.counterWindow = counterWindow
        self.fallback = fallback
    }

    /// A route without checks.
    public static let off = RoutePolicy(mode: .off)
}

/// A route's DeviceCheck fallback (docs/verification.md, "Devices without App Attest"), as the
/// policy works with it.
public struct FallbackPolicy: Sendable, Equatable {
    /// What the route does with the device's two bits.
    public enum Bits: String, Sendable, CaseIterable {
        case off
        case read
        case write
    }

    public var bits: Bits
    /// Fallback requests above this share of the route's requests over `windowMillis` are refused.
    public var maxShareBasisPoints: Int
    public var windowMillis: Int64
    /// The share is held to its maximum once the window has seen this many requests.
    public var minRequests: Int
    /// How long a token is remembered as used.
    public var tokenTTLMillis: Int64

    public init(
        bits: Bits = .off, maxShareBasisPoints: Int = 500, windowMillis: Int64 = 600_000, minRequests: Int = 20,
        tokenTTLMillis: Int64 = 3_600_000
    ) {
        self.bits = bits
        self.maxShareBasisPoints = maxShareBasisPoints
        self.windowMillis = windowMillis
        self.minRequests = minRequests
        self.tokenTTLMillis = tokenTTLMillis
    }
}

/// An app whose devices may attest, as the policy works with it (the composition root makes it
/// from `apps[]`).
public struct AppPolicy: Sendable, Equatable {
    public var teamID: String
    public var bundleIDs: [String]
    public var environments: Set<KeyEnvironmentName>
    /// iOS 27's validation category names allowed (`ValidationCategory(name:)`); nil: any.
    public var validationCategories: Set<String>?
    /// The attested bundle version must be at least this; nil: no minimum.
    public var minBundleVersion: BundleVersion?
    /// Apple's receipt checks at registration (else the receipt is kept unchecked).
    public var verifiesReceipts: Bool
    /// Keys must carry macOS 27's Full Security mode and SIP policy.
    public var requiresMacOSSecurity: Bool
    /// The app's Android build (`apps[].android`): its packages, signers and device rules, as the
    /// verifier's policy checks them; nil: none.
    public var android: AndroidAttestationPolicy?

    /// The App Attest environments by name.
    public enum KeyEnvironmentName: String, Sendable, CaseIterable {
        case development
        case production
    }

    public init(
        teamID: String, bundleIDs: [String], environments: Set<KeyEnvironmentName> = [.production],
        validationCategories: Set<String>? = nil,
        minBundleVersion: BundleVersion? = nil, verifiesReceipts: Bool = true, requiresMacOSSecurity: Bool = false,
        android: AndroidAttestationPolicy? = nil
    ) {
        self.android = android
        self.teamID = teamID
        self.bundleIDs = bundleIDs
        self.environments = environments
        self.validationCategories = validationCategories
        self.minBundleVersion = minBundleVersion
        self.verifiesReceipts = verifiesReceipts
        self.requiresMacOSSecurity = requiresMacOSSecurity
    }
}
