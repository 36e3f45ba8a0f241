import Foundation
import GatewayCrypto
import GatewayTestSupport
import Testing

/// A fresh gatewayd's `/metrics` against docs/metrics.md and deploy/prometheus/alerts.yaml, and what
/// `gatewayd --version` and `attest_gateway_build_info` say (real binary).
@Suite("/metrics of a fresh gatewayd, and which build runs (real gatewayd)", .serialized, .timeLimit(.minutes(2)))
struct MetricsEndpointTests {
    /// One scrape: families by `# TYPE`, help texts, samples.
    struct Scrape {
        var types: [String: String] = [:]
        var helps: [String: String] = [:]
        var samples: [(name: String, labels: [String: String], value: Double)] = []

        init(_ text: String) {
            for line in text.split(separator: "\n").map(String.init) {
                if line.hasPrefix("# TYPE ") {
                    let parts = line.split(separator: " ")
                    if parts.count == 4 { types[String(parts[2])] = String(parts[3]) }
                } else if line.hasPrefix("# HELP ") {
                    let rest = line.dropFirst(7)
                    let name = rest.prefix { $0 != " " }
                    helps[String(name)] = String(rest.dropFirst(name.count + 1))
                } else if !line.hasPrefix("#"), let space = line.lastIndex(of: " ") {
                    let series = line[..<space]
                    let name = String(series.prefix { $0 != "{" })
                    var labels: [String: String] = [:]
                    for m in series.matches(of: /([a-z_]+)="([^"]*)"/) { labels[String(m.output.1)] = String(m.output.2) }
                    samples.append((name, labels, Double(line[line.index(after: space)...]) ?? .nan))
                }
            }
        }

        /// The family a sample belongs to (`x_bucket` → `x` for a histogram).
        func family(of sample: String) -> String {
            for suffix in ["_bucket", "_sum", "_count"] where sample.hasSuffix(suffix) {
                let base = String(sample.dropLast(suffix.count))
                if types[base] == "histogram" { return base }
            }
            return sample
        }

