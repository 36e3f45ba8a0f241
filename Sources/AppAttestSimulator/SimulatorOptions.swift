import AppAttest
import GatewayCrypto
import GatewayWire
import SimulatorPKI

/// The iOS 27 extensions map a simulated device appends to its authenticator data:
/// `{"apple_validation_category_01": 4-byte little-endian bytes, "apple_bundle_version_01": text}`.
///
/// For tests, benchmarks and the simulator only.
public struct SimulatedExtensions: Sendable, Hashable {
    /// The map as it is encoded, in this order.
    public var map: CBORMap
    /// Whether the ED flag (0x80) is set. Apple may append the map without it; both must verify.
    public var setsExtensionDataFlag: Bool

    /// The two extensions Apple defines; a nil value leaves its key out.
    public init(validationCategory: ValidationCategory? = nil, bundleVersion: String? = nil, setsExtensionDataFlag: Bool = false) {
        var m = CBORMap()
        if let validationCategory {
            let v = validationCategory.rawValue
            m.append(
                .text(AppleExtensions.validationCategoryKey),
                .bytes([UInt8(v & 0xff), UInt8((v >> 8) & 0xff), UInt8((v >> 16) & 0xff), UInt8(v >> 24)]))
        }
        if let bundleVersion { m.append(.text(AppleExtensions.bundleVersionKey), .text(bundleVersion)) }
        self.map = m
        self.setsExtensionDataFlag = setsExtensionDataFlag
    }

    /// Any map, for extensions with unexpected keys or value types.
    public init(map: CBORMap, setsExtensionDataFlag: Bool = false) {
        self.map = map
        self.setsExtensionDataFlag = setsExtensionDataFlag
    }

    /// The CBOR bytes appended to authenticator data.
    public var encoded: [UInt8] { CBOREncoder.encode(.map(map)) }
}

/// Deliberate defects for negative tests of attestation verification. The default value changes
/// nothing: the device produces what a real iPhone produces. Each field breaks one thing; the nonce
/// in the credential certificate is still computed over the final authenticator data, so only the
/// check a field aims at fails.
///
/// For tests, benchmarks and the simulator only. The verifier knows nothing of these options: they
/// only change the bytes the simulator emits.
public struct AttestationMutations: Sendable {
    /// `fmt` instead of "apple-appattest".
    public var format: String?
    /// The whole flags byte instead of 0x40 (| 0x80 when the extensions ask for ED).
    public var flags: UInt8?
    /// A counter instead of 0.
    public var counter: UInt32?
    /// 16 aaguid bytes instead of the environment's (other lengths shift the fields after it).
    public var aaguid: [UInt8]?
    /// The rpIdHash instead of SHA256(app id) (e.g. `AppID("OTHER.app").rpIDHash`).
    public var rpIDHash: [UInt8]?
    /// The credential id instead of the key id (its length field follows it).
    public var credentialID: [UInt8]?
    /// The COSE credential key in authData: this uncompressed P-256 point instead of the device key.
    public var credentialPublicKey: [UInt8]?
    /// Bytes appended after the attested credential data and any extensions map.
    public var trailingAuthenticatorData: [UInt8]?
    /// XORs 0x01 into this byte of authData after the certificate was issued over it.
    public var tamperedAuthenticatorDataByte: Int?

    /// The nonce written into the credential certificate instead of SHA256(authData ‖ clientDataHash).
    public var certificateNonce: [UInt8]?
    /// Leaves the nonce extension out of the credential certificate.
    public var omitNonceExtension: Bool
    /// The raw DER value of the nonce extension (malformed encodings).
    public var nonceExtensionValue: [UInt8]?
    /// Further extensions of the credential certificate (e.g. a second nonce extension).
    public var extraLeafExtensions: [CertificateBuilder.Extension]
    /// The credential certificate certifies this key instead of the device key (→ key id mismatch).
    public var leafPublicKey: P256PublicKey?
    /// The credential certificate's validity instead of `TestCA.leafValidity(issuedAt:)`.
    public var leafValidity: TestCA.Validity?
    /// Another CA (not trusted by the verifier) issues the credential certificate; x5c then carries
    /// that CA's intermediate.
    public var issuingCA: TestCA?
    /// The whole x5c array (DER certificates) instead of [leaf, intermediate].
    public var x5c: [[UInt8]]?
    /// `attStmt.receipt` instead of the simulator's receipt (an empty array: no receipt).
    public var receipt: [UInt8]?
    /// Changes the `ATTEST` receipt's fields before the receipt chain signs them (another app id,
    /// type, client hash, creation time…); the signature stays valid.
    public var receiptEdit: (@Sendable (inout ReceiptContents) -> Void)?

