import AndroidAttest
import GatewayCrypto
import GatewayStore

/// `apps[].android` as the policy works with it (the composition root makes it from the
/// configuration's `AndroidAppConfig`).
public struct AndroidAppPolicy: Sendable, Equatable {
    public enum MinimumSecurityLevel: String, Sendable, CaseIterable {
        case tee
        case strongbox
    }

    public var packageNames: [String]
    public var signingCertSHA256: [[UInt8]]
    public var minSecurityLevel: MinimumSecurityLevel
    public var requireLockedBootloader: Bool
    public var requireVerifiedBoot: Bool
    public var allowSelfSignedBoot: Bool
    public var minPatchLevel: Int64?

    public init(
        packageNames: [String], signingCertSHA256: [[UInt8]], minSecurityLevel: MinimumSecurityLevel = .tee,
        requireLockedBootloader: Bool = true, requireVerifiedBoot: Bool = true, allowSelfSignedBoot: Bool = false,
        minPatchLevel: Int64? = nil
    ) {
        self.packageNames = packageNames
        self.signingCertSHA256 = signingCertSHA256
        self.minSecurityLevel = minSecurityLevel
        self.requireLockedBootloader = requireLockedBootloader
        self.requireVerifiedBoot = requireVerifiedBoot
        self.allowSelfSignedBoot = allowSelfSignedBoot
        self.minPatchLevel = minPatchLevel
    }

    /// The verifier's policy for this app: its package names and signers, and the device rules.
    public var attestationPolicy: AndroidAttestationPolicy {
        AndroidAttestationPolicy(
            packageNames: packageNames, signingCertificateSHA256: signingCertSHA256,
            minSecurityLevel: minSecurityLevel == .strongbox ? .strongBox : .trustedEnvironment,
            requireLockedBootloader: requireLockedBootloader, requireVerifiedBoot: requireVerifiedBoot,
            allowSelfSignedBoot: allowSelfSignedBoot, minPatchLevel: minPatchLevel.flatMap { PatchLevel(rawValue: $0) },
            requireSigningKey: true)
    }
}

/// How an Android key's app id is written in the store: `android:<package name>`. App Attest's app
/// ids are `TEAMID.bundle.id` (a bundle id has no ':'), so the two never meet, and the stores
/// (memory, journal, snapshots, Redis) keep Android keys with no change of format.
public enum AndroidAppID {
    public static let prefix = "android:"

    public static func of(package: String) -> String { prefix + package }

    /// The package name of an Android key's app id; nil for an App Attest one.
    public static func package(of appID: String) -> Substring? {
        guard appID.hasPrefix(prefix) else { return nil }
        return appID.dropFirst(prefix.count)
    }
}
