import AppAttest
import AppAttestSimulator
import Foundation
import GatewayCrypto
import GatewayTestSupport
import GatewayWire
import Testing

/// A software device speaking the client contract of the README to a real `gatewayd`.
final class ContractDevice: @unchecked Sendable {
    let device: SimulatedDevice
    private(set) var port: UInt16
    /// The local address this device connects from (127.0.0.2 …: another client); nil: 127.0.0.1.
    let source: String?
    var keyID: String { Base64.encode(device.keyID) }

    init(ca: TestCA, appID: String, environment: AttestEnvironment = .development, port: UInt16, source: String? = nil) throws {
        device = SimulatedDevice(appID: try AppID(appID), environment: environment, ca: ca)
        self.port = port
        self.source = source
    }

    func challenge(purpose: String? = nil, keyID: String? = nil) throws -> String {
        var fields: [String] = []
        if let purpose { fields.append("\"purpose\":\"\(purpose)\"") }
        if let keyID { fields.append("\"keyId\":\"\(keyID)\"") }
        let body = fields.isEmpty ? [] : Array("{\(fields.joined(separator: ","))}".utf8)
        let r = try HTTPCall.send(port: port, method: "POST", target: "/v1/attest/challenge", body: body, source: source)
        guard r.status == 201, let c = r.json?["challenge"] as? String else { throw POSIXError(.EPROTO) }
        return c
    }

    /// Fetches a challenge, attests over SHA256(challenge text), posts the registration.
    func register() throws -> HTTPCall {
        try register(challenge: try challenge(purpose: "register"))
    }

    /// Attests over SHA256(challenge text) and posts the registration.
    func register(challenge c: String) throws -> HTTPCall {
        let attestation = try device.attest(clientDataHash: SHA256.hash(Array(c.utf8)))
        let body = "{\"keyId\":\"\(keyID)\",\"attestation\":\"\(Base64.encode(attestation))\",\"challenge\":\"\(c)\"}"
        return try HTTPCall.send(port: port, method: "POST", target: "/v1/attest/register", body: Array(body.utf8), source: source)
    }

    /// The client data of `bind: request`, written here from the contract (not from the gateway's code):
    /// version 2 (the default) ends with the authority the request is addressed to, already in its
    /// normal form; version 1 has no authority line.
    static func clientData(
        _ version: String = "v2", challenge: String, method: String, target: String, authority: String = "", body: [UInt8]
    ) -> [UInt8] {
        let v1 = "\(challenge)\n\(method)\n\(target)\n\(Hex.encode(SHA256.hash(body)))"
        return Array((version == "v1" ? v1 : v1 + "\n" + authority).utf8)
    }

    struct Signed {
        let method: String
        let target: String
        let body: [UInt8]
        let headers: [(String, String)]
        /// The authority signed (version 2): sent as the Host unless a test says otherwise.
        let authority: String
    }

    /// Signed for `authority` (default `127.0.0.1:PORT`, the Host `HTTPCall` sends) in `version`.
    func sign(
        method: String = "POST", target: String, body: [UInt8], challenge: String, counter: UInt32? = nil,
        version: String = "v2", authority: String? = nil
    ) -> Signed {
        let signedFor = authority ?? "127.0.0.1:\(port)"
        let cd = Self.clientData(version, challenge: challenge, method: method, target: target, authority: signedFor, body: body)
        let a = device.assert(clientDataHash: SHA256.hash(cd), mutations: AssertionMutations(counter: counter))
        return Signed(
            method: method, target: target, body: body,
            headers: [
                ("X-App-Attest-Key-Id", keyID), ("X-App-Attest-Challenge", challenge), ("X-App-Assertion", Base64.encode(a)),
            ], authority: signedFor)
    }

    /// `host`: the Host field (default: the authority `s` was signed for).
    func send(_ s: Signed, extraHeaders: [(String, String)] = [], host: String? = nil) throws -> HTTPCall {
        try HTTPCall.send(
            port: port, method: s.method, target: s.target, headers: s.headers + extraHeaders, body: s.body, host: host ?? s.authority,
            source: source)
    }
}

@Suite("App Attest gateway end to end (real gatewayd, software devices)", .serialized, .timeLimit(.minutes(5)))
struct AttestGatewayTests {
    static let appID = "ABCDE12345.com.example.shop"
    let ca: TestCA
    let dir: URL

    init() throws {
        (ca, dir) = try makeTrustedTestCADirectory("gw-attest")
    }

