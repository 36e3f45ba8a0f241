import GatewayWire

/// A P-256 public key as a JSON Web Key (RFC 7517, RFC 7518 §6.2): what the gateway publishes at
/// `/.well-known/jwks.json` for the verdict tokens it signs (`ES256JWT`), and the key's RFC 7638
/// thumbprint, its `kid`.
public struct P256JWK: Sendable, Equatable {
    /// The coordinates, base64url without padding (32 bytes each before encoding).
    public let x: String
    public let y: String
    /// RFC 7638: base64url(SHA-256 of the required members in lexicographic order, no whitespace):
    /// `{"crv":"P-256","kty":"EC","x":…,"y":…}`.
    public let thumbprint: String

    /// From an uncompressed point 0x04 ‖ X ‖ Y (65 bytes); nil for anything else.
    public init?(x962 point: [UInt8]) {
        guard point.count == 65, point[0] == 0x04 else { return nil }
        x = Base64.encodeURL(point[1..<33])
        y = Base64.encodeURL(point[33..<65])
        thumbprint = Base64.encodeURL(SHA256.hash(Self.thumbprintInput(x: x, y: y)))
    }

    /// The key's public half: `key` must be on P-256.
    public init?(_ key: ECPrivateKey) {
        guard key.curve == .p256 else { return nil }
        self.init(x962: key.publicKeyX962)
    }

    /// The thumbprint's input (RFC 7638 §3.2: only the required members, sorted, no whitespace).
    /// Coordinates are base64url, which needs no JSON escaping.
    static func thumbprintInput(x: String, y: String) -> String {
        "{\"crv\":\"P-256\",\"kty\":\"EC\",\"x\":\"\(x)\",\"y\":\"\(y)\"}"
    }

    /// The key as a JWKS entry: `kty`, `crv`, `x`, `y`, `kid` (the thumbprint), `use: sig`, `alg: ES256`.
    public var json: JSONObject {
        var o = JSONObject()
        o.set("kty", "EC")
        o.set("crv", "P-256")
        o.set("x", x)
        o.set("y", y)
        o.set("kid", thumbprint)
        o.set("use", "sig")
        o.set("alg", "ES256")
        return o
    }
}