    public init(
        format: String? = nil, flags: UInt8? = nil, counter: UInt32? = nil, aaguid: [UInt8]? = nil,
        rpIDHash: [UInt8]? = nil, credentialID: [UInt8]? = nil, credentialPublicKey: [UInt8]? = nil,
        trailingAuthenticatorData: [UInt8]? = nil, tamperedAuthenticatorDataByte: Int? = nil,
        certificateNonce: [UInt8]? = nil, omitNonceExtension: Bool = false, nonceExtensionValue: [UInt8]? = nil,
        extraLeafExtensions: [CertificateBuilder.Extension] = [], leafPublicKey: P256PublicKey? = nil,
        leafValidity: TestCA.Validity? = nil, issuingCA: TestCA? = nil, x5c: [[UInt8]]? = nil, receipt: [UInt8]? = nil,
        receiptEdit: (@Sendable (inout ReceiptContents) -> Void)? = nil
    ) {
        self.format = format
        self.flags = flags
        self.counter = counter
        self.aaguid = aaguid
        self.rpIDHash = rpIDHash
        self.credentialID = credentialID
        self.credentialPublicKey = credentialPublicKey
        self.trailingAuthenticatorData = trailingAuthenticatorData
        self.tamperedAuthenticatorDataByte = tamperedAuthenticatorDataByte
        self.certificateNonce = certificateNonce
        self.omitNonceExtension = omitNonceExtension
        self.nonceExtensionValue = nonceExtensionValue
        self.extraLeafExtensions = extraLeafExtensions
        self.leafPublicKey = leafPublicKey
        self.leafValidity = leafValidity
        self.issuingCA = issuingCA
        self.x5c = x5c
        self.receipt = receipt
        self.receiptEdit = receiptEdit
    }

    /// No defect.
    public static let none = AttestationMutations()
}

/// Deliberate defects for negative tests of assertion verification. The default value changes
/// nothing. For tests, benchmarks and the simulator only; the verifier knows nothing of these options.
public struct AssertionMutations: Sendable {
    /// The counter to emit instead of the incremented one; the device's counter is left unchanged.
    public var counter: UInt32?
    /// The whole flags byte instead of 0x40 (| 0x80 when the extensions ask for ED).
    public var flags: UInt8?
    /// The rpIdHash instead of SHA256(app id); the signature covers it (only the app id check fails).
    public var rpIDHash: [UInt8]?
    /// Bytes appended after the counter and any extensions map; the signature covers them.
    public var trailingAuthenticatorData: [UInt8]?
    /// XORs 0x01 into this byte of authenticatorData after signing.
    public var tamperedAuthenticatorDataByte: Int?
    /// Signs over SHA256(authenticatorData ‖ this) instead of the given clientDataHash.
    public var signedClientDataHash: [UInt8]?
    /// Signs with this key instead of the device key.
    public var signingKey: ECPrivateKey?
    /// The signature bytes instead of a real signature.
    public var signature: [UInt8]?

    public init(
        counter: UInt32? = nil, flags: UInt8? = nil, rpIDHash: [UInt8]? = nil, trailingAuthenticatorData: [UInt8]? = nil,
        tamperedAuthenticatorDataByte: Int? = nil, signedClientDataHash: [UInt8]? = nil, signingKey: ECPrivateKey? = nil,
        signature: [UInt8]? = nil
    ) {
        self.counter = counter
        self.flags = flags
        self.rpIDHash = rpIDHash
        self.trailingAuthenticatorData = trailingAuthenticatorData
        self.tamperedAuthenticatorDataByte = tamperedAuthenticatorDataByte
        self.signedClientDataHash = signedClientDataHash
        self.signingKey = signingKey
        self.signature = signature
    }

    /// No defect.
    public static let none = AssertionMutations()
}
