/// `apps[].android`: the Android build of an app, whose devices register with hardware key
/// attestation (docs/android.md). What a registration's KeyDescription must show.
public struct AndroidAppConfig: Sendable, Equatable {
    /// `min_security_level`: who made and attested the key. Software keys never pass.
    public enum SecurityLevel: String, Sendable, CaseIterable {
        /// The Trusted Execution Environment (or better).
        case tee
        /// StrongBox, a separate secure chip.
        case strongbox
    }

    /// At least one; each package name once across all apps.
    public var packageNames: [String]
    /// SHA-256 digests (32 bytes) of the app's signing certificates; at least one.
    public var signingCertSHA256: [[UInt8]]
    /// Default `.tee`.
    public var minSecurityLevel: SecurityLevel
    /// Default true.
    public var requireLockedBootloader: Bool
    /// Default true: verified boot green (Verified).
    public var requireVerifiedBoot: Bool
    /// With `requireVerifiedBoot`: also yellow (SelfSigned, a custom OS signed by the user's key).
    /// Default false.
    public var allowSelfSignedBoot: Bool
    /// `YYYYMM` or `YYYYMMDD`; nil: no minimum.
    public var minPatchLevel: Int64?

    public init(
        packageNames: [String], signingCertSHA256: [[UInt8]], minSecurityLevel: SecurityLevel = .tee,
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
}
