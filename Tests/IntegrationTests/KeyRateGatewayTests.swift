import AppAttest
import AppAttestSimulator
import Foundation
import GatewayCrypto
import GatewayTestSupport
import GatewayWire
import Synchronization
import Testing

/// Issue 27: `assertion.key_rate` end to end, with real `gatewayd` processes and software devices:
/// on a memory store (one process), and two processes sharing one real `redis-server`.
@Suite("Budgets per attested key end to end (real gatewayd, software devices)", .serialized, .timeLimit(.minutes(5)))
struct KeyRateGatewayTests {
    static let appID = "ABCDE12345.com.example.shop"
    let ca: TestCA
    let dir: URL

    init() throws {
        (ca, dir) = try makeTrustedTestCADirectory("gw-keyrate")
    }

    /// `pay`: 20/m (a token every 3 s: back-to-back requests meet an empty bucket even on a slow machine) with a burst of 3, enforced; `feed`: 1/h with a burst of 1, shadowed.
    func config(store: String = "{kind: memory, shards: 8, max_challenges_per_key: 8}") -> String {
        """
        \(TestGatewayYAML.base(caDir: dir))
        attest: {challenge_ttl: 5m, challenge_rate: {per_client: off}}
        store: \(store)
        routes:
          - name: pay
            match: {methods: [POST], path_prefix: /api/pay}
            upstream: demo
            assertion: {mode: enforce, key_rate: {rate: 20/m, burst: 3}}
          - name: feed
            match: {methods: [POST], path_prefix: /api/feed}
            upstream: demo
            assertion: {mode: shadow, key_rate: {rate: 1/h, burst: 1}}
          - {name: default, match: {path_prefix: /}, upstream: demo}
        """
    }

    /// `n` requests of `phone` to `target`, signed in order (counters rising), each over its own
    /// challenge bound to the key, from `ports` in turn.
    static func presign(_ phone: ContractDevice, target: String, count n: Int, ports: [UInt16]) throws -> [ContractDevice.Signed] {
        try (0..<n).map { i in
            let c = try HTTPCall.send(
                port: ports[i % ports.count], method: "POST", target: "/v1/attest/challenge",
                body: Array("{\"purpose\":\"assert\",\"keyId\":\"\(phone.keyID)\"}".utf8))
            guard c.status == 201, let challenge = c.json?["challenge"] as? String else { throw POSIXError(.EPROTO) }
            return phone.sign(target: target, body: Array("{\"i\":\(i)}".utf8), challenge: challenge)
        }
    }

    static func send(_ s: ContractDevice.Signed, port: UInt16) throws -> HTTPCall {
        try HTTPCall.send(port: port, method: s.method, target: s.target, headers: s.headers, body: s.body, host: s.authority)
    }

    @Test(
        "memory store: a burst of 3 + 2 verified requests gives 3 accepted and 2 429 key_rate_limited; each limited one, sent again after Retry-After, passes"
    )
    func burstThenRetry() throws {
        let gw = try GatewayProcess(config: config())
        defer { gw.stop() }
        let port = HTTPCall.port(gw, "public")
        let phone = try ContractDevice(ca: ca, appID: Self.appID, port: port)
        #expect(try phone.register().status == 201)
        // Signed (and their challenges fetched) first: the five are then sent back to back.
        let signed = try Self.presign(phone, target: "/api/pay", count: 5, ports: [port])
        let answers = try signed.map { try Self.send($0, port: port) }
        #expect(answers.map(\.status) == [200, 200, 200, 429, 429], "\(answers.map(\.body))")
        for a in answers.prefix(3) {
            #expect((a.json?["headers"] as? [String: String])?["X-App-Attest-Verified-Key-Id"] == phone.keyID)
        }
        for a in answers.suffix(2) {
            #expect(a.error == "key_rate_limited")
            #expect(a.json?["action"] as? String == "retry_later")
            #expect((1...3).contains(a.json?["retryAfter"] as? Int ?? 0), "\(a.body)")
            #expect(a.headers["retry-after"] == (a.json?["retryAfter"] as? Int).map(String.init))
            #expect(a.json?["headers"] == nil, "a limited request reached the upstream")
        }
        // explain names the limit.
        let id = try #require(answers[3].json?["requestId"] as? String)
        let explained = try curl([gw.url("admin", "/explain/\(id)")])
        #expect(explained.0 == 200)
        for field in [
            "\"error\":\"key_rate_limited\"", "\"step\":\"commit\"", "\"key_rate\":\"20/m\"", "\"key_rate_burst\":\"3\"", "\"status\":429",
        ] {
            #expect(explained.1.contains(field), "\(field) in \(explained.1)")
        }
        // The very same requests (challenge, counter, signature), once their tokens are back.
        usleep(3_100_000)
        let fourth = try Self.send(signed[3], port: port)
        #expect(fourth.status == 200, "\(fourth.body)")
        let early = try Self.send(signed[4], port: port)
        #expect(early.status == 429 && early.error == "key_rate_limited", "\(early.body)")
        usleep(3_100_000)
        let fifth = try Self.send(signed[4], port: port)
        #expect(fifth.status == 200, "\(fifth.body)")
        // Replayed now: the challenge and counter were taken by the accepted send.
        #expect(try Self.send(signed[4], port: port).status == 401)

        // Shadow: the second request of the hour is counted and forwarded, unverified.
        let feed = try Self.presign(phone, target: "/api/feed", count: 2, ports: [port])
        let first = try Self.send(feed[0], port: port)
        #expect(first.status == 200 && (first.json?["headers"] as? [String: String])?["X-App-Attest-Verified-Key-Id"] == phone.keyID)
        let shadowed = try Self.send(feed[1], port: port)
        #expect(shadowed.status == 200, "\(shadowed.body)")
        #expect((shadowed.json?["headers"] as? [String: String])?["X-App-Attest-Verified-Key-Id"] == nil)

        let metrics = try curl([gw.url("admin", "/metrics")]).1
        #expect(metrics.contains("attest_gateway_key_rate_limited_total{route=\"pay\"} 3"), "\(metrics)")
        #expect(metrics.contains("attest_gateway_key_rate_limited_total{route=\"feed\"} 1"))
        #expect(metrics.contains("route=\"pay\",mode=\"enforce\",verdict=\"refused\",reason=\"key_rate_limited\"} 3"))
        #expect(metrics.contains("route=\"feed\",mode=\"shadow\",verdict=\"would_refuse\",reason=\"key_rate_limited\"} 1"))
        #expect(metrics.contains("route=\"pay\",mode=\"enforce\",verdict=\"accepted\",reason=\"ok\"} 5"))
        #expect(gw.stderrLines.contains { $0.contains("assertion would_refuse") && $0.contains("\"key_rate\":\"1/h\"") }, "\(gw.stderr)")
    }

