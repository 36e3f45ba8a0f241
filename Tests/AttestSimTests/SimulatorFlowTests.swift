import AppAttest
import AppAttestSimulator
import AttestSim
import Foundation
import GatewayCrypto
import GatewayWire
import Testing

@Suite("attest-sim client data, requests, reports")
struct ClientDataTests {
    static let appID = try! AppID("ABCDE12345.com.example.sim")

    @Test("bind request: challenge, method, target and the body's hash, newline-separated") func requestForm() {
        let cd = ClientData.forRequest(challenge: "Y2hhbA", method: "POST", target: "/api/purchase?x=1", body: Array("{}".utf8))
        #expect(
            String(decoding: cd, as: UTF8.self)
                == "Y2hhbA\nPOST\n/api/purchase?x=1\n44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a")
        // An empty body hashes the empty string.
        let empty = ClientData.forRequest(challenge: "c", method: "GET", target: "/", body: [])
        #expect(String(decoding: empty, as: UTF8.self) == "c\nGET\n/\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        #expect(Binding.body.clientData(challenge: "c", method: "POST", target: "/", body: [1, 2]) == [1, 2])
        // Version 2 (the default) adds the authority line; version 1 is the form above.
        #expect(
            String(
                decoding: Binding.request.clientData(challenge: "c", method: "GET", target: "/", body: [], authority: "a.example"),
                as: UTF8.self)
                == "c\nGET\n/\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\na.example")
        #expect(
            Binding.request.clientData(challenge: "c", method: "GET", target: "/", body: [], version: .v1, authority: "a.example") == empty)
        #expect(ClientData.registrationHash(challenge: "abc") == SHA256.hash(Array("abc".utf8)))
    }

    @Test("a protected request carries key id, challenge and an assertion that verifies over its client data")
    func protectedRequest() throws {
        let ca = try TestCA()
        let device = SimulatedDevice(appID: Self.appID, ca: ca)
        let body = Array("{\"sku\":1}".utf8)
        let r = GatewayRequests.protected(
            device: device, challenge: "CHAL", method: "POST", target: "/api/purchase", body: body, binding: .request,
            host: try RequestHost("Shop.Example.:80"))
        let headers = Dictionary(r.headers, uniquingKeysWith: { a, _ in a })
        #expect(headers["X-App-Attest-Key-Id"] == Base64.encode(device.keyID))
        #expect(headers["X-App-Attest-Challenge"] == "CHAL")
        let assertion = try Base64.decode(try #require(headers["X-App-Assertion"]))
        let verifier = AssertionVerifier(appIDs: [Self.appID])
        // Signed over version 2 with the Host's normal form.
        let cd = ClientData.forRequest(
            .v2, challenge: "CHAL", method: "POST", target: "/api/purchase", authority: "shop.example", body: body)
        let v = try verifier.verify(assertion: assertion, publicKey: device.publicKey, clientDataHash: SHA256.hash(cd), previousCounter: 0)
        #expect(v.signCount == 1)
        // Another target, or another host, does not verify.
        let other = ClientData.forRequest(
            .v2, challenge: "CHAL", method: "POST", target: "/api/purchase?x", authority: "shop.example", body: body)
        let elsewhere = ClientData.forRequest(
            .v2, challenge: "CHAL", method: "POST", target: "/api/purchase", authority: "b.example", body: body)
        for wrong in [other, elsewhere] {
            #expect(throws: AppAttestError.self) {
                try verifier.verify(
                    assertion: assertion, publicKey: device.publicKey, clientDataHash: SHA256.hash(wrong), previousCounter: 0)
            }
        }
        // The request carries that Host, whatever the endpoint's.
        let wire = String(decoding: r.serialized(host: "gw"), as: UTF8.self)
        #expect(wire.hasPrefix("POST /api/purchase HTTP/1.1\r\nHost: Shop.Example.:80\r\nX-App-Attest-Key-Id: "))
        #expect(throws: AttestSimError.self) { try RequestHost("a b") }
        #expect(throws: AttestSimError.self) { try RequestHost("user@a.example") }
        #expect(wire.hasSuffix("Content-Length: 9\r\n\r\n{\"sku\":1}"))
    }

    @Test("the registration body verifies as an attestation over SHA256(challenge)") func registration() throws {
        let ca = try TestCA()
        let device = SimulatedDevice(appID: Self.appID, ca: ca)
        let att = try device.attest(clientDataHash: ClientData.registrationHash(challenge: "xyz"))
        let r = GatewayRequests.register(paths: GatewayPaths(), keyID: device.keyID, attestation: att, challenge: "xyz")
        #expect(r.target == "/v1/attest/register")
        let json = try #require((try JSONSerialization.jsonObject(with: Data(r.body))) as? [String: String])
        #expect(json["challenge"] == "xyz")
        #expect(json["keyId"] == Base64.encode(device.keyID))
        let verifier = AttestationVerifier(policy: .init(appIDs: [Self.appID], environments: [.development]), extraRoots: [ca.root])
        let v = try verifier.verify(
            attestation: try Base64.decode(json["attestation"]!), keyID: device.keyID, clientDataHash: SHA256.hash(Array("xyz".utf8)),
            at: Date())
        #expect(v.environment == .development)
        let c = GatewayRequests.challenge(paths: GatewayPaths(), purpose: .assert, keyID: [1, 2, 3])
        #expect(String(decoding: c.body, as: UTF8.self) == "{\"purpose\":\"assert\",\"keyId\":\"AQID\"}")
        #expect(GatewayRequests.challenge(paths: GatewayPaths(), purpose: nil, keyID: nil).body.isEmpty)
    }

    @Test("challenge and next-challenge parsing; verdicts from error bodies") func parsing() {
        let ok = HTTPResponse(
            status: 201, reason: "Created", headers: [], body: Array("{\"challenge\":\"abc\",\"expiresAt\":\"2030-01-02T03:04:05Z\"}".utf8))
        let c = GatewayRequests.parseChallenge(ok)
        #expect(c == IssuedChallenge(value: "abc", expiresAt: "2030-01-02T03:04:05Z"))
        #expect(c?.expiryDate == Date(timeIntervalSince1970: 1_893_553_445))
        #expect(
            IssuedChallenge(value: "a", expiresAt: "2030-01-02T03:04:05.250Z").expiryDate == Date(timeIntervalSince1970: 1_893_553_445.25))
        #expect(GatewayRequests.parseChallenge(HTTPResponse(status: 200, reason: "", headers: [], body: ok.body)) == nil)
        #expect(GatewayRequests.parseChallenge(HTTPResponse(status: 201, reason: "", headers: [], body: Array("{}".utf8))) == nil)
        let next = HTTPResponse(
            status: 200, reason: "OK", headers: [("x-app-attest-next-challenge", "n1"), ("X-App-Attest-Next-Challenge-Expires", "t")],
            body: [])
        #expect(GatewayRequests.nextChallenge(next) == IssuedChallenge(value: "n1", expiresAt: "t"))
        let refused = HTTPResponse(
            status: 401, reason: "", headers: [], body: Array("{\"error\":\"bad_signature\",\"action\":\"rechallenge\"}".utf8))
        #expect(Verdict(refused) == Verdict(status: 401, error: "bad_signature", action: "rechallenge"))
        #expect(Verdict(refused).description == "401 bad_signature")
        #expect(Verdict(HTTPResponse(status: 502, reason: "", headers: [], body: Array("oops".utf8))).description == "502")
    }

    @Test("percentiles by nearest rank") func percentiles() throws {
        let s = try #require(LatencySummary(samples: (1...100).reversed().map(Double.init)))
        #expect(s.p50 == 50 && s.p90 == 90 && s.p99 == 99 && s.max == 100 && s.count == 100 && s.mean == 50.5)
        let one = try #require(LatencySummary(samples: [7]))
        #expect(one.p50 == 7 && one.p99 == 7 && one.max == 7)
        let ten = try #require(LatencySummary(samples: [10, 1, 9, 2, 8, 3, 7, 4, 6, 5]))
        #expect(ten.p50 == 5 && ten.p90 == 9 && ten.p99 == 10)
        #expect(LatencySummary.percentile([1, 2, 3], 0) == 1)
        #expect(LatencySummary(samples: []) == nil)
    }

    @Test("run options: shares, workers, bodies, and refused values") func runOptions() throws {
        let e = HTTPEndpoint(host: "127.0.0.1", port: 1)
        let o = try RunOptions(endpoint: e, appID: Self.appID, devices: 3, requests: 10, concurrency: 8, bodySize: 40)
        #expect(o.workers == 3)
        #expect((0..<3).map(o.share(ofDevice:)) == [4, 3, 3])
        #expect(o.devices(ofWorker: 0) == [0])
        let two = try RunOptions(endpoint: e, appID: Self.appID, devices: 5, requests: 1, concurrency: 2)
        #expect(two.devices(ofWorker: 0) == [0, 2, 4] && two.devices(ofWorker: 1) == [1, 3])
        #expect(o.body(device: 1, request: 2).count == 40)
        #expect(o.body(device: 1, request: 2) != o.body(device: 1, request: 3))
        for size in [0, 1, 20, 40, 300] {
            let sized = try RunOptions(endpoint: e, appID: Self.appID, devices: 1, requests: 1, concurrency: 1, bodySize: size)
            #expect(sized.body(device: 0, request: 0).count == size)
            // bind: body puts the challenge inside the signed body, growing it when it does not fit.
            let withChallenge = String(decoding: sized.body(device: 0, request: 0, challenge: "CHALLENGE-TEXT"), as: UTF8.self)
            #expect(withChallenge.contains("\"challenge\":\"CHALLENGE-TEXT\""))
            #expect(withChallenge.utf8.count >= size)
        }
        let json = String(
            decoding: (try RunOptions(endpoint: e, appID: Self.appID, devices: 1, requests: 1, concurrency: 1, bodySize: 300))
                .body(device: 0, request: 0, challenge: "C"), as: UTF8.self)
        #expect((try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any])?["challenge"] as? String == "C")
        let bad: [() throws -> RunOptions] = [
            { try RunOptions(endpoint: e, appID: Self.appID, devices: 0, requests: 1, concurrency: 1) },
            { try RunOptions(endpoint: e, appID: Self.appID, devices: 1, requests: -1, concurrency: 1) },
            { try RunOptions(endpoint: e, appID: Self.appID, devices: 1, requests: 1, concurrency: 0) },
            { try RunOptions(endpoint: e, appID: Self.appID, devices: 1, requests: 1, concurrency: 1, method: "post") },
            { try RunOptions(endpoint: e, appID: Self.appID, devices: 1, requests: 1, concurrency: 1, path: "api") },
            { try RunOptions(endpoint: e, appID: Self.appID, devices: 1, requests: 1, concurrency: 1, bodySize: -1) },
            { try RunOptions(endpoint: e, appID: Self.appID, devices: 1, requests: 1, concurrency: 1, rate: 0) },
            { try RunOptions(endpoint: e, appID: Self.appID, devices: 1, requests: 1, concurrency: 1, rate: .infinity) },
        ]
        for make in bad { #expect(throws: AttestSimError.self) { try make() } }
        #expect(throws: AttestSimError.self) { try AttackMode.parse("everything") }
        #expect(try AttackMode.parse("all") == AttackMode.allCases)
        #expect(try AttackMode.parse("replay") == [.replay])
    }
}

