import AppAttest
import Foundation
import GatewayCrypto
import GatewayWire
import SimulatorPKI

/// A root → intermediate certificate authority shaped like Apple's App Attest CA (P-384 root and
/// intermediate, P-256 credential certificates carrying the nonce extension), named so that nobody
/// mistakes it for Apple's: "Attest Gateway TEST Root CA" and "Attest Gateway TEST CA 1".
///
/// Beside it, a receipt chain shaped like the one that signs Apple's App Attest receipts (Apple Root
/// CA - G3 → "Apple Application Integration CA 5 - G1" → "Application Attestation Fraud Receipt
/// Signing"): "<name> Root CA - G3" (P-384) → "<name> Integration CA 5 - G1" (P-256) →
/// "<name> Fraud Receipt Signing" (P-256), with Apple's marker extensions, so
/// that simulated attestations carry CMS-signed receipts of the real shape (`issueReceipt`).
///
/// For tests, benchmarks and the simulator only. Nothing it issues verifies unless its `root` is
/// trusted explicitly (`AttestationVerifier(policy:extraRoots:)`, `gatewayd --root FILE` with `rootPEM`),
/// nor any receipt unless its `receiptRoot` is (`ReceiptVerifier(extraRoots:)`, `trust.extra_receipt_roots`).
public final class TestCA: Sendable {
    /// A validity period, both bounds inclusive. For tests, benchmarks and the simulator only.
    public struct Validity: Sendable, Hashable {
        public var notBefore: Date
        public var notAfter: Date

        public init(notBefore: Date, notAfter: Date) {
            self.notBefore = notBefore
            self.notAfter = notAfter
        }

        /// From `start` for `lifetime` seconds.
        public init(from start: Date, lifetime: TimeInterval) {
            self.init(notBefore: start, notAfter: start.addingTimeInterval(lifetime))
        }

        /// Whole seconds since the epoch, as certificates hold them (fractions are dropped).
        var epochNotBefore: Int64 { Int64(notBefore.timeIntervalSince1970.rounded(.down)) }
        var epochNotAfter: Int64 { Int64(notAfter.timeIntervalSince1970.rounded(.down)) }
    }

    /// OID of App Attest's nonce extension in the credential certificate.
    public static let nonceExtensionOID = AttestationVerifier.nonceExtensionOID

    /// 2020-01-01T00:00:00Z to 2060-01-01T00:00:00Z: covers any instant a test or a simulator run uses.
    public static let defaultValidity = Validity(
        notBefore: Date(timeIntervalSince1970: 1_577_836_800), notAfter: Date(timeIntervalSince1970: 2_840_140_800))

    /// Three days, like the credential certificates Apple issued in 2020 and 2021 (later ones live months).
    public static let defaultLeafLifetime: TimeInterval = 3 * 86_400

    /// The name every certificate of this CA carries as its organization ("Attest Gateway TEST").
    public let name: String
    public let rootKey: ECPrivateKey
    public let intermediateKey: ECPrivateKey
    /// The trust anchor: self-signed, P-384, `CN=<name> Root CA`.
    public let root: X509Certificate
    /// Signed by the root, P-384, `CN=<name> CA 1`; the second element of every x5c this CA issues.
    public let intermediate: X509Certificate
    /// Lifetime of credential certificates from their issuing instant.
    public let leafLifetime: TimeInterval

    /// Receipt chain root: self-signed, P-384, `CN=<name> Root CA - G3`.
    public let receiptRoot: X509Certificate
    /// Signed by `receiptRoot`, P-256, `CN=<name> Integration CA 5 - G1`, marker 1.2.840.113635.100.6.2.3.
    public let receiptIntermediate: X509Certificate
    /// Signed by `receiptIntermediate`, P-256, end entity, `CN=<name> Fraud Receipt Signing`, marker
    /// 1.2.840.113635.100.12.15: signs every receipt.
    public let receiptSigner: X509Certificate
    public let receiptRootKey: ECPrivateKey
    public let receiptIntermediateKey: ECPrivateKey
    public let receiptSignerKey: ECPrivateKey

    let rootName: CertificateBuilder.Name
    let intermediateName: CertificateBuilder.Name

    /// Marker extensions of Apple's receipt chain (value NULL): the Application Integration CA's and
    /// the receipt signer's (`ReceiptVerifier.receiptSigningMarkerOID`).
    public static let receiptIntermediateMarkerOID = "1.2.840.113635.100.6.2.3"
    static let nullValue: [UInt8] = [0x05, 0x00]

