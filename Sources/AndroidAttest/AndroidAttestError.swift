/// Every way an Android key attestation, its policy or an Android assertion can fail, as a stable
/// code (the gateway's metric `reason` and JSON `error`, the CLI's `reason`) plus a detail for logs.
/// Codes shared with App Attest (`malformed`, `bad_signature`, `chain_untrusted`,
/// `certificate_expired`, `certificate_not_yet_valid`, `counter_replay`) mean the same there.
public struct AndroidAttestError: Error, Equatable, Sendable, CustomStringConvertible {
    public enum Code: String, CaseIterable, Sendable {
        // The verdict (`AndroidAttestationVerifier`).
        /// Bad encoding anywhere: a certificate, the KeyDescription, the assertion; also a chain of
        /// a shape no Keystore makes (too short, too long, no KeyDescription on the leaf).
        case malformed
        /// A certificate of the chain is not signed by the next one (or does not name it as issuer).
        case badSignature = "bad_signature"
        /// The chain does not end at a pinned root (Google's, or one the caller trusts explicitly).
        case chainUntrusted = "chain_untrusted"
        /// A certificate issued by a CA of the chain expired before the verification instant.
        case certificateExpired = "certificate_expired"
        /// A certificate issued by a CA of the chain is not valid yet at the verification instant.
        case certificateNotYetValid = "certificate_not_yet_valid"
        /// A certificate of the chain is listed in the attestation status list (revoked or suspended).
        case revoked
        /// The leaf's attestation challenge is not the one issued.
        case challengeMismatch = "challenge_mismatch"
        /// The attestation or the key is Software: no secure hardware vouches for it.
        case softwareKey = "software_key"

        // The gateway's policy (`AndroidAttestationPolicy`).
        /// No attested package name is in the allow-list.
        case packageNotAllowed = "package_not_allowed"
        /// No attested signing-certificate digest is in the allow-list.
        case signingCertNotAllowed = "signing_cert_not_allowed"
        /// TEE where StrongBox is required.
        case securityLevelTooLow = "security_level_too_low"
        /// The device's bootloader is unlocked (or no root of trust is attested).
        case bootloaderUnlocked = "bootloader_unlocked"
        /// Verified boot is not green (Verified), nor yellow (SelfSigned) where that is allowed.
        case verifiedBootRequired = "verified_boot_required"
        /// An attested patch level is older than the minimum (or the OS patch level is missing).
        case patchLevelTooOld = "patch_level_too_old"
        /// The key may not sign (its purposes lack SIGN).
        case keyNotForSigning = "key_not_for_signing"
        /// The key is not an EC P-256 key the gateway can verify requests with.
        case unsupportedKey = "unsupported_key"

        // The assertion (`AndroidAssertionVerifier`).
        /// The assertion's counter is not strictly greater than the stored one.
        case counterReplay = "counter_replay"
    }

    public let code: Code
    public let detail: String

    public init(_ code: Code, _ detail: String) {
        self.code = code
        self.detail = detail
    }

    public var description: String { "\(code.rawValue): \(detail)" }

    /// Errors compare by code only, as `AppAttestError` does: details may be reworded.
    public static func == (a: AndroidAttestError, b: AndroidAttestError) -> Bool { a.code == b.code }
}
