import GatewayWire

/// WebAuthn authenticator data as App Attest uses it, parsed with every length checked.
///
/// ```
/// rpIdHash (32) ‖ flags (1) ‖ signCount (4, big-endian)
///   [‖ aaguid (16) ‖ credentialIdLength (2) ‖ credentialId ‖ credentialPublicKey (COSE, CBOR)]   attestations
///   [‖ extensions (CBOR map)]                                                                  since iOS 27
/// ```
/// Apple sets the AT flag in assertions although no credential data follows, and (since iOS 27) may
/// append the extensions map without setting ED. Both are accepted; any other trailing bytes are not.
public struct AuthenticatorData: Sendable, Equatable {
    public struct Flags: OptionSet, Sendable, Equatable {
        public let rawValue: UInt8
        public init(rawValue: UInt8) { self.rawValue = rawValue }
        public static let userPresent = Flags(rawValue: 0x01)
        public static let userVerified = Flags(rawValue: 0x04)
        public static let attestedCredentialData = Flags(rawValue: 0x40)
        public static let extensionData = Flags(rawValue: 0x80)
    }

    public struct AttestedCredentialData: Sendable, Equatable {
        public let aaguid: [UInt8]
        public let credentialID: [UInt8]
        /// The COSE EC2 P-256 credential key as an uncompressed point 0x04 ‖ X ‖ Y.
        public let credentialPublicKey: [UInt8]
    }

    public enum Kind: Sendable { case attestation, assertion }

    public let rpIDHash: [UInt8]
    public let flags: Flags
    public let signCount: UInt32
    public let attestedCredentialData: AttestedCredentialData?
    public let extensions: AppleExtensions?
    /// The exact bytes parsed (the nonce is computed over them).
    public let bytes: [UInt8]

    static let cborLimits = CBORDecoder.Limits(maxDepth: 8, maxItems: 256, maxStringLength: 4096)

    public static func parse(_ bytes: [UInt8], kind: Kind) throws(AppAttestError) -> AuthenticatorData {
        guard bytes.count >= 37 else {
            throw AppAttestError(.malformed, "authenticator data is \(bytes.count) bytes, at least 37 are required")
        }
        let rpIDHash = Array(bytes[0..<32])
        let flags = Flags(rawValue: bytes[32])
        let signCount = UInt32(bytes[33]) << 24 | UInt32(bytes[34]) << 16 | UInt32(bytes[35]) << 8 | UInt32(bytes[36])
        var pos = 37
        var credential: AttestedCredentialData? = nil

        switch kind {
        case .attestation:
            guard flags.contains(.attestedCredentialData) else {
                throw AppAttestError(.malformed, "attestation authenticator data lacks the AT flag (attested credential data)")
            }
            guard bytes.count >= pos + 18 else {
                throw AppAttestError(.malformed, "authenticator data ends inside the attested credential data header")
            }
            let aaguid = Array(bytes[pos..<pos + 16])
            let idLength = Int(bytes[pos + 16]) << 8 | Int(bytes[pos + 17])
            pos += 18
            guard bytes.count - pos >= idLength else {
                throw AppAttestError(.malformed, "credential id length \(idLength) runs past the end of authenticator data")
            }
            let credentialID = Array(bytes[pos..<pos + idLength])
            pos += idLength
            let key: CBORValue
            do {
                (key, pos) = try CBORDecoder(limits: cborLimits).decodePrefix(bytes, from: pos)
            } catch {
                throw AppAttestError(.malformed, "credential public key: \(error)")
            }
            credential = AttestedCredentialData(
                aaguid: aaguid, credentialID: credentialID, credentialPublicKey: try coseP256Point(key))
        case .assertion:
            // Real assertions set AT with nothing after the counter: the flag is not a promise of data here.
            break
        }

        var extensions: AppleExtensions? = nil
        if pos < bytes.count {
            // iOS 27: an extensions map, with or without ED. Anything else trailing is malformed.
            let value: CBORValue
            let end: Int
            do {
                (value, end) = try CBORDecoder(limits: cborLimits).decodePrefix(bytes, from: pos)
            } catch {
                throw AppAttestError(
                    .malformed, "\(bytes.count - pos) trailing byte(s) after authenticator data are not an extensions map: \(error)")
            }
            guard case .map(let map) = value else {
                throw AppAttestError(.malformed, "trailing authenticator data is a CBOR \(value.kindName), not an extensions map")
            }
            guard end == bytes.count else {
                throw AppAttestError(.malformed, "\(bytes.count - end) byte(s) follow the extensions map")
            }
            extensions = try AppleExtensions(map)
        }
        return AuthenticatorData(
            rpIDHash: rpIDHash, flags: flags, signCount: signCount, attestedCredentialData: credential,
            extensions: extensions, bytes: bytes)
    }

