import AppAttest
import Foundation
import GatewayCrypto
import GatewayWire
import SimulatorPKI

/// A software App Attest device for one app id and environment: it holds one P-256 key, attests it
/// with a credential certificate from a `TestCA`, and signs assertions with an increasing counter,
/// producing the same byte layouts as a real iPhone (see Tests/AppAttestTests/Vectors/README.md).
///
/// Each attestation carries an `ATTEST` receipt of Apple's shape signed by the `TestCA`'s receipt
/// chain (`ReceiptContents.attest`).
///
/// For tests, benchmarks and the simulator only. Its attestations verify only where the `TestCA`
/// root is trusted explicitly; Apple's root alone refuses them with `chain_untrusted` (and its
/// receipts only where the CA's receipt root is trusted).
/// Not thread-safe: the counter is mutable state; use one device per task.
public final class SimulatedDevice {
    /// For tests, benchmarks and the simulator only.
    public enum Error: Swift.Error, Equatable, Sendable {
        /// App Attest device keys are P-256.
        case keyNotP256
    }

    /// A Mac's key policy, as macOS 27 writes it into the credential certificate (extension
    /// 1.2.840.113635.100.8.6): Full Security mode and System Integrity Protection.
    public static let macOSKeyAccessControl = KeyAccessControl.macOSFullSecurityBlob

    public let appID: AppID
    public let environment: AttestEnvironment
    public let ca: TestCA
    public let privateKey: ECPrivateKey
    public let publicKey: P256PublicKey
    /// SHA256 of the uncompressed public point: what `DCAppAttestService.generateKey` reports.
    public let keyID: [UInt8]
    /// The counter of the last assertion (0 after attestation).
    public private(set) var counter: UInt32
    /// The ACL blob written into every credential certificate as extension 1.2.840.113635.100.8.6
    /// (`macOSKeyAccessControl` plays a Mac on macOS 27); nil: none, as iPhones before iOS 27 attest.
    public var keyAccessControl: [UInt8]?

    /// A device with a fresh key.
    public convenience init(appID: AppID, environment: AttestEnvironment = .development, ca: TestCA) {
        try! self.init(appID: appID, environment: environment, ca: ca, key: ECPrivateKey(curve: .p256), counter: 0)
    }

    /// A device with a given P-256 key and counter (to restore a persisted simulator device).
    public init(appID: AppID, environment: AttestEnvironment = .development, ca: TestCA, key: ECPrivateKey, counter: UInt32)
        throws(Error)
    {
        guard key.curve == .p256, let pub = key.p256PublicKey else { throw .keyNotP256 }
        self.appID = appID
        self.environment = environment
        self.ca = ca
        self.privateKey = key
        self.publicKey = pub
        self.keyID = SHA256.hash(pub.x962)
        self.counter = counter
    }

    // MARK: Attestation

    /// The CBOR attestation object `{"fmt","attStmt":{"x5c":[leaf,intermediate],"receipt"},"authData"}`
    /// for `clientDataHash`, with a credential certificate issued at `instant`.
    public func attest(
        clientDataHash: [UInt8], at instant: Date = Date(), extensions: SimulatedExtensions? = nil,
        mutations: AttestationMutations = .none
    ) throws(CertificateBuilder.Error) -> [UInt8] {
        try makeAttestation(clientDataHash: clientDataHash, at: instant, extensions: extensions, mutations: mutations).bytes
    }

    /// Like `attest`, with the parts that went into the object.
    public func makeAttestation(
        clientDataHash: [UInt8], at instant: Date = Date(), extensions: SimulatedExtensions? = nil,
        mutations m: AttestationMutations = .none
    ) throws(CertificateBuilder.Error) -> SimulatedAttestation {
        let flags = m.flags ?? (0x40 | (extensions?.setsExtensionDataFlag == true ? 0x80 : 0))
        let credentialID = m.credentialID ?? keyID
        var authData = m.rpIDHash ?? appID.rpIDHash
        authData.append(flags)
        authData += Self.bigEndian(m.counter ?? 0)
        authData += m.aaguid ?? environment.aaguid
        authData += [UInt8(truncatingIfNeeded: credentialID.count >> 8), UInt8(truncatingIfNeeded: credentialID.count)]
        authData += credentialID
        authData += Self.coseKey(m.credentialPublicKey ?? publicKey.x962)
        if let extensions { authData += extensions.encoded }
        authData += m.trailingAuthenticatorData ?? []

        let nonce = SHA256.hash(authData, clientDataHash)
        let issuer = m.issuingCA ?? ca
        var leafExtensions = m.extraLeafExtensions
        if let keyAccessControl {
            leafExtensions.insert(
                .init(oid: KeyAccessControl.oid, critical: false, value: KeyAccessControl.extensionValue(blob: keyAccessControl)), at: 0)
        }
        let leaf = try issuer.issueCredentialCertificate(
            for: m.leafPublicKey ?? publicKey, nonce: m.omitNonceExtension ? nil : (m.certificateNonce ?? nonce),
            validity: m.leafValidity ?? issuer.leafValidity(issuedAt: instant),
            nonceExtensionValue: m.omitNonceExtension ? nil : m.nonceExtensionValue, extraExtensions: leafExtensions)
        if let i = m.tamperedAuthenticatorDataByte { authData[i] ^= 0x01 }

        let receipt: [UInt8]
        if let given = m.receipt {
            receipt = given
        } else {
            var contents = ReceiptContents.attest(
                appID: appID, certificate: leaf.der, clientDataHash: clientDataHash, environment: environment, at: instant)
            m.receiptEdit?(&contents)
            do {
                receipt = try issuer.issueReceipt(contents)
            } catch {
                throw .signingFailed("receipt: \(error)")
            }
        }
        let x5c = m.x5c ?? [leaf.der, issuer.intermediate.der]
        let statement = CBORMap([
            (.text("x5c"), .array(x5c.map { .bytes($0) })),
            (.text("receipt"), .bytes(receipt)),
        ])
        let object = CBORMap([
            (.text("fmt"), .text(m.format ?? AttestationObject.format)),
            (.text("attStmt"), .map(statement)),
            (.text("authData"), .bytes(authData)),
        ])
        return SimulatedAttestation(
            bytes: CBOREncoder.encode(.map(object)), keyID: keyID, clientDataHash: clientDataHash, authenticatorData: authData,
            nonce: nonce, credentialCertificate: leaf, intermediate: issuer.intermediate, receipt: receipt)
    }

