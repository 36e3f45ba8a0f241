import Foundation
import GatewayTestSupport
import Testing

/// deploy/grafana: a valid dashboard whose queries use only exported metrics, all of them, in valid PromQL.
@Suite("deploy/grafana")
struct GrafanaTests {
    static let path = "deploy/grafana/attest-gateway.json"

    static func dashboard() throws -> [String: Any] {
        let data = try Data(contentsOf: Deploy.url(path))
        return try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any], "not a JSON object")
    }

    static func panels(_ d: [String: Any]) -> [[String: Any]] {
        let top = d["panels"] as? [[String: Any]] ?? []
        return top + top.flatMap { $0["panels"] as? [[String: Any]] ?? [] }
    }

    /// Every PromQL expression: panel targets, template variable queries, annotations.
    static func expressions(_ d: [String: Any]) -> [String] {
        var exprs: [String] = []
        for p in panels(d) {
            for t in p["targets"] as? [[String: Any]] ?? [] { if let e = t["expr"] as? String { exprs.append(e) } }
        }
        for v in (d["templating"] as? [String: Any])?["list"] as? [[String: Any]] ?? [] {
            if let q = (v["query"] as? [String: Any])?["query"] as? String { exprs.append(q) }
        }
        for a in (d["annotations"] as? [String: Any])?["list"] as? [[String: Any]] ?? [] {
            if let e = a["expr"] as? String { exprs.append(e) }
        }
        return exprs
    }

    @Test("valid JSON: titled, unique panel ids, every graph has a query and a data source")
    func structure() throws {
        let d = try Self.dashboard()
        #expect(d["title"] as? String == "attest-gateway")
        #expect(d["uid"] as? String != nil)
        let panels = Self.panels(d)
        let ids = panels.compactMap { $0["id"] as? Int }
        #expect(ids.count == panels.count && Set(ids).count == ids.count, "panel ids must be unique")
        let graphs = panels.filter { $0["type"] as? String != "row" }
        #expect(graphs.count >= 12)
        for p in graphs {
            let targets = p["targets"] as? [[String: Any]] ?? []
            #expect(
                !targets.isEmpty && targets.allSatisfy { ($0["expr"] as? String)?.isEmpty == false }, "\(p["title"] ?? "?") has no query")
            #expect(p["datasource"] != nil, "\(p["title"] ?? "?") has no data source")
            #expect(p["gridPos"] != nil)
        }
    }

    @Test("every metric the dashboard queries is exported, and every exported metric is shown")
    func metricNames() throws {
        let metrics = try ExportedMetrics.load()
        let exported = ExportedMetrics.seriesNames(metrics)
        var used: Set<String> = []
        for e in Self.expressions(try Self.dashboard()) {
            let names = ExportedMetrics.referenced(in: e)
            for n in names where !exported.contains(n) {
                Issue.record("the dashboard queries \(n), which the gateway does not export: \(e)")
            }
            used.formUnion(names)
        }
        for m in metrics {
            let shown = m.histogram ? used.contains(m.name + "_bucket") || used.contains(m.name + "_count") : used.contains(m.name)
            #expect(shown, "no panel shows \(m.name)")
        }
    }

    /// Grafana variables replaced by values Prometheus accepts, each query checked by promtool as a
    /// recording rule (its PromQL parser).
    @Test(
        "every query is valid PromQL (promtool)",
        .enabled(if: Deploy.runnable("promtool"), "promtool not installed (scripts/install-deps.sh); skipped outside CI"))
    func promql() throws {
        let promtool = try #require(Deploy.tool("promtool"), "promtool is missing")
        let exprs = Self.expressions(try Self.dashboard()).map { e -> String in
            // Grafana's label_values(SELECTOR, LABEL) is not PromQL: its selector is.
            var e = e
            if e.hasPrefix("label_values("), let comma = e.lastIndex(of: ",") {
                e = String(e[e.index(e.startIndex, offsetBy: "label_values(".count)..<comma])
            }
            return e.replacingOccurrences(of: "$__rate_interval", with: "5m").replacingOccurrences(of: "$instance", with: ".*")
        }
        #expect(exprs.allSatisfy { !$0.contains("$") }, "an unknown Grafana variable is left")
        func check(_ exprs: [String]) throws -> ProcessResult {
            let rules: [String: Any] = [
                "groups": [
                    ["name": "dashboard", "rules": exprs.enumerated().map { ["record": "dashboard:q\($0.offset)", "expr": $0.element] }]
                ]
            ]
            let tmp = try Deploy.temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: tmp) }
            let file = tmp.appendingPathComponent("dashboard-rules.yaml")  // JSON is YAML
            try JSONSerialization.data(withJSONObject: rules, options: [.withoutEscapingSlashes]).write(to: file)
            return try runProcess(promtool, ["check", "rules", file.path], timeout: 60)
        }
        let r = try check(exprs)
        #expect(r.status == 0, "\(r.stdout)\(r.stderr)")
        #expect(try check(["sum by (route (rate(attest_gateway_requests_total[5m]))"]).status != 0, "promtool accepted broken PromQL")
    }
}
