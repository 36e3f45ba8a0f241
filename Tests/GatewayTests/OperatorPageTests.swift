import Foundation
import GatewayCrypto
import GatewayWire
import Synchronization
import Testing

@testable import Gateway

/// The operator's page without a server: the `/metrics` text read back, the sampled windows, the
/// page built from them and its HTML (escaping above all), the response fields.
@Suite("The operator's page: metrics text, windows, rendering, escaping")
struct OperatorPageTests {
    static let verdicts = "attest_gateway_assertion_verdicts_total"

    static func text(_ lines: [String]) -> MetricsText { MetricsText(Array((lines.joined(separator: "\n") + "\n").utf8)) }

    static func verdict(_ route: String, _ verdict: String, _ reason: String, _ value: Int, mode: String = "enforce") -> String {
        "\(verdicts){route=\"\(route)\",mode=\"\(mode)\",verdict=\"\(verdict)\",reason=\"\(reason)\"} \(value)"
    }

    static func facts(now: Int64 = 4_000_000, started: Int64 = 0) -> OperatorReport.Facts {
        OperatorReport.Facts(
            version: "0.1.0-dev", commit: "0123456789abcdef", nowMillis: now, startedMillis: started, reload: nil,
            listeners: [(name: "public", address: "127.0.0.1:8080", protocols: "http1")], admin: "127.0.0.1:9090", tokenRequired: false,
            storeKind: "memory, no data_dir", ready: true, notReadyReasons: [], apple: false)
    }

    @Test("the text format is read back: names, labels with escapes, values, comments skipped")
    func parse() {
        let t = Self.text([
            "# HELP x_total Something.", "# TYPE x_total counter", #"x_total{a="1",b="say \"hi\"\\n"} 3"#, "plain 4.5",
            #"h_bucket{le="+Inf"} 7"#, "inf +Inf", "broken{a=\"1\" 2", "",
        ])
        #expect(t.samples.count == 4)
        #expect(t.samples[0].name == "x_total" && t.samples[0].label("b") == "say \"hi\"\\n" && t.samples[0].value == 3)
        #expect(t.samples[0].key == #"x_total{a="1",b="say \"hi\"\\n"}"#)
        #expect(t.samples[1].name == "plain" && t.samples[1].labels.isEmpty && t.samples[1].value == 4.5)
        #expect(t.samples[2].label("le") == "+Inf" && t.samples[2].value == 7)
        #expect(t.samples[3].value == .infinity)
        #expect(t.sum("x_total", ["a": "1"]) == 3 && t.sum("x_total", ["a": "2"]) == 0)
    }