    @Test(
        "two gatewayd processes on one redis-server share one budget per key: 3 of 6 alternating requests pass, the rest 429; the budget refills for both",
        .enabled(if: RedisProcess.testsEnabled, Comment(rawValue: RedisProcess.skipMessage)))
    func fleetSharesTheBudget() throws {
        let redis = try RedisProcess()
        defer { redis.stop() }
        let gws = try (0..<2).map { _ in try GatewayProcess(config: config(store: "{kind: redis, url: \(redis.url)}")) }
        defer { for g in gws { g.stop() } }
        let ports = gws.map { HTTPCall.port($0, "public") }
        let phone = try ContractDevice(ca: ca, appID: Self.appID, port: ports[0])
        #expect(try phone.register().status == 201)
        let signed = try Self.presign(phone, target: "/api/pay", count: 6, ports: ports)
        let answers = try signed.enumerated().map { i, s in try Self.send(s, port: ports[i % 2]) }
        #expect(answers.map(\.status) == [200, 200, 200, 429, 429, 429], "\(answers.map(\.body))")
        #expect(
            answers.suffix(3).allSatisfy { $0.error == "key_rate_limited" && ["1", "2", "3"].contains($0.headers["retry-after"] ?? "") })
        // A limited request sent again, to the other instance, once a token is back.
        usleep(3_100_000)
        let retried = try Self.send(signed[3], port: ports[0])
        #expect(retried.status == 200, "\(retried.body)")
        #expect(try Self.send(signed[4], port: ports[1]).status == 429)
        // Once a token is back: accepted in one script call (the bucket is read and taken inside it).
        usleep(3_100_000)
        let before = try redis.commandCalls()
        #expect(try Self.send(signed[4], port: ports[1]).status == 200)
        let after = try redis.commandCalls()
        #expect((after["evalsha"] ?? 0) - (before["evalsha"] ?? 0) == 1, "\(before) → \(after)")
        // The bucket sits next to the key, with a TTL.
        let keys = try redis.cli(["--scan", "--pattern", "ag:r:*"])
        #expect(keys.hasSuffix(":pay"), "\(keys)")
        let ttl = Int(try redis.cli(["PTTL", keys])) ?? -1
        #expect(ttl > 0 && ttl <= 10_000, "\(ttl)")  // refilling 3 tokens at 20/m, plus a second
        let counted = try gws.map { try curl([$0.url("admin", "/metrics")]).1 }
        let limited = counted.map { text in
            text.split(separator: "\n").first { $0.hasPrefix("attest_gateway_key_rate_limited_total{route=\"pay\"}") }
                .flatMap { Double($0.split(separator: " ").last ?? "") } ?? 0
        }
        #expect(limited.reduce(0, +) == 4, "\(limited)")
    }
}
