import GatewayCrypto
import GatewayWire

/// The operator's page (`GET /` on the admin listener) as data, and its HTML: one self-contained
/// document, no external asset, readable with JavaScript off (a small inline script reloads it every
/// `refreshSeconds` when on). Every text that comes from configuration or traffic (route names,
/// reasons, addresses) is escaped here, in `escape`, and nowhere else. Pure: `OperatorReport` builds
/// the model, `AdminRouter` serves the text with `headers`.
struct OperatorPage: Sendable, Equatable {
    /// One table cell. `key` names the figure for tests and scripts (`data-k`), e.g.
    /// `route.purchase.accepted.5m`.
    struct Cell: Sendable, Equatable {
        enum Kind: Sendable, Equatable {
            case text
            /// Text kept on one line (an age, a status).
            case nowrap
            case number
            /// A same-origin link (a path on the admin listener).
            case link(String)
            case good, warn, bad
            /// Per bucket, oldest first: (accepted, refused).
            case bars([Bar])
        }

        var text: String
        var kind: Kind = .text
        var key: String? = nil

        static func n(_ value: Double, key: String? = nil) -> Cell { Cell(text: OperatorPage.count(value), kind: .number, key: key) }
        static func t(_ text: String) -> Cell { Cell(text: text) }
    }

    struct Bar: Sendable, Equatable {
        var accepted: Double
        var refused: Double
    }

    struct Table: Sendable, Equatable {
        var caption: String? = nil
        var head: [String]
        var rows: [[Cell]]
        /// Shown instead of an empty table.
        var empty: String = "none"
    }

    /// A card: a route, an upstream, the store…
    struct Block: Sendable, Equatable {
        var title: String
        var badges: [Cell] = []
        var lines: [String] = []
        var spark: (caption: String, bars: [Bar])? = nil
        var tables: [Table] = []

        static func == (a: Block, b: Block) -> Bool {
            a.title == b.title && a.badges == b.badges && a.lines == b.lines && a.spark?.caption == b.spark?.caption
                && a.spark?.bars == b.spark?.bars && a.tables == b.tables
        }
    }

    struct Section: Sendable, Equatable {
        var id: String
        var title: String
        var note: String? = nil
        var blocks: [Block]
    }

    var title = "attest-gateway"
    /// Build, uptime, generated at… as (name, value).
    var facts: [(String, String)]
    /// Said at the top when there is nothing to show yet (a fresh start).
    var banner: String?
    var sections: [Section]
    var refreshSeconds = 10

    static func == (a: OperatorPage, b: OperatorPage) -> Bool {
        a.title == b.title && a.facts.map(\.0) == b.facts.map(\.0) && a.facts.map(\.1) == b.facts.map(\.1) && a.banner == b.banner
            && a.sections == b.sections && a.refreshSeconds == b.refreshSeconds
    }

    // MARK: HTML

    /// `&`, `<`, `>`, `"` and `'` as character references: safe in text and in quoted attributes.
    static func escape(_ s: String) -> String {
        var out = ""
        out.reserveCapacity(s.utf8.count)
        for c in s.unicodeScalars {
            switch c {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&quot;"
            case "'": out += "&#39;"
            default: out.unicodeScalars.append(c)
            }
        }
        return out
    }

    /// A count as a whole number with thin grouping (`12,345`); a fraction keeps two decimals.
    static func count(_ v: Double) -> String {
        guard v.isFinite else { return "-" }
        if v != v.rounded() { return String(Int((v * 100).rounded()) / 100) + "." + pad2(Int((v * 100).rounded()) % 100) }
        let digits = String(Int64(v).magnitude)
        var out = ""
        for (i, ch) in digits.enumerated() {
            if i > 0, (digits.count - i) % 3 == 0 { out += "," }
            out.append(ch)
        }
        return (v < 0 ? "-" : "") + out
    }

    private static func pad2(_ n: Int) -> String { n < 10 ? "0\(n)" : String(n) }