    /// COSE_Key (RFC 9053): kty 2 (EC2), crv 1 (P-256), x and y of 32 bytes; alg, when present, -7 (ES256).
    static func coseP256Point(_ value: CBORValue) throws(AppAttestError) -> [UInt8] {
        guard case .map(let m) = value else {
            throw AppAttestError(.malformed, "credential public key is a CBOR \(value.kindName), not a COSE key map")
        }
        guard m[int: 1]?.int == 2 else { throw AppAttestError(.malformed, "COSE key kty is not 2 (EC2)") }
        if let alg = m[int: 3], alg.int != -7 { throw AppAttestError(.malformed, "COSE key alg is not -7 (ES256)") }
        guard m[int: -1]?.int == 1 else { throw AppAttestError(.malformed, "COSE key crv is not 1 (P-256)") }
        guard let x = m[int: -2]?.bytes, x.count == 32, let y = m[int: -3]?.bytes, y.count == 32 else {
            throw AppAttestError(.malformed, "COSE key x and y must be 32-byte strings")
        }
        return [0x04] + x + y
    }
}

/// The extensions Apple appends to authenticator data since iOS 27.
public struct AppleExtensions: Sendable, Equatable {
    public static let validationCategoryKey = "apple_validation_category_01"
    public static let bundleVersionKey = "apple_bundle_version_01"

    public let validationCategory: ValidationCategory?
    public let bundleVersion: String?
    /// Keys of extensions this verifier does not know (kept for logs; they do not fail verification).
    public let unknownKeys: [String]

    init(_ map: CBORMap) throws(AppAttestError) {
        var category: ValidationCategory? = nil
        var version: String? = nil
        var unknown: [String] = []
        for (k, v) in map.entries {
            guard case .text(let key) = k else {
                throw AppAttestError(.malformed, "authenticator data extension key \(k.debugSummary) is not a text string")
            }
            switch key {
            case Self.validationCategoryKey:
                switch v {
                case .bytes(let b) where b.count == 4:
                    category = ValidationCategory(rawValue: UInt32(b[0]) | UInt32(b[1]) << 8 | UInt32(b[2]) << 16 | UInt32(b[3]) << 24)
                case .unsigned(let n) where n <= UInt64(UInt32.max):
                    category = ValidationCategory(rawValue: UInt32(n))
                default:
                    throw AppAttestError(.malformed, "\(key) must be 4 bytes (little-endian), got \(v.debugSummary)")
                }
            case Self.bundleVersionKey:
                guard case .text(let s) = v else {
                    throw AppAttestError(.malformed, "\(key) must be a text string, got a CBOR \(v.kindName)")
                }
                version = s
            default:
                unknown.append(key)
            }
        }
        validationCategory = category
        bundleVersion = version
        unknownKeys = unknown
    }
}

/// How the app was distributed, as Apple tells it since iOS 27 (`apple_validation_category_01`).
public struct ValidationCategory: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }

    public static let os = ValidationCategory(rawValue: 1)
    public static let testFlight = ValidationCategory(rawValue: 2)
    public static let development = ValidationCategory(rawValue: 3)
    public static let appStore = ValidationCategory(rawValue: 4)
    public static let enterprise = ValidationCategory(rawValue: 5)
    public static let developerID = ValidationCategory(rawValue: 6)
    public static let other = ValidationCategory(rawValue: 10)

    static let names: [UInt32: String] = [
        1: "os", 2: "testflight", 3: "development", 4: "app_store", 5: "enterprise", 6: "developer_id", 10: "other",
    ]

    /// The configuration name (`app_store`, `testflight`, …); `unknown_<n>` for values Apple may add.
    public var name: String { Self.names[rawValue] ?? "unknown_\(rawValue)" }
    public var description: String { name }

    public init?(name: String) {
        guard let (v, _) = Self.names.first(where: { $0.value == name }) else { return nil }
        self.init(rawValue: v)
    }

    public static var knownNames: [String] { names.sorted { $0.key < $1.key }.map(\.value) }
}
