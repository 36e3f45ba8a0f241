import GatewayCrypto
import GatewayWire

/// The gateway's Android rules for an attestation that verified (`AndroidAttestation`): which
/// app, how secure a device, which key. Separate from the verdict because the verdict is a fact
/// about the chain (the same for every gateway) and this is configuration (each app's own).
/// Checks run in this order; the first failure is thrown:
///
/// | check | setting | code |
/// | --- | --- | --- |
/// | an attested package is allowed | `packageNames` (empty: not checked) | `package_not_allowed` |
/// | an attested signing-certificate digest is allowed | `signingCertificateSHA256` (empty: not checked) | `signing_cert_not_allowed` |
/// | security level | `minSecurityLevel` (`.trustedEnvironment` or `.strongBox`; Software never passes the verdict) | `security_level_too_low` |
/// | bootloader locked | `requireLockedBootloader` | `bootloader_unlocked` |
/// | verified boot green (yellow with `allowSelfSignedBoot`) | `requireVerifiedBoot` | `verified_boot_required` |
/// | OS patch level (and vendor, boot ones when attested as dates) at least | `minPatchLevel` | `patch_level_too_old` |
/// | the key is EC P-256 (the KeyDescription says so and the leaf's key is one) | `requireSigningKey` | `unsupported_key` |
/// | the key's purposes include SIGN | `requireSigningKey` | `key_not_for_signing` |
public struct AndroidAttestationPolicy: Sendable, Equatable {
    public var packageNames: [String]
    public var signingCertificateSHA256: [[UInt8]]
    public var minSecurityLevel: SecurityLevel
    public var requireLockedBootloader: Bool
    public var requireVerifiedBoot: Bool
    /// With `requireVerifiedBoot`: also accept yellow (SelfSigned: a custom OS signed by a key the
    /// user installed, e.g. GrapheneOS on a Pixel).
    public var allowSelfSignedBoot: Bool
    public var minPatchLevel: PatchLevel?
    /// The key must be able to sign requests: EC P-256 with the SIGN purpose.
    public var requireSigningKey: Bool

    /// Defaults are the gateway's: TEE or better, locked, green boot, an EC P-256 signing key;
    /// every package and signer allowed until listed (the gateway always lists them).
    public init(
        packageNames: [String] = [], signingCertificateSHA256: [[UInt8]] = [], minSecurityLevel: SecurityLevel = .trustedEnvironment,
        requireLockedBootloader: Bool = true, requireVerifiedBoot: Bool = true, allowSelfSignedBoot: Bool = false,
        minPatchLevel: PatchLevel? = nil, requireSigningKey: Bool = true
    ) {
        self.packageNames = packageNames
        self.signingCertificateSHA256 = signingCertificateSHA256
        self.minSecurityLevel = minSecurityLevel
        self.requireLockedBootloader = requireLockedBootloader
        self.requireVerifiedBoot = requireVerifiedBoot
        self.allowSelfSignedBoot = allowSelfSignedBoot
        self.minPatchLevel = minPatchLevel
        self.requireSigningKey = requireSigningKey
    }

    /// Only the allow-lists (what `gatewayd verify-android-attestation --package` checks).
    public static func allowList(packageNames: [String], signingCertificateSHA256: [[UInt8]]) -> AndroidAttestationPolicy {
        AndroidAttestationPolicy(
            packageNames: packageNames, signingCertificateSHA256: signingCertificateSHA256, requireLockedBootloader: false,
            requireVerifiedBoot: false, requireSigningKey: false)
    }

    public func check(_ a: AndroidAttestation) throws(AndroidAttestError) {
        try checkPackage(a)
        try checkSigningCertificate(a)
        try checkSecurityLevel(a)
        try checkBootloader(a)
        try checkVerifiedBoot(a)
        try checkPatchLevel(a)
        try checkKey(a)
    }

    func checkPackage(_ a: AndroidAttestation) throws(AndroidAttestError) {
        guard !packageNames.isEmpty else { return }
        guard a.packageNames.contains(where: packageNames.contains) else {
            let attested = a.applicationID == nil ? "no attestationApplicationId" : "packages \(a.packageNames)"
            throw AndroidAttestError(.packageNotAllowed, "\(attested); allowed: \(packageNames)")
        }
    }

