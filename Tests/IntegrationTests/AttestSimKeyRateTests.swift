import Foundation
import GatewayTestSupport
import Testing

/// Issue 27: the real `attest-sim run` against the real `gatewayd` on routes with `key_rate`: its
/// report counts the `key_rate_limited` answers, and `--retry-key-rate` sends each limited request
/// again after `Retry-After`, as the client contract says, until every one is accepted.
@Suite("attest-sim run against key_rate routes (real gatewayd, loopback)", .serialized, .timeLimit(.minutes(3)))
struct AttestSimKeyRateTests {
    static let appID = AttestSimEndToEndTests.appID

    static func config(root: String) -> String {
        """
        workers: 2
        listeners:
          - {name: public, address: 127.0.0.1:0}
        admin: {address: 127.0.0.1:0}
        limits: {drain_timeout: 5s}
        upstreams:
          - {name: demo, url: demo}
        routes:
          - {name: hourly, match: {path_prefix: /api/hourly}, upstream: demo, assertion: {mode: enforce, key_rate: {rate: 1/h, burst: 4}}}
          - {name: paced, match: {path_prefix: /api/paced}, upstream: demo, assertion: {mode: enforce, key_rate: {rate: 2/s, burst: 2}}}
          - {name: default, match: {path_prefix: /}, upstream: demo}
        apps:
          - {team_id: "ABCDE12345", bundle_ids: [com.example.attestsim], environments: [development, production]}
        trust: {extra_roots: ["\(root)"], extra_receipt_roots: ["\(receiptRoot(besideRoot: root))"]}
        attest: {challenge_ttl: 5m, challenge_rate: {per_client: off}}
        """
    }

    @Test("one key faster than its budget: the report counts 429 key_rate_limited; with --retry-key-rate every request passes")
    func countsAndRetries() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("attest-sim-keyrate-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: dir) }
        let ca = try runProcess(AttestSimEndToEndTests.attestSim, ["ca", "--out", dir.path])
        try #require(ca.status == 0, "attest-sim ca: \(ca.stderr)")
        let gw = try GatewayProcess(config: Self.config(root: dir.appendingPathComponent("root.pem").path))
        defer { gw.stop() }
        let base = ["run", "--gateway", gw.url("public", ""), "--ca", dir.path, "--app-id", Self.appID, "--devices", "1"]

        // 8 requests of one key on a route allowing 4 an hour: 4 accepted, 4 refused 429.
        let limited = try runProcess(
            AttestSimEndToEndTests.attestSim, base + ["--requests", "8", "--path", "/api/hourly", "--json"], timeout: 60)
        let report = try #require(limited.json, "attest-sim run: \(limited.stdout) \(limited.stderr)")
        #expect(limited.status == 1)
        #expect(report["verdicts"] as? [String: Int] == ["200": 4, "429 key_rate_limited": 4], "\(limited.stdout)")
        #expect(report["key_rate_limited"] as? Int == 4)
        #expect(report["key_rate_retried_accepted"] as? Int == 0)
        #expect((report["hint"] as? String)?.contains("--retry-key-rate") == true)
        // Each run registers new devices (new keys, full buckets): 6 more, 2 over.
        let text = try runProcess(
            AttestSimEndToEndTests.attestSim, base + ["--requests", "6", "--path", "/api/hourly"], timeout: 60)
        #expect(text.stdout.contains("key_rate:      2 answers 429 key_rate_limited"), "\(text.stdout)")

        // 2/s with a burst of 2: the third request waits out Retry-After and is then accepted unchanged.
        let retried = try runProcess(
            AttestSimEndToEndTests.attestSim, base + ["--requests", "6", "--path", "/api/paced", "--retry-key-rate", "--json"],
            timeout: 90)
        let again = try #require(retried.json, "attest-sim run: \(retried.stdout) \(retried.stderr)")
        #expect(retried.status == 0, "\(retried.stdout)")
        #expect(again["verdicts"] as? [String: Int] == ["200": 6])
        let waited = again["key_rate_limited"] as? Int ?? 0
        #expect(waited >= 1 && again["key_rate_retried_accepted"] as? Int == waited, "\(retried.stdout)")
        let metrics = try curl([gw.url("admin", "/metrics")]).1
        #expect(metrics.contains("attest_gateway_key_rate_limited_total{route=\"hourly\"} 6"))
        #expect(metrics.contains("attest_gateway_key_rate_limited_total{route=\"paced\"} \(waited)"))
    }
}
