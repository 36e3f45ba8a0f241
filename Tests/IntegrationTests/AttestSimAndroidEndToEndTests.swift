import AppAttestSimulator
import AttestSim
import Foundation
import GatewayTestSupport
import Testing

/// The real `gatewayd run` trusting the CAs made by `attest-sim ca` (the App Attest root and the
/// Android root), one app with iOS and Android identities, driven by the real `attest-sim run
/// --platform both`, `attest-sim attack --platform android` and `attest-sim presign --platform android`.
@Suite("attest-sim Android devices against the real gatewayd (loopback)", .serialized, .timeLimit(.minutes(3)))
struct AttestSimAndroidEndToEndTests {
    static let appID = "ABCDE12345.com.example.attestsim"

    static func config(dir: URL, signer: String) -> String {
        let root = dir.appendingPathComponent("root.pem").path
        return """
            listeners:
              - {name: public, address: 127.0.0.1:0}
            admin: {address: 127.0.0.1:0}
            limits: {max_body: 64KiB, drain_timeout: 5s}
            upstreams:
              - {name: demo, url: demo}
            routes:
              - {name: purchase, match: {path_prefix: /api/purchase}, upstream: demo, assertion: {mode: enforce}}
              - {name: legacy, match: {path_prefix: /api/legacy}, upstream: demo, assertion: {mode: enforce, client_data: v1}}
              - {name: signed, match: {path_prefix: /api/signed}, upstream: demo, assertion: {mode: enforce, bind: body, challenge: optional}}
              - {name: default, match: {path_prefix: /}, upstream: demo}
            apps:
              - team_id: "ABCDE12345"
                bundle_ids: [com.example.attestsim]
                environments: [development, production]
                android: {package_names: [com.example.attestsim], signing_cert_sha256: ["\(signer)"]}
            trust:
              extra_roots: ["\(root)"]
              extra_receipt_roots: ["\(receiptRoot(besideRoot: root))"]
              extra_android_roots: ["\(dir.appendingPathComponent("android-root.pem").path)"]
            attest: {challenge_rate: {per_client: off}}    # one address plays every device
            """
    }

