import AppAttestClient
import AppAttestClientSimulator
import AppAttestSimulator
import Foundation
import GatewayTestSupport
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// The library with the simulator's software device against a real `gatewayd` (loopback, the demo
/// upstream, a test CA in `trust.extra_roots`), over URLSession (FoundationNetworking).
@Suite("AppAttestClient against a real gatewayd (software device, URLSession)", .serialized, .timeLimit(.minutes(5)))
struct ClientAgainstGatewayTests {
    static let appID = "ABCDE12345.com.example.shop"
    let ca: TestCA
    let dir: URL

    init() throws {
        ca = try TestCA()
        dir = temporaryDirectory("client-gw")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        try ca.rootPEM.write(to: dir.appendingPathComponent("root.pem"), atomically: true, encoding: .utf8)
        try ca.receiptRootPEM.write(to: dir.appendingPathComponent("receipt-root.pem"), atomically: true, encoding: .utf8)
    }

    func config(port: UInt16 = 0, ttl: String = "5m", challengeRate: String = "{per_client: 10/s, burst: 20}") -> String {
        """
        workers: 2
        listeners:
          - {name: public, address: 127.0.0.1:\(port)}
        admin: {address: 127.0.0.1:0}
        limits: {drain_timeout: 2s}
        upstreams:
          - {name: demo, url: demo}
        apps:
          - {team_id: ABCDE12345, bundle_ids: [com.example.shop], environments: [development, production]}
        trust: {extra_roots: [\(dir.appendingPathComponent("root.pem").path)], extra_receipt_roots: [\(dir.appendingPathComponent("receipt-root.pem").path)]}
        attest: {challenge_ttl: \(ttl), challenge_rate: \(challengeRate)}
        store: {kind: memory, shards: 8, max_challenges_per_key: 8}
        routes:
          - {name: purchase, match: {path_prefix: /api/purchase}, upstream: demo, max_body: 64KiB, assertion: {mode: enforce}}
          - {name: feed, match: {path_prefix: /api/feed}, upstream: demo, assertion: {mode: enforce, counter_window: 8}}
          - {name: legacy, match: {path_prefix: /api/legacy}, upstream: demo, assertion: {mode: enforce, client_data: v1}}
          - {name: signed, match: {path_prefix: /api/signed}, upstream: demo, assertion: {mode: enforce, bind: body, challenge: "off"}}
          - {name: challenged, match: {path_prefix: /api/challenged}, upstream: demo, assertion: {mode: enforce, bind: body, challenge: required}}
          - {name: default, match: {path_prefix: /}, upstream: demo}
        """
    }

    static let routes: [AppAttestClient.Route] = [
        .init(pathPrefix: "/api/purchase", binding: .request(.v2)),
        .init(pathPrefix: "/api/legacy", binding: .request(.v1)),
        .init(pathPrefix: "/api/signed", binding: .body(challenge: .off)),
        .init(pathPrefix: "/api/challenged", binding: .body(challenge: .embedded)),
    ]

