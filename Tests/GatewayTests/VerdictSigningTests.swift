import Foundation
import GatewayConfig
import GatewayCrypto
import GatewayPolicy
import GatewayWire
import Testing

@testable import Gateway

/// `verdict` compiled: the key file's rules (read at start, by `check` and on reload; never its
/// contents in a message), refused at `verdict.key`'s position, and a reload that changes the key
/// keeping the old public key in the JWKS.
@Suite("verdict: the signing key file and the runtime's key set")
struct VerdictSigningTests {
    final class Files {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("verdict-\(UUID().uuidString)")
        init() throws { try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true) }
        deinit { try? FileManager.default.removeItem(at: dir) }

        func write(_ name: String, _ text: String, mode: Int = 0o600) throws -> String {
            let path = dir.appendingPathComponent(name).path
            #expect(FileManager.default.createFile(atPath: path, contents: Data(text.utf8)))
            #expect(chmod(path, mode_t(mode)) == 0)
            return path
        }
    }

    @Test("bad key files are refused at verdict.key, naming the file and never its contents")
    func badKeys() throws {
        let files = try Files()
        let p256 = ECPrivateKey(curve: .p256)
        let cases: [(path: String, expected: String)] = [
            (files.dir.appendingPathComponent("missing.pem").path, "does not exist"),
            (try files.write("open.pem", p256.pkcs8PEM, mode: 0o644), "lets other users read or change the verdict's private key"),
            (try files.write("empty.pem", ""), "is empty"),
            (
                try files.write("garbage.pem", "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"),
                "is not an EC P-256 private key in PEM"
            ),
            (try files.write("p384.pem", ECPrivateKey(curve: .p384).pkcs8PEM), "is a P-384 key; the verdict is signed with ES256"),
            (files.dir.path, "is not a regular file"),
        ]
        for c in cases {
            do {
                _ = try VerdictSigning.readKey(c.path)
                Issue.record("\(c.path) was accepted")
            } catch {
                #expect(error.description.hasPrefix("verdict.key \(c.path): "), "\(error)")
                #expect(error.description.contains(c.expected), "\(error)")
                #expect(!error.description.contains("BEGIN"), "\(error)")
            }
        }
        let sec1 = try files.write("sec1.pem", try Self.sec1PEM())
        #expect(try VerdictSigning.readKey(sec1).key.curve == .p256)
    }

    /// A SEC 1 `BEGIN EC PRIVATE KEY` file, as `openssl ecparam -genkey` writes it.
    static func sec1PEM() throws -> String {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
        p.arguments = ["ecparam", "-name", "prime256v1", "-genkey", "-noout"]
        let out = Pipe()
        p.standardOutput = out
        try p.run()
        let data = out.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        let text = String(decoding: data, as: UTF8.self)
        #expect(text.hasPrefix("-----BEGIN EC PRIVATE KEY-----"))
        return text
    }

    @Test("the runtime: the key checked at compile (check, start, reload) at its position; a new key keeps the old one in the JWKS")
    func runtime() throws {
        let files = try Files()
        let key = try files.write("verdict.pem", ECPrivateKey(curve: .p256).pkcs8PEM)
        let yaml = """
            listeners:
              - {name: public, address: 127.0.0.1:0}
            upstreams:
              - {name: demo, url: demo}
            routes:
              - {name: default, match: {path_prefix: /}, upstream: demo}
            verdict: {key: \(key), ttl: 30s, issuer: gw-test}
            """
        let config = try GatewayConfig.parse(yaml: yaml, baseDirectory: files.dir.path)
        let first = try GatewayRuntime(config, coreCount: 1)
        let v1 = try #require(first.verdict)
        #expect(v1.issuer == "gw-test" && !v1.publish && v1.keys.ttlSeconds == 30)
        let again = try GatewayRuntime(config, coreCount: 1, previous: first)
        #expect(again.verdict?.keys.current.kid == v1.keys.current.kid && again.verdict?.keys.retired.isEmpty == true)
        _ = try files.write("verdict.pem", ECPrivateKey(curve: .p256).pkcs8PEM)
        let rotated = try GatewayRuntime(config, coreCount: 1, previous: again)
        let v2 = try #require(rotated.verdict)
        #expect(v2.keys.current.kid != v1.keys.current.kid)
        #expect(v2.keys.retired.map(\.jwk.thumbprint) == [v1.keys.current.kid])
        let jwks = v2.jwksResponse(nowMillis: AttestContext.nowMillis())
        #expect(jwks.status == 200)
        let text = String(decoding: jwks.body, as: UTF8.self)
        #expect(text.contains(v1.keys.current.kid) && text.contains(v2.keys.current.kid))
        #expect(!text.contains("\"d\""))
        #expect(chmod(key, 0o644) == 0)
        do {
            _ = try GatewayRuntime(config, coreCount: 1, previous: rotated)
            Issue.record("a world-readable key was accepted")
        } catch {
            #expect(error.diagnostic?.line == 7)
            #expect(error.description.contains("verdict.key \(key): its mode 0644 lets other users read or change"), "\(error)")
        }
    }
}
