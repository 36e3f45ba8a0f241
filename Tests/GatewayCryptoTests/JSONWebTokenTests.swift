import Foundation
import GatewayCrypto
import GatewayWire
import Testing

/// ES256 tokens for Apple's device services: JOSE's raw `r ‖ s` signature (not DER), checked against
/// RFC 7515's own ES256 example and against the openssl binary.
@Suite("ES256 JSON Web Tokens")
struct JSONWebTokenTests {
    /// RFC 7515 Appendix A.3: the published ES256 JWS and its key's public point.
    static let rfcToken =
        "eyJhbGciOiJFUzI1NiJ9."
        + "eyJpc3MiOiJqb2UiLA0KICJleHAiOjEzMDA4MTkzODAsDQogImh0dHA6Ly9leGFtcGxlLmNvbS9pc19yb290Ijp0cnVlfQ."
        + "DtEhU3ljbEg8L38VWAfUAqOyKAM6-Xx-F4GawxaepmXFCgfTjDxw5djxLa8ISlSApmWQxfKTUJqPP3-Kg6NU1Q"
    static let rfcX = "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU"
    static let rfcY = "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"

    @Test("RFC 7515 A.3's ES256 token verifies, and with one bit flipped it does not")
    func rfcVector() throws {
        let key = try P256PublicKey(x962: [0x04] + (try Base64.decode(Self.rfcX)) + (try Base64.decode(Self.rfcY)))
        let (header, claims) = try ES256JWT.verify(Self.rfcToken, publicKey: key)
        #expect(String(decoding: header, as: UTF8.self) == #"{"alg":"ES256"}"#)
        #expect(String(decoding: claims, as: UTF8.self).contains(#""iss":"joe""#))
        var flipped = Array(Self.rfcToken.utf8)
        flipped[flipped.count - 3] = flipped[flipped.count - 3] == UInt8(ascii: "N") ? UInt8(ascii: "M") : UInt8(ascii: "N")
        #expect(throws: ES256JWT.Error.self) { try ES256JWT.verify(String(decoding: flipped, as: UTF8.self), publicKey: key) }
    }

    @Test("Apple's token: header alg ES256 and kid, claims iss and iat, a 64-byte signature that verifies")
    func appleToken() throws {
        let key = ECPrivateKey(curve: .p256)
        let token = try ES256JWT.apple(keyID: "ABC123DEFG", teamID: "DEF123GHIJ", issuedAt: 1_437_179_036, key: key)
        let parts = token.split(separator: ".").map(String.init)
        #expect(parts.count == 3)
        #expect(String(decoding: try Base64.decode(parts[0]), as: UTF8.self) == #"{"alg":"ES256","kid":"ABC123DEFG"}"#)
        #expect(String(decoding: try Base64.decode(parts[1]), as: UTF8.self) == #"{"iss":"DEF123GHIJ","iat":1437179036}"#)
        #expect(try Base64.decode(parts[2]).count == 64)
        #expect(!token.contains("=") && !token.contains("+") && !token.contains("/"))
        _ = try ES256JWT.verify(token, publicKey: try #require(key.p256PublicKey))
        // Another key's signature does not verify.
        #expect(throws: ES256JWT.Error.self) { try ES256JWT.verify(token, publicKey: ECPrivateKey(curve: .p256).p256PublicKey!) }
    }

    @Test("a DER signature in the token's place is refused: JOSE's form is r ‖ s")
    func derIsNotJOSE() throws {
        let key = ECPrivateKey(curve: .p256)
        let input = Base64.encodeURL(Array(#"{"alg":"ES256"}"#.utf8)) + "." + Base64.encodeURL(Array("{}".utf8))
        let der = key.signature(for: Array(input.utf8))
        let token = input + "." + Base64.encodeURL(der)
        do {
            _ = try ES256JWT.verify(token, publicKey: key.p256PublicKey!)
            Issue.record("a DER signature was accepted")
        } catch {
            guard case .malformed = error else {
                Issue.record("expected malformed, got \(error)")
                return
            }
        }
    }

    @Test("raw and DER signatures convert both ways, short r and s included")
    func conversions() throws {
        // r with a high bit (a 0x00 pad in DER), s short (leading zero bytes dropped in DER).
        let raw = [UInt8](repeating: 0x80, count: 32) + [UInt8](repeating: 0, count: 30) + [0x01, 0x02]
        let der = ES256JWT.derSignature(fromRaw: raw)
        #expect(der == [0x30, 0x27, 0x02, 0x21, 0x00] + [UInt8](repeating: 0x80, count: 32) + [0x02, 0x02, 0x01, 0x02])
        #expect(ES256JWT.rawSignature(fromDER: der) == raw)
        for _ in 0..<64 {
            let key = ECPrivateKey(curve: .p256)
            let message = SecureRandom.bytes(20)
            let signature = key.signature(for: message)
            let r = try #require(ES256JWT.rawSignature(fromDER: signature))
            #expect(ES256JWT.derSignature(fromRaw: r) == signature)
        }
        #expect(ES256JWT.rawSignature(fromDER: [0x30, 0x00]) == nil)
        #expect(ES256JWT.rawSignature(fromDER: der + [0]) == nil)
        #expect(ES256JWT.rawSignature(fromDER: [0x30, 0x06, 0x02, 0x01, 0x80, 0x02, 0x01, 0x01]) == nil)  // negative r
    }

    @Test("the openssl binary verifies our token's signature once it is turned back into DER")
    func opensslVerifies() throws {
        let key = ECPrivateKey(curve: .p256)
        let token = try ES256JWT.apple(keyID: "KEY1234567", teamID: "TEAM123456", issuedAt: 1_700_000_000, key: key)
        let parts = token.split(separator: ".")
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("jwt-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let keyFile = dir.appendingPathComponent("key.pem")
        try key.pkcs8PEM.write(to: keyFile, atomically: true, encoding: .utf8)
        let input = dir.appendingPathComponent("input")
        try Data((parts[0] + "." + parts[1]).utf8).write(to: input)
        let signature = dir.appendingPathComponent("sig.der")
        try Data(ES256JWT.derSignature(fromRaw: try Base64.decode(String(parts[2])))).write(to: signature)
        let pub = dir.appendingPathComponent("pub.pem")
        #expect(try run(["ec", "-in", keyFile.path, "-pubout", "-out", pub.path]) == 0)
        #expect(try run(["dgst", "-sha256", "-verify", pub.path, "-signature", signature.path, input.path]) == 0)
    }

    private func run(_ args: [String]) throws -> Int32 {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
        p.arguments = args
        p.standardOutput = FileHandle.nullDevice
        p.standardError = FileHandle.nullDevice
        try p.run()
        p.waitUntilExit()
        return p.terminationStatus
    }
}
