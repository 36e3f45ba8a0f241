import AppAttest
import AppAttestSimulator
import Foundation
import GatewayCrypto
import GatewayTestSupport
import GatewayWire
import Testing

/// `gatewayd verify-receipt` end to end, on every real receipt: one JSON object on stdout, exit 0
/// valid, 1 invalid (with the reason), 2 usage.
@Suite("gatewayd verify-receipt CLI")
struct VerifyReceiptCLITests {
    /// The receipt's own creation time plus one second, as ISO 8601.
    static func creationPlusOne(_ receipt: [UInt8]) throws -> String {
        let r = try AppAttestReceipt.parseStored(receipt)
        return Date(timeIntervalSince1970: Double(r.creationTime.millis / 1000 + 1)).formatted(.iso8601)
    }

    @Test("every receipt of the receipts file: valid, its metric and dates printed", arguments: VectorCase.receipts)
    func receiptFile(_ v: VectorCase) throws {
        let r = try runProcess(
            gatewaydBinary,
            [
                "verify-receipt", "--receipt", v.string("receipt_b64")!, "--app-id", v.string("app_id")!, "--at",
                v.string("verification_time")!,
            ])
        #expect(r.status == 0, "\(v.name): \(r.stdout) \(r.stderr)")
        let json = try #require(r.json, "\(r.stdout)")
        #expect(json["valid"] as? Bool == true)
        #expect(json["type"] as? String == v.string("receipt_type"))
        #expect(json["riskMetric"] as? Int == v.json["risk_metric"] as? Int)
        #expect(json["creationTime"] as? String == v.string("creation_time"))
        #expect(json["notBefore"] as? String == v.string("not_before"))
        #expect(json["expirationTime"] as? String == v.string("expiration_time"))
        #expect(json["environment"] as? String == "sandbox")
        #expect(json["keyId"] as? String == v.string("key_id_b64"))
        #expect(json["clientHash"] as? String == v.string("client_hash_b64"))
        #expect(json["signer"] as? String == "C=US,O=Apple Inc.,CN=Application Attestation Fraud Receipt Signing")
        #expect((json["chain"] as? [String])?.count == 3)
    }

    @Test(
        "every real attestation's receipt belongs to it (--attestation, --client-data-hash)", arguments: VectorCase.attestationsWithReceipts
    )
    func attestationReceipt(_ v: VectorCase) throws {
        let receipt = try AttestationObject.parse(v.bytes("attestation_b64")).receipt
        let r = try runProcess(
            gatewaydBinary,
            [
                "verify-receipt", "--receipt", Base64.encode(receipt), "--app-id", v.string("app_id")!,
                "--attestation", v.string("attestation_b64")!, "--client-data-hash", v.string("client_data_hash_b64")!,
                "--at", try Self.creationPlusOne(receipt),
            ])
        #expect(r.status == 0, "\(v.name): \(r.stdout) \(r.stderr)")
        #expect(r.json?["type"] as? String == "ATTEST")
        #expect(r.json?["keyId"] as? String == v.string("key_id_b64"))
        #expect(r.json?["riskMetric"] is NSNull)
    }

    @Test("@FILE holds raw DER/CBOR bytes or base64 text (either alphabet, wrapped lines): the same verdict from each form")
    func fileForms() throws {
        let v = try #require(VectorCase.attestationCase(named: "veehaitch-ios-14.4-attestation"))
        let attestation = try v.bytes("attestation_b64")
        let receipt = try AttestationObject.parse(attestation).receipt
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("receipt-files-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        func file(_ name: String, _ bytes: [UInt8]) throws -> String {
            let url = dir.appendingPathComponent(name)
            try Data(bytes).write(to: url)
            return "@" + url.path
        }
        let urlAlphabet = Base64.encode(receipt).replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
        let wrapped =
            stride(from: 0, to: Base64.encode(receipt).count, by: 64).map { i -> String in
                let s = Base64.encode(receipt)
                let start = s.index(s.startIndex, offsetBy: i)
                return String(s[start..<(s.index(start, offsetBy: 64, limitedBy: s.endIndex) ?? s.endIndex)])
            }.joined(separator: "\r\n") + "\n"
        let forms: [(String, String)] = [
            ("raw DER", try file("receipt.der", receipt)),
            ("base64 text", try file("receipt.b64", Array((Base64.encode(receipt) + "\n").utf8))),
            ("URL alphabet, no padding", try file("receipt.b64url", Array(urlAlphabet.utf8))),
            ("wrapped lines", try file("receipt.pem-like", Array(wrapped.utf8))),
        ]
        let rawAttestation = try file("attestation.cbor", attestation)
        for (what, arg) in forms {
            let r = try runProcess(
                gatewaydBinary,
                [
                    "verify-receipt", "--receipt", arg, "--app-id", v.string("app_id")!, "--attestation", rawAttestation,
                    "--client-data-hash", v.string("client_data_hash_b64")!, "--at", try Self.creationPlusOne(receipt),
                ])
            #expect(r.status == 0, "\(what): \(r.stdout) \(r.stderr)")
            #expect(r.json?["type"] as? String == "ATTEST", "\(what)")
        }
        // Text that is not valid base64 is still refused as such (exit 1, malformed), not read as bytes.
        let bad = try runProcess(gatewaydBinary, ["verify-receipt", "--receipt", try file("bad.b64", Array("QUJD=x\n".utf8))])
        #expect(bad.status == 1)
        #expect(bad.json?["reason"] as? String == "malformed", "\(bad.stdout)")
        let help = try runProcess(gatewaydBinary, ["verify-receipt", "--help"])
        let helpText = help.stdout.split(whereSeparator: \.isWhitespace).joined(separator: " ")
        #expect(helpText.contains("a file of the raw bytes (DER, CBOR) or of such base64 text"), "\(helpText)")
    }