    func client(
        _ gw: GatewayProcess, service: SimulatedAppAttestService, store: any KeyIDStore, routes: [AppAttestClient.Route] = routes,
        retry: AppAttestClient.RetryPolicy = .init(), timing: AppAttestClient.Timing = .system, expiryMargin: TimeInterval = 5
    ) throws -> AppAttestClient {
        AppAttestClient(
            configuration: .init(
                gateway: try #require(URL(string: gw.url("public", ""))), routes: routes, retry: retry, challengeExpiryMargin: expiryMargin),
            service: service, keyStore: store, transport: URLSessionTransport(session: URLSession(configuration: .ephemeral)),
            timing: timing)
    }

    static func post(_ gw: GatewayProcess, _ path: String, _ body: String) throws -> URLRequest {
        var r = URLRequest(url: try #require(URL(string: gw.url("public", path))))
        r.httpMethod = "POST"
        r.httpBody = Data(body.utf8)
        r.setValue("application/json", forHTTPHeaderField: "Content-Type")
        return r
    }

    /// The demo upstream's echo: the request headers it received.
    static func upstreamHeaders(_ data: Data) -> [String: String] {
        ((try? JSONSerialization.jsonObject(with: data)) as? [String: Any])?["headers"] as? [String: String] ?? [:]
    }

    static func metric(_ gw: GatewayProcess, _ line: String) throws -> Bool {
        try curl([gw.url("admin", "/metrics")]).1.split(separator: "\n").contains { $0 == line }
    }

    func service() throws -> SimulatedAppAttestService { try SimulatedAppAttestService(appID: Self.appID, ca: ca) }

    @Test("register, then 100 sequential protected requests with one challenge fetch; the key kept across a relaunch")
    func registerAndHundredSequential() async throws {
        let gw = try GatewayProcess(config: config())
        defer { gw.stop() }
        let keys = FileKeyIDStore(directory: dir.appendingPathComponent("keys"))
        let device = try service()
        let c = try client(gw, service: device, store: keys)
        for i in 0..<100 {
            let (data, response) = try await c.send(try Self.post(gw, "/api/purchase?order=\(i)", "{\"sku\":\(i)}"))
            #expect(response.statusCode == 200, "request \(i): \(String(decoding: data, as: UTF8.self))")
            let kept = try #require(try keys.load(account: nil))
            #expect(kept.registered)
            #expect(Self.upstreamHeaders(data)["X-App-Attest-Verified-Key-Id"] == kept.keyID)
            #expect(Self.upstreamHeaders(data)["X-App-Assertion"] == nil)
        }
        let stats = await c.statistics
        #expect(stats.registrations == 1 && stats.keysGenerated == 1)
        #expect(stats.challengesFetched == 2)  // the registration's, and the first request's
        #expect(stats.nextChallengesUsed == 99 && stats.protectedRequestsSent == 100 && stats.rechallenges == 0)
        #expect(try Self.metric(gw, "attest_gateway_challenges_issued_total{purpose=\"assert\"} 1"))
        #expect(try Self.metric(gw, "attest_gateway_challenges_issued_total{purpose=\"register\"} 1"))
        #expect(try Self.metric(gw, "attest_gateway_challenges_issued_total{purpose=\"next\"} 100"))
        #expect(
            try Self.metric(
                gw, "attest_gateway_assertion_verdicts_total{route=\"purchase\",mode=\"enforce\",verdict=\"accepted\",reason=\"ok\"} 100"))

        // A relaunch: a new client, the same Keychain (file) and Secure Enclave (device): no new key.
        let relaunched = try client(gw, service: device, store: keys)
        let (_, response) = try await relaunched.send(try Self.post(gw, "/api/purchase", "{}"))
        #expect(response.statusCode == 200)
        #expect(await relaunched.statistics.registrations == 0)
        #expect(try Self.metric(gw, "attest_gateway_registrations_total{result=\"registered\",reason=\"new_key\"} 1"))
    }

    @Test("60 concurrent sends from many tasks (two accounts, one key each): all accepted, none refused")
    func concurrentSends() async throws {
        let gw = try GatewayProcess(config: config())
        defer { gw.stop() }
        let keys = InMemoryKeyIDStore()
        let device = try service()
        let c = try client(gw, service: device, store: keys)
        let verifiedKeys = try await withThrowingTaskGroup(of: (String?, String?).self) { group in
            for i in 0..<60 {
                let account: String? = i % 6 == 0 ? "bob" : nil
                let request = try Self.post(gw, "/api/purchase?task=\(i)", "{\"task\":\(i)}")
                group.addTask {
                    let (data, response) = try await c.send(request, account: account)
                    #expect(response.statusCode == 200, "task \(i): \(String(decoding: data, as: UTF8.self))")
                    return (account, Self.upstreamHeaders(data)["X-App-Attest-Verified-Key-Id"])
                }
            }
            var seen: [String: Set<String>] = [:]
            for try await (account, key) in group { seen[account ?? "app", default: []].insert(key ?? "none") }
            return seen
        }
        let app = try #require(try keys.load(account: nil)?.keyID)
        let bob = try #require(try keys.load(account: "bob")?.keyID)
        #expect(app != bob)
        #expect(verifiedKeys == ["app": [app], "bob": [bob]])
        // The device generated each key's assertions in counter order, and the gateway accepted them all.
        for key in [app, bob] {
            let counters = device.assertionCounters.filter { $0.keyID == key }.map(\.counter)
            #expect(counters == Array(1...UInt32(counters.count)))
        }
        #expect(
            try Self.metric(
                gw, "attest_gateway_assertion_verdicts_total{route=\"purchase\",mode=\"enforce\",verdict=\"accepted\",reason=\"ok\"} 60"))
        // The refusal series exist from the start at 0 (alerts read them); none moved.
        let refused = try curl([gw.url("admin", "/metrics")]).1.split(separator: "\n").filter { $0.contains("verdict=\"refused\"") }
        #expect(refused.allSatisfy { $0.hasSuffix(" 0") }, "\(refused.filter { !$0.hasSuffix(" 0") })")
        let stats = await c.statistics
        #expect(stats.challengesFetched == 4 && stats.nextChallengesUsed == 58 && stats.rechallenges == 0)
    }