    @Test(
        "run --platform both: every request of both platforms accepted, counted per platform; attack --platform android: every attack refused"
    )
    func runAndAttack() throws {
        let sim = AttestSimEndToEndTests.attestSim
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("attest-sim-android-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: dir) }
        let ca = try runProcess(sim, ["ca", "--out", dir.path])
        try #require(ca.status == 0, "attest-sim ca: \(ca.stderr)")
        // `ca` says where the Android root goes and which signer the simulated app has.
        #expect(ca.stdout.contains("extra_android_roots: [\(dir.appendingPathComponent("android-root.pem").path)]"), "\(ca.stdout)")
        let signer = String(try #require(ca.stdout.firstMatch(of: /signing_cert_sha256: \["([0-9a-f]{64})"\]/)).output.1)
        let gw = try GatewayProcess(config: Self.config(dir: dir, signer: signer))
        defer { gw.stop() }
        let base = ["--gateway", gw.url("public", ""), "--ca", dir.path, "--app-id", Self.appID]

        let run = try runProcess(
            sim, ["run"] + base + ["--platform", "both", "--devices", "4", "--requests", "40", "--concurrency", "2", "--json"],
            timeout: 120)
        let report = try #require(run.json, "attest-sim run: \(run.stdout) \(run.stderr)")
        #expect(run.status == 0, "\(run.stdout)")
        #expect(report["verdicts"] as? [String: Int] == ["200": 40])
        #expect(report["registration_verdicts"] as? [String: Int] == ["201": 4])
        let platforms = try #require(report["platforms"] as? [String: [String: [String: Int]]], "\(report)")
        #expect(platforms["ios"]?["registration_verdicts"] == ["201": 2] && platforms["ios"]?["verdicts"] == ["200": 20])
        #expect(platforms["android"]?["registration_verdicts"] == ["201": 2] && platforms["android"]?["verdicts"] == ["200": 20])
        // Android devices sign what the route binds, as iPhones do: the body (with the challenge inside), or client data v1.
        for extra in [["--bind", "body", "--path", "/api/signed"], ["--path", "/api/legacy", "--client-data", "v1"]] {
            let r = try runProcess(sim, ["run"] + base + ["--platform", "both", "--devices", "2", "--requests", "10", "--json"] + extra)
            #expect(r.status == 0 && r.json?["verdicts"] as? [String: Int] == ["200": 10], "\(extra): \(r.stdout)")
        }
        // The text report has a line per platform.
        let text = try runProcess(
            sim, ["run"] + base + ["--platform", "android", "--devices", "2", "--requests", "6", "--no-next-challenge"])
        #expect(text.status == 0 && text.stdout.contains("android:       registrations 201 ×2; requests 200 ×6"), "\(text.stdout)")
        // Android devices of another package are refused, and the run says so.
        let wrong = try runProcess(
            sim,
            ["run"] + base + ["--platform", "android", "--package", "com.example.other", "--devices", "1", "--requests", "1", "--json"])
        #expect(
            wrong.status == 1 && wrong.json?["registration_verdicts"] as? [String: Int] == ["403 app_not_allowed": 1], "\(wrong.stdout)")
        #expect((wrong.json?["hint"] as? String ?? "").contains("apps[].android.package_names"), "\(wrong.stdout)")
        let signer2 = try runProcess(
            sim,
            ["run"] + base + [
                "--platform", "android", "--signing-cert-sha256", String(repeating: "0", count: 64), "--devices", "1", "--requests", "1",
            ])
        #expect(signer2.status == 1 && signer2.stdout.contains("403 signing_cert_not_allowed"), "\(signer2.stdout)")
        #expect(signer2.stdout.contains("hint:          --signing-cert-sha256"), "\(signer2.stdout)")

        let attack = try runProcess(sim, ["attack"] + base + ["--platform", "android", "--json"], timeout: 90)
        let result = try #require(attack.json, "attest-sim attack: \(attack.stdout) \(attack.stderr)")
        #expect(attack.status == 0, "\(attack.stdout)")
        let probes = result["probes"] as? [[String: Any]] ?? []
        for p in probes {
            #expect(p["passed"] as? Bool == true && p["platform"] as? String == "android", "\(p)")
        }
        #expect(
            Set(probes.compactMap { $0["name"] as? String }) == [
                "control", "replay", "wrong-package", "unlocked-bootloader", "software-key", "revoked", "wrong-challenge",
                "other-key-signature", "tampered-body",
            ])
        func got(_ name: String, _ step: String) -> String? {
            probes.first { $0["name"] as? String == name && $0["step"] as? String == step }?["error"] as? String
        }
        #expect(got("replay", "resend") == "counter_replay")
        #expect(got("wrong-package", "register") == "app_not_allowed" && got("wrong-package", "assert") == "key_unknown")
        #expect(got("unlocked-bootloader", "register") == "bootloader_unlocked")
        #expect(got("software-key", "register") == "software_key")
        #expect(got("wrong-challenge", "register") == "challenge_mismatch")
        #expect(got("other-key-signature", "assert") == "bad_signature" && got("tampered-body", "assert") == "bad_signature")
        // This gateway has no status list: the revoked batch registers, as expected without --expect-revocation…
        let revoked = try #require(probes.first { $0["name"] as? String == "revoked" })
        #expect(revoked["status"] as? Int == 201 && (revoked["note"] as? String ?? "").contains("--expect-revocation"))
        // …and with it the report is a clear FAIL: expected revoked, got 201.
        let expecting = try runProcess(
            sim, ["attack"] + base + ["--platform", "android", "--mode", "revoked", "--expect-revocation"], timeout: 60)
        #expect(expecting.status == 1, "\(expecting.stdout)")
        #expect(
            expecting.stdout.contains("android:revoked/register") && expecting.stdout.contains("expect 401/403 revoked"),
            "\(expecting.stdout)")
        #expect(expecting.stdout.contains("got 201"), "\(expecting.stdout)")

