import Foundation
import GatewayTestSupport
import Testing

/// The real `gatewayd run` in front of the demo upstream, trusting a CA made by `attest-sim ca`,
/// driven by the real `attest-sim run` and `attest-sim attack` binaries.
@Suite("attest-sim against the real gatewayd (loopback)", .serialized, .timeLimit(.minutes(3)))
struct AttestSimEndToEndTests {
    static let appID = "ABCDE12345.com.example.attestsim"

    /// The `attest-sim` built next to `gatewayd` (`swift build --build-tests` builds both), or `$ATTEST_SIM_BIN`.
    static var attestSim: URL {
        if let env = ProcessInfo.processInfo.environment["ATTEST_SIM_BIN"] { return URL(fileURLWithPath: env) }
        return gatewaydBinary.deletingLastPathComponent().appendingPathComponent("attest-sim")
    }

    /// Two event loops: concurrent connections land on both (this once caught a read buffer shared by
    /// the loops' threads, which mixed bytes across connections).
    static func config(root: String) -> String {
        """
        workers: 2
        listeners:
          - {name: public, address: 127.0.0.1:0}
        admin: {address: 127.0.0.1:0}
        limits: {max_body: 64KiB, drain_timeout: 5s}
        upstreams:
          - {name: demo, url: demo}
        routes:
          - {name: purchase, match: {path_prefix: /api/purchase}, upstream: demo, assertion: {mode: enforce}}
          - {name: legacy, match: {path_prefix: /api/legacy}, upstream: demo, assertion: {mode: enforce, client_data: v1}}
          - name: signed
            match: {path_prefix: /api/signed}
            upstream: demo
            assertion: {mode: enforce, bind: body, challenge: optional}
          - {name: default, match: {path_prefix: /}, upstream: demo}
        apps:
          - {team_id: "ABCDE12345", bundle_ids: [com.example.attestsim], environments: [development, production]}
        trust: {extra_roots: ["\(root)"], extra_receipt_roots: ["\(receiptRoot(besideRoot: root))"]}
        attest: {challenge_ttl: 2s, challenge_rate: {per_client: off}}    # one address plays every device
        """
    }

    @Test("run: every legitimate request accepted; attack all: every attack refused") func runAndAttack() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("attest-sim-e2e-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: dir) }
        let ca = try runProcess(Self.attestSim, ["ca", "--out", dir.path])
        try #require(ca.status == 0, "attest-sim ca: \(ca.stderr)")
        let gw = try GatewayProcess(config: Self.config(root: dir.appendingPathComponent("root.pem").path))
        defer { gw.stop() }
        let base = ["--gateway", gw.url("public", ""), "--ca", dir.path, "--app-id", Self.appID]

        // Without an assertion the protected route refuses, and the demo upstream is not reached.
        let bare = try curl(["-X", "POST", "--data", "{}", gw.url("public", "/api/purchase")])
        #expect(bare.0 == 401)
        #expect(bare.1.contains("\"error\":\"assertion_missing\""))

        let run = try runProcess(
            Self.attestSim, ["run"] + base + ["--devices", "4", "--requests", "200", "--concurrency", "2", "--json"], timeout: 120)
        let report = try #require(run.json, "attest-sim run: \(run.stdout) \(run.stderr)")
        #expect(run.status == 0, "\(run.stdout)")
        #expect(report["requests_done"] as? Int == 200)
        #expect(report["verdicts"] as? [String: Int] == ["200": 200])
        #expect(report["registration_verdicts"] as? [String: Int] == ["201": 4])
        #expect((report["next_challenges_used"] as? Int ?? 0) > 0)

        // bind: body, the challenge inside the signed body.
        let signed = try runProcess(
            Self.attestSim,
            ["run"] + base + ["--devices", "2", "--requests", "20", "--bind", "body", "--path", "/api/signed", "--json"], timeout: 60)
        #expect(signed.status == 0, "\(signed.stdout)")
        #expect(signed.json?["verdicts"] as? [String: Int] == ["200": 20])

        // The baseline run sends no assertion: accepted on an open route, refused on a protected one.
        let plain = try runProcess(
            Self.attestSim, ["run"] + base + ["--devices", "2", "--requests", "20", "--plain", "--path", "/open", "--json"], timeout: 60)
        #expect(plain.status == 0, "\(plain.stdout)")
        let plainRefused = try runProcess(
            Self.attestSim, ["run"] + base + ["--devices", "1", "--requests", "3", "--plain", "--json"], timeout: 60)
        #expect(plainRefused.status == 1)
        #expect(plainRefused.json?["verdicts"] as? [String: Int] == ["401 assertion_missing": 3])

        // Each device fetches a challenge per request when told not to use the next-challenge header.
        let fetching = try runProcess(
            Self.attestSim, ["run"] + base + ["--devices", "2", "--requests", "10", "--no-next-challenge", "--json"], timeout: 60)
        #expect(fetching.status == 0, "\(fetching.stdout)")
        #expect(fetching.json?["next_challenges_used"] as? Int == 0)

        let attack = try runProcess(Self.attestSim, ["attack"] + base + ["--mode", "all", "--json"], timeout: 90)
        let result = try #require(attack.json, "attest-sim attack: \(attack.stdout) \(attack.stderr)")
        #expect(attack.status == 0, "\(attack.stdout)")
        let probes = result["probes"] as? [[String: Any]] ?? []
        for p in probes {
            #expect(p["passed"] as? Bool == true, "\(p)")
        }
        let names = Set(probes.compactMap { $0["name"] as? String })
        #expect(
            names == [
                "control", "replay", "tampered-body", "tampered-target", "wrong-app-id", "expired-challenge", "reused-challenge",
                "counter-rollback", "unknown-key", "untrusted-root", "wrong-host",
            ])

        // Client data version 2 signs the Host sent (--host); a route that opted into version 1 takes v1.
        let otherHost = try runProcess(
            Self.attestSim, ["run"] + base + ["--devices", "1", "--requests", "3", "--host", "Shop.Example.", "--json"], timeout: 60)
        #expect(otherHost.json?["verdicts"] as? [String: Int] == ["200": 3], "\(otherHost.stdout)")
        let legacy = try runProcess(
            Self.attestSim,
            ["run"] + base + ["--devices", "1", "--requests", "3", "--path", "/api/legacy", "--client-data", "v1", "--json"], timeout: 60)
        #expect(legacy.json?["verdicts"] as? [String: Int] == ["200": 3], "\(legacy.stdout)")
        let v1OnV2 = try runProcess(
            Self.attestSim, ["run"] + base + ["--devices", "1", "--requests", "2", "--client-data", "v1", "--json"], timeout: 60)
        #expect(v1OnV2.json?["verdicts"] as? [String: Int] == ["401 bad_signature": 2], "\(v1OnV2.stdout)")
        let legacyAttack = try runProcess(
            Self.attestSim,
            ["attack"] + base + ["--mode", "all", "--path", "/api/legacy", "--client-data", "v1", "--challenge-wait", "3", "--json"],
            timeout: 90)
        #expect(legacyAttack.status == 0, "\(legacyAttack.stdout)")

        // The gateway counted the refusals.
        let metrics = try curl([gw.url("admin", "/metrics")]).1
        #expect(metrics.contains("attest_gateway_assertion_verdicts_total"))
    }
}