@Suite("TestCA saved to files and loaded back")
struct TestCAFileTests {
    static func tempDir() -> URL {
        FileManager.default.temporaryDirectory.appendingPathComponent("attest-sim-ca-\(UUID().uuidString)")
    }

    @Test("round trip: a device of the loaded CA attests under the saved root") func roundTrip() throws {
        let dir = Self.tempDir()
        defer { try? FileManager.default.removeItem(at: dir) }
        let ca = try TestCA(name: "Round Trip TEST")
        try ca.write(to: dir)
        let mode = try FileManager.default.attributesOfItem(atPath: dir.appendingPathComponent("root-key.pem").path)[.posixPermissions]
        #expect((mode as? NSNumber)?.intValue == 0o600)
        let loaded = try TestCA.load(from: dir)
        #expect(loaded.name == "Round Trip TEST" && loaded.root.der == ca.root.der && loaded.leafLifetime == ca.leafLifetime)
        let rootFromFile = try X509Certificate.parsePEM(String(contentsOf: dir.appendingPathComponent("root.pem"), encoding: .utf8))
        let app = ClientDataTests.appID
        let device = SimulatedDevice(appID: app, ca: loaded)
        let att = try device.attest(clientDataHash: SHA256.hash([1]))
        let verifier = AttestationVerifier(policy: .init(appIDs: [app], environments: [.development]), extraRoots: rootFromFile)
        let verified = try verifier.verify(attestation: att, keyID: device.keyID, clientDataHash: SHA256.hash([1]), at: Date())
        #expect(verified.appID == app)
        // The receipt chain comes back too: the loaded CA's devices carry receipts that verify under
        // the saved receipt-root.pem, and not under the App Attest test root.
        #expect(loaded.receiptRoot.der == ca.receiptRoot.der && loaded.receiptSigner.der == ca.receiptSigner.der)
        let receiptRoot = try X509Certificate.parsePEM(String(contentsOf: dir.appendingPathComponent("receipt-root.pem"), encoding: .utf8))
        let receipt = try ReceiptVerifier(extraRoots: receiptRoot).verify(
            verified.receipt, expecting: .attestation(verified, clientDataHash: SHA256.hash([1])), at: Date())
        #expect(receipt.receipt.kind == .attest)
        #expect(throws: ReceiptError.self) {
            try ReceiptVerifier(extraRoots: rootFromFile).verify(verified.receipt, expecting: .init(), at: Date())
        }
        for file in ["receipt-signer-key.pem", "receipt-intermediate-key.pem", "receipt-root-key.pem"] {
            let m = try FileManager.default.attributesOfItem(atPath: dir.appendingPathComponent(file).path)[.posixPermissions]
            #expect((m as? NSNumber)?.intValue == 0o600, "\(file)")
        }
        // Writing again into the same directory refuses and keeps the files.
        #expect(throws: TestCA.FileError.self) { try TestCA().write(to: dir) }
        #expect(try TestCA.load(from: dir).root.der == ca.root.der)
    }

    @Test("missing files, a key of another CA, and bad metadata are refused") func refused() throws {
        let dir = Self.tempDir()
        let other = Self.tempDir()
        defer {
            try? FileManager.default.removeItem(at: dir)
            try? FileManager.default.removeItem(at: other)
        }
        #expect(throws: TestCA.FileError.self) { try TestCA.load(from: dir) }
        try TestCA().write(to: dir)
        try TestCA().write(to: other)
        let keyFile = dir.appendingPathComponent("intermediate-key.pem")
        let original = try Data(contentsOf: keyFile)
        try Data(contentsOf: other.appendingPathComponent("intermediate-key.pem")).write(to: keyFile)
        #expect(throws: TestCA.FileError.self) { try TestCA.load(from: dir) }
        try original.write(to: keyFile)
        let rootKey = dir.appendingPathComponent("root-key.pem")
        let originalRoot = try Data(contentsOf: rootKey)
        try Data(contentsOf: other.appendingPathComponent("root-key.pem")).write(to: rootKey)
        #expect(throws: TestCA.FileError.self) { try TestCA.load(from: dir) }
        try originalRoot.write(to: rootKey)
        _ = try TestCA.load(from: dir)
        // A receipt signer key of another CA; then a CA directory from before receipts (no receipt files).
        let signerKey = dir.appendingPathComponent("receipt-signer-key.pem")
        let originalSigner = try Data(contentsOf: signerKey)
        try Data(contentsOf: other.appendingPathComponent("receipt-signer-key.pem")).write(to: signerKey)
        #expect(throws: TestCA.FileError.self) { try TestCA.load(from: dir) }
        try originalSigner.write(to: signerKey)
        _ = try TestCA.load(from: dir)
        try FileManager.default.removeItem(at: other.appendingPathComponent("receipt-root.pem"))
        do {
            _ = try TestCA.load(from: other)
            Issue.record("a CA without its receipt chain loaded")
        } catch {
            #expect(error.reason.contains("create a new one"))
        }
        try Data("{\"name\":\"\"}".utf8).write(to: dir.appendingPathComponent("ca.json"))
        #expect(throws: TestCA.FileError.self) { try TestCA.load(from: dir) }
    }
}

