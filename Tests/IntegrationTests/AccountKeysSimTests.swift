import Foundation
import GatewayTestSupport
import Testing

/// Keys per account with the real `attest-sim run --account` against the real `gatewayd` and its
/// demo upstream (which names the `X-Demo-Account` of a verified request as the key's account), as
/// docs/attest-sim.md shows it.
@Suite("attest-sim run --account against the real gatewayd (loopback)", .serialized, .timeLimit(.minutes(3)))
struct AccountKeysSimTests {
    static let appID = "ABCDE12345.com.example.attestsim"

    static func config(root: String) -> String {
        """
        workers: 1
        listeners:
          - {name: public, address: 127.0.0.1:0}
        admin: {address: 127.0.0.1:0}
        limits: {drain_timeout: 5s}
        upstreams:
          - {name: demo, url: demo}
        accounts: {window: 720h}
        routes:
          - {name: flag, match: {path_prefix: /api/flag}, upstream: demo, assertion: {mode: enforce, max_keys_per_account: 2}}
          - name: refuse
            match: {path_prefix: /api/refuse}
            upstream: demo
            assertion: {mode: enforce, max_keys_per_account: 2, on_keys: refuse}
        apps:
          - {team_id: "ABCDE12345", bundle_ids: [com.example.attestsim], environments: [development, production]}
        trust: {extra_roots: ["\(root)"], extra_receipt_roots: ["\(receiptRoot(besideRoot: root))"]}
        attest: {challenge_ttl: 2m, challenge_rate: {per_client: off}}    # one address plays every device
        """
    }

    @Test("3 devices of one account, max_keys_per_account 2: the third key's later requests are refused (or flagged), the others pass")
    func threeKeysOfOneAccount() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("attest-sim-accounts-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: dir) }
        let ca = try runProcess(AttestSimEndToEndTests.attestSim, ["ca", "--out", dir.path])
        try #require(ca.status == 0, "attest-sim ca: \(ca.stderr)")
        let gw = try GatewayProcess(config: Self.config(root: dir.appendingPathComponent("root.pem").path))
        defer { gw.stop() }
        let base = ["--gateway", gw.url("public", ""), "--ca", dir.path, "--app-id", Self.appID]
        // One worker: each device's requests in turn (d1, d2, d3, d1, …): each key's first request
        // names the account; key 3's count is then 3.
        let run = ["run"] + base + ["--devices", "3", "--requests", "9", "--concurrency", "1", "--json"]
        let refused = try runProcess(
            AttestSimEndToEndTests.attestSim, run + ["--path", "/api/refuse", "--account", "shopper-1"], timeout: 60)
        #expect(refused.status == 1, "\(refused.stdout)")
        #expect(refused.json?["verdicts"] as? [String: Int] == ["200": 7, "403 account_key_limit": 2], "\(refused.stdout)")

        // Another account on the flagging route: every request passes, key 3's are flagged.
        let flagged = try runProcess(
            AttestSimEndToEndTests.attestSim, run + ["--path", "/api/flag", "--account", "shopper-2"], timeout: 60)
        #expect(flagged.status == 0, "\(flagged.stdout)")
        #expect(flagged.json?["verdicts"] as? [String: Int] == ["200": 9], "\(flagged.stdout)")
        let metrics = try curl([gw.url("admin", "/metrics")]).1
        #expect(
            metrics.contains(
                "attest_gateway_assertion_verdicts_total{route=\"flag\",mode=\"enforce\",verdict=\"flagged\",reason=\"account_key_limit\"} 2"
            ), "\(metrics.split(separator: "\n").filter { $0.contains("account_key_limit") })")
        #expect(metrics.contains("attest_gateway_account_associations_total{result=\"recorded\"} 6"))

        // A bad --account is a usage error.
        let bad = try runProcess(AttestSimEndToEndTests.attestSim, run + ["--account", "two words"], timeout: 30)
        #expect(bad.status == 2, "\(bad.stderr)")
    }
}