    /// - Parameters:
    ///   - name: organization of every certificate, and the start of the CA common names.
    ///   - rootValidity: validity of the root.
    ///   - intermediateValidity: validity of the intermediate; the root's when nil.
    ///   - leafLifetime: default lifetime of credential certificates (Apple's live days to months).
    ///   - receiptSignerValidity: validity of the receipt-signing certificate; the root's when nil
    ///     (Apple's live about 13 months).
    public init(
        name: String = "Attest Gateway TEST", rootValidity: Validity = TestCA.defaultValidity,
        intermediateValidity: Validity? = nil, leafLifetime: TimeInterval = TestCA.defaultLeafLifetime,
        receiptSignerValidity: Validity? = nil
    ) throws(CertificateBuilder.Error) {
        self.name = name
        self.leafLifetime = leafLifetime
        rootName = CertificateBuilder.Name(commonName: "\(name) Root CA", organization: name, state: "Test")
        intermediateName = CertificateBuilder.Name(commonName: "\(name) CA 1", organization: name, state: "Test")
        rootKey = ECPrivateKey(curve: .p384)
        intermediateKey = ECPrivateKey(curve: .p384)
        root = try CertificateBuilder(
            subject: rootName, issuer: rootName, serialNumber: CertificateBuilder.randomSerialNumber(),
            notBefore: rootValidity.epochNotBefore, notAfter: rootValidity.epochNotAfter, subjectKey: rootKey,
            basicConstraints: .certificateAuthority(pathLength: nil), keyUsage: [.keyCertSign, .cRLSign]
        ).sign(with: rootKey)
        let iv = intermediateValidity ?? rootValidity
        intermediate = try CertificateBuilder(
            subject: intermediateName, issuer: rootName, serialNumber: CertificateBuilder.randomSerialNumber(),
            notBefore: iv.epochNotBefore, notAfter: iv.epochNotAfter, subjectKey: intermediateKey,
            basicConstraints: .certificateAuthority(pathLength: 0), keyUsage: [.keyCertSign, .cRLSign]
        ).sign(with: rootKey)
        let receipt = try Self.makeReceiptChain(
            name: name, rootValidity: rootValidity, signerValidity: receiptSignerValidity ?? rootValidity)
        (receiptRootKey, receiptIntermediateKey, receiptSignerKey) = (receipt.rootKey, receipt.intermediateKey, receipt.signerKey)
        (receiptRoot, receiptIntermediate, receiptSigner) = (receipt.root, receipt.intermediate, receipt.signer)
    }

    struct ReceiptChain {
        let rootKey: ECPrivateKey
        let intermediateKey: ECPrivateKey
        let signerKey: ECPrivateKey
        let root: X509Certificate
        let intermediate: X509Certificate
        let signer: X509Certificate
    }

    static func receiptNames(_ name: String) -> (root: CertificateBuilder.Name, intermediate: CertificateBuilder.Name) {
        (
            CertificateBuilder.Name(
                commonName: "\(name) Root CA - G3", organizationalUnit: "\(name) Certification Authority", organization: name, state: "Test"
            ),
            CertificateBuilder.Name(
                commonName: "\(name) Integration CA 5 - G1", organizationalUnit: "\(name) Certification Authority",
                organization: name, state: "Test")
        )
    }

    /// Apple's receipt chain in miniature: a P-384 root, a P-256 intermediate and a P-256 signer.
    static func makeReceiptChain(name: String, rootValidity: Validity, signerValidity: Validity) throws(CertificateBuilder.Error)
        -> ReceiptChain
    {
        let names = receiptNames(name)
        let rootKey = ECPrivateKey(curve: .p384)
        let intermediateKey = ECPrivateKey(curve: .p256)
        let root = try CertificateBuilder(
            subject: names.root, issuer: names.root, serialNumber: CertificateBuilder.randomSerialNumber(),
            notBefore: rootValidity.epochNotBefore, notAfter: rootValidity.epochNotAfter, subjectKey: rootKey,
            basicConstraints: .certificateAuthority(pathLength: nil), keyUsage: [.keyCertSign, .cRLSign]
        ).sign(with: rootKey)
        let intermediate = try CertificateBuilder(
            subject: names.intermediate, issuer: names.root, serialNumber: CertificateBuilder.randomSerialNumber(),
            notBefore: rootValidity.epochNotBefore, notAfter: rootValidity.epochNotAfter, subjectKey: intermediateKey,
            basicConstraints: .certificateAuthority(pathLength: 0), keyUsage: [.keyCertSign, .cRLSign],
            extensions: [.init(oid: receiptIntermediateMarkerOID, critical: false, value: nullValue)]
        ).sign(with: rootKey)
        let signerKey = ECPrivateKey(curve: .p256)
        let signer = try issueReceiptSigner(
            name: name, key: signerKey, validity: signerValidity, intermediateKey: intermediateKey)
        return ReceiptChain(
            rootKey: rootKey, intermediateKey: intermediateKey, signerKey: signerKey, root: root, intermediate: intermediate,
            signer: signer)
    }

