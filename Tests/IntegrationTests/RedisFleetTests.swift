import AppAttest
import AppAttestSimulator
import Foundation
import GatewayCrypto
import GatewayTestSupport
import GatewayWire
import Synchronization
import Testing

/// Several real `gatewayd` processes sharing one real `redis-server` (`store.kind: redis`).
@Suite(
    "Gateway fleet on one Redis (real gatewayd processes, real redis-server)", .serialized, .timeLimit(.minutes(5)),
    .enabled(if: RedisProcess.testsEnabled, Comment(rawValue: RedisProcess.skipMessage)))
struct RedisFleetTests {
    static let appID = "ABCDE12345.com.example.shop"
    let ca: TestCA
    let dir: URL

    init() throws {
        (ca, dir) = try makeTrustedTestCADirectory("gw-fleet")
    }

    /// A fleet member's configuration: two loops, the demo upstream, the test CA's root in
    /// `root`, the enforced purchase route (then `extraRoutes`, YAML lines indented by two), `store`.
    static func fleetConfig(root: String, store: String, extraRoutes: String = "") -> String {
        """
        \(TestGatewayYAML.base(caDir: URL(fileURLWithPath: root).deletingLastPathComponent(), drain: "2s"))
        attest: {challenge_ttl: 5m}
        store: \(store)
        routes:
          - name: purchase
            match: {methods: [POST], path_prefix: /api/purchase}
            upstream: demo
            assertion: {mode: enforce}
        \(extraRoutes)  - {name: default, match: {path_prefix: /}, upstream: demo}
        """
    }

    func config(redis: RedisProcess, timeout: String = "500ms") -> String {
        Self.fleetConfig(
            root: dir.appendingPathComponent("root.pem").path, store: "{kind: redis, url: \(redis.url), timeout: \(timeout)}",
            extraRoutes: """
                  - name: feed
                    match: {methods: [POST], path_prefix: /api/feed}
                    upstream: demo
                    assertion: {mode: enforce, on_store_error: fail_open}

                """)
    }

    func fleet(_ n: Int, redis: RedisProcess) throws -> [GatewayProcess] {
        try (0..<n).map { _ in try GatewayProcess(config: config(redis: redis)) }
    }

    /// A challenge from instance `port` (bound to the device's key).
    func challenge(_ phone: ContractDevice, port: UInt16) throws -> String {
        let r = try HTTPCall.send(
            port: port, method: "POST", target: "/v1/attest/challenge",
            body: Array("{\"purpose\":\"assert\",\"keyId\":\"\(phone.keyID)\"}".utf8))
        guard r.status == 201, let c = r.json?["challenge"] as? String else { throw POSIXError(.EPROTO) }
        return c
    }

    static func send(_ s: ContractDevice.Signed, port: UInt16) throws -> HTTPCall {
        try HTTPCall.send(port: port, method: s.method, target: s.target, headers: s.headers, body: s.body, host: s.authority)
    }

    func send(_ s: ContractDevice.Signed, port: UInt16) throws -> HTTPCall { try Self.send(s, port: port) }

    func readyz(_ gw: GatewayProcess) -> Int { (try? curl([gw.url("admin", "/readyz")]).0) ?? 0 }

    /// Polls `/readyz` until it answers `status` (at most 10 s).
    func waitReady(_ gw: GatewayProcess, _ status: Int) -> Bool {
        let deadline = Date().addingTimeInterval(10)
        while Date() < deadline {
            if readyz(gw) == status { return true }
            usleep(50_000)
        }
        return false
    }

