import GatewayWire

/// ES256 JSON Web Tokens in the compact serialization (RFC 7515 §7.1, RFC 7518 §3.4): what Apple's
/// device services (the App Attest data service, DeviceCheck) take as their authentication token,
/// made "using the same procedure you use to create a provider authentication token for APNs":
/// header `{"alg":"ES256","kid":<key id>}`, claims `{"iss":<team id>,"iat":<seconds>}`, signed with
/// the team's P-256 key (the `.p8` file, PKCS#8).
///
/// The signature is JOSE's: the raw 64 bytes `r ‖ s`, each left-padded to 32 bytes, base64url
/// without padding; never the DER `SEQUENCE { INTEGER r, INTEGER s }` OpenSSL produces and takes
/// (`rawSignature(fromDER:)` and `derSignature(fromRaw:)` convert).
public enum ES256JWT {
    /// Bytes of one coordinate of a P-256 signature half.
    static let half = 32

    /// A compact token `base64url(header).base64url(claims).base64url(r ‖ s)` for Apple's services.
    /// `issuedAt` in Unix seconds. Signing draws a fresh nonce (two tokens of the same claims differ).
    public static func apple(keyID: String, teamID: String, issuedAt: Int64, key: ECPrivateKey) throws(Error) -> String {
        var header = JSONObject()
        header.set("alg", "ES256")
        header.set("kid", keyID)
        var claims = JSONObject()
        claims.set("iss", teamID)
        claims.set("iat", issuedAt)
        return try sign(header: Array(header.description.utf8), claims: Array(claims.description.utf8), key: key)
    }

    /// Signs the header and claims JSON as given (their bytes are what is encoded and signed).
    public static func sign(header: [UInt8], claims: [UInt8], key: ECPrivateKey) throws(Error) -> String {
        try sign(encodedHeader: Base64.encodeURL(header), claims: claims, key: key)
    }

    /// The same with the header already base64url-encoded (a signer whose header never changes
    /// encodes it once).
    public static func sign(encodedHeader: String, claims: [UInt8], key: ECPrivateKey) throws(Error) -> String {
        guard key.curve == .p256 else { throw .wrongKey("ES256 needs a P-256 key, not \(key.curve.rawValue)") }
        let input = encodedHeader + "." + Base64.encodeURL(claims)
        let der = key.signature(for: Array(input.utf8))
        guard let raw = rawSignature(fromDER: der) else {
            throw .malformed("OpenSSL's ECDSA signature is not SEQUENCE { INTEGER r, INTEGER s } of 32-byte values")
        }
        return input + "." + Base64.encodeURL(raw)
    }

    /// A token split and its signature checked with `publicKey`; the header and claims are returned
    /// as their JSON bytes, for the caller to read (this module parses no JSON). `alg` is not read
    /// here: a caller checks that the header says ES256.
    public static func verify(_ token: String, publicKey: P256PublicKey) throws(Error) -> (header: [UInt8], claims: [UInt8]) {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3 else { throw .malformed("a compact JWS has three parts separated by dots, this one \(parts.count)") }
        func decode(_ part: Substring, _ what: String) throws(Error) -> [UInt8] {
            guard !part.contains("="), !part.contains("+"), !part.contains("/") else {
                throw .malformed("the \(what) is not base64url without padding")
            }
            do {
                return try Base64.decode(String(part))
            } catch {
                throw .malformed("the \(what) is not base64url: \(error)")
            }
        }
        let header = try decode(parts[0], "header")
        let claims = try decode(parts[1], "claims")
        let raw = try decode(parts[2], "signature")
        guard raw.count == 2 * half else {
            throw .malformed("an ES256 signature is r ‖ s, 64 bytes, not \(raw.count) (a DER signature is not JOSE's form)")
        }
        let input = Array(token.utf8.prefix(parts[0].utf8.count + 1 + parts[1].utf8.count))
        guard publicKey.isValidSignature(derSignature(fromRaw: raw), for: input) else {
            throw .badSignature("the ES256 signature does not verify with the key")
        }
        return (header, claims)
    }

    public enum Error: Swift.Error, Equatable, Sendable, CustomStringConvertible {
        case wrongKey(String)
        case malformed(String)
        case badSignature(String)

        public var description: String {
            switch self {
            case .wrongKey(let why), .malformed(let why), .badSignature(let why): why
            }
        }
    }

    /// DER `SEQUENCE { INTEGER r, INTEGER s }` to JOSE's `r ‖ s` (each 32 bytes, left-padded); nil
    /// for anything else (a negative or longer value, trailing bytes).
    public static func rawSignature(fromDER der: [UInt8]) -> [UInt8]? {
        var outer = DERReader(der)
        guard let sequence = try? outer.read(tag: DERReader.Tag.sequence), outer.isAtEnd else { return nil }
        var inner = DERReader(sequence.contents)
        guard let r = try? inner.read(tag: 0x02), let s = try? inner.read(tag: 0x02), inner.isAtEnd else { return nil }
        func fixed(_ value: ArraySlice<UInt8>) -> [UInt8]? {
            guard let first = value.first, first & 0x80 == 0 else { return nil }
            let trimmed = value.drop { $0 == 0 }
            guard trimmed.count <= half else { return nil }
            return [UInt8](repeating: 0, count: half - trimmed.count) + trimmed
        }
        guard let rr = fixed(r.contents), let ss = fixed(s.contents) else { return nil }
        return rr + ss
    }

    /// JOSE's `r ‖ s` (64 bytes) to DER `SEQUENCE { INTEGER r, INTEGER s }` in minimal encoding.
    public static func derSignature(fromRaw raw: [UInt8]) -> [UInt8] {
        precondition(raw.count == 2 * half, "an ES256 signature is 64 bytes")
        func integer(_ value: ArraySlice<UInt8>) -> [UInt8] {
            var v = Array(value.drop { $0 == 0 })
            if v.isEmpty { v = [0] }
            if v[0] & 0x80 != 0 { v.insert(0, at: 0) }
            return [0x02, UInt8(v.count)] + v
        }
        let body = integer(raw[0..<half]) + integer(raw[half...])
        return [0x30, UInt8(body.count)] + body
    }
}
