import Foundation
import GatewayTestSupport
import Testing

/// deploy/prometheus: rules accepted and unit-tested by promtool, alerts present for every failure the
/// operations guide names, and every metric they use exported by the gateway.
@Suite("deploy/prometheus")
struct PrometheusTests {
    static let rulesPath = "deploy/prometheus/alerts.yaml"
    static let rulesTestPath = "deploy/prometheus/alerts_test.yaml"

    /// Metrics exported by the Redis store, built in parallel (issue 6); alerts may use them before it lands.
    static let pendingMetrics: Set<String> = []

    static func rules() throws -> [[String: Any]] {
        let doc = try #require(try Deploy.yamlDocuments(rulesPath).first)
        let groups = try #require(doc["groups"] as? [[String: Any]])
        return groups.flatMap { $0["rules"] as? [[String: Any]] ?? [] }
    }

    static func promtool() throws -> URL {
        try #require(Deploy.tool("promtool"), "promtool is missing: scripts/install-deps.sh installs Debian's prometheus package")
    }

    @Test(
        "promtool check rules accepts alerts.yaml, and refuses a broken copy",
        .enabled(if: Deploy.runnable("promtool"), "promtool not installed (scripts/install-deps.sh); skipped outside CI"))
    func checkRules() throws {
        let promtool = try Self.promtool()
        let r = try runProcess(promtool, ["check", "rules", Deploy.url(Self.rulesPath).path], timeout: 60)
        #expect(r.status == 0, "\(r.stdout)\(r.stderr)")
        let tmp = try Deploy.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: tmp) }
        let broken = tmp.appendingPathComponent("alerts.yaml")
        try (try Deploy.text(Self.rulesPath)).replacingOccurrences(of: "sum by (operation) (rate(", with: "sum by (operation) (rate((")
            .write(to: broken, atomically: true, encoding: .utf8)
        #expect(try runProcess(promtool, ["check", "rules", broken.path], timeout: 60).status != 0)
    }

    @Test(
        "promtool test rules: the alert unit tests pass",
        .enabled(if: Deploy.runnable("promtool"), "promtool not installed (scripts/install-deps.sh); skipped outside CI"))
    func unitTests() throws {
        let r = try runProcess(try Self.promtool(), ["test", "rules", Deploy.url(Self.rulesTestPath).path], timeout: 120)
        #expect(r.status == 0, "\(r.stdout)\(r.stderr)")
        // The unit tests cover at least two alerts.
        let tested = Set(try Deploy.text(Self.rulesTestPath).matches(of: /alertname: (\w+)/).map { String($0.output.1) })
        #expect(tested.count >= 2, "\(tested)")
    }

    @Test(
        "an alert watches each failure: refusals, registrations, snapshots, store, store writes, journal damage, upstream 5xx, upstream servers down, challenge floods"
    )
    func requiredAlerts() throws {
        var byName: [String: String] = [:]
        for r in try Self.rules() {
            if let a = r["alert"] as? String { byName[a] = r["expr"] as? String ?? "" }
        }
        let records = try Self.rules().compactMap { r -> (String, String)? in
            guard let n = r["record"] as? String, let e = r["expr"] as? String else { return nil }
            return (n, e)
        }
        /// The expression with recording rules expanded once.
        func expanded(_ alert: String) -> String {
            var e = byName[alert] ?? ""
            for (n, x) in records { e = e.replacingOccurrences(of: n, with: "(\(x))") }
            return e
        }
        let required: [(String, [String])] = [
            ("AttestGatewayRefusalRatioRising", ["attest_gateway_assertion_verdicts_total", "verdict=\"refused\"", "reason"]),
            ("AttestGatewayRegistrationsFailing", ["attest_gateway_registrations_total", "result=\"refused\""]),
            ("AttestGatewaySnapshotTooOld", ["attest_gateway_store_snapshot_age_seconds"]),
            ("AttestGatewayStoreUnavailable", ["attest_gateway_assertion_verdicts_total", "reason=\"store_unavailable\""]),
            ("AttestGatewayStoreErrors", ["attest_gateway_store_operation_errors_total", "operation"]),
            ("AttestGatewayStoreWriteErrors", ["attest_gateway_store_write_errors_total", "file", "errno"]),
            ("AttestGatewayJournalDamaged", ["attest_gateway_store_journal_corrupt_records_total"]),
            ("AttestGatewayUpstream5xx", ["attest_gateway_requests_total", "status_class=\"5xx\""]),
            ("AttestGatewayUpstreamErrors", ["attest_gateway_upstream_errors_total"]),
            ("AttestGatewayUpstreamAllServersDown", ["attest_gateway_upstream_server_up", "max by (instance, upstream)"]),
            ("AttestGatewayUpstreamServerDown", ["attest_gateway_upstream_server_up"]),
            ("AttestGatewayKeyCapacityNearlyFull", ["attest_gateway_store_keys", "attest_gateway_store_key_capacity"]),
            ("AttestGatewayKeyCapacityReached", ["attest_gateway_registrations_total", "reason=\"key_capacity\""]),
            (
                "AttestGatewayChallengeFlood",
                [
                    "attest_gateway_rate_limited_total", "limit=\"client\"", "attest_gateway_challenges_evicted_total",
                    "budget=\"anonymous\"",
                ]
            ),
            ("AttestGatewayKeyBoundChallengesReplaced", ["attest_gateway_challenges_evicted_total", "budget=\"key_bound\""]),
            ("AttestGatewayRegistrationBudgetExhausted", ["attest_gateway_rate_limited_total", "limit=\"registration\""]),
            ("AttestGatewayRiskRefreshFailing", ["attest_gateway_receipt_refreshes_total", "unauthorized", "rate_limited"]),
            ("AttestGatewayRiskRefreshLagging", ["attest_gateway_receipt_refresh_lag_seconds"]),
            ("AttestGatewayRiskMetricHigh", ["attest_gateway_assertion_verdicts_total", "reason=\"risk_metric_exceeded\""]),
            ("AttestGatewayAccountKeyLimit", ["attest_gateway_assertion_verdicts_total", "reason=\"account_key_limit\""]),
        ]
        for (alert, needles) in required {
            let e = expanded(alert)
            #expect(!e.isEmpty, "missing alert \(alert)")
            for n in needles { #expect(e.contains(n), "\(alert) does not use \(n)") }
        }
        for r in try Self.rules() where r["alert"] != nil {
            let labels = r["labels"] as? [String: Any] ?? [:]
            let annotations = r["annotations"] as? [String: Any] ?? [:]
            #expect(["warning", "critical"].contains(labels["severity"] as? String ?? ""), "\(r["alert"]!) severity")
            #expect(annotations["summary"] != nil && annotations["description"] != nil, "\(r["alert"]!) annotations")
        }
    }

    @Test("every metric the rules use is exported by the gateway")
    func metricNames() throws {
        let exported = ExportedMetrics.seriesNames(try ExportedMetrics.load())
        for r in try Self.rules() {
            let expr = r["expr"] as? String ?? ""
            for name in ExportedMetrics.referenced(in: expr) where !exported.contains(name) && !Self.pendingMetrics.contains(name) {
                Issue.record("\(r["alert"] ?? r["record"] ?? "?") uses \(name), which the gateway does not export")
            }
        }
    }

    @Test("the exported metric list is read from the sources (names, histograms)")
    func exportedList() throws {
        let metrics = try ExportedMetrics.load()
        let names = Set(metrics.map(\.name))
        for n in [
            "attest_gateway_requests_total", "attest_gateway_assertion_verdicts_total", "attest_gateway_store_snapshot_age_seconds",
            "attest_gateway_upstream_pool_connections", "attest_gateway_registrations_total",
        ] {
            #expect(names.contains(n), "\(n) not found in Sources/**/*Metrics.swift")
        }
        let histograms = Set(metrics.filter(\.histogram).map(\.name))
        #expect(
            histograms.isSuperset(of: ["attest_gateway_request_duration_seconds", "attest_gateway_store_journal_fsync_duration_seconds"]))
        #expect(!histograms.contains("attest_gateway_requests_total"))
    }
}
