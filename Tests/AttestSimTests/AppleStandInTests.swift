import AppAttest
import AppAttestSimulator
import Foundation
import GatewayCrypto
import GatewayTestSupport
import GatewayWire
import Glibc
import Testing

/// `attest-sim apple`, the binary: HTTPS with a certificate the test CA issued (curl verifies it with
/// root.pem and nothing else), Apple's request and response for the App Attest data service, the
/// token checks, and the controls under /_sim/; SIGTERM ends it with 0.
@Suite("attest-sim apple: the App Attest data service stand-in (binary)", .serialized, .timeLimit(.minutes(3)))
struct AppleStandInTests {
    final class Running {
        let process = Process()
        let out = Pipe()
        let url: String

        init(_ args: [String]) throws {
            process.executableURL = attestSimBinary
            process.arguments = args
            process.standardOutput = out
            process.standardError = FileHandle.nullDevice
            try process.run()
            var text = ""
            let deadline = Date().addingTimeInterval(15)
            while !text.contains("\n"), Date() < deadline {
                let d = out.fileHandleForReading.availableData
                if d.isEmpty { break }
                text += String(decoding: d, as: UTF8.self)
            }
            guard let match = text.firstMatch(of: /https:\/\/127\.0\.0\.1:\d+/) else {
                process.terminate()
                throw POSIXError(.EPROTO)
            }
            url = String(match.output)
        }

        deinit { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }
    }

    /// An ATTEST receipt of a fresh device key, as a simulated attestation carries one.
    static func attestReceipt(_ ca: TestCA) throws -> (receipt: [UInt8], keyID: String) {
        let device = SimulatedDevice(appID: try AppID("ABCDE12345.com.example.sim"), ca: ca)
        let attestation = try AttestationObject.parse(try device.attest(clientDataHash: SHA256.hash(Array("c".utf8))))
        return (attestation.receipt, Base64.encode(device.keyID))
    }

    func post(_ url: String, ca: String, token: String?, body: String) throws -> (Int, String, String) {
        var args = ["-s", "--max-time", "10", "--cacert", ca, "-D", "-", "-X", "POST", "--data-binary", body, url]
        if let token { args += ["-H", "Authorization: \(token)"] }
        let r = try runProcess(URL(fileURLWithPath: "/usr/bin/curl"), args)
        let parts = r.stdout.components(separatedBy: "\r\n\r\n")
        let status = Int(parts.first?.split(separator: " ").dropFirst().first ?? "") ?? 0
        return (status, parts.first ?? "", parts.dropFirst().joined(separator: "\r\n\r\n"))
    }

