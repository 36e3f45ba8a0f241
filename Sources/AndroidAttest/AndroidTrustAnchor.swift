import GatewayCrypto
import GatewayWire

/// A root an Android attestation chain may end at, pinned by the SHA-256 of its public key
/// (SubjectPublicKeyInfo DER), not by its certificate: Google has issued four certificates of its
/// one RSA-4096 root key, and chains made years ago still end at the first of them, which expired
/// on 2026-05-24. Whatever certificate carries a pinned key counts as that root; its own validity
/// and self-signature are not looked at (Google's verifier does not look at them either: the key
/// is the anchor).
///
/// Google's roots are built in (`google`); others are trusted only where a caller lists them
/// (`trust.extra_android_roots`, `gatewayd verify-android-attestation --root`).
public struct AndroidTrustAnchor: Sendable, Equatable {
    public let name: String
    public let spkiSHA256: [UInt8]

    public init(name: String, spkiSHA256: [UInt8]) {
        self.name = name
        self.spkiSHA256 = spkiSHA256
    }

    /// The anchor of a root certificate a caller trusts (a test root).
    public init(certificate: X509Certificate) {
        self.init(name: "extra root \(certificate.subject)", spkiSHA256: SHA256.hash(certificate.subjectPublicKeyInfoDER))
    }

    /// Google's hardware attestation root keys (https://developer.android.com/privacy-and-security/security-key-attestation#root_certificate):
    ///
    /// - the RSA-4096 key of `serialNumber=f92009e853b6b045`, in four certificates: e8fa196314d2fa18
    ///   (2016-05-26 to 2026-05-24), d50ff25ba3f2d6b3 (2019–2034), c36b7c44b9ae1831 (2021–2036),
    ///   f1c172a699eaf51d (2022–2042);
    /// - the EC P-384 key of `CN=Key Attestation CA1, OU=Android, O=Google LLC, C=US`, serial
    ///   84a9d0297b0eb58ae7ff0e80de760605 (2025-07-17 to 2035-07-15), which roots chains since 2026.
    ///
    /// Checked against Google's published PEM in `AndroidRealVectorTests.googleRootsArePinned`.
    public static let google: [AndroidTrustAnchor] = [
        AndroidTrustAnchor(
            name: "Google hardware attestation root (RSA-4096)",
            spkiSHA256: Hex.decode("feb2ea7551ee316ed4bb443c8293b884dbfdea40b603ee3e4f4a897e4580fbae")!),
        AndroidTrustAnchor(
            name: "Google Key Attestation CA1 (EC P-384)",
            spkiSHA256: Hex.decode("3ee44512a1af2beb39c889490c60ea3f82e43f5d5a5532f5ab9419f676cd07ec")!),
    ]
}