    /// A receipt-signing certificate for `key`, issued by the receipt intermediate.
    static func issueReceiptSigner(name: String, key: ECPrivateKey, validity: Validity, intermediateKey: ECPrivateKey)
        throws(CertificateBuilder.Error) -> X509Certificate
    {
        try CertificateBuilder(
            subject: CertificateBuilder.Name(
                commonName: "\(name) Fraud Receipt Signing", organization: name, state: "Test"),
            issuer: receiptNames(name).intermediate, serialNumber: CertificateBuilder.randomSerialNumber(),
            notBefore: validity.epochNotBefore, notAfter: validity.epochNotAfter, subjectKey: key,
            basicConstraints: .endEntity, keyUsage: [.digitalSignature],
            extensions: [.init(oid: ReceiptVerifier.receiptSigningMarkerOID, critical: false, value: nullValue)]
        ).sign(with: intermediateKey)
    }

    /// A CA from existing parts (to restore one saved with `write(to:)`). The names are rebuilt from
    /// `name` exactly as `init(name:…)` makes them; `TestCA.load(from:)` checks that the parts fit.
    init(
        name: String, rootKey: ECPrivateKey, intermediateKey: ECPrivateKey, root: X509Certificate,
        intermediate: X509Certificate, leafLifetime: TimeInterval, receipt: ReceiptChain
    ) {
        self.name = name
        self.leafLifetime = leafLifetime
        rootName = CertificateBuilder.Name(commonName: "\(name) Root CA", organization: name, state: "Test")
        intermediateName = CertificateBuilder.Name(commonName: "\(name) CA 1", organization: name, state: "Test")
        self.rootKey = rootKey
        self.intermediateKey = intermediateKey
        self.root = root
        self.intermediate = intermediate
        (receiptRootKey, receiptIntermediateKey, receiptSignerKey) = (receipt.rootKey, receipt.intermediateKey, receipt.signerKey)
        (receiptRoot, receiptIntermediate, receiptSigner) = (receipt.root, receipt.intermediate, receipt.signer)
    }

    /// The root as PEM, to write to a file for `gatewayd --root FILE`.
    public var rootPEM: String { root.pem }

    /// The receipt root as PEM, for `trust.extra_receipt_roots` and `gatewayd verify-receipt --root FILE`.
    public var receiptRootPEM: String { receiptRoot.pem }

    /// The validity of a credential certificate issued at `instant` (whole seconds, `leafLifetime` long).
    public func leafValidity(issuedAt instant: Date) -> Validity {
        let start = Date(timeIntervalSince1970: instant.timeIntervalSince1970.rounded(.down))
        return Validity(from: start, lifetime: leafLifetime)
    }

    /// The nonce extension's value: DER `SEQUENCE { [1] EXPLICIT OCTET STRING(nonce) }`.
    public static func nonceExtensionValue(_ nonce: [UInt8]) -> [UInt8] {
        CertificateBuilder.DER.sequence([CertificateBuilder.DER.explicit(1, CertificateBuilder.DER.octetString(nonce))])
    }

    /// Issues a credential (leaf) certificate for a device's P-256 key, signed by the intermediate:
    /// `CN=<hex SHA256(point)>, OU=AAA Certification TEST, O=<name>, ST=Test`, end entity,
    /// digitalSignature, with the nonce extension (non-critical) unless `nonce` is nil.
    ///
    /// - Parameters:
    ///   - nonceExtensionValue: when given, the raw DER value of the nonce extension instead of the
    ///     one built from `nonce` (for malformed-extension tests).
    ///   - extraExtensions: appended after the nonce extension.
    public func issueCredentialCertificate(
        for key: P256PublicKey, nonce: [UInt8]?, validity: Validity, serialNumber: [UInt8]? = nil,
        nonceExtensionValue: [UInt8]? = nil, extraExtensions: [CertificateBuilder.Extension] = []
    ) throws(CertificateBuilder.Error) -> X509Certificate {
        var extensions: [CertificateBuilder.Extension] = []
        if let value = nonceExtensionValue ?? nonce.map(Self.nonceExtensionValue) {
            extensions.append(.init(oid: Self.nonceExtensionOID, critical: false, value: value))
        }
        let subject = CertificateBuilder.Name(
            commonName: Hex.encode(SHA256.hash(key.x962)), organizationalUnit: "AAA Certification TEST", organization: name,
            state: "Test")
        return try CertificateBuilder(
            subject: subject, issuer: intermediateName, serialNumber: serialNumber ?? CertificateBuilder.randomSerialNumber(),
            notBefore: validity.epochNotBefore, notAfter: validity.epochNotAfter, subjectKey: key,
            basicConstraints: .endEntity, keyUsage: [.digitalSignature], extensions: extensions + extraExtensions
        ).sign(with: intermediateKey)
    }
}
