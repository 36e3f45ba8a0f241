import AndroidAttest
import Foundation
import GatewayCrypto
import GatewayWire
import SimulatorPKI

/// A software Android device for one app: a Keystore EC P-256 key attested under a `TestAndroidCA`
/// (leaf → the device's attestation certificate → intermediate → root, leaf first, as
/// `KeyStore.getCertificateChain` returns it) and Android assertions signed with that key and a
/// counter the device keeps, as the app does (docs/android.md).
///
/// For tests and the simulator only: its chains verify only where the CA's root is trusted
/// explicitly. Not thread-safe (the counter is mutable state); use one device per task.
public final class SimulatedAndroidDevice {
    public let ca: TestAndroidCA
    public let securityLevel: SecurityLevel
    /// The attested key (the app's Keystore key).
    public let privateKey: ECPrivateKey
    public let publicKey: P256PublicKey
    /// The device's attestation key and certificate (one per device, like a provisioned key).
    public let attestationKey: ECPrivateKey
    public let attestationCertificate: X509Certificate
    /// SHA-256 of the key's SubjectPublicKeyInfo DER: the key id the gateway derives.
    public let keyID: [UInt8]
    /// The counter of the last assertion (0 after attestation).
    public private(set) var counter: UInt32

    /// The DER SubjectPublicKeyInfo of a P-256 key is this prefix, then the uncompressed point.
    static let p256SPKIPrefix: [UInt8] = Hex.decode("3059301306072a8648ce3d020106082a8648ce3d030107034200")!

    public convenience init(ca: TestAndroidCA, securityLevel: SecurityLevel = .trustedEnvironment, counter: UInt32 = 0)
        throws(CertificateBuilder.Error)
    {
        let attestationKey = ECPrivateKey(curve: .p256)
        let certificate = try ca.issueAttestationCertificate(
            for: attestationKey, securityLevel: securityLevel, validity: TestCA.defaultValidity)
        self.init(
            ca: ca, securityLevel: securityLevel, attestationKey: attestationKey, attestationCertificate: certificate, counter: counter)
    }

    /// A device whose attestation key and certificate are given: several devices of one batch share
    /// them, as a provisioned batch does (`TestAndroidCA.RevokedBatch`: a batch whose certificate is
    /// on the status list). The certificate must be the CA's, issued for `attestationKey` at
    /// `securityLevel` (`TestAndroidCA.attestationName`).
    public init(
        ca: TestAndroidCA, securityLevel: SecurityLevel, attestationKey: ECPrivateKey, attestationCertificate: X509Certificate,
        counter: UInt32 = 0
    ) {
        self.ca = ca
        self.securityLevel = securityLevel
        privateKey = ECPrivateKey(curve: .p256)
        publicKey = privateKey.p256PublicKey!
        self.attestationKey = attestationKey
        self.attestationCertificate = attestationCertificate
        keyID = SHA256.hash(Self.p256SPKIPrefix + publicKey.x962)
        self.counter = counter
    }

    /// A KeyDescription for this device's app and security level, for a test to adjust.
    public func keyDescription(packageName: String, signingCertificateSHA256: [UInt8]) -> SimulatedKeyDescription {
        var d = SimulatedKeyDescription(packageName: packageName, signingCertificateSHA256: signingCertificateSHA256)
        d.securityLevel = securityLevel
        return d
    }

    /// The attestation chain for `challenge`, leaf first, DER: what the app sends to register.
    /// `keyDescriptionValue` replaces the encoded KeyDescription (malformed-input tests);
    /// `extraLeafExtensions` follow it in the leaf (real leaves' quirks).
    public func attest(
        challenge: [UInt8], keyDescription: SimulatedKeyDescription, keyDescriptionValue: [UInt8]? = nil,
        extraLeafExtensions: [CertificateBuilder.Extension] = []
    ) throws(CertificateBuilder.Error) -> [[UInt8]] {
        try makeChain(
            challenge: challenge, keyDescription: keyDescription, keyDescriptionValue: keyDescriptionValue,
            extraLeafExtensions: extraLeafExtensions
        ).map(\.der)
    }

    public func makeChain(
        challenge: [UInt8], keyDescription: SimulatedKeyDescription, keyDescriptionValue: [UInt8]? = nil,
        extraLeafExtensions: [CertificateBuilder.Extension] = []
    ) throws(CertificateBuilder.Error) -> [X509Certificate] {
        let leaf = try CertificateBuilder(
            subject: CertificateBuilder.Name(commonName: "Android Keystore Key"),
            issuer: TestAndroidCA.attestationName(for: attestationKey, securityLevel: securityLevel), serialNumber: [1],
            // A Keystore leaf is valid from the epoch to 2048 (its dates are the device's).
            notBefore: 0, notAfter: 2_461_449_600, subjectKey: privateKey, keyUsage: [.digitalSignature], includesKeyIdentifiers: false,
            extensions: [
                .init(oid: KeyDescription.oid, critical: false, value: keyDescriptionValue ?? keyDescription.encoded(challenge: challenge))
            ] + extraLeafExtensions
        ).sign(with: attestationKey)
        return [leaf, attestationCertificate, ca.intermediate, ca.root]
    }

    /// Increments the counter and returns the CBOR assertion `{"counter", "signature"}` over
    /// `counter ‖ clientDataHash` (base64 of it is `X-App-Assertion`).
    public func assert(clientDataHash: [UInt8]) -> [UInt8] {
        counter &+= 1
        return makeAssertion(clientDataHash: clientDataHash, counter: counter).encoded
    }

    /// An assertion with a given counter (the device's counter unchanged), signed by `signingKey`
    /// (another key: a forged assertion) or the device's key.
    public func makeAssertion(clientDataHash: [UInt8], counter: UInt32, signingKey: ECPrivateKey? = nil) -> AndroidAssertion {
        let message = AndroidAssertion.signedMessage(counter: counter, clientDataHash: clientDataHash)
        return AndroidAssertion(counter: counter, signature: (signingKey ?? privateKey).signature(for: message))
    }
}