    @Test("50 concurrent sends on a counter_window route: all accepted, several in flight at once, each with its own challenge")
    func concurrentSendsOnACounterWindowRoute() async throws {
        let gw = try GatewayProcess(config: config())
        defer { gw.stop() }
        let device = try service()
        let c = AppAttestClient(
            configuration: .init(
                gateway: try #require(URL(string: gw.url("public", ""))),
                routes: Self.routes + [.init(pathPrefix: "/api/feed", binding: .request(.v2), counterWindow: 8)], maxChallengesPerKey: 8),
            service: device, keyStore: InMemoryKeyIDStore(), transport: URLSessionTransport(session: URLSession(configuration: .ephemeral)))
        try await withThrowingTaskGroup(of: Void.self) { group in
            for i in 0..<50 {
                let request = try Self.post(gw, "/api/feed?task=\(i)", "{\"task\":\(i)}")
                group.addTask {
                    let (data, response) = try await c.send(request)
                    #expect(response.statusCode == 200, "task \(i): \(String(decoding: data, as: UTF8.self))")
                    #expect(Self.upstreamHeaders(data)["X-App-Attest-Verified-Key-Id"] != nil)
                }
            }
            try await group.waitForAll()
        }
        // Signed in counter order, not one at a time (without the route's window, some of these
        // arrive after a higher counter and are refused counter_replay).
        #expect(device.assertionCounters.map(\.counter) == Array(1...50))
        let stats = await c.statistics
        #expect(stats.mostInFlight > 1 && stats.mostInFlight <= 8, "\(stats)")
        #expect(stats.rechallenges == 0 && stats.protectedRequestsSent == 50)
        #expect(stats.challengesFetched <= 1 + 8 && stats.nextChallengesUsed == 50 - (stats.challengesFetched - 1), "\(stats)")
        #expect(
            try Self.metric(
                gw, "attest_gateway_assertion_verdicts_total{route=\"feed\",mode=\"enforce\",verdict=\"accepted\",reason=\"ok\"} 50"))
        let refused = try curl([gw.url("admin", "/metrics")]).1.split(separator: "\n").filter { $0.contains("verdict=\"refused\"") }
        #expect(refused.allSatisfy { $0.hasSuffix(" 0") }, "\(refused.filter { !$0.hasSuffix(" 0") })")
    }

    @Test("reattest: the gateway lost the key (memory store restarted): a new key registered, the request accepted")
    func reattestAfterStoreLoss() async throws {
        let port = try freeLoopbackPort()
        var gw = try GatewayProcess(config: config(port: port))
        defer { gw.stop() }
        let keys = InMemoryKeyIDStore()
        let device = try service()
        let c = try client(gw, service: device, store: keys)
        #expect(try await c.send(try Self.post(gw, "/api/purchase", "{\"n\":1}")).1.statusCode == 200)
        let first = try #require(try keys.load(account: nil))

        gw.stop()  // a memory store without data_dir: every key is gone with the process
        gw = try GatewayProcess(config: config(port: port))
        let (data, response) = try await c.send(try Self.post(gw, "/api/purchase", "{\"n\":2}"))
        #expect(response.statusCode == 200, "\(String(decoding: data, as: UTF8.self))")
        let second = try #require(try keys.load(account: nil))
        #expect(second.keyID != first.keyID && second.registered)
        #expect(Self.upstreamHeaders(data)["X-App-Attest-Verified-Key-Id"] == second.keyID)
        let stats = await c.statistics
        #expect(stats.reattestations == 1 && stats.keysGenerated == 2 && stats.registrations == 2)
        #expect(
            try Self.metric(
                gw,
                "attest_gateway_assertion_verdicts_total{route=\"purchase\",mode=\"enforce\",verdict=\"refused\",reason=\"key_unknown\"} 1")
        )
        #expect(try Self.metric(gw, "attest_gateway_registrations_total{result=\"registered\",reason=\"new_key\"} 1"))
    }

    @Test("rechallenge: the kept challenge expired at the gateway (the device's clock says otherwise): one fresh challenge, accepted")
    func rechallengeOnExpiredChallenge() async throws {
        let gw = try GatewayProcess(config: config(ttl: "1s"))
        defer { gw.stop() }
        let frozen = TestTiming(start: Date(), reallySleep: true)  // the device's clock stands still: the kept challenge looks valid
        let c = try client(gw, service: try service(), store: InMemoryKeyIDStore(), timing: frozen.timing, expiryMargin: 0)
        #expect(try await c.send(try Self.post(gw, "/api/purchase", "{}")).1.statusCode == 200)
        try await Task.sleep(nanoseconds: 1_500_000_000)
        let (data, response) = try await c.send(try Self.post(gw, "/api/purchase", "{}"))
        #expect(response.statusCode == 200, "\(String(decoding: data, as: UTF8.self))")
        let stats = await c.statistics
        #expect(stats.rechallenges == 1 && stats.nextChallengesUsed == 1 && stats.protectedRequestsSent == 3)
        let metrics = try curl([gw.url("admin", "/metrics")]).1
        let refused = "attest_gateway_assertion_verdicts_total{route=\"purchase\",mode=\"enforce\",verdict=\"refused\",reason="
        #expect(metrics.contains(refused + "\"challenge_expired\"} 1") || metrics.contains(refused + "\"challenge_unknown\"} 1"))
    }

    @Test("429 with Retry-After: waited out (plus jitter) and sent again, registration unchanged; bounded")
    func retryAfterHonoured() async throws {
        // One request per second per client, no burst: the registration right after its challenge is refused.
        let gw = try GatewayProcess(config: config(challengeRate: "{per_client: 1/s, burst: 1}"))
        defer { gw.stop() }
        let timing = TestTiming(reallySleep: true, realClock: true, random: 0.1)
        let device = try service()
        let c = try client(gw, service: device, store: InMemoryKeyIDStore(), timing: timing.timing)
        let started = Date()
        let (data, response) = try await c.send(try Self.post(gw, "/api/purchase", "{}"))
        #expect(response.statusCode == 200, "\(String(decoding: data, as: UTF8.self))")
        #expect(timing.sleeps.count >= 1 && timing.sleeps.allSatisfy { abs($0 - 1.1) < 1e-9 }, "\(timing.sleeps)")
        #expect(Date().timeIntervalSince(started) >= 1.1 * Double(timing.sleeps.count))
        #expect(device.attestationCount == 1)  // the registration was sent again as it was, not attested again
        #expect(try Self.metric(gw, "attest_gateway_registrations_total{result=\"registered\",reason=\"new_key\"} 1"))
        #expect(try curl([gw.url("admin", "/metrics")]).1.contains("attest_gateway_rate_limited_total{limit=\"client\""))

        // Bounded: a client allowed no wait gives up at once with the gateway's refusal.
        let impatient = try client(gw, service: device, store: InMemoryKeyIDStore(), retry: .init(maxWaits: 0))
        let error = await #expect(throws: AppAttestClientError.self) { try await impatient.send(try Self.post(gw, "/api/purchase", "{}")) }
        guard case .rateLimited(let r)? = error else { Issue.record("\(String(describing: error))"); return }
        #expect(r.status == 429 && r.code == "rate_limited" && r.limit == "client" && (r.retryAfter ?? 0) >= 1)
    }

    @Test("the device lost its key (DCError.invalidKey after a reinstall): a new key registered, the request accepted")
    func invalidKeyRecovered() async throws {
        let gw = try GatewayProcess(config: config())
        defer { gw.stop() }
        let keys = InMemoryKeyIDStore()
        let device = try service()
        let c = try client(gw, service: device, store: keys)
        #expect(try await c.send(try Self.post(gw, "/api/purchase", "{}")).1.statusCode == 200)
        let before = try #require(try keys.load(account: nil)?.keyID)
        device.invalidateKeys()
        let (data, response) = try await c.send(try Self.post(gw, "/api/purchase", "{}"))
        #expect(response.statusCode == 200, "\(String(decoding: data, as: UTF8.self))")
        #expect(try keys.load(account: nil)?.keyID != before)
        #expect(await c.statistics.reattestations == 1)
        #expect(try Self.metric(gw, "attest_gateway_registrations_total{result=\"registered\",reason=\"new_key\"} 2"))
    }

    @Test("every binding (v2, v1, bind: body with and without a challenge); a misconfigured route throws with a requestId explain knows")
    func everyBindingAndATypedRefusal() async throws {
        let gw = try GatewayProcess(config: config())
        defer { gw.stop() }
        let device = try service()
        let c = try client(gw, service: device, store: InMemoryKeyIDStore())
        for path in ["/api/purchase/7?x=%41", "/api/legacy/1", "/api/signed"] {
            let (data, response) = try await c.send(try Self.post(gw, path, "{\"p\":\"\(path)\"}"))
            #expect(response.statusCode == 200, "\(path): \(String(decoding: data, as: UTF8.self))")
        }
        let (data, response) = try await c.send(try Self.post(gw, "/api/challenged", "")) { challenge in
            Data("{\"challenge\":\"\(challenge)\",\"sku\":1}".utf8)
        }
        #expect(response.statusCode == 200, "\(String(decoding: data, as: UTF8.self))")

        // The app signs version 2 where the route verifies version 1: refused, typed, with the requestId.
        let wrong = try client(gw, service: device, store: InMemoryKeyIDStore(), routes: [])
        let error = await #expect(throws: AppAttestClientError.self) { try await wrong.send(try Self.post(gw, "/api/legacy/1", "{}")) }
        guard case .refused(let r)? = error else { Issue.record("\(String(describing: error))"); return }
        #expect(r.status == 401 && r.code == "bad_signature" && r.action == GatewayRefusal.Action.none && r.endpoint == .protected)
        let id = try #require(r.requestID)
        let explain = try curl([gw.url("admin", "/explain/\(id)")])
        #expect(explain.0 == 200 && explain.1.contains("bad_signature"), "\(explain)")
    }
}