    func config(dataDir: String? = nil, ttl: String = "5m", extraRoutes: String = "") -> String {
        """
        \(TestGatewayYAML.base(caDir: dir))
        attest: {challenge_ttl: \(ttl), challenge_rate: {per_client: off}}    # one address plays every device
        store: {kind: memory, shards: 8\(dataDir.map { ", data_dir: \($0), snapshot_interval: 1s" } ?? "")}
        routes:
          - name: purchase
            match: {methods: [POST], path_prefix: /api/purchase}
            upstream: demo
            max_body: 64KiB
            assertion: {mode: enforce}
          - name: profile
            match: {path_prefix: /api/profile}
            upstream: demo
            assertion: {mode: shadow}
          - name: signed-body
            match: {path_prefix: /api/signed}
            upstream: demo
            assertion: {mode: enforce, bind: body, challenge: "off"}
        \(extraRoutes)
          - {name: default, match: {path_prefix: /}, upstream: demo}
        """
    }

    @Test("challenge → register → protected requests, with the next challenge, verified header and metrics")
    func fullFlow() throws {
        let gw = try GatewayProcess(config: config())
        defer { gw.stop() }
        let port = HTTPCall.port(gw, "public")
        let phone = try ContractDevice(ca: ca, appID: Self.appID, port: port)
        let reg = try phone.register()
        #expect(reg.status == 201)
        #expect(reg.json?["keyId"] as? String == phone.keyID)
        #expect(reg.json?["environment"] as? String == "development")

        var challenge = try phone.challenge(purpose: "assert", keyID: phone.keyID)
        for i in 0..<3 {
            let body = Array("{\"sku\":\(i)}".utf8)
            let r = try phone.send(phone.sign(target: "/api/purchase?order=\(i)", body: body, challenge: challenge))
            #expect(r.status == 200, "request \(i): \(r.body)")
            let headers = try #require(r.json?["headers"] as? [String: String])
            #expect(headers["X-App-Attest-Verified-Key-Id"] == phone.keyID)
            #expect(headers["X-App-Assertion"] == nil && headers["X-App-Attest-Challenge"] == nil && headers["X-App-Attest-Key-Id"] == nil)
            #expect(r.json?["bodyBytes"] as? Int == body.count)
            let next = try #require(r.headers["x-app-attest-next-challenge"])
            #expect(r.headers["x-app-attest-next-challenge-expires"]?.hasSuffix("Z") == true)
            challenge = next
        }
        // A client-sent verified header never reaches an upstream, on any route.
        let forged = try HTTPCall.send(port: port, method: "GET", target: "/plain", headers: [("X-App-Attest-Verified-Key-Id", "forged")])
        #expect(forged.status == 200)
        #expect((forged.json?["headers"] as? [String: String])?["X-App-Attest-Verified-Key-Id"] == nil)

        let metrics = try curl([gw.url("admin", "/metrics")]).1
        #expect(
            metrics.contains(
                "attest_gateway_assertion_verdicts_total{route=\"purchase\",mode=\"enforce\",verdict=\"accepted\",reason=\"ok\"} 3"))
        #expect(metrics.contains("attest_gateway_registrations_total{result=\"registered\",reason=\"new_key\"} 1"))
        #expect(metrics.contains("attest_gateway_challenges_issued_total{purpose=\"assert\"} 1"))
        #expect(metrics.contains("attest_gateway_challenges_issued_total{purpose=\"next\"} 3"))
        #expect(try curl([gw.url("admin", "/readyz")]).0 == 200)
        // The access log: the protected route's lines carry the verdict and its reason, a plain route's none.
        let log = waitForStdout(gw) { $0.components(separatedBy: "\"route\":\"purchase\"").count > 3 && $0.contains("\"/plain\"") }
        let purchases = log.split(separator: "\n").filter { $0.contains("\"route\":\"purchase\"") }
        #expect(
            purchases.count == 3
                && purchases.allSatisfy { $0.contains("\"status\":200") && $0.hasSuffix(",\"verdict\":\"accepted\",\"reason\":\"ok\"}") },
            "\(purchases)")
        #expect(log.split(separator: "\n").contains { $0.contains("\"target\":\"/plain\"") && !$0.contains("\"verdict\"") }, "\(log)")
    }

    @Test("every attack is refused with its code and action; nothing reaches the upstream; explain tells why")
    func attacks() throws {
        let gw = try GatewayProcess(config: config(ttl: "1s"))
        defer { gw.stop() }
        let port = HTTPCall.port(gw, "public")
        let phone = try ContractDevice(ca: ca, appID: Self.appID, port: port)
        #expect(try phone.register().status == 201)
        let body = Array("{\"sku\":42}".utf8)

        // Replay: the accepted request again, byte for byte.
        let c1 = try phone.challenge()
        let accepted = phone.sign(target: "/api/purchase", body: body, challenge: c1)
        #expect(try phone.send(accepted).status == 200)
        let replay = try phone.send(accepted)
        #expect(replay.status == 401)
        #expect(replay.error == "counter_replay")  // its counter is the stored one: refused before the challenge is even looked at
        #expect(replay.json?["action"] as? String == "none")
        #expect(replay.json?["headers"] == nil)  // the demo upstream never answered

        // Reused challenge: a fresh assertion (higher counter) on the consumed challenge.
        #expect(try phone.send(phone.sign(target: "/api/purchase", body: body, challenge: c1)).error == "challenge_consumed")

        // Tampered body and tampered target.
        let c2 = try phone.challenge()
        let signed = phone.sign(target: "/api/purchase", body: body, challenge: c2)
        let tamperedBody = try HTTPCall.send(
            port: port, method: "POST", target: "/api/purchase", headers: signed.headers,
            body: Array("{\"sku\":43}".utf8))
        #expect(tamperedBody.status == 401)
        #expect(tamperedBody.error == "bad_signature")
        #expect(tamperedBody.json?["action"] as? String == "none")
        let tamperedTarget = try HTTPCall.send(
            port: port, method: "POST", target: "/api/purchase?admin=1", headers: signed.headers, body: body)
        #expect(tamperedTarget.error == "bad_signature")
        // Both refusals left the challenge unconsumed: the genuine request still passes.
        #expect(try phone.send(signed).status == 200)

        // Counter rollback: fresh challenge, counter not above the accepted one.
        let c3 = try phone.challenge()
        let rollback = try phone.send(phone.sign(target: "/api/purchase", body: body, challenge: c3, counter: 1))
        #expect(rollback.error == "counter_replay")

        // Unknown key, and keys from an untrusted root or a disallowed app.
        let stranger = try ContractDevice(ca: ca, appID: Self.appID, port: port)
        let unknown = try stranger.send(stranger.sign(target: "/api/purchase", body: body, challenge: try stranger.challenge()))
        #expect(unknown.error == "key_unknown")
        #expect(unknown.json?["action"] as? String == "reattest")
        let rogue = try ContractDevice(ca: try TestCA(name: "Rogue"), appID: Self.appID, port: port)
        let rogueReg = try rogue.register()
        #expect(rogueReg.status == 401)
        #expect(rogueReg.error == "chain_untrusted")
        #expect(try rogue.send(rogue.sign(target: "/api/purchase", body: body, challenge: try rogue.challenge())).error == "key_unknown")
        let otherApp = try ContractDevice(ca: ca, appID: "ABCDE12345.com.example.other", port: port)
        #expect(try otherApp.register().error == "app_id_mismatch")

        // Challenges bound to a purpose or a key.
        let forRegister = try phone.challenge(purpose: "register")
        #expect(try phone.send(phone.sign(target: "/api/purchase", body: body, challenge: forRegister)).error == "challenge_wrong_purpose")
        let forStranger = try phone.challenge(purpose: "assert", keyID: stranger.keyID)
        #expect(try phone.send(phone.sign(target: "/api/purchase", body: body, challenge: forStranger)).error == "challenge_wrong_key")

        // Missing headers, and an expired challenge (TTL 1 s here).
        let bare = try HTTPCall.send(port: port, method: "POST", target: "/api/purchase", body: body)
        #expect(bare.status == 401)
        #expect(bare.error == "assertion_missing")
        let old = try phone.challenge()
        usleep(1_600_000)
        let expired = try phone.send(phone.sign(target: "/api/purchase", body: body, challenge: old))
        #expect(expired.error == "challenge_expired")
        #expect(expired.json?["action"] as? String == "rechallenge")

        // explain: the failing step and the computed vs presented values, no secrets.
        let id = try #require(rollback.json?["requestId"] as? String)
        #expect(rollback.headers["x-request-id"] == id)
        let explained = try curl([gw.url("admin", "/explain/\(id)")])
        #expect(explained.0 == 200)
        #expect(explained.1.contains("\"step\":\"verify\""))
        #expect(explained.1.contains("\"counter_presented\":\"1\""))
        #expect(explained.1.contains("\"counter_stored\":\"3\""))
        #expect(!explained.1.contains(c3))
        #expect(try curl([gw.url("admin", "/explain/0000000000000000")]).0 == 404)
        let metrics = try curl([gw.url("admin", "/metrics")]).1
        #expect(metrics.contains("verdict=\"refused\",reason=\"bad_signature\"} 2"))
        #expect(metrics.contains("attest_gateway_registrations_total{result=\"refused\",reason=\"chain_untrusted\"} 1"))
        // Decision logs never carry assertion bytes.
        let assertion = accepted.headers.first { $0.0 == "X-App-Assertion" }!.1
        #expect(!gw.stderr.contains(assertion) && !gw.stdout.contains(assertion))
        // The refusal's access line: its request id, the verdict and the reason.
        let bareID = try #require(bare.headers["x-request-id"])
        let line =
            waitForStdout(gw) { $0.contains("\"request_id\":\"\(bareID)\"") }.split(separator: "\n")
            .first { $0.contains("\"request_id\":\"\(bareID)\"") }.map(String.init) ?? ""
        #expect(line.contains("\"status\":401") && line.hasSuffix(",\"verdict\":\"refused\",\"reason\":\"assertion_missing\"}"), "\(line)")
    }

    @Test("shadow forwards refusals and counts them; bind: body with challenge off relies on the counter")
    func shadowAndBodyBinding() throws {
        let gw = try GatewayProcess(
            config: config(
                extraRoutes: """
                      - name: rollout
                        match: {path_prefix: /api/rollout}
                        upstream: demo
                        assertion: {mode: enforce, rollout: 0%}
                    """))
        defer { gw.stop() }
        let port = HTTPCall.port(gw, "public")
        let phone = try ContractDevice(ca: ca, appID: Self.appID, port: port)
        #expect(try phone.register().status == 201)
        let shadow = try HTTPCall.send(port: port, method: "GET", target: "/api/profile", headers: [("X-App-Assertion", "AAAA")])
        #expect(shadow.status == 200)
        #expect((shadow.json?["headers"] as? [String: String])?["X-App-Assertion"] == nil)
        let valid = try phone.send(phone.sign(method: "GET", target: "/api/profile", body: [], challenge: try phone.challenge()))
        #expect(valid.status == 200)
        #expect((valid.json?["headers"] as? [String: String])?["X-App-Attest-Verified-Key-Id"] == phone.keyID)
        #expect(try HTTPCall.send(port: port, method: "GET", target: "/api/rollout").status == 200)

        // bind: body, challenge off: clientData is the body; the counter alone stops a replay.
        let body = Array("{\"transfer\":100}".utf8)
        let a = phone.device.assert(clientDataHash: SHA256.hash(body))
        let headers = [("X-App-Attest-Key-Id", phone.keyID), ("X-App-Assertion", Base64.encode(a))]
        #expect(try HTTPCall.send(port: port, method: "POST", target: "/api/signed", headers: headers, body: body).status == 200)
        #expect(
            try HTTPCall.send(port: port, method: "POST", target: "/api/signed", headers: headers, body: body).error == "counter_replay")

        let metrics = try curl([gw.url("admin", "/metrics")]).1
        #expect(metrics.contains("route=\"profile\",mode=\"shadow\",verdict=\"would_refuse\",reason=\"assertion_missing\"} 1"))
        #expect(metrics.contains("route=\"rollout\",mode=\"shadow\",verdict=\"would_refuse\",reason=\"assertion_missing\"} 1"))
        #expect(gw.stderr.contains("assertion would_refuse"))
    }

    @Test(
        "a verified request reaches a real upstream whole: head, verified key id and every body byte (nginx counts them)",
        .enabled(if: NginxProcess.testsEnabled))
    func verifiedBodyReachesRealUpstream() throws {
        let nginx = try NginxProcess()
        defer { nginx.stop() }
        let yaml = config().replacingOccurrences(
            of: "  - {name: demo, url: demo}",
            with: "  - {name: demo, url: demo}\n  - {name: nginx, url: \"http://127.0.0.1:\(nginx.port)\"}"
        )
        .replacingOccurrences(
            of: "routes:\n",
            with: """
                routes:
                  - name: upload
                    match: {methods: [POST], path_prefix: /upload}
                    upstream: nginx
                    assertion: {mode: enforce}

                """)
        let gw = try GatewayProcess(config: yaml)
        defer { gw.stop() }
        let port = HTTPCall.port(gw, "public")
        let phone = try ContractDevice(ca: ca, appID: Self.appID, port: port)
        #expect(try phone.register().status == 201)
        // Several on one keep-alive upstream connection: a body left unsent would shift the next request.
        var challenge = try phone.challenge()
        for size in [1, 300, 20_000, 0, 64] {
            let body = (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 7) }
            let r = try phone.send(phone.sign(target: "/upload", body: body, challenge: challenge))
            #expect(r.status == 200, "\(size) bytes: \(r.body)")
            #expect(r.body.contains("received=\(size)"), "\(size) bytes: \(r.body)")
            challenge = try #require(r.headers["x-app-attest-next-challenge"])
        }
    }

    @Test("iOS 27 signals: validation category and minimum bundle version, at registration and on assertions")
    func ios27Signals() throws {
        let yaml = config().replacingOccurrences(
            of: "  - {team_id: ABCDE12345, bundle_ids: [com.example.shop], environments: [development, production]}",
            with: """
                  - {team_id: ABCDE12345, bundle_ids: [com.example.shop], environments: [development, production],
                     validation_categories: [app_store, testflight], min_bundle_version: '4.2'}
                """)
        let gw = try GatewayProcess(config: yaml)
        defer { gw.stop() }
        let port = HTTPCall.port(gw, "public")
        func register(_ d: ContractDevice, _ ext: SimulatedExtensions?) throws -> HTTPCall {
            let c = try d.challenge(purpose: "register")
            let att = try d.device.attest(clientDataHash: SHA256.hash(Array(c.utf8)), extensions: ext)
            let body = "{\"keyId\":\"\(d.keyID)\",\"attestation\":\"\(Base64.encode(att))\",\"challenge\":\"\(c)\"}"
            return try HTTPCall.send(port: port, method: "POST", target: "/v1/attest/register", body: Array(body.utf8))
        }
        let dev = try ContractDevice(ca: ca, appID: Self.appID, port: port)
        let r1 = try register(dev, SimulatedExtensions(validationCategory: .development, bundleVersion: "5.0"))
        #expect(r1.status == 403)
        #expect(r1.error == "validation_category_not_allowed")
        let old = try ContractDevice(ca: ca, appID: Self.appID, port: port)
        let r2 = try register(old, SimulatedExtensions(validationCategory: .appStore, bundleVersion: "4.1.9"))
        #expect(r2.status == 403)
        #expect(r2.error == "bundle_version_too_old")
        // Before iOS 27 there is no signal: accepted. An assertion that later reports an old version is refused.
        let legacy = try ContractDevice(ca: ca, appID: Self.appID, port: port)
        #expect(try register(legacy, nil).status == 201)
        let ok = try ContractDevice(ca: ca, appID: Self.appID, port: port)
        #expect(
            try register(ok, SimulatedExtensions(validationCategory: .testFlight, bundleVersion: "4.10", setsExtensionDataFlag: true))
                .status == 201)
        let c = try legacy.challenge()
        let cd = ContractDevice.clientData(challenge: c, method: "POST", target: "/api/purchase", authority: "127.0.0.1:\(port)", body: [])
        let a = legacy.device.assert(
            clientDataHash: SHA256.hash(cd), extensions: SimulatedExtensions(validationCategory: .appStore, bundleVersion: "4.0"))
        let refused = try HTTPCall.send(
            port: port, method: "POST", target: "/api/purchase",
            headers: [
                ("X-App-Attest-Key-Id", legacy.keyID), ("X-App-Attest-Challenge", c), ("X-App-Assertion", Base64.encode(a)),
            ])
        #expect(refused.status == 403)
        #expect(refused.error == "bundle_version_too_old")
        #expect(try ok.send(ok.sign(target: "/api/purchase", body: [], challenge: try ok.challenge())).status == 200)
    }

    @Test("receipts at registration: a bad one is refused with receipt_invalid and explained; receipts: ignore; the macOS key policy")
    func receiptsAndMacOSPolicy() throws {
        let yaml = config().replacingOccurrences(
            of: "  - {team_id: ABCDE12345, bundle_ids: [com.example.shop], environments: [development, production]}",
            with: """
                  - {team_id: ABCDE12345, bundle_ids: [com.example.shop], environments: [development, production]}
                  - {team_id: ABCDE12345, bundle_ids: [com.example.lax], environments: [development], receipts: ignore}
                  - {team_id: ABCDE12345, bundle_ids: [com.example.mac], environments: [development], require_macos_security: true}
                """)
        let gw = try GatewayProcess(config: yaml)
        defer { gw.stop() }
        #expect(gw.stderr.contains("TRUSTING EXTRA ROOTS for receipts besides Apple Root CA - G3"))
        let port = HTTPCall.port(gw, "public")
        func register(_ d: ContractDevice, _ m: AttestationMutations = .none) throws -> HTTPCall {
            let c = try d.challenge(purpose: "register")
            let att = try d.device.attest(clientDataHash: SHA256.hash(Array(c.utf8)), mutations: m)
            let body = "{\"keyId\":\"\(d.keyID)\",\"attestation\":\"\(Base64.encode(att))\",\"challenge\":\"\(c)\"}"
            return try HTTPCall.send(port: port, method: "POST", target: "/v1/attest/register", body: Array(body.utf8))
        }
        let otherApp = AttestationMutations(receiptEdit: { $0.appID = "ABCDE12345.com.example.other" })

        // A genuine receipt (signed by the test CA's receipt chain, whose root is listed) registers.
        #expect(try register(ContractDevice(ca: ca, appID: Self.appID, port: port)).status == 201)
        // A receipt for another app: refused, nothing stored, the reason in explain.
        let bad = try register(ContractDevice(ca: ca, appID: Self.appID, port: port), otherApp)
        #expect(bad.status == 401)
        #expect(bad.error == "receipt_invalid")
        #expect(bad.json?["action"] as? String == "none")
        let id = try #require(bad.json?["requestId"] as? String)
        let explained = try curl([gw.url("admin", "/explain/\(id)")])
        #expect(explained.1.contains("\"step\":\"receipt\""))
        #expect(explained.1.contains("\"reason\":\"app_id_mismatch\""), "\(explained.1)")
        // Another CA's receipt chain is not trusted; no receipt at all is malformed.
        let rogue = try TestCA()
        #expect(
            try register(
                ContractDevice(ca: ca, appID: Self.appID, port: port),
                AttestationMutations(
                    receipt: try rogue.issueReceipt(payload: [0x31, 0x00]))
            ).error == "receipt_invalid")
        #expect(
            try register(ContractDevice(ca: ca, appID: Self.appID, port: port), AttestationMutations(receipt: [])).error
                == "receipt_invalid")
        // receipts: ignore registers the same bad receipt.
        #expect(try register(ContractDevice(ca: ca, appID: "ABCDE12345.com.example.lax", port: port), otherApp).status == 201)

        // require_macos_security: a simulated Mac registers, an iPhone is refused with 403.
        let mac = try ContractDevice(ca: ca, appID: "ABCDE12345.com.example.mac", port: port)
        mac.device.keyAccessControl = SimulatedDevice.macOSKeyAccessControl
        #expect(try mac.register().status == 201)
        // The key's policy is recorded where its registration is logged (written before the answer,
        // read by the test from a pipe: waited for, bounded).
        _ = waitForLog(gw, "\"key_access_control\":\"macos_full_security", seconds: 5)
        #expect(
            gw.stderrLines.contains {
                $0.contains("\"msg\":\"key registered\"") && $0.contains("\"key_access_control\":\"macos_full_security")
            })
        #expect(
            gw.stderrLines.contains { $0.contains("\"msg\":\"key registered\"") && $0.contains("\"receipt\":\"verified ATTEST created") })
        let phone = try register(ContractDevice(ca: ca, appID: "ABCDE12345.com.example.mac", port: port))
        #expect(phone.status == 403)
        #expect(phone.error == "macos_security_required")

        let metrics = try curl([gw.url("admin", "/metrics")]).1
        #expect(metrics.contains("attest_gateway_registrations_total{result=\"refused\",reason=\"receipt_invalid\"} 3"))
        #expect(metrics.contains("attest_gateway_registrations_total{result=\"refused\",reason=\"macos_security_required\"} 1"))
        #expect(metrics.contains("attest_gateway_registrations_total{result=\"registered\",reason=\"new_key\"} 3"))
    }

    @Test("parallel requests on one device: the same challenge, or the same counter, gives exactly one accept")
    func parallelExactlyOne() throws {
        let gw = try GatewayProcess(config: config())
        defer { gw.stop() }
        let port = HTTPCall.port(gw, "public")
        let phone = try ContractDevice(ca: ca, appID: Self.appID, port: port)
        #expect(try phone.register().status == 201)
        let body = Array("{}".utf8)
        var floor: UInt32 = 0  // every committed counter is at most this
        for round in 0..<3 {
            // Same challenge, rising counters (all above anything committed).
            let c = try phone.challenge()
            let sameChallenge = (1...12).map { i in
                phone.sign(target: "/api/purchase", body: body, challenge: c, counter: floor + UInt32(i))
            }
            floor += 12
            // Same counter, each its own challenge.
            let sameCounter = try (0..<12).map { _ in
                phone.sign(target: "/api/purchase", body: body, challenge: try phone.challenge(), counter: floor + 1)
            }
            floor += 1
            for batch in [sameChallenge, sameCounter] {
                let results = Mutex2([String](repeating: "", count: batch.count))
                DispatchQueue.concurrentPerform(iterations: batch.count) { i in
                    let r = try? phone.send(batch[i])
                    results.with { $0[i] = r.map { "\($0.status) \($0.error ?? "")" } ?? "no answer" }
                }
                let all = results.with { $0 }
                #expect(all.filter { $0.hasPrefix("200") }.count == 1, "round \(round): \(all)")
                #expect(all.filter { $0.hasPrefix("401") }.count == batch.count - 1, "round \(round): \(all)")
            }
        }
    }

    @Test("bad JSON, bad base64, wrong methods, oversized bodies and headers: 4xx with a code, never a crash")
    func badInput() throws {
        let gw = try GatewayProcess(config: config())
        defer { gw.stop() }
        let port = HTTPCall.port(gw, "public")
        func post(_ path: String, _ body: String) throws -> HTTPCall {
            try HTTPCall.send(port: port, method: "POST", target: path, body: Array(body.utf8))
        }
        #expect(try post("/v1/attest/register", "{not json").error == "bad_json")
        #expect(try post("/v1/attest/register", "[1,2]").error == "bad_json")
        #expect(try post("/v1/attest/register", "{\"keyId\":\"AAAA\"}").error == "missing_field")
        #expect(try post("/v1/attest/register", "{\"keyId\":7,\"attestation\":\"x\",\"challenge\":\"y\"}").error == "bad_json")
        let badKey = try post(
            "/v1/attest/register", "{\"keyId\":\"***\",\"attestation\":\"AAAA\",\"challenge\":\"AAAAAAAAAAAAAAAAAAAAAA\"}")
        #expect(badKey.status == 400)
        #expect(badKey.error == "malformed")
        let key = Base64.encode([UInt8](repeating: 7, count: 32))
        let challenge = try post("/v1/attest/challenge", "").json?["challenge"] as? String ?? ""
        #expect(
            try post("/v1/attest/register", "{\"keyId\":\"\(key)\",\"attestation\":\"%%%\",\"challenge\":\"\(challenge)\"}").error
                == "malformed")
        let garbage = try post("/v1/attest/register", "{\"keyId\":\"\(key)\",\"attestation\":\"AAAA\",\"challenge\":\"\(challenge)\"}")
        #expect(garbage.status == 400)
        #expect(garbage.error == "malformed")
        #expect(try post("/v1/attest/challenge", "{\"purpose\":\"steal\"}").error == "bad_json")
        #expect(try post("/v1/attest/challenge", "{\"keyId\":\"abc\"}").error == "malformed")
        #expect(try HTTPCall.send(port: port, method: "GET", target: "/v1/attest/challenge").status == 405)
        #expect(try post("/v1/attest/register", String(repeating: "x", count: 200_000)).status == 413)
        #expect(try post("/v1/attest/challenge", String(repeating: " ", count: 5_000)).status == 413)
        let hugeHeader = try HTTPCall.send(
            port: port, method: "POST", target: "/api/purchase",
            headers: [("X-App-Assertion", String(repeating: "A", count: 70_000))])
        #expect(hugeHeader.status == 431)
        for (k, c, a) in [
            ("%%", "x", "y"), (key, "%%", "AAAA"), (key, "AAAAAAAAAAAAAAAAAAAAAA", "@@@"), (key, "AAAAAAAAAAAAAAAAAAAAAA", "AAAA"),
        ] {
            let r = try HTTPCall.send(
                port: port, method: "POST", target: "/api/purchase",
                headers: [("X-App-Attest-Key-Id", k), ("X-App-Attest-Challenge", c), ("X-App-Assertion", a)])
            #expect(r.status == 401, "\(k) \(c) \(a): \(r.body)")
            #expect(r.error != nil)
        }
        #expect(try curl([gw.url("admin", "/healthz")]).0 == 200)
        #expect(gw.process.isRunning)
    }

    @Test("with a data directory: periodic snapshots only when something changed, their age and duration in metrics")
    func snapshotMetrics() throws {
        let gw = try GatewayProcess(config: config(dataDir: dir.appendingPathComponent("snap").path))
        defer { gw.stop() }
        let port = HTTPCall.port(gw, "public")
        let phone = try ContractDevice(ca: ca, appID: Self.appID, port: port)
        #expect(try phone.register().status == 201)
        var metrics = ""
        for _ in 0..<40 {  // snapshot_interval is 1 s here; allow a loaded machine some slack
            usleep(250_000)
            metrics = try curl([gw.url("admin", "/metrics")]).1
            if metrics.contains("attest_gateway_store_snapshot_duration_seconds_count 1") { break }
        }
        #expect(metrics.contains("attest_gateway_store_snapshot_duration_seconds_count 1"))
        #expect(metrics.contains("attest_gateway_store_keys 1"))
        usleep(2_500_000)  // idle: nothing new, no second snapshot, and the age stays 0
        metrics = try curl([gw.url("admin", "/metrics")]).1
        #expect(metrics.contains("attest_gateway_store_snapshot_duration_seconds_count 1"))
        #expect(metrics.contains("attest_gateway_store_snapshot_age_seconds 0"))
        #expect(metrics.contains("attest_gateway_store_journal_fsync_duration_seconds_count"))
    }

    @Test("kill -9 under load, restart, repeated: no registration lost, no accepted assertion accepted again")
    func crashUnderLoad() throws {
        let data = dir.appendingPathComponent("data").path
        var devices: [ContractDevice] = []
        var acceptedRequests: [ContractDevice.Signed] = []
        var acceptedBodyBound: [[(String, String)]] = []
        for round in 0..<3 {
            let gw = try GatewayProcess(config: config(dataDir: data))
            let port = HTTPCall.port(gw, "public")
            // Everything accepted before this start must be refused now.
            for s in acceptedRequests {
                let r = try HTTPCall.send(
                    port: port, method: s.method, target: s.target, headers: s.headers, body: s.body, host: s.authority)
                #expect(r.status == 401, "round \(round): a request accepted before the crash passed again")
            }
            for h in acceptedBodyBound {
                let r = try HTTPCall.send(port: port, method: "POST", target: "/api/signed", headers: h, body: Array("{\"n\":1}".utf8))
                #expect(r.error == "counter_replay", "round \(round): \(r.body)")
            }
            // Every registration answered 201 before is still there.
            for d in devices {
                d.rebind(port: port)
                let r = try d.send(d.sign(target: "/api/purchase", body: [], challenge: try d.challenge()))
                #expect(r.status == 200, "round \(round): device lost: \(r.body)")
            }
            // Load: registrations and protected requests from several threads, then kill -9 mid-flight.
            let fresh = try (0..<4).map { _ in try ContractDevice(ca: ca, appID: Self.appID, port: port) }
            let registered = Mutex2([ContractDevice]())
            let accepted = Mutex2([ContractDevice.Signed]())
            let acceptedBody = Mutex2([[(String, String)]]())
            let stop = Mutex2(false)
            let group = DispatchGroup()
            for d in fresh {
                DispatchQueue.global().async(group: group) {
                    guard (try? d.register())?.status == 201 else { return }
                    registered.with { $0.append(d) }
                    var n = 0
                    while !stop.with({ $0 }) && n < 400 {
                        n += 1
                        guard let c = try? d.challenge() else { break }
                        let s = d.sign(target: "/api/purchase?n=\(n)", body: Array("{\"n\":\(n)}".utf8), challenge: c)
                        guard let r = try? d.send(s) else { break }
                        if r.status == 200 { accepted.with { $0.append(s) } }
                        let bodyBound = [
                            ("X-App-Attest-Key-Id", d.keyID),
                            ("X-App-Assertion", Base64.encode(d.device.assert(clientDataHash: SHA256.hash(Array("{\"n\":1}".utf8))))),
                        ]
                        if let r2 = try? HTTPCall.send(
                            port: port, method: "POST", target: "/api/signed", headers: bodyBound,
                            body: Array("{\"n\":1}".utf8)), r2.status == 200
                        {
                            acceptedBody.with { $0.append(bodyBound) }
                        }
                    }
                }
            }
            // Mid-flight: once the load has been accepted (a slower build, e.g. under ThreadSanitizer,
            // takes longer to get there), a little later each round.
            let loaded = Date().addingTimeInterval(20)
            while accepted.with({ $0 }).isEmpty && Date() < loaded { usleep(20_000) }
            usleep(useconds_t(300_000 + round * 250_000))
            gw.signal(SIGKILL)
            stop.with { $0 = true }
            _ = group.wait(timeout: .now() + 30)
            gw.waitForExit()
            devices += registered.with { $0 }
            acceptedRequests += accepted.with { $0 }
            acceptedBodyBound += acceptedBody.with { $0 }
            #expect(!accepted.with { $0 }.isEmpty, "round \(round): the load accepted nothing before the kill")
        }
        // A clean stop keeps a live challenge valid across the restart.
        let gw = try GatewayProcess(config: config(dataDir: data))
        let port = HTTPCall.port(gw, "public")
        let d = devices[0]
        d.rebind(port: port)
        let c = try d.challenge()
        gw.signal(SIGTERM)
        #expect(gw.waitForExit() == 0)
        let again = try GatewayProcess(config: config(dataDir: data))
        defer { again.stop() }
        d.rebind(port: HTTPCall.port(again, "public"))
        #expect(try d.send(d.sign(target: "/api/purchase", body: [], challenge: c)).status == 200)
        #expect(again.stderr.contains("\"last_stop\":\"clean\""))
    }
}