        func has(_ name: String, _ matchers: [String: String] = [:]) -> Bool {
            samples.contains { s in s.name == name && matchers.allSatisfy { s.labels[$0.key] == $0.value } }
        }
    }

    /// docs/metrics.md's table: name → present.
    static func documented() throws -> [String: String] {
        let text = try String(contentsOf: repositoryRoot.appendingPathComponent("docs/metrics.md"), encoding: .utf8)
        var rows: [String: String] = [:]
        for line in text.split(separator: "\n") where line.hasPrefix("| `") {
            let cells = line.split(separator: "|", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
            if cells.count >= 6 { rows[cells[1].trimmingCharacters(in: CharacterSet(charactersIn: "`"))] = cells[4] }
        }
        return rows
    }

    static let appID = "apps: [{team_id: ABCDE12345, bundle_ids: [com.example.shop]}]"

    static func scrape(_ gw: GatewayProcess) throws -> Scrape {
        let (status, body) = try curl([gw.url("admin", "/metrics")])
        try #require(status == 200)
        return Scrape(body)
    }

    /// What every scrape must hold: HELP and TYPE for every family, each family documented.
    static func checkDocumented(_ s: Scrape, present: Set<String>) throws {
        let doc = try documented()
        for sample in s.samples {
            #expect(s.types[s.family(of: sample.name)] != nil, "\(sample.name) has no # TYPE")
        }
        for (name, _) in s.types {
            #expect(!(s.helps[name] ?? "").isEmpty, "\(name) has no # HELP")
            #expect(doc[name] != nil, "\(name) is not in docs/metrics.md")
        }
        let expected = Set(doc.filter { present.contains($0.value) }.keys)
        #expect(
            Set(s.types.keys) == expected,
            "on /metrics but not documented as present: \(Set(s.types.keys).subtracting(expected).sorted()); documented but missing: \(expected.subtracting(s.types.keys).sorted())"
        )
    }

    @Test("memory store with data_dir and apple: every family has HELP and TYPE and is documented; the alerts' series exist at 0")
    func freshWithDataDirectory() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("metrics-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: dir) }
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        let key = dir.appendingPathComponent("AuthKey_KEY1234567.p8").path
        #expect(
            FileManager.default.createFile(
                atPath: key, contents: Data(ECPrivateKey(curve: .p256).pkcs8PEM.utf8), attributes: [.posixPermissions: 0o600]))
        let gw = try GatewayProcess(
            config: """
                workers: 1
                listeners: [{name: public, address: 127.0.0.1:0, protocols: [http1, h2c]}]
                admin: {address: 127.0.0.1:0}
                upstreams:
                  - {name: demo, url: demo}
                  - {name: legacy, url: "http://127.0.0.1:9"}
                routes:
                  - name: purchase
                    match: {path_prefix: /api/purchase}
                    upstream: demo
                    assertion: {mode: enforce, rollout: 50%, on_store_error: fail_open, max_risk_metric: 5, fallback: {devicecheck: {bits: write}}, max_keys_per_account: 3}
                  - {name: legacy, match: {path_prefix: /legacy}, upstream: legacy}
                  - {name: default, match: {path_prefix: /}, upstream: demo}
                \(Self.appID)
                store: {kind: memory, data_dir: \(dir.path)/data}
                apple: {team_id: ABCDE12345, key_id: KEY1234567, private_key: \(key)}
                """)
        defer { gw.stop() }
        let s = try Self.scrape(gw)
        try Self.checkDocumented(s, present: ["always", "upstream", "data_dir", "apple", "fallback"])
        // The fallback's series at 0 (issue 14): per route its results and share, DeviceCheck's answers.
        #expect(s.has("attest_gateway_fallback_requests_total", ["route": "purchase", "result": "fallback_share_exceeded"]))
        #expect(s.has("attest_gateway_fallback_share", ["route": "purchase"]))
        #expect(s.has("attest_gateway_unsupported_claims_total", ["route": "purchase"]))
        #expect(s.has("attest_gateway_devicecheck_requests_total", ["endpoint": "update_two_bits", "result": "rate_limited"]))
        #expect(
            s.has(
                "attest_gateway_assertion_verdicts_total",
                ["route": "purchase", "mode": "enforce", "verdict": "fail_open", "reason": "devicecheck_unavailable"]))
        for result in [
            "refreshed", "not_modified", "stale", "rate_limited", "server_error", "unauthorized", "bad_request", "invalid_receipt",
            "unavailable", "error",
        ] {
            #expect(s.has("attest_gateway_receipt_refreshes_total", ["result": result]))
        }
        #expect(s.has("attest_gateway_receipt_refresh_lag_seconds", [:]))
        #expect(
            s.has(
                "attest_gateway_assertion_verdicts_total",
                ["route": "purchase", "mode": "shadow", "verdict": "flagged", "reason": "risk_metric_exceeded"]))
        // Keys per account (issue 27): a route with max_keys_per_account declares its flagged series.
        #expect(
            s.has(
                "attest_gateway_assertion_verdicts_total",
                ["route": "purchase", "mode": "enforce", "verdict": "flagged", "reason": "account_key_limit"]))
        #expect(s.has("attest_gateway_account_associations_total", ["result": "capacity"]))

        // Every series an alert selects exists now (rates and increase() see the first event).
        let rules = try String(contentsOf: repositoryRoot.appendingPathComponent("deploy/prometheus/alerts.yaml"), encoding: .utf8)
        var checked: Set<String> = []
        for m in rules.matches(of: /(attest_gateway_[a-z0-9_]+)(\{[^}]*\})?/) {
            let name = String(m.output.1)
            let family = s.family(of: name)
            guard family != "attest_gateway_store_operation_errors_total" else { continue }  // Redis: below
            var matchers: [String: String] = [:]
            if let selector = m.output.2 {
                for l in selector.matches(of: /([a-z_]+)="([^"]*)"/) { matchers[String(l.output.1)] = String(l.output.2) }
            }
            #expect(s.types[family] != nil, "alerts.yaml reads \(family), which a fresh gatewayd does not export")
            #expect(s.has(name, matchers), "no series \(name)\(matchers) at start")
            checked.insert(family)
        }
        #expect(checked.count >= 14, "\(checked.sorted())")

        // The known label values, at 0: per route, protocol and class; per protected route, its
        // modes and reasons; per upstream, its errors; registrations; write errors.
        #expect(s.has("attest_gateway_requests_total", ["route": "legacy", "status_class": "5xx", "protocol": "h2"]))
        #expect(s.has("attest_gateway_requests_total", ["route": "attest_register", "status_class": "4xx", "protocol": "http1"]))
        #expect(s.has("attest_gateway_request_duration_seconds_count", ["route": "purchase"]))
        for (mode, refused) in [("enforce", "refused"), ("shadow", "would_refuse")] {
            #expect(
                s.has(
                    "attest_gateway_assertion_verdicts_total", ["route": "purchase", "mode": mode, "verdict": "accepted", "reason": "ok"]))
            for reason in ["assertion_missing", "bad_signature", "counter_replay", "challenge_expired", "key_unknown", "store_unavailable"]
            {
                #expect(
                    s.has(
                        "attest_gateway_assertion_verdicts_total",
                        ["route": "purchase", "mode": mode, "verdict": refused, "reason": reason]))
            }
        }
        #expect(
            s.has("attest_gateway_assertion_verdicts_total", ["route": "purchase", "verdict": "fail_open", "reason": "store_unavailable"]))
        #expect(!s.has("attest_gateway_assertion_verdicts_total", ["route": "default"]))
        for reason in [
            "upstream_unavailable", "upstream_connect_timeout", "upstream_busy", "upstream_closed", "upstream_timeout",
            "upstream_bad_response",
        ] {
            #expect(s.has("attest_gateway_upstream_errors_total", ["upstream": "legacy", "reason": reason]))
        }
        #expect(!s.has("attest_gateway_upstream_errors_total", ["upstream": "demo"]))
        #expect(s.has("attest_gateway_upstream_pool_connections", ["upstream": "legacy", "state": "idle"]))
        #expect(s.has("attest_gateway_registrations_total", ["result": "refused", "reason": "environment_mismatch"]))
        #expect(s.has("attest_gateway_registrations_total", ["result": "registered", "reason": "new_key"]))
        #expect(s.has("attest_gateway_store_write_errors_total", ["file": "journal", "errno": "ENOSPC"]))
        #expect(s.samples.filter { $0.name.hasPrefix("attest_gateway_") && $0.name.hasSuffix("_total") }.allSatisfy { $0.value == 0 })

        // Build info and the process.
        #expect(
            s.has(
                "attest_gateway_build_info",
                ["version": try #require(s.samples.first { $0.name == "attest_gateway_build_info" }?.labels["version"])]))
        #expect(s.samples.first { $0.name == "attest_gateway_build_info" }?.value == 1)
        let started = try #require(s.samples.first { $0.name == "process_start_time_seconds" }?.value)
        #expect(abs(started - Date().timeIntervalSince1970) < 60)
        #expect((s.samples.first { $0.name == "process_open_fds" }?.value ?? 0) >= 5)

        // A new route on reload gets its series too.
        let config = try String(contentsOf: gw.configURL, encoding: .utf8)
            .replacingOccurrences(
                of: "  - {name: default,",
                with:
                    "  - {name: profile, match: {path_prefix: /api/profile}, upstream: demo, assertion: {mode: shadow}}\n  - {name: default,"
            )
        try config.write(to: gw.configURL, atomically: true, encoding: .utf8)
        gw.signal(SIGHUP)
        try waitFor { gw.stderr.contains("configuration reloaded") }
        let after = try Self.scrape(gw)
        #expect(
            after.has(
                "attest_gateway_assertion_verdicts_total",
                ["route": "profile", "mode": "shadow", "verdict": "would_refuse", "reason": "bad_signature"]))
        #expect(!after.has("attest_gateway_assertion_verdicts_total", ["route": "profile", "mode": "enforce"]))
    }

    @Test("without data_dir there are no snapshot, restore or journal families")
    func freshWithoutDataDirectory() throws {
        let gw = try GatewayProcess(
            config: """
                listeners: [{name: public, address: 127.0.0.1:0}]
                admin: {address: 127.0.0.1:0}
                upstreams: [{name: demo, url: demo}]
                routes: [{name: r, match: {path_prefix: /}, upstream: demo, assertion: {mode: shadow}}]
                \(Self.appID)
                """)
        defer { gw.stop() }
        let s = try Self.scrape(gw)
        try Self.checkDocumented(s, present: ["always"])
        #expect(s.types["attest_gateway_store_snapshot_age_seconds"] == nil)
    }

    @Test(
        "Redis store: its families, and the operation errors the alert reads, at 0",
        .enabled(if: RedisProcess.testsEnabled, Comment(rawValue: RedisProcess.skipMessage)))
    func freshWithRedis() throws {
        let redis = try RedisProcess()
        defer { redis.stop() }
        let gw = try GatewayProcess(
            config: """
                listeners: [{name: public, address: 127.0.0.1:0}]
                admin: {address: 127.0.0.1:0}
                upstreams: [{name: demo, url: demo}]
                routes: [{name: r, match: {path_prefix: /}, upstream: demo, assertion: {mode: enforce}}]
                \(Self.appID)
                store: {kind: redis, url: "\(redis.url)"}
                """)
        defer { gw.stop() }
        let s = try Self.scrape(gw)
        try Self.checkDocumented(s, present: ["always", "redis"])
        #expect(s.types["attest_gateway_upstream_errors_total"] == nil)  // only the demo upstream
        #expect(s.has("attest_gateway_store_operation_errors_total", ["error": "store_unavailable"]))
    }

    /// A copy of the built gatewayd in a temporary directory (stamped copies never touch .build).
    final class BinaryCopy {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("gatewayd-copy-\(UUID().uuidString)")
        let path: String
        init() throws {
            try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
            path = dir.appendingPathComponent("gatewayd").path
            try FileManager.default.copyItem(atPath: gatewaydBinary.path, toPath: path)
        }
        deinit { try? FileManager.default.removeItem(at: dir) }
        var size: Int { ((try? FileManager.default.attributesOfItem(atPath: path))?[.size] as? Int) ?? 0 }
    }

    static func stamp(_ path: String, environment: [String] = []) throws -> ProcessResult {
        try runProcess(
            URL(fileURLWithPath: "/usr/bin/env"),
            environment + [repositoryRoot.appendingPathComponent("scripts/stamp-build-info").path, path])
    }

    @Test(
        "--version: version, commit, build date, OpenSSL, nghttp2 and the allocator in use; unknown until stamped; the stamp is replaced, not added"
    )
    func version() throws {
        let copy = try BinaryCopy()
        // Whatever .build holds, a binary whose end is not a stamp (as a plain swift build leaves it) says unknown.
        let handle = try #require(FileHandle(forWritingAtPath: copy.path))
        handle.seekToEndOfFile()
        handle.write(Data("\n".utf8))
        try handle.close()
        let plain = try runProcess(URL(fileURLWithPath: copy.path), ["--version"])
        #expect(plain.status == 0)
        let lines = plain.stdout.split(separator: "\n").map(String.init)
        try #require(lines.count == 6, "\(plain.stdout)")
        #expect(lines[0].wholeMatch(of: /gatewayd [0-9]+\.[0-9]+\.[0-9]+(-[a-z0-9.]+)?/) != nil, "\(lines[0])")
        #expect(lines[1] == "commit:  unknown")
        #expect(lines[2] == "built:   unknown")
        #expect(lines[3].hasPrefix("OpenSSL: OpenSSL 3."), "\(lines[3])")
        #expect(lines[4].wholeMatch(of: /nghttp2: 1\.[0-9]+\.[0-9]+/) != nil, "\(lines[4])")
        // jemalloc is linked and is what Swift's runtime allocates through (checked by gatewayd, not
        // assumed); the sanitizer builds leave it out (scripts/sanitize.sh, Package.swift).
        if ProcessInfo.processInfo.environment["ATTEST_GATEWAY_NO_JEMALLOC"] == nil {
            #expect(lines[5].wholeMatch(of: /malloc:  jemalloc 5\.[0-9]+\.[0-9]+/) != nil, "\(lines[5])")
        } else {
            #expect(lines[5] == "malloc:  the C library's (built without jemalloc)", "\(lines[5])")
        }

        // Stamped from git: HEAD, "-dirty" when tracked files differ.
        let head = try runProcess(URL(fileURLWithPath: "/usr/bin/git"), ["-C", repositoryRoot.path, "rev-parse", "HEAD"])
        let clean = try runProcess(URL(fileURLWithPath: "/usr/bin/git"), ["-C", repositoryRoot.path, "diff", "--quiet", "HEAD", "--"])
        let expected = head.stdout.trimmingCharacters(in: .whitespacesAndNewlines) + (clean.status == 0 ? "" : "-dirty")
        let stamped = try Self.stamp(copy.path, environment: ["SOURCE_DATE_EPOCH=1795600000"])
        #expect(stamped.status == 0, "\(stamped.stderr)")
        let v = try runProcess(URL(fileURLWithPath: copy.path), ["--version"]).stdout.split(separator: "\n").map(String.init)
        #expect(v[1] == "commit:  \(expected)")
        #expect(v[2] == "built:   2026-11-25T09:46:40Z")

        // Again, with the commit given (a build without .git): replaced, not added.
        let given = ["COMMIT=0123456789abcdef0123456789abcdef01234567", "SOURCE_DATE_EPOCH=1795600000"]
        #expect(try Self.stamp(copy.path, environment: given).status == 0)
        let size = copy.size
        #expect(try Self.stamp(copy.path, environment: given).status == 0)
        #expect(copy.size == size)
        let again = try runProcess(URL(fileURLWithPath: copy.path), ["--version"]).stdout
        #expect(again.contains("commit:  0123456789abcdef0123456789abcdef01234567\n"))
        #expect(try Self.stamp(copy.path, environment: ["COMMIT=not-a-commit"]).status == 1)

        // The stamped binary serves, and says the same in build_info.
        let gw = try GatewayProcess(
            config: """
                listeners: [{name: public, address: 127.0.0.1:0}]
                admin: {address: 127.0.0.1:0}
                upstreams: [{name: demo, url: demo}]
                routes: [{name: r, match: {path_prefix: /}, upstream: demo}]
                """, executable: URL(fileURLWithPath: copy.path))
        defer { gw.stop() }
        let s = try Self.scrape(gw)
        let info = try #require(s.samples.first { $0.name == "attest_gateway_build_info" })
        #expect(info.labels["commit"] == "0123456789abcdef0123456789abcdef01234567")
        #expect(info.labels["version"] == String(lines[0].dropFirst("gatewayd ".count)))
    }
}
