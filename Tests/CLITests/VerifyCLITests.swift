import AppAttest
import Foundation
import GatewayTestSupport
import GatewayWire
import Testing

/// End to end: the real `gatewayd` binary, as ops run it (issue contract: one JSON object on stdout,
/// exit 0 valid, 1 invalid, 2 usage error with a message on stderr).
@Suite("gatewayd verify-* CLI")
struct VerifyCLITests {
    static func attestationArguments(_ v: VectorCase, urlAlphabet: Bool = false) -> [String] {
        func b64(_ key: String) -> String {
            urlAlphabet ? Base64.encodeURL(v.bytes(key)) : v.string(key)!
        }
        return [
            "verify-attestation", "--app-id", v.string("app_id")!, "--key-id", b64("key_id_b64"),
            "--attestation", b64("attestation_b64"), "--client-data-hash", b64("client_data_hash_b64"),
            "--at", v.string("verification_time")!, "--environment", v.string("verifier_environment")!,
        ]
    }

    static func assertionArguments(_ v: VectorCase) -> [String] {
        var args = [
            "verify-assertion", "--app-id", v.string("app_id")!, "--public-key", v.string("public_key_x962_b64")!,
            "--assertion", v.string("assertion_b64")!,
        ]
        if let cd = v.string("client_data_b64") {
            args += ["--client-data", cd]
        } else {
            args += ["--client-data-hash", v.string("client_data_hash_b64")!]
        }
        if let prev = v.json["previous_counter"] as? Int { args += ["--previous-counter", String(prev)] }
        return args
    }

    static func check(_ v: VectorCase, _ r: ProcessResult) {
        let json = r.json
        #expect(json != nil, "\(v.name): stdout is not one JSON object: \(r.stdout) \(r.stderr)")
        if let code = v.expectedCode {
            #expect(r.status == 1, "\(v.name): exit \(r.status)")
            #expect(json?["valid"] as? Bool == false)
            #expect(json?["reason"] as? String == code.rawValue, "\(v.name): \(r.stdout)")
            #expect((json?["detail"] as? String)?.isEmpty == false)
        } else {
            #expect(r.status == 0, "\(v.name): exit \(r.status) \(r.stdout)")
            #expect(json?["valid"] as? Bool == true)
        }
    }

    @Test("every real attestation vector gets its verdict through the CLI", arguments: VectorCase.attestations)
    func attestation(_ v: VectorCase) throws {
        let r = try runProcess(gatewaydBinary, Self.attestationArguments(v))
        Self.check(v, r)
        if v.expectedCode == nil {
            #expect(r.json?["publicKey"] as? String == v.string("expected_public_key_x962_b64"))
            #expect(r.json?["environment"] as? String == v.string("environment"))
            #expect(r.json?["counter"] as? Int == 0)
        }
    }

