import Foundation
import GatewayConfig
import GatewayCrypto
import GatewayWire
import Testing

@testable import Gateway

/// `apple` compiled: the `.p8` key file's rules (read at start, by `check` and on reload; never its
/// contents in a message), the token (ES256, bare or Bearer, made again after 30 minutes), the
/// endpoints by environment, and a reload that changes nothing keeping the running object.
@Suite("apple: the team key, its token, the service endpoints")
struct AppleServicesTests {
    final class Files {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("apple-\(UUID().uuidString)")
        init() throws { try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true) }
        deinit { try? FileManager.default.removeItem(at: dir) }

        func write(_ name: String, _ text: String, mode: Int = 0o600) throws -> String {
            let path = dir.appendingPathComponent(name).path
            #expect(FileManager.default.createFile(atPath: path, contents: Data(text.utf8)))
            #expect(chmod(path, mode_t(mode)) == 0)
            return path
        }
    }

    static func config(key: String, url: UpstreamURL? = nil) -> AppleConfig {
        AppleConfig(teamID: "ABCDE12345", keyID: "KEY1234567", privateKey: key, attestDataURL: url)
    }

    @Test("a good key: tokens verify with its public key, bare for the data service and Bearer for DeviceCheck, cached 30 minutes")
    func tokens() throws {
        let files = try Files()
        let key = ECPrivateKey(curve: .p256)
        let services = try AppleServices(Self.config(key: try files.write("AuthKey_KEY1234567.p8", key.pkcs8PEM, mode: 0o400)))
        let bare = try services.authorization(.bare, nowSeconds: 1_800_000_000)
        let (header, claims) = try ES256JWT.verify(bare, publicKey: key.p256PublicKey!)
        #expect(String(decoding: header, as: UTF8.self) == #"{"alg":"ES256","kid":"KEY1234567"}"#)
        #expect(String(decoding: claims, as: UTF8.self) == #"{"iss":"ABCDE12345","iat":1800000000}"#)
        #expect(try services.authorization(.bearer, nowSeconds: 1_800_000_100) == "Bearer " + bare)
        #expect(try services.authorization(.bare, nowSeconds: 1_800_000_000 + 1_799) == bare)
        let next = try services.authorization(.bare, nowSeconds: 1_800_000_000 + 1_800)
        #expect(next != bare)
        let (_, nextClaims) = try ES256JWT.verify(next, publicKey: key.p256PublicKey!)
        #expect(String(decoding: nextClaims, as: UTF8.self).contains(#""iat":1800001800"#))
        // Apple's hosts by environment, or the configured base url for both.
        #expect(
            services.attestData(.development)
                == .init(host: "data-development.appattest.apple.com", port: 443, target: "/v1/attestationData"))
        #expect(services.attestData(.production).authority == "data.appattest.apple.com")
        let local = try AppleServices(
            Self.config(
                key: try files.write("k2.p8", key.pkcs8PEM), url: UpstreamURL(scheme: .https, host: "127.0.0.1", port: 8443, path: "/base"))
        )
        #expect(local.attestData(.production) == local.attestData(.development))
        #expect(local.attestData(.production).target == "/base/v1/attestationData")
        #expect(local.attestData(.production).authority == "127.0.0.1:8443")
    }

    @Test(
        "the team key's mode: the rule of every secret file (owner only, or read by the group), the same for the runtime, check and the simulator's 0600"
    )
    func keyModes() throws {
        let files = try Files()
        let key = ECPrivateKey(curve: .p256)
        for mode in [0o400, 0o600, 0o440, 0o640] {
            let path = try files.write("ok-\(String(mode, radix: 8)).p8", key.pkcs8PEM, mode: mode)
            #expect(throws: Never.self, "mode \(String(mode, radix: 8))") { _ = try AppleServices(Self.config(key: path)) }
        }
        for mode in [0o644, 0o604, 0o660, 0o620, 0o606] {
            let path = try files.write("open-\(String(mode, radix: 8)).p8", key.pkcs8PEM, mode: mode)
            do {
                _ = try AppleServices(Self.config(key: path))
                Issue.record("mode \(String(mode, radix: 8)) was accepted")
            } catch {
                #expect(
                    error.description.contains("make it readable by the gateway only (chmod 0600 or 0400; 0640 or 0440 with a group)"),
                    "\(error)")
            }
        }
    }

    @Test("bad key files are refused at apple.private_key, naming the file and never its contents")
    func badKeys() throws {
        let files = try Files()
        let p256 = ECPrivateKey(curve: .p256)
        let cases: [(path: String, expected: String)] = [
            (files.dir.appendingPathComponent("missing.p8").path, "does not exist"),
            (try files.write("open.p8", p256.pkcs8PEM, mode: 0o644), "lets other users read or change the team's private key"),
            (try files.write("group-writable.p8", p256.pkcs8PEM, mode: 0o660), "lets other users read or change"),
            (try files.write("empty.p8", ""), "is empty"),
            (
                try files.write("garbage.p8", "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"),
                "is not the .p8 key Apple hands out"
            ),
            (try files.write("p384.p8", ECPrivateKey(curve: .p384).pkcs8PEM), "is a P-384 key; Apple's keys are P-256 (ES256)"),
            (files.dir.path, "is not a regular file"),
        ]
        for c in cases {
            do {
                _ = try AppleServices(Self.config(key: c.path))
                Issue.record("\(c.path) was accepted")
            } catch {
                #expect(error.path == "apple.private_key")
                #expect(error.description.hasPrefix("apple.private_key \(c.path): "), "\(error)")
                #expect(error.description.contains(c.expected), "\(error)")
                #expect(!error.description.contains("BEGIN"), "\(error)")
            }
        }
    }

    @Test("the runtime: the key checked at compile (check, start, reload) at its position; a reload that changes nothing keeps the object")
    func runtime() throws {
        let files = try Files()
        let key = try files.write("team.p8", ECPrivateKey(curve: .p256).pkcs8PEM)
        let yaml = """
            listeners:
              - {name: public, address: 127.0.0.1:0}
            upstreams:
              - {name: demo, url: demo}
            routes:
              - {name: default, match: {path_prefix: /}, upstream: demo}
            store: {kind: memory, data_dir: \(files.dir.path)/data}
            apple: {team_id: ABCDE12345, key_id: KEY1234567, private_key: \(key)}
            """
        let config = try GatewayConfig.parse(yaml: yaml, baseDirectory: files.dir.path)
        let first = try GatewayRuntime(config, coreCount: 1)
        let again = try GatewayRuntime(config, coreCount: 1, previous: first)
        #expect(first.apple != nil && first.apple === again.apple)
        _ = try files.write("team.p8", ECPrivateKey(curve: .p256).pkcs8PEM)
        let rotated = try GatewayRuntime(config, coreCount: 1, previous: again)
        #expect(rotated.apple != nil && rotated.apple !== again.apple)
        #expect(chmod(key, 0o644) == 0)
        do {
            _ = try GatewayRuntime(config, coreCount: 1, previous: rotated)
            Issue.record("a world-readable key was accepted")
        } catch {
            #expect(error.diagnostic?.line == 8)
            #expect(
                error.description.contains(
                    "apple.private_key \(key): its mode 0644 lets other users read or change the team's private key"), "\(error)")
        }
    }
}
