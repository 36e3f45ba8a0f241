import Foundation
import GatewayCrypto
import GatewayWire
import Testing

/// A P-256 public key as a JWK and its RFC 7638 thumbprint (the verdict token's `kid`).
@Suite("P-256 JSON Web Keys and their RFC 7638 thumbprints")
struct JSONWebKeyTests {
    /// RFC 9449 (DPoP) §6.1: a published P-256 public key and its RFC 7638 thumbprint (the `jkt`).
    /// RFC 7638's own example is an RSA key; this is the published EC vector.
    static let x = "l8tFrhx-34tV3hRICRDY9zCkDlpBhF42UQUfWVAWBFs"
    static let y = "9VE4jf_Ok_o64zbTTlcuNJajHmt6v9TDVrU0CdvGRDA"
    static let thumbprint = "0ZcOCORZNYy-DWpqq30jZyJGHTN0d2HglBV3uiguA4I"

    @Test("the published key's thumbprint is the published one; its JWK names the key by it")
    func publishedVector() throws {
        let point = [0x04] + (try Base64.decode(Self.x)) + (try Base64.decode(Self.y))
        let jwk = try #require(P256JWK(x962: point))
        #expect(jwk.x == Self.x && jwk.y == Self.y)
        #expect(jwk.thumbprint == Self.thumbprint)
        #expect(
            jwk.json.description
                == "{\"kty\":\"EC\",\"crv\":\"P-256\",\"x\":\"\(Self.x)\",\"y\":\"\(Self.y)\",\"kid\":\"\(Self.thumbprint)\","
                + "\"use\":\"sig\",\"alg\":\"ES256\"}")
    }

    @Test("a generated key: coordinates of 32 bytes, base64url without padding, and the thumbprint of those; P-384 and bad points are none")
    func generated() throws {
        let key = ECPrivateKey(curve: .p256)
        let jwk = try #require(P256JWK(key))
        #expect(try Base64.decode(jwk.x) == Array(key.publicKeyX962[1..<33]))
        #expect(try Base64.decode(jwk.y) == Array(key.publicKeyX962[33...]))
        for text in [jwk.x, jwk.y, jwk.thumbprint] {
            #expect(text.count == 43 && !text.contains("=") && !text.contains("+") && !text.contains("/"))
        }
        let canonical = "{\"crv\":\"P-256\",\"kty\":\"EC\",\"x\":\"\(jwk.x)\",\"y\":\"\(jwk.y)\"}"
        #expect(jwk.thumbprint == Base64.encodeURL(SHA256.hash(Array(canonical.utf8))))
        #expect(P256JWK(ECPrivateKey(curve: .p384)) == nil)
        #expect(P256JWK(x962: Array(key.publicKeyX962.dropFirst())) == nil)
        #expect(P256JWK(x962: [0x02] + Array(key.publicKeyX962.dropFirst())) == nil)
    }
}