extension ContractDevice {
    /// The same device talking to a restarted gateway (a new port).
    func rebind(port: UInt16) { self.port = port }
}

/// A directory for one suite's files holding the roots of a fresh test CA, `root.pem` and
/// `receipt-root.pem` (its receipt chain's root, for `trust.extra_receipt_roots`), to list in
/// `trust.extra_roots` (the gateway never trusts a test root implicitly).
func makeTrustedTestCADirectory(_ prefix: String) throws -> (ca: TestCA, dir: URL) {
    let ca = try TestCA()
    let dir = FileManager.default.temporaryDirectory.appendingPathComponent("\(prefix)-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
    try ca.rootPEM.write(to: dir.appendingPathComponent("root.pem"), atomically: true, encoding: .utf8)
    try ca.receiptRootPEM.write(to: dir.appendingPathComponent("receipt-root.pem"), atomically: true, encoding: .utf8)
    return (ca, dir)
}

/// The receipt root a test CA directory keeps beside its `root.pem` (`TestCA.receiptRootFile`).
func receiptRoot(besideRoot root: String) -> String {
    URL(fileURLWithPath: root).deletingLastPathComponent().appendingPathComponent("receipt-root.pem").path
}

/// A lock-protected value for test threads.
final class Mutex2<T>: @unchecked Sendable {
    private var value: T
    private let lock = NSLock()
    init(_ v: T) { value = v }
    func with<R>(_ f: (inout T) -> R) -> R {
        lock.lock()
        defer { lock.unlock() }
        return f(&value)
    }
}