    @Test("a challenge from one instance works on another; parallel replays across instances: exactly one accept")
    func sharedChallengesAndExactlyOneAccept() throws {
        let redis = try RedisProcess()
        defer { redis.stop() }
        let gws = try fleet(3, redis: redis)
        defer { for g in gws { g.stop() } }
        let ports = gws.map { HTTPCall.port($0, "public") }
        for g in gws { #expect(readyz(g) == 200) }

        let phone = try ContractDevice(ca: ca, appID: Self.appID, port: ports[0])
        #expect(try phone.register().status == 201)
        // Challenge from A, request to B; the next challenge B returns, used on C.
        let c = try challenge(phone, port: ports[0])
        let first = try send(phone.sign(target: "/api/purchase", body: Array("{\"n\":1}".utf8), challenge: c), port: ports[1])
        #expect(first.status == 200, "\(first.body)")
        let next = try #require(first.headers["x-app-attest-next-challenge"])
        #expect(try send(phone.sign(target: "/api/purchase", body: Array("{\"n\":2}".utf8), challenge: next), port: ports[2]).status == 200)

        // The same signed request, 12 times at once, spread over the three instances.
        for round in 0..<3 {
            let signed = phone.sign(
                target: "/api/purchase", body: Array("{\"round\":\(round)}".utf8), challenge: try challenge(phone, port: ports[round]))
            let statuses = Mutex<[Int]>([])
            let errors = Mutex<[String]>([])
            DispatchQueue.concurrentPerform(iterations: 12) { i in
                let r = try? send(signed, port: ports[i % 3])
                statuses.withLock { $0.append(r?.status ?? 0) }
                if let e = r?.error { errors.withLock { $0.append(e) } }
            }
            let all = statuses.withLock { $0 }
            #expect(all.filter { $0 == 200 }.count == 1, "round \(round): \(all)")
            #expect(all.filter { $0 == 401 }.count == 11, "round \(round): \(all)")
            #expect(Set(errors.withLock { $0 }).isSubset(of: ["counter_replay", "challenge_consumed"]))
        }
        let metrics = try curl([gws[0].url("admin", "/metrics")]).1
        #expect(metrics.contains("attest_gateway_store_operation_duration_seconds"))
        #expect(metrics.contains("operation=\"commit_assertion\""))
    }

    @Test("Redis restarted mid-load: 503 store_unavailable and not ready while down; no replay accepted after it returns")
    func redisRestartedMidLoad() throws {
        let redis = try RedisProcess(durable: true)
        defer { redis.stop() }
        let gws = try fleet(2, redis: redis)
        defer { for g in gws { g.stop() } }
        let ports = gws.map { HTTPCall.port($0, "public") }
        let phone = try ContractDevice(ca: ca, appID: Self.appID, port: ports[0])
        #expect(try phone.register().status == 201)

        // Load: accepted requests, alternating instances; keep them to replay later.
        var accepted: [ContractDevice.Signed] = []
        var challengeText = try challenge(phone, port: ports[0])
        for i in 0..<10 {
            let s = phone.sign(target: "/api/purchase", body: Array("{\"i\":\(i)}".utf8), challenge: challengeText)
            let r = try send(s, port: ports[i % 2])
            #expect(r.status == 200, "request \(i): \(r.body)")
            accepted.append(s)
            challengeText = try #require(r.headers["x-app-attest-next-challenge"])
        }

        redis.kill()
        for (i, port) in ports.enumerated() {
            for _ in 0..<3 {
                let s = phone.sign(target: "/api/purchase", body: Array("{\"down\":\(i)}".utf8), challenge: challengeText)
                let r = try send(s, port: port)
                #expect(r.status == 503)
                #expect(r.error == "store_unavailable")
            }
        }
        for g in gws { #expect(waitReady(g, 503), "readyz while Redis is down") }

        try redis.start()
        for g in gws { #expect(waitReady(g, 200), "readyz after Redis returned") }
        // Every accepted request, replayed on either instance: refused.
        for (i, s) in accepted.enumerated() {
            let r = try send(s, port: ports[(i + 1) % 2])
            #expect(r.status == 401, "replay \(i) after the restart: \(r.status) \(r.body)")
        }
        // A fresh request on the last (still unconsumed) challenge passes.
        let fresh = try send(
            phone.sign(target: "/api/purchase", body: Array("{\"after\":1}".utf8), challenge: challengeText), port: ports[1])
        #expect(fresh.status == 200, "\(fresh.body)")
    }

    @Test("the event log says when the store's connection is lost and regained; /readyz says why it is not ready")
    func connectionLostAndRegained() throws {
        let redis = try RedisProcess()
        defer { redis.stop() }
        let gw = try GatewayProcess(config: config(redis: redis))
        defer { gw.stop() }
        #expect(waitReady(gw, 200))
        redis.kill()
        #expect(waitForLog(gw, "store connection lost"), "\(gw.stderr)")
        #expect(waitReady(gw, 503))
        let r = try HTTPCall.send(port: HTTPCall.port(gw, "admin"), method: "GET", target: "/readyz")
        #expect(r.json?["ready"] as? Bool == false)
        let reasons = r.json?["reasons"] as? [String] ?? []
        #expect(reasons.contains { $0.hasPrefix("store: Redis 127.0.0.1:\(redis.port) unreachable: ") }, "\(r.body)")
        let lost = gw.stderrLines.first { $0.contains("store connection lost") } ?? ""
        #expect(lost.contains(redis.url) && lost.contains("\"error\":\"") && lost.contains("connections_up"), "\(lost)")
        try redis.start()
        #expect(waitForLog(gw, "store connection regained"), "\(gw.stderr)")
        #expect(waitReady(gw, 200))
        let regained = gw.stderrLines.first { $0.contains("store connection regained") } ?? ""
        #expect(regained.contains("\"level\":\"info\"") && regained.contains(redis.url), "\(regained)")
    }

    @Test("Redis gone for good: fail_closed answers 503 store_unavailable, fail_open forwards")
    func redisKilledForGood() throws {
        let redis = try RedisProcess()
        let gws = try fleet(2, redis: redis)
        defer { for g in gws { g.stop() } }
        let ports = gws.map { HTTPCall.port($0, "public") }
        let phone = try ContractDevice(ca: ca, appID: Self.appID, port: ports[0])
        #expect(try phone.register().status == 201)
        let c = try challenge(phone, port: ports[1])
        redis.stop()
        for port in ports {
            let closed = try send(phone.sign(target: "/api/purchase", body: [1], challenge: c), port: port)
            #expect(closed.status == 503)
            #expect(closed.error == "store_unavailable")
            let open = try send(phone.sign(target: "/api/feed", body: [2], challenge: c), port: port)
            #expect(open.status == 200, "\(open.body)")
            #expect(open.json?["headers"] != nil)  // the demo upstream answered
            let newChallenge = try HTTPCall.send(port: port, method: "POST", target: "/v1/attest/challenge")
            #expect(newChallenge.status == 503)
        }
        for g in gws { #expect(waitReady(g, 503)) }
    }
}