    static let style = """
        :root{color-scheme:light dark;--fg:#1b1f24;--muted:#5b6570;--bg:#f6f7f9;--card:#fff;--line:#d9dde3;--ok:#1f7a3a;--warn:#9a6200;--bad:#b3261e;--acc:#2e7d32;--ref:#c62828}
        @media (prefers-color-scheme:dark){:root{--fg:#e6e8eb;--muted:#9aa4ae;--bg:#14171a;--card:#1d2125;--line:#353b42}}
        *{box-sizing:border-box}body{margin:0;font:14px/1.4 system-ui,-apple-system,"DejaVu Sans",sans-serif;color:var(--fg);background:var(--bg)}
        header{padding:12px 16px;border-bottom:1px solid var(--line);background:var(--card)}h1{font-size:18px;margin:0 0 4px}
        dl.facts{display:flex;flex-wrap:wrap;gap:4px 16px;margin:0;color:var(--muted)}dl.facts div{display:flex;gap:4px}dl.facts dt{font-weight:600}dl.facts dd{margin:0}
        main{padding:8px 16px 24px}.banner{margin:12px 0;padding:10px 12px;border:1px solid var(--warn);border-radius:6px;background:var(--card)}
        h2{font-size:16px;margin:18px 0 6px}p.note{margin:0 0 8px;color:var(--muted)}
        .grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(380px,1fr));gap:12px}
        .card{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:10px 12px;min-width:0}
        .card h3{font-size:15px;margin:0 0 6px;display:flex;flex-wrap:wrap;gap:6px;align-items:center;overflow-wrap:anywhere}
        .badge{font-size:12px;font-weight:600;padding:1px 6px;border-radius:10px;border:1px solid var(--line)}
        .good{color:var(--ok)}.warn{color:var(--warn)}.bad{color:var(--bad)}
        .card p{margin:2px 0;color:var(--muted);overflow-wrap:anywhere}.scroll{overflow-x:auto}
        table{border-collapse:collapse;width:100%;margin:6px 0}caption{text-align:left;font-weight:600;padding:2px 0}
        th,td{padding:2px 6px;border-bottom:1px solid var(--line);text-align:left;vertical-align:top;overflow-wrap:break-word}
        th,.nw{white-space:nowrap}td a{font-family:ui-monospace,"DejaVu Sans Mono",monospace;font-size:12px;white-space:nowrap}
        td.num,th.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
        svg.spark{display:block;width:100%;max-width:360px;height:36px}.spark .a{fill:var(--acc)}.spark .r{fill:var(--ref)}
        .legend{font-size:12px;color:var(--muted)}a{color:inherit}
        @media (max-width:480px){.grid{grid-template-columns:1fr}main{padding:6px 8px 16px}header{padding:10px 8px}body{font-size:13px}}
        """

    static let script = "setTimeout(function(){location.reload()},10000);"

    /// The page's Content-Security-Policy: nothing may load; only this style and this script run
    /// (by their SHA-256), no framing, no form, no base.
    static let contentSecurityPolicy: String = {
        func hash(_ s: String) -> String { "'sha256-" + Base64.encode(SHA256.hash(Array(s.utf8))) + "'" }
        return "default-src 'none'; style-src \(hash(style)); script-src \(hash(script)); img-src data:; base-uri 'none'; "
            + "form-action 'none'; frame-ancestors 'none'"
    }()

    /// The response fields of the page.
    static let headers: [(String, String)] = [
        ("Content-Type", "text/html; charset=utf-8"), ("Cache-Control", "no-store"),
        ("Content-Security-Policy", contentSecurityPolicy), ("X-Content-Type-Options", "nosniff"), ("X-Frame-Options", "DENY"),
        ("Referrer-Policy", "no-referrer"),
    ]

    func html() -> String {
        var h = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        h += "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">"
        h += "<title>\(Self.escape(title))</title><style>\(Self.style)</style></head><body>"
        h += "<header><h1>\(Self.escape(title))</h1><dl class=\"facts\">"
        for (name, value) in facts { h += "<div><dt>\(Self.escape(name))</dt><dd>\(Self.escape(value))</dd></div>" }
        h += "</dl></header><main>"
        if let banner { h += "<p class=\"banner\" id=\"empty-state\">\(Self.escape(banner))</p>" }
        for s in sections {
            h += "<section id=\"\(Self.escape(s.id))\"><h2>\(Self.escape(s.title))</h2>"
            if let note = s.note { h += "<p class=\"note\">\(Self.escape(note))</p>" }
            h += "<div class=\"grid\">"
            for b in s.blocks { h += Self.block(b) }
            h += "</div></section>"
        }
        h += "<p class=\"legend\">Counts come from the same counters as /metrics. Windows are sampled every "
        h += "\(CounterHistory.intervalMillis / 1000) s; with JavaScript on, this page reloads every \(refreshSeconds) s.</p>"
        h += "</main><script>\(Self.script)</script></body></html>\n"
        return h
    }