    @Test("windows: now minus the value at the window's start; 0 before the first point while nothing was dropped")
    func windows() {
        var h = CounterHistory()
        let key = [#"attest_gateway_registrations_total{result="registered",reason="new_key"}"#]
        func at(_ v: Int) -> MetricsText {
            Self.text([#"attest_gateway_registrations_total{result="registered",reason="new_key"} \#(v)"#, "untracked_total 5"])
        }
        // A point every 10 s for 20 minutes, the counter growing by 1 per point.
        for i in 0...120 { h.append(at(i), atMillis: Int64(i) * 10_000) }
        #expect(h.keys == key)
        let now: Int64 = 1_200_000
        #expect(h.delta(key, current: 120, nowMillis: now, windowMillis: 300_000) == 30)
        // The hour is longer than the history, which started with the process: everything since start.
        #expect(h.delta(key, current: 120, nowMillis: now, windowMillis: 3_600_000) == 120)
        #expect(h.value(key, at: -1) == 0)
        #expect(h.buckets(key, current: 120, nowMillis: now, bucketMillis: 60_000, count: 3) == [6, 6, 6])
        #expect(h.lastIncrease(key) == now)
        // Past the capacity the oldest points go; a window older than them starts at the oldest.
        for i in 121...500 { h.append(at(i), atMillis: Int64(i) * 10_000) }
        #expect(h.points.count == CounterHistory.capacity && h.dropped)
        #expect(h.delta(key, current: 500, nowMillis: 5_000_000, windowMillis: 3_600_000) == 360)
        #expect(h.delta(key, current: 500, nowMillis: 5_000_000, windowMillis: 10 * 3_600_000) == 500 - Double(500 - 361))
        // A series seen for the first time later counts from 0 before it.
        h.append(Self.text([#"attest_gateway_challenges_expired_total 9"#]), atMillis: 5_010_000)
        #expect(h.delta(["attest_gateway_challenges_expired_total"], current: 9, nowMillis: 5_010_000, windowMillis: 300_000) == 9)
    }

    @Test("a route's counts: since start is the /metrics value, the windows the sampled growth")
    func routeCounts() throws {
        var h = CounterHistory()
        h.append(Self.text([Self.verdict("purchase", "accepted", "ok", 0)]), atMillis: 0)
        h.append(Self.text([Self.verdict("purchase", "accepted", "ok", 20)]), atMillis: 400_000)
        h.append(Self.text([Self.verdict("purchase", "accepted", "ok", 50)]), atMillis: 3_700_000)
        let now = Self.text([
            Self.verdict("purchase", "accepted", "ok", 80), Self.verdict("purchase", "refused", "bad_signature", 4),
            Self.verdict("purchase", "refused", "assertion_missing", 7),
            Self.verdict("purchase", "would_refuse", "key_unknown", 2, mode: "shadow"),
            #"attest_gateway_requests_total{route="purchase",status_class="2xx",protocol="http1"} 80"#,
        ])
        let report = OperatorReport(
            now: now, history: h, facts: Self.facts(now: 4_100_000),
            routes: [
                OperatorReport.Route(name: "purchase", mode: "enforce", protected: true, upstream: "legacy", fallbackMaxShare: nil)
            ], upstreams: [],
            refusals: [
                OperatorReport.Refusal(
                    id: "req-1", atMillis: 3_790_000, route: "purchase", verdict: "refused", reason: "bad_signature", status: 401)
            ])
        let page = report.page()
        #expect(page.banner == nil)
        let html = page.html()
        func figure(_ key: String) -> String? {
            guard let r = html.range(of: "data-k=\"\(key)\">") else { return nil }
            return String(html[r.upperBound...].prefix { $0 != "<" })
        }
        #expect(figure("route.purchase.accepted.total") == "80")
        #expect(figure("route.purchase.accepted.1h") == "60")
        #expect(figure("route.purchase.accepted.5m") == "30")
        #expect(figure("route.purchase.refused.total") == "11")
        #expect(figure("route.purchase.shadowed.total") == "2")
        #expect(figure("route.purchase.mode") == "enforce")
        #expect(figure("route.purchase.reason.assertion_missing.1h") == "7")
        #expect(html.contains("<a href=\"/explain/req-1\">req-1</a>"))
        #expect(html.contains("<svg class=\"spark\""))
    }

    @Test("a fresh start says so")
    func emptyState() {
        let report = OperatorReport(
            now: Self.text([Self.verdict("purchase", "accepted", "ok", 0)]), history: CounterHistory(), facts: Self.facts(now: 12_000),
            routes: [OperatorReport.Route(name: "purchase", mode: "enforce", protected: true, upstream: "demo", fallbackMaxShare: nil)],
            upstreams: [], refusals: [])
        let page = report.page()
        #expect(page.banner?.hasPrefix("No requests yet") == true)
        #expect(page.html().contains("id=\"empty-state\""))
        #expect(page.html().contains("none kept"))
    }

    @Test("XSS: route names, reasons, ids, upstreams and listeners with markup come out as text")
    func escaping() {
        let evil = "<script>alert(1)</script>"
        let quote = "x\" onmouseover=\"alert(2)"
        let now = Self.text([
            Self.verdict(evil, "refused", evil, 3), Self.verdict(evil, "accepted", "ok", 1),
            #"attest_gateway_registrations_total{result="refused",reason="<img src=x onerror=alert(3)>"} 2"#,
            #"attest_gateway_upstream_server_up{upstream="<b>u</b>",server="<i>s</i>:80"} 1"#,
        ])
        var facts = Self.facts()
        facts.listeners = [(name: evil, address: quote, protocols: "http1")]
        let report = OperatorReport(
            now: now, history: CounterHistory(), facts: facts,
            routes: [OperatorReport.Route(name: evil, mode: "enforce", protected: true, upstream: quote, fallbackMaxShare: 0.1)],
            upstreams: ["<b>u</b>"],
            refusals: [OperatorReport.Refusal(id: quote, atMillis: 0, route: evil, verdict: "refused", reason: evil, status: 401)])
        let html = report.page().html()
        #expect(!html.contains(evil))
        #expect(!html.contains("<img"))
        #expect(!html.contains("<b>u</b>") && !html.contains("<i>s</i>"))
        #expect(!html.contains(quote))
        #expect(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"))
        // An id that is not a request id's bytes is shown, not linked.
        #expect(html.contains("<td class=\"nw\">x&quot; onmouseover=&quot;alert(2)</td>") && !html.contains("href=\"/explain/x"))
        #expect(OperatorReport.linkable("Ab-9_.:+=") && !OperatorReport.linkable("..") && !OperatorReport.linkable("a/b"))
        // The page's own script is the one script element.
        #expect(html.components(separatedBy: "<script").count == 2)
        #expect(OperatorPage.escape("a&b<c>d\"e'f") == "a&amp;b&lt;c&gt;d&quot;e&#39;f")
    }

    @Test("the response fields: HTML, no-store, a CSP allowing only the page's own style and script by hash, nosniff, no framing")
    func headers() {
        let fields = Dictionary(uniqueKeysWithValues: OperatorPage.headers)
        #expect(fields["Content-Type"] == "text/html; charset=utf-8")
        #expect(fields["Cache-Control"] == "no-store")
        #expect(fields["X-Content-Type-Options"] == "nosniff")
        #expect(fields["X-Frame-Options"] == "DENY")
        let csp = fields["Content-Security-Policy"] ?? ""
        #expect(csp.hasPrefix("default-src 'none';"))
        #expect(csp.contains("frame-ancestors 'none'"))
        #expect(!csp.contains("unsafe-inline") && !csp.contains("http"))
        for inline in [OperatorPage.style, OperatorPage.script] {
            #expect(csp.contains("'sha256-" + Base64.encode(SHA256.hash(Array(inline.utf8))) + "'"))
        }
        let html = OperatorReport(
            now: Self.text([]), history: CounterHistory(), facts: Self.facts(), routes: [], upstreams: [], refusals: []
        ).page().html()
        #expect(html.contains("<style>\(OperatorPage.style)</style>") && html.contains("<script>\(OperatorPage.script)</script>"))
        #expect(!html.contains("src=") && !html.contains("<link"))
    }

    @Test("Apple services: refresh answers, back-off, DeviceCheck and the fallback share against max_share; the store's data directory")
    func appleAndStore() {
        var h = CounterHistory()
        h.append(Self.text([#"attest_gateway_receipt_refreshes_total{result="refreshed"} 0"#]), atMillis: 0)
        h.append(Self.text([#"attest_gateway_receipt_refreshes_total{result="refreshed"} 4"#]), atMillis: 3_980_000)
        let now = Self.text([
            #"attest_gateway_receipt_refreshes_total{result="refreshed"} 4"#,
            #"attest_gateway_receipt_refreshes_total{result="rate_limited"} 2"#,
            #"attest_gateway_receipt_refreshes_total{result="stale"} 0"#, "attest_gateway_receipt_refresh_lag_seconds 90",
            #"attest_gateway_devicecheck_requests_total{endpoint="validate_device_token",result="ok"} 6"#,
            #"attest_gateway_devicecheck_requests_total{endpoint="query_two_bits",result="ok"} 3"#,
            #"attest_gateway_fallback_share{route="purchase"} 0.25"#, "attest_gateway_store_snapshot_age_seconds 400",
            "attest_gateway_store_snapshot_failures_total 1", "attest_gateway_store_journal_fsync_duration_seconds_count 10",
            "attest_gateway_store_journal_fsync_duration_seconds_sum 0.05", "attest_gateway_store_keys 50",
            "attest_gateway_store_key_capacity 200",
        ])
        var facts = Self.facts()
        facts.apple = true
        facts.refreshPausedMillis = 65_000
        let html = OperatorReport(
            now: now, history: h, facts: facts,
            routes: [OperatorReport.Route(name: "purchase", mode: "enforce", protected: true, upstream: "demo", fallbackMaxShare: 0.1)],
            upstreams: [], refusals: []
        ).page().html()
        func figure(_ key: String) -> String? {
            guard let r = html.range(of: "data-k=\"\(key)\">") else { return nil }
            return String(html[r.upperBound...].prefix { $0 != "<" })
        }
        #expect(figure("apple.refresh") == "paused 1 min")
        #expect(figure("apple.refresh.refreshed.total") == "4" && figure("apple.refresh.rate_limited.1h") == "2")
        #expect(figure("apple.refresh.stale.total") == nil, "a result never answered is left out")
        #expect(html.contains("last answer: 20 s ago") && html.contains("oldest due refresh late by 1 min"))
        #expect(figure("devicecheck.state") == "running" && figure("devicecheck.ok.total") == "9")
        // The share above max_share is marked bad, on the route and in the Apple section.
        #expect(html.contains("<span class=\"badge bad\" data-k=\"route.purchase.fallback_share\">fallback 25.0 %</span>"))
        #expect(html.contains("<td class=\"bad\">25.0 %</td><td>10.0 %</td>"))
        #expect(html.contains("<td class=\"bad\">6 min</td>"), "a snapshot older than 5 minutes is marked")
        #expect(html.contains("<td>5.00 ms</td>") && html.contains("keys: 50 of 200 (25.0 %)"))
    }

    @Test("the sampler keeps a point at start and builds the page off the caller's thread from the metrics now")
    func sampler() async throws {
        let value = Shared()
        let sampler = OperatorSampler(
            exposition: { Array((Self.verdict("purchase", "accepted", "ok", value.count.withLock { $0 }) + "\n").utf8) },
            clock: { 1_000 })
        sampler.start()
        defer { sampler.stop() }
        value.count.withLock { $0 = 42 }
        let inputs = OperatorSampler.Inputs(
            facts: Self.facts(),
            routes: [OperatorReport.Route(name: "purchase", mode: "shadow", protected: true, upstream: "demo", fallbackMaxShare: nil)],
            upstreams: [], refusals: [])
        let html: String = await withCheckedContinuation { c in
            sampler.page({ inputs }) { c.resume(returning: String(decoding: $0, as: UTF8.self)) }
        }
        #expect(html.contains("data-k=\"route.purchase.accepted.total\">42<"))
        #expect(html.contains("data-k=\"route.purchase.accepted.5m\">42<"))
        #expect(html.contains("data-k=\"route.purchase.mode\">shadow<"))
    }
}

private final class Shared: Sendable {
    let count = Mutex(0)
}