    @Test("refusals: wrong app id, another key's attestation, another challenge, today's date, a flipped byte, not base64")
    func refusals() throws {
        let v = try #require(VectorCase.attestationCase(named: "veehaitch-ios-14.4-attestation"))
        let other = try #require(VectorCase.attestationCase(named: "veehaitch-ios-14.3-attestation"))
        let receipt = try AttestationObject.parse(v.bytes("attestation_b64")).receipt
        let at = try Self.creationPlusOne(receipt)
        let base = ["verify-receipt", "--receipt", Base64.encode(receipt), "--at", at]
        func reason(_ extra: [String], base: [String] = base) throws -> String? {
            let r = try runProcess(gatewaydBinary, base + extra)
            #expect(r.status == 1, "\(extra): exit \(r.status) \(r.stdout) \(r.stderr)")
            #expect(r.json?["valid"] as? Bool == false)
            #expect((r.json?["detail"] as? String)?.isEmpty == false)
            return r.json?["reason"] as? String
        }
        #expect(try reason(["--app-id", "6MURL8TA57.de.vincent-haupert.other"]) == "app_id_mismatch")
        #expect(try reason(["--attestation", other.string("attestation_b64")!]) == "attested_key_mismatch")
        #expect(try reason(["--client-data-hash", Base64.encode(SHA256.hash(Array("other".utf8)))]) == "client_hash_mismatch")
        #expect(try reason([], base: ["verify-receipt", "--receipt", Base64.encode(receipt)]) == "certificate_expired")  // now
        var flipped = receipt
        flipped[200] ^= 0x01
        #expect(try reason([], base: ["verify-receipt", "--receipt", Base64.encode(flipped), "--at", at]) == "bad_signature")
        #expect(try reason([], base: ["verify-receipt", "--receipt", "not base64!", "--at", at]) == "malformed")
    }

    @Test("--root trusts a test receipt root besides Apple Root CA - G3; usage errors exit 2")
    func rootsAndUsage() throws {
        let ca = try TestCA()
        let device = SimulatedDevice(appID: try AppID("ABCDE12345.com.example.shop"), ca: ca)
        let made = try device.makeAttestation(clientDataHash: SHA256.hash(Array("c".utf8)))
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("verify-receipt-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let rootFile = dir.appendingPathComponent("receipt-root.pem")
        try ca.receiptRootPEM.write(to: rootFile, atomically: true, encoding: .utf8)
        let receiptFile = dir.appendingPathComponent("receipt.b64")
        try Base64.encode(made.receipt).write(to: receiptFile, atomically: true, encoding: .utf8)

        let untrusted = try runProcess(gatewaydBinary, ["verify-receipt", "--receipt", "@" + receiptFile.path])
        #expect(untrusted.status == 1 && untrusted.json?["reason"] as? String == "chain_untrusted", "\(untrusted.stdout)")
        let trusted = try runProcess(
            gatewaydBinary,
            [
                "verify-receipt", "--receipt", "@" + receiptFile.path, "--root", rootFile.path, "--app-id", "ABCDE12345.com.example.shop",
                "--attestation", Base64.encode(made.bytes),
            ])
        #expect(trusted.status == 0, "\(trusted.stdout) \(trusted.stderr)")
        #expect(trusted.json?["keyId"] as? String == Base64.encode(device.keyID))
        #expect((trusted.json?["otherFields"] as? [Any])?.isEmpty == true)
        // A field Apple does not document is printed as it came.
        var contents = ReceiptContents(try AppAttestReceipt.parseStored(made.receipt))
        contents.extraFields = [.init(type: 99, value: [1, 2, 3])]
        let extra = try runProcess(
            gatewaydBinary,
            [
                "verify-receipt", "--receipt", Base64.encode(try ca.issueReceipt(contents)), "--root", rootFile.path,
            ])
        let other = try #require((extra.json?["otherFields"] as? [[String: Any]])?.first, "\(extra.stdout)")
        #expect(other["type"] as? Int == 99 && other["version"] as? Int == 1 && other["value"] as? String == "AQID")
        // The App Attest test root is not a receipt root.
        let attestRoot = dir.appendingPathComponent("root.pem")
        try ca.rootPEM.write(to: attestRoot, atomically: true, encoding: .utf8)
        let wrong = try runProcess(gatewaydBinary, ["verify-receipt", "--receipt", "@" + receiptFile.path, "--root", attestRoot.path])
        #expect(wrong.json?["reason"] as? String == "chain_untrusted")

        for args in [
            ["verify-receipt"], ["verify-receipt", "--receipt", "@" + receiptFile.path, "--at", "yesterday"],
            ["verify-receipt", "--receipt", "@" + receiptFile.path, "--root", "/nonexistent/root.pem"],
            ["verify-receipt", "--receipt", "@" + receiptFile.path, "--app-id", ""],
        ] {
            let r = try runProcess(gatewaydBinary, args)
            #expect(r.status == 2, "\(args): \(r.stdout) \(r.stderr)")
            #expect(!r.stderr.isEmpty)
        }
    }
}