    static func block(_ b: Block) -> String {
        var h = "<div class=\"card\"><h3>\(escape(b.title))"
        for badge in b.badges { h += "<span class=\"badge\(cls(badge.kind))\"\(dataKey(badge))>\(escape(badge.text))</span>" }
        h += "</h3>"
        for line in b.lines { h += "<p>\(escape(line))</p>" }
        if let spark = b.spark {
            h += sparkline(spark.bars, caption: spark.caption) + "<p class=\"legend\">\(escape(spark.caption))</p>"
        }
        for t in b.tables { h += table(t) }
        return h + "</div>"
    }

    private static func cls(_ k: Cell.Kind) -> String {
        switch k {
        case .good: " good"
        case .warn: " warn"
        case .bad: " bad"
        default: ""
        }
    }

    private static func dataKey(_ c: Cell) -> String { c.key.map { " data-k=\"\(escape($0))\"" } ?? "" }

    static func table(_ t: Table) -> String {
        var h = "<div class=\"scroll\"><table>"
        if let caption = t.caption { h += "<caption>\(escape(caption))</caption>" }
        if t.rows.isEmpty {
            return h + "<tbody><tr><td>\(escape(t.empty))</td></tr></tbody></table></div>"
        }
        let numeric = t.head.indices.map { i in t.rows.contains { i < $0.count && $0[i].kind == .number } }
        h += "<thead><tr>"
        for (i, name) in t.head.enumerated() { h += "<th\(numeric[i] ? " class=\"num\"" : "")>\(escape(name))</th>" }
        h += "</tr></thead><tbody>"
        for row in t.rows {
            h += "<tr>"
            for c in row { h += cell(c) }
            h += "</tr>"
        }
        return h + "</tbody></table></div>"
    }

    static func cell(_ c: Cell) -> String {
        let k = dataKey(c)
        switch c.kind {
        case .text: return "<td\(k)>\(escape(c.text))</td>"
        case .nowrap: return "<td class=\"nw\"\(k)>\(escape(c.text))</td>"
        case .number: return "<td class=\"num\"\(k)>\(escape(c.text))</td>"
        case .good, .warn, .bad: return "<td class=\"\(cls(c.kind).dropFirst())\"\(k)>\(escape(c.text))</td>"
        case .link(let href): return "<td\(k)><a href=\"\(escape(href))\">\(escape(c.text))</a></td>"
        case .bars(let bars): return "<td\(k)>\(sparkline(bars, caption: c.text))</td>"
        }
    }

    /// Stacked bars (accepted below, refused above), scaled to the highest bucket; `caption` is the
    /// image's accessible name and tooltip.
    static func sparkline(_ bars: [Bar], caption: String) -> String {
        let width = 4
        let height = 36.0
        let top = bars.map { $0.accepted + $0.refused }.max() ?? 0
        var h =
            "<svg class=\"spark\" viewBox=\"0 0 \(max(1, bars.count * width)) 36\" preserveAspectRatio=\"none\" role=\"img\" "
            + "aria-label=\"\(escape(caption))\"><title>\(escape(caption))</title>"
        guard top > 0 else { return h + "<rect x=\"0\" y=\"35\" width=\"\(max(1, bars.count * width))\" height=\"1\" class=\"a\"/></svg>" }
        for (i, b) in bars.enumerated() {
            let a = (b.accepted / top * height * 10).rounded() / 10
            let r = (b.refused / top * height * 10).rounded() / 10
            let x = i * width
            if a > 0 { h += "<rect x=\"\(x)\" y=\"\(height - a)\" width=\"\(width - 1)\" height=\"\(a)\" class=\"a\"/>" }
            if r > 0 { h += "<rect x=\"\(x)\" y=\"\(height - a - r)\" width=\"\(width - 1)\" height=\"\(r)\" class=\"r\"/>" }
        }
        return h + "</svg>"
    }
}