    @Test("every real assertion vector gets its verdict through the CLI", arguments: VectorCase.assertions)
    func assertion(_ v: VectorCase) throws {
        let r = try runProcess(gatewaydBinary, Self.assertionArguments(v))
        Self.check(v, r)
        if v.expectedCode == nil { #expect(r.json?["counter"] as? Int == v.json["expected_counter"] as? Int) }
    }

    @Test("base64url without padding is accepted everywhere") func urlAlphabet() throws {
        let v = try #require(VectorCase.attestations.first { $0.expect == "valid" })
        let r = try runProcess(gatewaydBinary, Self.attestationArguments(v, urlAlphabet: true))
        #expect(r.status == 0, "\(r.stdout)")
    }

    @Test("--challenge hashes the raw challenge; Apple's sample needs it unhashed") func challengeOption() throws {
        let sample = repositoryRoot.appendingPathComponent("samples/apple-documentation-sample")
        var args = [
            "verify-attestation", "--app-id", "0352187391.com.apple.example_app_attest",
            "--key-id", "@" + sample.appendingPathComponent("key-id.b64").path,
            "--attestation", "@" + sample.appendingPathComponent("attestation.b64").path,
            "--at", "2024-04-18T00:00:00Z", "--environment", "production",
        ]
        let raw = Base64.encode(Array("test_server_challenge".utf8))
        let hashed = try runProcess(gatewaydBinary, args + ["--challenge", raw])
        #expect(hashed.status == 1)
        #expect(hashed.json?["reason"] as? String == "nonce_mismatch")
        args += ["--client-data-hash", raw]
        let direct = try runProcess(gatewaydBinary, args)
        #expect(direct.status == 0, "\(direct.stdout)")
        // Default instant is now: the 2024 leaf has long expired.
        let now = try runProcess(gatewaydBinary, args.filter { $0 != "--at" && $0 != "2024-04-18T00:00:00Z" })
        #expect(now.json?["reason"] as? String == "certificate_expired")
    }

    @Test("bad base64 is a malformed verdict (exit 1), never a crash") func badBase64() throws {
        let v = try #require(VectorCase.attestations.first { $0.expect == "valid" })
        for (flag, bad) in [("--attestation", "not base64!"), ("--key-id", "A"), ("--client-data-hash", "QR==")] {
            var args = Self.attestationArguments(v)
            let i = try #require(args.firstIndex(of: flag))
            args[i + 1] = bad
            let r = try runProcess(gatewaydBinary, args)
            #expect(r.status == 1, "\(flag)")
            #expect(r.json?["reason"] as? String == "malformed", "\(flag): \(r.stdout)")
        }
        let a = try #require(VectorCase.assertions.first { $0.expect == "valid" })
        var args = Self.assertionArguments(a)
        let i = try #require(args.firstIndex(of: "--assertion"))
        args[i + 1] = "%%%"
        #expect(try runProcess(gatewaydBinary, args).json?["reason"] as? String == "malformed")
    }

    @Test("a public key that is not a P-256 point is refused with a code") func badPublicKey() throws {
        let a = try #require(VectorCase.assertions.first { $0.expect == "valid" })
        var args = Self.assertionArguments(a)
        let i = try #require(args.firstIndex(of: "--public-key"))
        args[i + 1] = Base64.encode([0x04] + [UInt8](repeating: 7, count: 64))
        let offCurve = try runProcess(gatewaydBinary, args)
        #expect(offCurve.status == 1)
        #expect(offCurve.json?["reason"] as? String == "invalid_public_key")
        args[i + 1] = Base64.encode([UInt8](repeating: 7, count: 10))
        #expect(try runProcess(gatewaydBinary, args).json?["reason"] as? String == "malformed")
    }

    @Test("usage errors exit 2 with a message on stderr and nothing on stdout") func usageErrors() throws {
        let v = try #require(VectorCase.attestations.first { $0.expect == "valid" })
        let base = Self.attestationArguments(v)
        func without(_ flag: String) -> [String] {
            var a = base
            let i = a.firstIndex(of: flag)!
            a.removeSubrange(i...(i + 1))
            return a
        }
        let cases: [[String]] = [
            without("--app-id"),
            without("--key-id"),
            without("--client-data-hash"),
            base + ["--challenge", "AAAA"],
            without("--at") + ["--at", "yesterday"],
            without("--environment") + ["--environment", "staging"],
            base + ["--root", "/nonexistent/root.pem"],
            base + ["--app-id", ""],
            ["verify-assertion", "--app-id", "A.b", "--assertion", "AA==", "--public-key", "AA=="],
            [
                "verify-assertion", "--app-id", "A.b", "--assertion", "AA==", "--public-key", "AA==", "--client-data", "AA==",
                "--previous-counter", "-1",
            ],
            ["no-such-command"],
        ]
        for args in cases {
            let r = try runProcess(gatewaydBinary, args)
            #expect(r.status == 2, "\(args.suffix(3)): exit \(r.status) \(r.stdout)")
            #expect(r.stdout.isEmpty, "\(args.suffix(3))")
            #expect(!r.stderr.isEmpty)
        }
        let help = try runProcess(gatewaydBinary, ["verify-attestation", "--help"])
        #expect(help.status == 0)
        #expect(help.stdout.contains("--client-data-hash"))
    }
}