    func checkSigningCertificate(_ a: AndroidAttestation) throws(AndroidAttestError) {
        guard !signingCertificateSHA256.isEmpty else { return }
        let allowed = a.signingCertificateDigests.contains { d in signingCertificateSHA256.contains { ConstantTime.equals($0, d) } }
        guard allowed else {
            throw AndroidAttestError(
                .signingCertNotAllowed,
                "signing certificates \(a.signingCertificateDigests.map { Hex.encode($0) }) are not in the allow-list (\(signingCertificateSHA256.count) digest(s))"
            )
        }
    }

    func checkSecurityLevel(_ a: AndroidAttestation) throws(AndroidAttestError) {
        guard a.securityLevel >= minSecurityLevel, a.securityLevel > .software else {
            throw AndroidAttestError(
                .securityLevelTooLow,
                "the key is \(a.securityLevel.name); at least \(max(minSecurityLevel, .trustedEnvironment).name) is required")
        }
    }

    func checkBootloader(_ a: AndroidAttestation) throws(AndroidAttestError) {
        guard requireLockedBootloader else { return }
        guard let rot = a.rootOfTrust else {
            throw AndroidAttestError(.bootloaderUnlocked, "no hardware-enforced root of trust is attested, so no locked bootloader")
        }
        guard rot.deviceLocked else {
            throw AndroidAttestError(.bootloaderUnlocked, "the bootloader is unlocked (verified boot \(rot.verifiedBootState.name))")
        }
    }

    func checkVerifiedBoot(_ a: AndroidAttestation) throws(AndroidAttestError) {
        guard requireVerifiedBoot else { return }
        guard let state = a.rootOfTrust?.verifiedBootState else {
            throw AndroidAttestError(.verifiedBootRequired, "no hardware-enforced root of trust is attested")
        }
        guard state == .verified || (state == .selfSigned && allowSelfSignedBoot) else {
            throw AndroidAttestError(
                .verifiedBootRequired,
                "verified boot is \(state.name); required: Verified\(allowSelfSignedBoot ? " or SelfSigned" : "")")
        }
    }

    func checkPatchLevel(_ a: AndroidAttestation) throws(AndroidAttestError) {
        guard let minimum = minPatchLevel else { return }
        guard let raw = a.osPatchLevel else {
            throw AndroidAttestError(.patchLevelTooOld, "no OS patch level is attested; at least \(minimum) is required")
        }
        guard let os = PatchLevel(rawValue: raw), os.meets(minimum) else {
            throw AndroidAttestError(.patchLevelTooOld, "the OS patch level \(raw) is older than \(minimum) (or not a date)")
        }
        // Vendor and boot levels count when they are dates (some devices write 0 for "unknown").
        for case let (name, raw?) in [("vendor", a.vendorPatchLevel), ("boot", a.bootPatchLevel)] {
            guard let level = PatchLevel(rawValue: raw), !level.meets(minimum) else { continue }
            throw AndroidAttestError(.patchLevelTooOld, "the \(name) patch level \(level) is older than \(minimum)")
        }
    }

    func checkKey(_ a: AndroidAttestation) throws(AndroidAttestError) {
        guard requireSigningKey else { return }
        guard a.key.algorithm == KeyCharacteristics.Algorithm.ec, a.key.ecCurve == KeyCharacteristics.Curve.p256, a.publicKey != nil else {
            throw AndroidAttestError(
                .unsupportedKey,
                "the key is \(a.key.algorithmName ?? "of no attested algorithm")\(a.key.ecCurveName.map { " \($0)" } ?? "") "
                    + "(certificate: \(a.subjectPublicKeyInfo.algorithm)); requests are signed with EC P-256 keys only")
        }
        guard a.key.purposes.contains(KeyCharacteristics.Purpose.sign) else {
            throw AndroidAttestError(.keyNotForSigning, "the key's purposes are \(a.key.purposeNames), without SIGN")
        }
    }
}
