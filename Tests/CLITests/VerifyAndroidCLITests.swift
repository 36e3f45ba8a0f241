import AndroidAttest
import AppAttestSimulator
import Foundation
import GatewayCrypto
import GatewayTestSupport
import GatewayWire
import Testing

/// `gatewayd verify-android-attestation` on the real Android chains (Tests/AndroidAttestTests/Vectors)
/// and on a simulated device: one JSON object, exit 0 valid, 1 invalid, 2 usage.
@Suite("gatewayd verify-android-attestation")
struct VerifyAndroidCLITests {
    static let vectors = repositoryRoot.appendingPathComponent("Tests/AndroidAttestTests/Vectors")

    struct Case: Sendable, CustomTestStringConvertible {
        let name: String
        let json: [String: any Sendable]
        var testDescription: String { "\(name) → \(json["expect"] as! String)" }
        var chain: [String] { json["chain_b64_der_leaf_first"] as! [String] }
        var expect: String { json["expect"] as! String }
        var reasonCode: String? { (json["reason"] as? String).map { String($0.prefix { $0 != " " }) } }

        func arguments(url: Bool = false) -> [String] {
            let chainText =
                url ? chain.map { Base64.encodeURL(try! Base64.decode($0)) }.joined(separator: ",") : chain.joined(separator: ",")
            return [
                "verify-android-attestation", "--chain=" + chainText, "--challenge=" + (json["challenge_b64"] as! String),
                "--at", json["verification_time"] as! String,
            ]
        }
    }

    static let cases: [Case] = {
        let files = try! FileManager.default.contentsOfDirectory(atPath: vectors.path).filter { $0.hasPrefix("android-") }.sorted()
        return files.flatMap { f -> [Case] in
            let obj = try! JSONSerialization.jsonObject(with: Data(contentsOf: vectors.appendingPathComponent(f))) as! [String: Any]
            return (obj["cases"] as! [[String: Any]]).map { c in
                Case(
                    name: c["name"] as! String,
                    json: c.mapValues { v -> any Sendable in
                        switch v {
                        case let s as String: return s
                        case let a as [String]: return a
                        case let n as NSNumber: return n.intValue
                        default: return String(describing: v)
                        }
                    })
            }
        }
    }()

    @Test("every real chain gets its verdict through the CLI", arguments: cases)
    func verdict(_ c: Case) throws {
        let r = try runProcess(gatewaydBinary, c.arguments())
        let json = try #require(r.json, "\(c.name): \(r.stdout) \(r.stderr)")
        switch c.expect {
        case "valid":
            #expect(r.status == 0, "\(c.name): \(r.stdout)")
            #expect(json["valid"] as? Bool == true)
            #expect(json["attestationVersion"] as? Int == c.json["attestation_version"] as? Int)
            #expect(json["attestationSecurityLevel"] as? String == c.json["attestation_security_level"] as? String)
            #expect(json["keymintSecurityLevel"] as? String == c.json["keymint_security_level"] as? String)
            #expect(json["keyAlgorithm"] as? String == c.json["key_algorithm"] as? String)
            #expect(json["packageNames"] as? [String] == c.json["package_names"] as? [String])
            #expect(json["signingCertSha256"] as? [String] == c.json["signing_cert_sha256_hex"] as? [String])
            #expect(json["osPatchLevel"] as? Int == c.json["os_patch_level"] as? Int)
            let rot = try #require(json["rootOfTrust"] as? [String: Any])
            #expect(rot["verifiedBootState"] as? String != nil)
            #expect((json["keyId"] as? String).flatMap { try? Base64.decode($0) }?.count == 32)
        case "invalid":
            #expect(r.status == 1, "\(c.name): \(r.stdout)")
            #expect(json["valid"] as? Bool == false)
            #expect(json["reason"] as? String == c.reasonCode, "\(c.name): \(r.stdout)")
            #expect((json["detail"] as? String)?.isEmpty == false)
        default:
            #expect(r.status == 0 || r.status == 1)
        }
    }

    static var rkp: Case { cases.first { $0.name == "keyattestation:TEE_EC_RKP.pem" }! }

