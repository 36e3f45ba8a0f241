import AndroidAttest
import Foundation
import GatewayCrypto
import GatewayWire
import SimulatorPKI

/// A certificate authority shaped like Google's remote key provisioning chain, for simulated
/// Android devices: root (P-384, self-signed, like "Key Attestation CA1") → intermediate (P-384,
/// like "Droid CA2") → one attestation certificate per device (P-256, `CN=<hex>, O=TEE` or
/// `O=StrongBox`) → the key's leaf (`CN=Android Keystore Key`, P-256, the KeyDescription, valid
/// 1970 to 2048 as a Keystore writes it). Named "Attest Gateway TEST Android …" so nobody takes
/// it for Google's.
///
/// For tests and the simulator only. Nothing it issues verifies unless its root is trusted
/// explicitly (`AndroidAttestationVerifier(extraRoots:)`, `trust.extra_android_roots` with
/// `rootPEM`, `gatewayd verify-android-attestation --root`).
public final class TestAndroidCA: Sendable {
    public let name: String
    public let rootKey: ECPrivateKey
    public let intermediateKey: ECPrivateKey
    public let root: X509Certificate
    public let intermediate: X509Certificate
    let rootName: CertificateBuilder.Name
    let intermediateName: CertificateBuilder.Name

    public init(name: String = "Attest Gateway TEST", validity: TestCA.Validity = TestCA.defaultValidity) throws(CertificateBuilder.Error) {
        self.name = name
        rootName = CertificateBuilder.Name(commonName: "\(name) Android Root", organizationalUnit: "Android", organization: name)
        intermediateName = CertificateBuilder.Name(commonName: "\(name) Droid CA2", organization: name)
        rootKey = ECPrivateKey(curve: .p384)
        intermediateKey = ECPrivateKey(curve: .p384)
        let (from, to) = (validity.epochNotBefore, validity.epochNotAfter)
        root = try CertificateBuilder(
            subject: rootName, issuer: rootName, serialNumber: CertificateBuilder.randomSerialNumber(), notBefore: from, notAfter: to,
            subjectKey: rootKey, basicConstraints: .certificateAuthority(pathLength: nil), keyUsage: [.keyCertSign, .cRLSign]
        ).sign(with: rootKey)
        intermediate = try CertificateBuilder(
            subject: intermediateName, issuer: rootName, serialNumber: CertificateBuilder.randomSerialNumber(), notBefore: from,
            notAfter: to, subjectKey: intermediateKey, basicConstraints: .certificateAuthority(pathLength: nil),
            keyUsage: [.keyCertSign, .cRLSign]
        ).sign(with: rootKey)
    }

    /// A CA from its parts (read back by `load(from:)`); the names are taken from the certificates'
    /// issuer and subject as `init(name:)` writes them.
    init(name: String, rootKey: ECPrivateKey, intermediateKey: ECPrivateKey, root: X509Certificate, intermediate: X509Certificate) {
        self.name = name
        self.rootKey = rootKey
        self.intermediateKey = intermediateKey
        self.root = root
        self.intermediate = intermediate
        rootName = CertificateBuilder.Name(commonName: "\(name) Android Root", organizationalUnit: "Android", organization: name)
        intermediateName = CertificateBuilder.Name(commonName: "\(name) Droid CA2", organization: name)
    }

    /// The root as PEM, for `trust.extra_android_roots` and `gatewayd verify-android-attestation --root FILE`.
    public var rootPEM: String { root.pem }

    /// A device's attestation certificate (its per-device key, remotely provisioned in real
    /// devices), signed by the intermediate.
    public func issueAttestationCertificate(for key: ECPrivateKey, securityLevel: SecurityLevel, validity: TestCA.Validity)
        throws(CertificateBuilder.Error) -> X509Certificate
    {
        try CertificateBuilder(
            subject: Self.attestationName(for: key, securityLevel: securityLevel), issuer: intermediateName,
            serialNumber: CertificateBuilder.randomSerialNumber(),
            notBefore: validity.epochNotBefore, notAfter: validity.epochNotAfter,
            subjectKey: key, basicConstraints: .certificateAuthority(pathLength: nil), keyUsage: [.keyCertSign]
        ).sign(with: intermediateKey)
    }

    /// `CN=<hex of the key's hash>, O=TEE` (or `O=StrongBox`), as remotely provisioned keys are named.
    public static func attestationName(for key: ECPrivateKey, securityLevel: SecurityLevel) -> CertificateBuilder.Name {
        CertificateBuilder.Name(
            commonName: Hex.encode(SHA256.hash(key.publicKeyX962).prefix(16)),
            organization: securityLevel == .strongBox ? "StrongBox" : "TEE")
    }

    /// A stand-in for Google's attestation status list: `{"entries": {"<serial hex>": {"status", "reason"}}}`,
    /// serials in lowercase hex without leading zeros, as Google lists them.
    public static func statusList(listing certificates: [X509Certificate], status: String = "REVOKED", reason: String = "KEY_COMPROMISE")
        -> [UInt8]
    {
        var entries = JSONObject()
        for cert in certificates {
            var entry = JSONObject()
            entry.set("status", status)
            entry.set("reason", reason)
            entries.set(statusListSerial(cert), .object(entry))
        }
        var list = JSONObject()
        list.set("entries", .object(entries))
        return Array(list.description.utf8)
    }
}