    // MARK: Assertion

    /// Increments the counter and returns the CBOR assertion `{"signature","authenticatorData"}`:
    /// authenticatorData = rpIdHash ‖ flags 0x40 (as real iPhones set) ‖ counter [‖ extensions map],
    /// signature = ECDSA-SHA256 over nonce = SHA256(authenticatorData ‖ clientDataHash).
    public func assert(clientDataHash: [UInt8], extensions: SimulatedExtensions? = nil, mutations: AssertionMutations = .none)
        -> [UInt8]
    {
        makeAssertion(clientDataHash: clientDataHash, extensions: extensions, mutations: mutations).bytes
    }

    /// Like `assert`, with the parts that went into the object.
    public func makeAssertion(
        clientDataHash: [UInt8], extensions: SimulatedExtensions? = nil, mutations m: AssertionMutations = .none
    ) -> SimulatedAssertion {
        let emitted: UInt32
        if let c = m.counter {
            emitted = c
        } else {
            counter &+= 1
            emitted = counter
        }
        let flags = m.flags ?? (0x40 | (extensions?.setsExtensionDataFlag == true ? 0x80 : 0))
        var authData = m.rpIDHash ?? appID.rpIDHash
        authData.append(flags)
        authData += Self.bigEndian(emitted)
        if let extensions { authData += extensions.encoded }
        authData += m.trailingAuthenticatorData ?? []

        let nonce = SHA256.hash(authData, m.signedClientDataHash ?? clientDataHash)
        let signature = m.signature ?? (m.signingKey ?? privateKey).signature(for: nonce)
        if let i = m.tamperedAuthenticatorDataByte { authData[i] ^= 0x01 }

        let object = CBORMap([
            (.text("signature"), .bytes(signature)),
            (.text("authenticatorData"), .bytes(authData)),
        ])
        return SimulatedAssertion(
            bytes: CBOREncoder.encode(.map(object)), authenticatorData: authData, counter: emitted, signature: signature)
    }

    // MARK: Encoding

    /// COSE_Key {1: 2 (EC2), 3: -7 (ES256), -1: 1 (P-256), -2: x, -3: y} of an uncompressed point.
    static func coseKey(_ point: [UInt8]) -> [UInt8] {
        let x = Array(point.dropFirst().prefix(32))
        let y = Array(point.dropFirst(33).prefix(32))
        let map = CBORMap([
            (.unsigned(1), .unsigned(2)),
            (.unsigned(3), .negative(6)),
            (.negative(0), .unsigned(1)),
            (.negative(1), .bytes(x)),
            (.negative(2), .bytes(y)),
        ])
        return CBOREncoder.encode(.map(map))
    }

    static func bigEndian(_ v: UInt32) -> [UInt8] {
        [UInt8(v >> 24), UInt8((v >> 16) & 0xff), UInt8((v >> 8) & 0xff), UInt8(v & 0xff)]
    }
}

/// An attestation a `SimulatedDevice` made, with its parts. For tests, benchmarks and the simulator only.
public struct SimulatedAttestation: Sendable {
    /// The CBOR attestation object, as the app would send it.
    public let bytes: [UInt8]
    public let keyID: [UInt8]
    public let clientDataHash: [UInt8]
    /// authData as sent (after any tampering).
    public let authenticatorData: [UInt8]
    /// SHA256(authData ‖ clientDataHash) over authData before any tampering.
    public let nonce: [UInt8]
    /// x5c[0] as issued (also when `mutations.x5c` replaced the array that was sent).
    public let credentialCertificate: X509Certificate
    /// The intermediate of the CA that issued the credential certificate.
    public let intermediate: X509Certificate
    /// `attStmt.receipt` as sent.
    public let receipt: [UInt8]
}

/// An assertion a `SimulatedDevice` made, with its parts. For tests, benchmarks and the simulator only.
public struct SimulatedAssertion: Sendable {
    /// The CBOR assertion object, as the app would send it.
    public let bytes: [UInt8]
    /// authenticatorData as sent (after any tampering).
    public let authenticatorData: [UInt8]
    /// The counter in authenticatorData.
    public let counter: UInt32
    public let signature: [UInt8]
}