@Suite("attest-sim runners against an in-test gateway", .serialized, .timeLimit(.minutes(2)))
struct RunnerTests {
    static let appID = ClientDataTests.appID

    @Test("run: every device registers, every request is accepted, next challenges are used") func run() throws {
        let ca = try TestCA()
        let gw = try FakeGateway(appID: Self.appID, ca: ca)
        defer { gw.stop() }
        let options = try RunOptions(endpoint: gw.endpoint, appID: Self.appID, devices: 3, requests: 20, concurrency: 2)
        let report = LoadRunner(options: options, ca: ca).run()
        #expect(report.passed, "\(report.text)")
        #expect(report.requests.counts == ["200": 20])
        #expect(report.registrations.counts == ["201": 3])
        #expect(report.requestLatencies.count == 20)
        // One challenge per device for registration, one for its first request; then next challenges.
        #expect(report.challenges.counts == ["201": 6])
        #expect(report.nextChallengesUsed == 17)
        #expect(report.connectionsOpened == 2)
        #expect(gw.forwardedCount == 20)
        let json = try #require(try JSONSerialization.jsonObject(with: Data(report.json.utf8)) as? [String: Any])
        #expect(json["requests_done"] as? Int == 20 && json["passed"] as? Bool == true)
        #expect(report.text.contains("result:        PASS"))

        let fetchEach = try RunOptions(
            endpoint: gw.endpoint, appID: Self.appID, devices: 2, requests: 6, concurrency: 2, useNextChallenge: false)
        let r2 = LoadRunner(options: fetchEach, ca: ca).run()
        #expect(r2.passed && r2.nextChallengesUsed == 0 && r2.challenges.total == 8)

        // Plain (baseline) to an unprotected path: no challenge, no registration; to a protected one: refused.
        let plain = try RunOptions(
            endpoint: gw.endpoint, appID: Self.appID, devices: 2, requests: 5, concurrency: 2, path: "/open", plain: true)
        let r3 = LoadRunner(options: plain, ca: ca).run()
        #expect(r3.passed && r3.requests.counts == ["200": 5] && r3.challenges.total == 0 && r3.registrations.total == 0)
        let plainProtected = try RunOptions(endpoint: gw.endpoint, appID: Self.appID, devices: 1, requests: 2, concurrency: 1, plain: true)
        let r4 = LoadRunner(options: plainProtected, ca: ca).run()
        #expect(!r4.passed && r4.requests.counts == ["401 assertion_missing": 2])
    }