    @Test("--package and --signing-cert-sha256 check the allow-lists; URL base64 and a PEM @FILE chain are read")
    func allowLists() throws {
        let c = Self.rkp
        let package = (c.json["package_names"] as! [String])[0]
        let digest = (c.json["signing_cert_sha256_hex"] as! [String])[0]
        #expect(
            try runProcess(gatewaydBinary, c.arguments(url: true) + ["--package", package, "--signing-cert-sha256", digest.uppercased()])
                .status == 0)
        let other = try runProcess(gatewaydBinary, c.arguments() + ["--package", "com.example.other"])
        #expect(other.status == 1)
        #expect(other.json?["reason"] as? String == "package_not_allowed")
        let signer = try runProcess(
            gatewaydBinary, c.arguments() + ["--package", package, "--signing-cert-sha256", String(repeating: "ab", count: 32)])
        #expect(signer.json?["reason"] as? String == "signing_cert_not_allowed")

        let dir = try Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let pem = dir.appendingPathComponent("chain.pem")
        try X509Certificate.pem(c.chain.map { try X509Certificate(der: Base64.decode($0)) }).write(
            to: pem, atomically: true, encoding: .utf8)
        var args = c.arguments()
        args[1] = "--chain=@" + pem.path
        let fromFile = try runProcess(gatewaydBinary, args)
        #expect(fromFile.status == 0, "\(fromFile.stdout)")
    }

    @Test("--status-list: a chain with a listed certificate is revoked; Google's real snapshot lists none of the vectors")
    func statusList() throws {
        let c = Self.rkp
        let dir = try Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let listed = dir.appendingPathComponent("status.json")
        let intermediate = try X509Certificate(der: Base64.decode(c.chain[2]))
        try Data(TestAndroidCA.statusList(listing: [intermediate])).write(to: listed)
        let revoked = try runProcess(gatewaydBinary, c.arguments() + ["--status-list", listed.path])
        #expect(revoked.status == 1)
        #expect(revoked.json?["reason"] as? String == "revoked")
        let real = try runProcess(
            gatewaydBinary, c.arguments() + ["--status-list", Self.vectors.appendingPathComponent("status-list-snapshot.json").path])
        #expect(real.status == 0, "\(real.stdout)")
    }

    @Test("--root trusts a simulated device's test root; without it the chain is untrusted")
    func simulatedRoot() throws {
        let ca = try TestAndroidCA()
        let device = try SimulatedAndroidDevice(ca: ca, securityLevel: .strongBox)
        let challenge = SecureRandom.bytes(16)
        let chain = try device.attest(
            challenge: challenge,
            keyDescription: device.keyDescription(packageName: "com.example.shop", signingCertificateSHA256: SHA256.hash([7])))
        let dir = try Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let root = dir.appendingPathComponent("android-root.pem")
        try ca.rootPEM.write(to: root, atomically: true, encoding: .utf8)
        let args = [
            "verify-android-attestation", "--chain", chain.map { Base64.encode($0) }.joined(separator: ","), "--challenge",
            Base64.encode(challenge),
        ]
        #expect(try runProcess(gatewaydBinary, args).json?["reason"] as? String == "chain_untrusted")
        let trusted = try runProcess(gatewaydBinary, args + ["--root", root.path, "--package", "com.example.shop"])
        #expect(trusted.status == 0, "\(trusted.stdout)")
        let json = try #require(trusted.json)
        #expect(json["securityLevel"] as? String == "StrongBox")
        #expect(json["keyId"] as? String == Base64.encode(device.keyID))
        #expect(json["publicKey"] as? String == Base64.encode(device.publicKey.x962))
        #expect((json["rootOfTrust"] as? [String: Any])?["deviceLocked"] as? Bool == true)
    }

    @Test("bad base64 is malformed (exit 1); usage errors exit 2 with nothing on stdout")
    func errors() throws {
        let c = Self.rkp
        var args = c.arguments()
        args[1] = "--chain=" + c.chain[0] + ",%%%"
        let bad = try runProcess(gatewaydBinary, args)
        #expect(bad.status == 1)
        #expect(bad.json?["reason"] as? String == "malformed")
        let usage: [[String]] = [
            ["verify-android-attestation", "--challenge", "AA=="],
            Array(c.arguments().prefix(2)),
            c.arguments().dropLast(2) + ["--at", "yesterday"],
            c.arguments() + ["--signing-cert-sha256", "abc"],
            c.arguments() + ["--status-list", "/nonexistent/status.json"],
            c.arguments() + ["--root", "/nonexistent/root.pem"],
        ]
        for a in usage {
            let r = try runProcess(gatewaydBinary, a)
            #expect(r.status == 2, "\(a.suffix(2)): \(r.status) \(r.stdout)")
            #expect(r.stdout.isEmpty)
            #expect(!r.stderr.isEmpty)
        }
    }

    static func temporaryDirectory() throws -> URL {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("gw-android-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        return dir
    }
}
