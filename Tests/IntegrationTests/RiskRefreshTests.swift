import AppAttest
import AppAttestSimulator
import AttestSim
import Foundation
import GatewayCrypto
import GatewayTestSupport
import GatewayWire
import Testing

/// The risk metric end to end: a real `gatewayd` refreshing each key's receipt with the local
/// stand-in for Apple's App Attest data service (`AppleStandIn`, what `attest-sim apple` serves),
/// over real TLS, with the team's ES256 token: the metric raised → the next protected request
/// refused on a `max_risk_metric` route; 429 → every refresh pauses for its `Retry-After`; 304 →
/// the key asked again at its receipt's not-before; 404 → the metric kept and marked stale; a
/// restart keeps receipts and metrics.
@Suite("Risk metric refresh (real gatewayd, the Apple stand-in)", .serialized, .timeLimit(.minutes(5)))
struct RiskRefreshTests {
    static let appID = "ABCDE12345.com.example.shop"
    let team: AppleTeamFixture
    var ca: TestCA { team.ca }
    var dir: URL { team.dir }
    let dataDir: String

    init() throws {
        team = try AppleTeamFixture("gw-risk")
        dataDir = team.dir.appendingPathComponent("data").path
    }

    func standIn(notBefore: Int64 = 1) throws -> AppleStandIn { try team.standIn(notBefore: notBefore) }

    func config(_ apple: AppleStandIn, refresh: String = "2s", staleProbe: String = "1h", teamID: String = "ABCDE12345") -> String {
        """
        \(TestGatewayYAML.base(caDir: dir))
        attest: {challenge_rate: {per_client: off}}
        store: {kind: memory, shards: 8, data_dir: \(dataDir), snapshot_interval: 1s}
        \(team.appleSection(apple, service: "attest_data_url", teamID: teamID))
        risk: {refresh: \(refresh), concurrency: 2, stale_probe: \(staleProbe)}
        routes:
          - name: purchase
            match: {methods: [POST], path_prefix: /api/purchase}
            upstream: demo
            assertion: {mode: enforce, max_risk_metric: 2, on_risk: refuse}
          - name: watch
            match: {methods: [POST], path_prefix: /api/watch}
            upstream: demo
            assertion: {mode: enforce, max_risk_metric: 2}
          - {name: default, match: {path_prefix: /}, upstream: demo}
        """
    }