        // Both platforms in one attack run: the iOS attacks (but the expired-challenge wait) and the Android ones.
        let both = try runProcess(sim, ["attack"] + base + ["--platform", "both", "--mode", "tampered-body"], timeout: 60)
        #expect(both.status == 0, "\(both.stdout)")
        #expect(both.stdout.contains("ios: 1/1 attack steps as expected") && both.stdout.contains("android: 1/1 attack steps as expected"))

        // Pre-signed Android requests are accepted when replayed as written.
        let out = dir.appendingPathComponent("android.tsv")
        let presign = try runProcess(
            sim,
            ["presign"] + base + [
                "--platform", "android", "--devices", "2", "--per-device", "2", "--bind", "request", "--out", out.path,
            ], timeout: 60)
        #expect(presign.status == 0, "\(presign.stderr)")
        let lines = try String(contentsOf: out, encoding: .utf8).split(separator: "\n").map { $0.split(separator: "\t").map(String.init) }
        #expect(lines.count == 4)
        for fields in lines {
            let r = try HTTPCall.send(
                port: HTTPCall.port(gw, "public"), method: fields[0], target: fields[1],
                headers: [("X-App-Attest-Key-Id", fields[2]), ("X-App-Attest-Challenge", fields[3]), ("X-App-Assertion", fields[4])],
                body: Array(fields[5].utf8))
            #expect(r.status == 200, "\(r.body)")
        }
    }

    @Test(
        "revocation end to end: the gateway fetches the stand-in's status list; attack --expect-revocation sees the revoked batch refused")
    func revocationAgainstTheStandIn() throws {
        let sim = AttestSimEndToEndTests.attestSim
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("attest-sim-revoked-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: dir) }
        let ca = try runProcess(sim, ["ca", "--out", dir.path])
        try #require(ca.status == 0, "attest-sim ca: \(ca.stderr)")
        let signer = String(try #require(ca.stdout.firstMatch(of: /signing_cert_sha256: \["([0-9a-f]{64})"\]/)).output.1)
        // Google's list as `attest-sim google` serves it: the CA directory's revoked batch listed.
        let batch = try TestAndroidCA.load(from: dir).revokedBatch
        let google = try GoogleStandIn(ca: try TestCA.load(from: dir), listing: [batch.serial], workDirectory: dir)
        defer { google.stop() }
        let config =
            Self.config(dir: dir, signer: signer) + """

                android: {status_url: "\(google.url)", refresh: 1s, ca_file: "\(dir.appendingPathComponent("root.pem").path)"}
                """
        let gw = try GatewayProcess(config: config)
        defer { gw.stop() }
        _ = try AndroidRevocationTests.waitForMetric(gw, "attest_gateway_android_status_list_entries") { $0 == 1 }
        let base = ["--gateway", gw.url("public", ""), "--ca", dir.path, "--app-id", Self.appID]
        let attack = try runProcess(
            sim, ["attack"] + base + ["--platform", "android", "--mode", "revoked", "--expect-revocation", "--json"], timeout: 60)
        #expect(attack.status == 0, "\(attack.stdout) \(attack.stderr)")
        let report = try #require(attack.json, "\(attack.stdout)")
        let probes = (report["probes"] as? [[String: Any]]) ?? (report["steps"] as? [[String: Any]]) ?? []
        let revoked = probes.filter { $0["name"] as? String == "revoked" }
        #expect(revoked.contains { $0["step"] as? String == "register" && $0["error"] as? String == "revoked" }, "\(attack.stdout)")
        // The gateway's requests reached the stand-in (a GET, then If-None-Match: 304s while unchanged).
        let deadline = Date().addingTimeInterval(10)
        while Date() < deadline, !google.requests.contains(where: { $0.status == 304 }) { usleep(100_000) }
        #expect(google.requests.contains { $0.status == 304 && $0.ifNoneMatch != nil }, "\(google.requests)")
    }
}