    @Test("200 with a RECEIPT of the key's metric; 401 without Apple's token; 400 for a stranger's receipt; the controls; SIGTERM")
    func binary() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("apple-sim-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: dir) }
        let ca = try TestCA()
        try ca.write(to: dir)
        let keyFile = dir.appendingPathComponent("team.p8").path
        let sim = try Running([
            "apple", "--listen", "127.0.0.1:0", "--ca", dir.path, "--team-id", "ABCDE12345", "--key-id", "KEY1234567",
            "--team-key", keyFile, "--receipt-not-before", "60",
        ])
        let root = dir.appendingPathComponent("root.pem").path
        // The team key was made as Apple hands one out: readable by its owner only.
        let attributes = try FileManager.default.attributesOfItem(atPath: keyFile)
        #expect((attributes[.posixPermissions] as? Int) == 0o600)
        // …and the gateway takes it as it is: `gatewayd check` holds it to the rule of every secret file.
        let yaml = dir.appendingPathComponent("gateway.yaml")
        try """
        listeners: [{name: public, address: 127.0.0.1:0}]
        upstreams: [{name: demo, url: demo}]
        routes: [{name: default, match: {path_prefix: /}, upstream: demo}]
        store: {kind: memory, data_dir: \(dir.appendingPathComponent("data").path)}
        apple: {team_id: ABCDE12345, key_id: KEY1234567, private_key: \(keyFile), attest_data_url: \(sim.url), ca_file: \(dir.appendingPathComponent("root.pem").path)}
        """.write(to: yaml, atomically: true, encoding: .utf8)
        let checked = try runProcess(gatewaydBinary, ["check", "--config", yaml.path])
        #expect(checked.status == 0, "\(checked.stdout) \(checked.stderr)")
        let key = try ECPrivateKey(pem: try String(contentsOfFile: keyFile, encoding: .utf8))
        let (receipt, keyID) = try Self.attestReceipt(ca)
        let body = Base64.encode(receipt)
        let endpoint = sim.url + "/v1/attestationData"
        let now = Int64(Date().timeIntervalSince1970)

        let token = try ES256JWT.apple(keyID: "KEY1234567", teamID: "ABCDE12345", issuedAt: now, key: key)
        let (status, head, answer) = try post(endpoint, ca: root, token: token, body: body)
        #expect(status == 200, "\(head)")
        #expect(head.lowercased().contains("content-type: base64"))
        let refreshed = try ReceiptVerifier(roots: [ca.receiptRoot]).verify(
            try Base64.decode(answer), expecting: .init(kind: .receipt), at: Date())
        #expect(refreshed.receipt.riskMetric == 1)
        #expect(refreshed.receipt.notBefore!.millis - refreshed.receipt.creationTime.millis == 60_000)

        // Apple's token only: bare, this team, this key id, recent, this key.
        for bad in [
            nil, "Bearer " + token,
            try ES256JWT.apple(keyID: "KEY7654321", teamID: "ABCDE12345", issuedAt: now, key: key),
            try ES256JWT.apple(keyID: "KEY1234567", teamID: "ZZZZZ99999", issuedAt: now, key: key),
            try ES256JWT.apple(keyID: "KEY1234567", teamID: "ABCDE12345", issuedAt: now - 7_200, key: key),
            try ES256JWT.apple(keyID: "KEY1234567", teamID: "ABCDE12345", issuedAt: now, key: ECPrivateKey(curve: .p256)),
        ] {
            #expect(try post(endpoint, ca: root, token: bad, body: body).0 == 401, "\(bad ?? "no token")")
        }
        // A receipt of another CA's chain is a bad payload; a RECEIPT before its not-before is 304.
        let (stranger, _) = try Self.attestReceipt(try TestCA(name: "Stranger"))
        #expect(try post(endpoint, ca: root, token: token, body: Base64.encode(stranger)).0 == 400)
        #expect(try post(endpoint, ca: root, token: token, body: answer).0 == 304)

        // Controls: the key's metric, scripted answers, no data, the request log.
        #expect(try post(sim.url + "/_sim/metric", ca: root, token: nil, body: "{\"metric\":7,\"keyId\":\"\(keyID)\"}").0 == 200)
        let seven = try post(endpoint, ca: root, token: token, body: body)
        #expect(try AppAttestReceipt.parseStored(try Base64.decode(seven.2)).riskMetric == 7)
        #expect(try post(sim.url + "/_sim/answer", ca: root, token: nil, body: "{\"status\":429,\"retryAfter\":2}").0 == 200)
        let limited = try post(endpoint, ca: root, token: token, body: body)
        #expect(limited.0 == 429 && limited.1.contains("Retry-After: 2"))
        #expect(try post(sim.url + "/_sim/no-data", ca: root, token: nil, body: "{\"keyId\":\"\(keyID)\"}").0 == 200)
        #expect(try post(endpoint, ca: root, token: token, body: body).0 == 404)
        let log = try runProcess(URL(fileURLWithPath: "/usr/bin/curl"), ["-s", "--cacert", root, sim.url + "/_sim/requests"]).stdout
        let requests = ((try JSONSerialization.jsonObject(with: Data(log.utf8))) as? [String: Any])?["requests"] as? [[String: Any]]
        #expect(requests?.map { $0["status"] as? Int ?? 0 } == [200, 401, 401, 401, 401, 401, 401, 400, 304, 200, 429, 404])

        kill(sim.process.processIdentifier, SIGTERM)
        sim.process.waitUntilExit()
        #expect(sim.process.terminationStatus == 0)
    }

    @Test("usage: --listen must be HOST:PORT; a CA that is not there is named")
    func usage() throws {
        let r = try runProcess(
            attestSimBinary,
            ["apple", "--listen", "8443", "--ca", "/nonexistent", "--team-id", "A", "--key-id", "B", "--team-key", "/tmp/x.p8"])
        #expect(r.status == 2 && r.stderr.contains("--listen must be HOST:PORT"))
        let noCA = try runProcess(
            attestSimBinary, ["apple", "--ca", "/nonexistent", "--team-id", "A", "--key-id", "B", "--team-key", "/tmp/x.p8"])
        #expect(noCA.status == 2 && noCA.stderr.contains("--ca: "))
    }
}