    @Test("run --rate: the requests are spaced, not sent as fast as the gateway answers") func pacedRun() throws {
        let ca = try TestCA()
        let gw = try FakeGateway(appID: Self.appID, ca: ca)
        defer { gw.stop() }
        // 2 workers at 20 requests/s in all: each sends every 0.1 s, so 12 requests take at least 0.5 s.
        let paced = try RunOptions(endpoint: gw.endpoint, appID: Self.appID, devices: 2, requests: 12, concurrency: 2, rate: 20)
        let report = LoadRunner(options: paced, ca: ca).run()
        #expect(report.passed, "\(report.text)")
        #expect(report.requests.counts == ["200": 12])
        #expect(report.requestPhaseSeconds >= 0.5, "\(report.requestPhaseSeconds) s")
    }

    @Test("run: a device the gateway refuses makes the run fail") func refusedRun() throws {
        let ca = try TestCA()
        let gw = try FakeGateway(appID: Self.appID, ca: ca)
        defer { gw.stop() }
        // The gateway does not trust this CA: registrations are refused, no request is sent.
        let options = try RunOptions(endpoint: gw.endpoint, appID: Self.appID, devices: 2, requests: 4, concurrency: 1)
        let report = LoadRunner(options: options, ca: try TestCA()).run()
        #expect(!report.passed)
        #expect(report.registrations.counts == ["401 chain_untrusted": 2])
        #expect(report.requestsDone == 0)
        // The two refusals happened; the four requests were never sent, and are not counted as refused.
        #expect(report.refusedLegitimate == 2)
        #expect(report.requestsNotSent == 4)
        #expect(
            report.text.contains("result:        FAIL: no device could register (401 chain_untrusted ×2); 4 requests not sent\n"),
            "\(report.text)")
        #expect(report.text.contains("hint:          the gateway does not trust this CA: list its root.pem in trust.extra_roots"))
        let json = try #require(try JSONSerialization.jsonObject(with: Data(report.json.utf8)) as? [String: Any])
        #expect(json["refused_legitimate"] as? Int == 2 && json["requests_not_sent"] as? Int == 4)
        #expect((json["hint"] as? String)?.contains("trust.extra_roots") == true)
    }

    @Test("attack: how long expired-challenge waits is said before the first attack") func expiryNoteUpFront() throws {
        let ca = try TestCA()
        let gw = try FakeGateway(appID: Self.appID, ca: ca, ttl: 1)
        defer { gw.stop() }
        let runner = AttackRunner(
            options: try AttackOptions(endpoint: gw.endpoint, appID: Self.appID, modes: [.replay, .expiredChallenge]), ca: ca)
        var notes: [(String, Int)] = []
        var probes = 0
        runner.onProbe = { _ in probes += 1 }
        runner.onNote = { notes.append(($0, probes)) }
        let report = runner.run()
        #expect(report.passed, "\(report.text)")
        let first = try #require(notes.first)
        // ttl 1 s + 1.5 s, less what already passed of the challenge's life (a loaded machine: more).
        let seconds = first.0.split(separator: " ").dropFirst(4).first.flatMap { Double($0) }
        #expect(first.0.hasPrefix("expired-challenge will wait about "), "\(first.0)")
        #expect(seconds.map { $0 > 1.0 && $0 <= 2.5 } == true, "\(first.0)")
        #expect(first.0.hasSuffix(" s for a challenge to expire (the gateway's attest.challenge_ttl + 1.5 s)"), "\(first.0)")
        // After the control's register and request (two probes), before any attack.
        #expect(first.1 == 2)
        #expect(report.probes.prefix(2).allSatisfy { $0.name == "control" } && report.probes[2].name == "replay")
        let given = AttackRunner(
            options: try AttackOptions(endpoint: gw.endpoint, appID: Self.appID, modes: [.expiredChallenge], challengeWait: 0.1), ca: ca)
        var givenNotes: [String] = []
        given.onNote = { givenNotes.append($0) }
        _ = given.run()
        #expect(givenNotes.first == "expired-challenge will wait 0.1 s (--challenge-wait)")
    }

    @Test("attack all: every attack refused with its code, control accepted before and after") func attackAll() throws {
        let ca = try TestCA()
        let gw = try FakeGateway(appID: Self.appID, ca: ca, ttl: 1)
        defer { gw.stop() }
        let report = AttackRunner(options: try AttackOptions(endpoint: gw.endpoint, appID: Self.appID), ca: ca).run()
        #expect(report.passed, "\(report.text)")
        let byName = Dictionary(
            report.probes.map { ("\($0.name)/\($0.step)", $0.verdict?.description ?? "-") }, uniquingKeysWith: { a, _ in a })
        #expect(byName["replay/resend"] == "401 challenge_consumed")
        #expect(byName["reused-challenge/assert"] == "401 challenge_consumed")
        #expect(byName["counter-rollback/assert"] == "401 counter_replay")
        #expect(byName["tampered-body/assert"] == "401 bad_signature")
        #expect(byName["tampered-target/assert"] == "401 bad_signature")
        #expect(byName["unknown-key/assert"] == "401 key_unknown")
        #expect(byName["wrong-app-id/register"] == "401 app_id_mismatch")
        #expect(byName["wrong-app-id/assert"] == "401 key_unknown")
        #expect(byName["untrusted-root/register"] == "401 chain_untrusted")
        #expect(byName["untrusted-root/assert"] == "401 key_unknown")
        #expect(byName["expired-challenge/assert"] == "401 challenge_expired")
        #expect(byName["wrong-host/assert"] == "401 bad_signature")
        #expect(byName["control/request-after"] == "200")
        // Only the two control requests reached the upstream.
        #expect(gw.forwardedCount == 2)
    }

    @Test("attack: a gateway that lets a challenge be reused fails replay and reused-challenge") func brokenGateway() throws {
        let ca = try TestCA()
        let gw = try FakeGateway(appID: Self.appID, ca: ca, reusableChallenges: true)
        defer { gw.stop() }
        let opts = try AttackOptions(endpoint: gw.endpoint, appID: Self.appID, modes: [.replay, .reusedChallenge, .tamperedBody])
        let report = AttackRunner(options: opts, ca: ca).run()
        #expect(!report.passed)
        let failed = report.probes.filter { !$0.passed }.map(\.name)
        // The replay is still refused by the counter; the fresh assertion on a used challenge is accepted.
        #expect(failed == ["reused-challenge"], "\(report.text)")
        #expect(report.probes.first { $0.name == "replay" }?.verdict?.error == "counter_replay")
        #expect(report.text.contains("result: FAIL"))
    }

    @Test("attack: wrong-host is refused by a host-bound (v2) gateway; a v1 route takes v1 requests only; all skips it on v1")
    func wrongHost() throws {
        let ca = try TestCA()
        let v2 = try FakeGateway(appID: Self.appID, ca: ca)
        defer { v2.stop() }
        let report = AttackRunner(options: try AttackOptions(endpoint: v2.endpoint, appID: Self.appID, modes: [.wrongHost]), ca: ca).run()
        #expect(report.passed, "\(report.text)")
        let probe = try #require(report.probes.first { $0.name == "wrong-host" })
        #expect(probe.verdict?.description == "401 bad_signature")
        #expect(probe.note == "signed for attest-sim-elsewhere.invalid, sent as \(v2.endpoint.hostHeader)")
        // A gateway verifying version 1: the v2 control request is refused (bad signature), a v1 one accepted.
        let v1 = try FakeGateway(appID: Self.appID, ca: ca, clientData: .v1)
        defer { v1.stop() }
        let mismatched = AttackRunner(options: try AttackOptions(endpoint: v1.endpoint, appID: Self.appID, modes: [.replay]), ca: ca).run()
        #expect(!mismatched.passed)
        #expect(mismatched.probes.last?.verdict?.description == "401 bad_signature")
        let legacy = try AttackOptions(endpoint: v1.endpoint, appID: Self.appID, modes: [.replay, .tamperedTarget], clientData: .v1)
        #expect(AttackRunner(options: legacy, ca: ca).run().passed)
        #expect(try !AttackMode.parse("all", clientData: .v1).contains(.wrongHost))
        #expect(try AttackMode.parse("all").contains(.wrongHost))
        #expect(throws: AttestSimError.self) {
            try AttackOptions(endpoint: HTTPEndpoint(host: "127.0.0.1", port: 1), appID: Self.appID, modes: [.wrongHost], clientData: .v1)
        }
    }
}
