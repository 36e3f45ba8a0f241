import AndroidAttest
import GatewayConfig
import GatewayPolicy
import GatewayStore

// The composition root maps the configuration's model onto the policy's own (GatewayPolicy reads no
// configuration type: docs/architecture.md, "Layers").

/// The policy's case of the same name as the configuration's. Every configuration case has one
/// (PolicyMappingTests holds each enum to it); there is no default to fall back on, since a default
/// would turn an `enforce` the two layers spelt differently into something weaker.
func mapped<Policy: RawRepresentable, Config: RawRepresentable>(_ c: Config, to _: Policy.Type = Policy.self) -> Policy
where Policy.RawValue == String, Config.RawValue == String {
    guard let p = Policy(rawValue: c.rawValue) else {
        preconditionFailure("\(Config.self).\(c.rawValue) has no \(Policy.self) of that name")
    }
    return p
}

extension RoutePolicy {
    /// A route's `assertion` block; `route`: its name (the scope of its `key_rate` buckets).
    init(_ c: AssertionPolicy, route: String = "") {
        self.init(
            mode: mapped(c.mode), bind: mapped(c.bind),
            challenge: mapped(c.challenge), rolloutBasisPoints: c.rollout.basisPoints,
            onStoreError: mapped(c.onStoreError),
            clientData: mapped(c.clientData), maxRiskMetric: c.maxRiskMetric,
            onRisk: mapped(c.onRisk), counterWindow: c.counterWindow,
            fallback: c.fallback.map(FallbackPolicy.init),
            keyRate: c.keyRate.map { KeyRateLimit($0, route: route) }, maxKeysPerAccount: c.maxKeysPerAccount, onKeys: mapped(c.onKeys))
    }
}

extension KeyRateLimit {
    /// `assertion.key_rate` of the route named `route`.
    init(_ c: KeyRateConfig, route: String) {
        self.init(count: c.rate.count, periodMillis: Int64(c.rate.unit.seconds) * 1_000, burst: c.burst, scope: route)
    }
}

extension FallbackPolicy {
    /// `assertion.fallback`.
    init(_ c: DeviceCheckFallback) {
        self.init(
            bits: mapped(c.bits), maxShareBasisPoints: c.maxShare.basisPoints, windowMillis: c.window.millis,
            minRequests: c.minRequests, tokenTTLMillis: c.tokenTTL.millis)
    }
}

extension AppPolicy {
    /// One of `apps[]`.
    init(_ c: AppConfig) {
        self.init(
            teamID: c.teamID, bundleIDs: c.bundleIDs,
            environments: Set(c.environments.map { mapped($0, to: KeyEnvironmentName.self) }),
            validationCategories: c.validationCategories.map { Set($0.map(\.rawValue)) }, minBundleVersion: c.minBundleVersion,
            verifiesReceipts: c.receipts == .verify, requiresMacOSSecurity: c.requireMacOSSecurity,
            android: c.android.map(AndroidAttestationPolicy.init))
    }
}

extension AndroidAttestationPolicy {
    /// `apps[].android`: the verifier's own policy (a signing EC P-256 key always required).
    init(_ c: AndroidAppConfig) {
        self.init(
            packageNames: c.packageNames, signingCertificateSHA256: c.signingCertSHA256,
            minSecurityLevel: {
                switch c.minSecurityLevel {  // exhaustive: a new level cannot map to a weaker one unnoticed
                case .tee: .trustedEnvironment
                case .strongbox: .strongBox
                }
            }(),
            requireLockedBootloader: c.requireLockedBootloader, requireVerifiedBoot: c.requireVerifiedBoot,
            allowSelfSignedBoot: c.allowSelfSignedBoot,
            minPatchLevel: c.minPatchLevel.map { level in
                // The decoder accepts only YYYYMM and YYYYMMDD levels PatchLevel reads; never a silently dropped minimum.
                guard let p = PatchLevel(rawValue: level) else { preconditionFailure("min_patch_level \(level) is not a patch level") }
                return p
            },
            requireSigningKey: true)
    }
}