    /// Polls `condition` every 50 ms for up to `seconds`.
    func eventually(_ seconds: Double = 20, _ condition: () throws -> Bool) rethrows -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if try condition() { return true }
            usleep(50_000)
        }
        return try condition()
    }

    /// The stand-in's answers for one key.
    func answers(_ apple: AppleStandIn, _ key: String) -> [AppleStandIn.Logged] { apple.requests.filter { $0.keyID == key } }

    /// `/explain/key/<id>` (the id in base64url: a path segment).
    func keyInfo(_ gw: GatewayProcess, _ key: String) throws -> [String: Any] {
        let urlSafe = Base64.encodeURL(try Base64.decode(key))
        let (status, body) = try curl([gw.url("admin", "/explain/key/\(urlSafe)")])
        #expect(status == 200, "\(body)")
        return (try JSONSerialization.jsonObject(with: Data(body.utf8))) as? [String: Any] ?? [:]
    }

    func metrics(_ gw: GatewayProcess) throws -> String { try curl([gw.url("admin", "/metrics")]).1 }

    func protected(_ phone: ContractDevice, _ target: String) throws -> HTTPCall {
        let body = Array("{\"sku\":1}".utf8)
        return try phone.send(phone.sign(target: target, body: body, challenge: try phone.challenge()))
    }

    @Test(
        "the metric raised at Apple → the next request refused 403 risk_metric_exceeded (flagged on a flag route); X-App-Attest-Risk-Metric upstream; explain; a restart keeps it all"
    )
    func metricRaisedThenRefused() throws {
        let apple = try standIn()
        defer { apple.stop() }
        let yaml = config(apple)
        var gw = try GatewayProcess(config: yaml)
        defer { gw.stop() }
        let phone = try ContractDevice(ca: ca, appID: Self.appID, port: HTTPCall.port(gw, "public"))
        #expect(try phone.register().status == 201)

        // The first refresh sends the attestation's receipt; Apple's answer (metric 1) is stored.
        #expect(eventually { answers(apple, phone.keyID).contains { $0.status == 200 } })
        #expect(try eventually { (try keyInfo(gw, phone.keyID)["risk"] as? [String: Any])?["metric"] as? Int == 1 })
        let first = try protected(phone, "/api/purchase")
        #expect(first.status == 200, "\(first.body)")
        let upstream = try #require(first.json?["headers"] as? [String: String])
        #expect(upstream["X-App-Attest-Risk-Metric"] == "1")
        #expect(upstream["X-App-Attest-Verified-Key-Id"] == phone.keyID)

        // Apple's metric for the device rises: the next refresh brings it, the next request is refused.
        apple.setMetric(5, keyID: phone.keyID)
        #expect(try eventually { (try keyInfo(gw, phone.keyID)["risk"] as? [String: Any])?["metric"] as? Int == 5 })
        let refused = try protected(phone, "/api/purchase")
        #expect(refused.status == 403)
        #expect(refused.error == "risk_metric_exceeded")
        #expect(refused.json?["action"] as? String == "none")
        #expect(refused.json?["headers"] == nil)  // nothing reached the upstream
        // On a flag route it goes on, with its metric, and is counted.
        let flagged = try protected(phone, "/api/watch")
        #expect(flagged.status == 200)
        #expect((flagged.json?["headers"] as? [String: String])?["X-App-Attest-Risk-Metric"] == "5")
        // A client's own copy of the header never reaches an upstream.
        let forged = try HTTPCall.send(port: phone.port, method: "GET", target: "/plain", headers: [("X-App-Attest-Risk-Metric", "0")])
        #expect((forged.json?["headers"] as? [String: String])?["X-App-Attest-Risk-Metric"] == nil)

        // explain: the refusal with the key's metric and receipt dates.
        let id = try #require(refused.json?["requestId"] as? String)
        let (_, explained) = try curl([gw.url("admin", "/explain/\(id)")])
        #expect(
            explained.contains("risk_metric_exceeded") && explained.contains("\"risk_metric\":\"5\"")
                && explained.contains("receipt_created"))
        #expect(explained.contains("\"status\":403") && !explained.contains("refusalStatus"), "\(explained)")
        // The flagged one reached the upstream: its entry says what the client was sent (200), and
        // what a refusing route would have answered in its own field.
        let flaggedID = try #require(flagged.headers["X-Request-Id"] ?? flagged.headers["x-request-id"], "\(flagged.headers)")
        let (_, flaggedWhy) = try curl([gw.url("admin", "/explain/\(flaggedID)")])
        #expect(
            flaggedWhy.contains("\"verdict\":\"flagged\"") && flaggedWhy.contains("\"status\":200")
                && flaggedWhy.contains("\"refusalStatus\":403"), "\(flaggedWhy)")
        let info = try keyInfo(gw, phone.keyID)
        let risk = try #require(info["risk"] as? [String: Any])
        #expect(risk["stale"] as? Bool == false)
        #expect((risk["receiptCreated"] as? String)?.hasSuffix("Z") == true && (risk["receiptNotBefore"] as? String) != nil)

        let text = try metrics(gw)
        #expect(
            text.contains(
                "attest_gateway_assertion_verdicts_total{route=\"purchase\",mode=\"enforce\",verdict=\"refused\",reason=\"risk_metric_exceeded\"} 1"
            ))
        #expect(
            text.contains(
                "attest_gateway_assertion_verdicts_total{route=\"watch\",mode=\"enforce\",verdict=\"flagged\",reason=\"risk_metric_exceeded\"} 1"
            ))
        #expect(text.contains("attest_gateway_receipt_refreshes_total{result=\"refreshed\"}"))
        #expect(text.contains("attest_gateway_receipt_risk_metric_bucket"))
        #expect(text.contains("attest_gateway_receipt_refresh_lag_seconds"))
        // Every token the stand-in saw verified (bare, ES256, kid, iss, iat).
        #expect(!apple.requests.contains { $0.status == 401 })

        // A restart (clean) keeps the refreshed receipt and its metric: refused at once.
        gw.signal(SIGTERM)
        #expect(gw.waitForExit() == 0)
        apple.script(.init(status: 503, count: 1_000))  // no refresh can change the metric after the restart
        gw = try GatewayProcess(config: yaml)
        phone.rebind(port: HTTPCall.port(gw, "public"))
        #expect(((try keyInfo(gw, phone.keyID))["risk"] as? [String: Any])?["metric"] as? Int == 5)
        #expect(try protected(phone, "/api/purchase").error == "risk_metric_exceeded")
    }

    @Test("429 with Retry-After: every refresh pauses that long, then goes on; counted rate_limited")
    func rateLimitedBacksOff() throws {
        let apple = try standIn()
        defer { apple.stop() }
        apple.script(.init(status: 429, retryAfter: 3, count: 1))
        let gw = try GatewayProcess(config: config(apple))
        defer { gw.stop() }
        let phone = try ContractDevice(ca: ca, appID: Self.appID, port: HTTPCall.port(gw, "public"))
        #expect(try phone.register().status == 201)
        #expect(eventually { answers(apple, phone.keyID).contains { $0.status == 200 } })
        let seen = answers(apple, phone.keyID)
        let limited = try #require(seen.first { $0.status == 429 })
        let next = try #require(seen.first { $0.atMillis > limited.atMillis })
        #expect(next.atMillis - limited.atMillis >= 3_000, "asked again \(next.atMillis - limited.atMillis) ms after the 429")
        #expect(next.status == 200)
        let text = try metrics(gw)
        #expect(text.contains("attest_gateway_receipt_refreshes_total{result=\"rate_limited\"} 1"))
        #expect(gw.stderr.contains("refreshes paused"))
    }

    @Test("304: the key is asked again at its receipt's not-before; 404: the metric is kept, marked stale, asked again at stale_probe")
    func notModifiedAndStale() throws {
        let apple = try standIn(notBefore: 4)
        defer { apple.stop() }
        let gw = try GatewayProcess(config: config(apple, refresh: "1s", staleProbe: "1h"))
        defer { gw.stop() }
        let phone = try ContractDevice(ca: ca, appID: Self.appID, port: HTTPCall.port(gw, "public"))
        #expect(try phone.register().status == 201)
        #expect(eventually { answers(apple, phone.keyID).contains { $0.status == 200 } })
        let refreshed = try #require(answers(apple, phone.keyID).first { $0.status == 200 })
        #expect(try eventually { (try keyInfo(gw, phone.keyID)["risk"] as? [String: Any])?["metric"] as? Int == 1 })
        // The stored receipt's not-before is 4 s after it was made: with refresh 1s, not asked before then.
        let info = try keyInfo(gw, phone.keyID)
        let risk = try #require(info["risk"] as? [String: Any])
        let notBefore = try #require((risk["receiptNotBefore"] as? String).flatMap(ReceiptTime.init))
        let nextRefresh = try #require((risk["nextRefresh"] as? String).flatMap(ReceiptTime.init))
        #expect(nextRefresh.millis >= notBefore.millis)
        // Apple answers 304 the next time anyway: asked again only at the not-before (within its spread).
        apple.script(.init(status: 304, count: 1))
        #expect(eventually(15) { answers(apple, phone.keyID).contains { $0.status == 304 } })
        let notModified = try #require(answers(apple, phone.keyID).first { $0.status == 304 })
        #expect(notModified.atMillis >= refreshed.atMillis + 3_000)
        // The not-before is behind now (Apple's clock and ours disagree): asked again after `refresh`, not at once.
        #expect(eventually(15) { answers(apple, phone.keyID).contains { $0.atMillis > notModified.atMillis } })
        let after = try #require(answers(apple, phone.keyID).first { $0.atMillis > notModified.atMillis })
        #expect(
            after.status == 200 && after.atMillis - notModified.atMillis >= 900,
            "asked again \(after.atMillis - notModified.atMillis) ms after the 304")

        // No data any more (404): the metric stays, stale; asked again only at stale_probe (1h).
        apple.setNoData(true, keyID: phone.keyID)
        #expect(try eventually(20) { (try keyInfo(gw, phone.keyID)["risk"] as? [String: Any])?["stale"] as? Bool == true })
        let stale = try #require(try keyInfo(gw, phone.keyID)["risk"] as? [String: Any])
        #expect(stale["metric"] as? Int == 1)
        let probe = try #require((stale["nextRefresh"] as? String).flatMap(ReceiptTime.init))
        #expect(probe.millis > Int64(Date().timeIntervalSince1970 * 1000) + 3_000_000)
        let count = answers(apple, phone.keyID).count
        usleep(2_500_000)
        #expect(answers(apple, phone.keyID).count == count)
        let text = try metrics(gw)
        #expect(text.contains("attest_gateway_receipt_refreshes_total{result=\"not_modified\"} 1"))
        #expect(text.contains("attest_gateway_receipt_refreshes_total{result=\"stale\"} 1"))
        // A stale metric still counts: 1 is under the route's maximum.
        #expect(try protected(phone, "/api/purchase").status == 200)
    }

    @Test(
        "two gateways on one Redis: each refresh of a key is made by one of them (the schedule claimed under a lease)",
        .enabled(if: RedisProcess.testsEnabled, Comment(rawValue: RedisProcess.skipMessage)))
    func fleetOnRedis() throws {
        let redis = try RedisProcess()
        defer { redis.stop() }
        let apple = try standIn(notBefore: 1)
        defer { apple.stop() }
        let yaml = config(apple, refresh: "2s").replacingOccurrences(
            of: "store: {kind: memory, shards: 8, data_dir: \(dataDir), snapshot_interval: 1s}",
            with: "store: {kind: redis, url: \"\(redis.url)\"}")
        let one = try GatewayProcess(config: yaml)
        defer { one.stop() }
        let two = try GatewayProcess(config: yaml)
        defer { two.stop() }
        let phone = try ContractDevice(ca: ca, appID: Self.appID, port: HTTPCall.port(one, "public"))
        #expect(try phone.register().status == 201)
        #expect(eventually { answers(apple, phone.keyID).contains { $0.status == 200 } })
        // Eight seconds of refreshing: one refresh per key every 2 s or so, not one per gateway.
        let start = Int64(Date().timeIntervalSince1970 * 1000)
        usleep(8_000_000)
        let window = answers(apple, phone.keyID).filter { $0.atMillis >= start }
        #expect(window.count >= 2 && window.count <= 5, "\(window.count) refreshes in 8 s by two gateways")
        let gaps = zip(window.dropFirst(), window).map { $0.atMillis - $1.atMillis }
        #expect(gaps.allSatisfy { $0 >= 1_500 }, "refreshes \(gaps) ms apart")
        // Both gateways read the metric the fleet stored.
        apple.setMetric(9, keyID: phone.keyID)
        #expect(try eventually { (try keyInfo(two, phone.keyID)["risk"] as? [String: Any])?["metric"] as? Int == 9 })
        phone.rebind(port: HTTPCall.port(two, "public"))
        #expect(try protected(phone, "/api/purchase").error == "risk_metric_exceeded")
        // Each stored refresh was counted by the gateway that made it, once.
        func refreshed(_ gw: GatewayProcess) throws -> Int {
            let line = try metrics(gw).split(separator: "\n").first {
                $0.hasPrefix("attest_gateway_receipt_refreshes_total{result=\"refreshed\"}")
            }
            return Int(Double(line?.split(separator: " ").last ?? "0") ?? 0)
        }
        let counted = try refreshed(one) + refreshed(two)
        let answered = answers(apple, phone.keyID).filter { $0.status == 200 }.count
        #expect(counted <= answered && counted >= answered - 2, "\(counted) counted, \(answered) answered")
    }

    @Test("a token Apple refuses (another team id): 401, refreshes paused, logged as an error; nothing stored")
    func unauthorized() throws {
        let apple = try standIn()
        defer { apple.stop() }
        let gw = try GatewayProcess(config: config(apple, teamID: "ZZZZZ99999"))
        defer { gw.stop() }
        let phone = try ContractDevice(ca: ca, appID: Self.appID, port: HTTPCall.port(gw, "public"))
        #expect(try phone.register().status == 201)
        #expect(eventually { answers(apple, phone.keyID).contains { $0.status == 401 } })
        let refused = try #require(answers(apple, phone.keyID).first { $0.status == 401 })
        #expect(refused.reason.contains("iss"))
        #expect(((try keyInfo(gw, phone.keyID))["risk"] as? [String: Any])?["metric"] is NSNull)
        #expect(try eventually { try metrics(gw).contains("attest_gateway_receipt_refreshes_total{result=\"unauthorized\"} 1") })
        #expect(gw.stderr.contains("Apple refused the token"))
        #expect(!gw.stderr.contains("BEGIN PRIVATE KEY"))
    }
}
