import GatewayCrypto

/// What a verified Android key attestation establishes (`AndroidAttestationVerifier.verify`): the
/// chain ends at a pinned root, every link verifies, nothing in it is revoked, the leaf's
/// KeyDescription parses, carries the issued challenge and is hardware-backed. Whether the app,
/// the device and the key are the ones the gateway accepts is `AndroidAttestationPolicy`'s call.
public struct AndroidAttestation: Sendable {
    /// The leaf's KeyDescription, whole (every tag of both lists).
    public let keyDescription: KeyDescription
    /// min(attestation, KeyMint) security level: TrustedEnvironment or StrongBox here.
    public let securityLevel: SecurityLevel
    public let applicationID: AttestationApplicationID?
    /// From hardwareEnforced only: a root of trust software reports means nothing.
    public let rootOfTrust: RootOfTrust?
    /// OS version (e.g. 140000 for Android 14) and patch levels, hardwareEnforced else softwareEnforced.
    public let osVersion: Int64?
    public let osPatchLevel: Int64?
    public let vendorPatchLevel: Int64?
    public let bootPatchLevel: Int64?
    public let key: KeyCharacteristics
    /// The leaf's key as its certificate holds it (also when OpenSSL cannot decode it).
    public let subjectPublicKeyInfo: SubjectPublicKeyInfo
    /// The leaf's key when it is EC P-256: the only kind that can sign gateway requests.
    public let publicKey: P256PublicKey?
    /// SHA-256 of the leaf's SubjectPublicKeyInfo DER: what the app computes as
    /// `MessageDigest.getInstance("SHA-256").digest(certificate.publicKey.encoded)`.
    public let keyID: [UInt8]
    /// The pinned root the chain ends at.
    public let anchor: AndroidTrustAnchor
    /// Certificates issued by app-generated attestation keys (KeyMint 100+ `attest_key`), between
    /// the leaf and the device's provisioned certificate; 0 in a plain chain.
    public let attestKeyCertificateCount: Int
    /// The chain as given, leaf first.
    public let chain: [X509Certificate]

    public var attestationVersion: Int64 { keyDescription.attestationVersion }
    public var attestationSecurityLevel: SecurityLevel { keyDescription.attestationSecurityLevel }
    public var keyMintVersion: Int64 { keyDescription.keyMintVersion }
    public var keyMintSecurityLevel: SecurityLevel { keyDescription.keyMintSecurityLevel }
    public var challenge: [UInt8] { keyDescription.attestationChallenge }
    public var packageNames: [String] { applicationID?.packages.map(\.name) ?? [] }
    /// SHA-256 digests of the app's signing certificates.
    public var signingCertificateDigests: [[UInt8]] { applicationID?.signatureDigests ?? [] }
    public var leaf: X509Certificate { chain[0] }
}
