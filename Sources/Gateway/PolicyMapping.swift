import GatewayConfig
import GatewayPolicy

// The composition root maps the configuration's model onto the policy's own (GatewayPolicy reads no
// configuration type: docs/architecture.md, "Layers").

extension RoutePolicy {
    /// A route's `assertion` block.
    init(_ c: AssertionPolicy) {
        self.init(
            mode: Mode(rawValue: c.mode.rawValue) ?? .off, bind: Binding(rawValue: c.bind.rawValue) ?? .request,
            challenge: Challenge(rawValue: c.challenge.rawValue) ?? .required, rolloutBasisPoints: c.rollout.basisPoints,
            onStoreError: StoreErrorPolicy(rawValue: c.onStoreError.rawValue) ?? .failClosed,
            clientData: ClientData(rawValue: c.clientData.rawValue) ?? .v2, maxRiskMetric: c.maxRiskMetric,
            onRisk: RiskAction(rawValue: c.onRisk.rawValue) ?? .flag, counterWindow: c.counterWindow,
            fallback: c.fallback.map(FallbackPolicy.init))
    }
}

extension FallbackPolicy {
    /// `assertion.fallback`.
    init(_ c: DeviceCheckFallback) {
        self.init(
            bits: Bits(rawValue: c.bits.rawValue) ?? .off, maxShareBasisPoints: c.maxShare.basisPoints, windowMillis: c.window.millis,
            minRequests: c.minRequests, tokenTTLMillis: c.tokenTTL.millis)
    }
}

extension AppPolicy {
    /// One of `apps[]`.
    init(_ c: AppConfig) {
        self.init(
            teamID: c.teamID, bundleIDs: c.bundleIDs,
            environments: Set(c.environments.compactMap { KeyEnvironmentName(rawValue: $0.rawValue) }),
            validationCategories: c.validationCategories.map { Set($0.map(\.rawValue)) }, minBundleVersion: c.minBundleVersion,
            verifiesReceipts: c.receipts == .verify, requiresMacOSSecurity: c.requireMacOSSecurity)
    }
}
