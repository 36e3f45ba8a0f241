import GatewayPolicy

/// Builds the operator's page from what the gateway already keeps: the `/metrics` text now (so the
/// page's "since start" counts are `/metrics`' values), the sampled history of its counters (the 5
/// minute and hour windows, the sparklines), the configuration, the explain log's latest refusals
/// and a few facts of the process (build, uptime, reload, listeners, the store's health). Pure: no
/// clock, no I/O; `OperatorSampler` gathers the inputs.
struct OperatorReport {
    struct Facts: Sendable {
        var version: String
        var commit: String
        /// What `gatewayd --version` prints, line by line.
        var versionLines: [String] = []
        var nowMillis: Int64
        var startedMillis: Int64
        /// The last SIGHUP reload: when, whether applied, and the error of a refused one.
        var reload: (atMillis: Int64, applied: Bool, detail: String)?
        var listeners: [(name: String, address: String, protocols: String)]
        var admin: String
        var tokenRequired: Bool
        var storeKind: String
        var ready: Bool
        var notReadyReasons: [String]
        var apple: Bool
        /// How long the risk refresh and DeviceCheck calls stay paused (back-off); 0: not paused.
        var refreshPausedMillis: Int64 = 0
        var deviceCheckPausedMillis: Int64 = 0
    }

    struct Route: Sendable {
        var name: String
        /// `enforce`, `shadow`, `off`; `enforce` with a rollout below 100 % says its share.
        var mode: String
        var protected: Bool
        var upstream: String
        /// The fallback's `max_share` (0 to 1), nil without a fallback.
        var fallbackMaxShare: Double?
    }

    struct Refusal: Sendable {
        var id: String
        var atMillis: Int64
        var route: String
        var verdict: String
        var reason: String
        var status: Int?
    }

    static let fiveMinutes: Int64 = 300_000
    static let hour: Int64 = 3_600_000

    let now: MetricsText
    let history: CounterHistory
    let facts: Facts
    let routes: [Route]
    /// Upstreams other than the demo, in file order.
    let upstreams: [String]
    let refusals: [Refusal]

    /// Counts of a family's samples matching `labels`: in the last 5 minutes, the last hour, since start.
    struct Windows {
        var m5: Double
        var h1: Double
        var total: Double
    }

    func windows(_ name: String, _ labels: [String: String] = [:]) -> Windows {
        windows(now.select(name, labels))
    }

    func windows(_ samples: [MetricsText.Sample]) -> Windows {
        let keys = samples.map(\.key)
        let total = samples.reduce(0) { $0 + $1.value }
        return Windows(
            m5: history.delta(keys, current: total, nowMillis: facts.nowMillis, windowMillis: Self.fiveMinutes),
            h1: history.delta(keys, current: total, nowMillis: facts.nowMillis, windowMillis: Self.hour), total: total)
    }

    /// A row: its label and the three windows, each cell keyed `<key>.5m`, `.1h`, `.total`.
    static func row(_ label: String, _ w: Windows, key: String) -> [OperatorPage.Cell] {
        [.t(label), .n(w.m5, key: key + ".5m"), .n(w.h1, key: key + ".1h"), .n(w.total, key: key + ".total")]
    }

    static let windowHead = ["", "5 min", "1 h", "since start"]

    func page() -> OperatorPage {
        var sections = [routesSection(), attestSection(), upstreamsSection()]
        if facts.apple || routes.contains(where: { $0.fallbackMaxShare != nil }) { sections.append(appleSection()) }
        sections.append(gatewaySection())
        return OperatorPage(facts: headerFacts(), banner: emptyState(), sections: sections)
    }

    func headerFacts() -> [(String, String)] {
        var out: [(String, String)] = [
            ("build", facts.version + (facts.commit == "unknown" ? "" : " (" + String(facts.commit.prefix(12)) + ")")),
            ("up", Self.duration(facts.nowMillis - facts.startedMillis)),
            ("ready", facts.ready ? "yes" : "no: " + facts.notReadyReasons.joined(separator: "; ")),
        ]
        if let r = facts.reload {
            out.append(("last reload", Self.ago(facts.nowMillis - r.atMillis) + (r.applied ? ", applied" : ", refused")))
        } else {
            out.append(("last reload", "none since start"))
        }
        out.append(("page", RFC3339.format(millis: facts.nowMillis)))
        return out
    }

    /// Said when nothing has been counted since start.
    func emptyState() -> String? {
        let traffic = now.sum(GatewayMetrics.requestsTotal) + now.sum(AttestMetrics.verdicts) + now.sum(AttestMetrics.registrations)
        guard traffic == 0 else { return nil }
        return "No requests yet: the gateway started \(Self.ago(facts.nowMillis - facts.startedMillis)) and has answered none. "
            + "Every count below is 0; the 5-minute and hour windows fill as requests arrive."
    }

    // MARK: Routes

    func routesSection() -> OperatorPage.Section {
        var blocks = routes.filter(\.protected).map(routeBlock)
        let plain = routes.filter { !$0.protected }
        if !plain.isEmpty {
            let rows = plain.map { r in Self.row(r.name, windows(GatewayMetrics.requestsTotal, ["route": r.name]), key: "plain.\(r.name)") }
            blocks.append(
                OperatorPage.Block(
                    title: "Routes without App Attest",
                    tables: [OperatorPage.Table(caption: "requests answered", head: ["route", "5 min", "1 h", "since start"], rows: rows)]
                ))
        }
        let none = routes.contains(where: \.protected) ? nil : "No protected route is configured: no request is checked."
        return OperatorPage.Section(
            id: "routes", title: "Protected routes",
            note: none ?? "Verdicts per route. Shadowed: would have been refused, forwarded (shadow mode or rollout).", blocks: blocks)
    }

    func routeBlock(_ r: Route) -> OperatorPage.Block {
        let verdicts = now.select(AttestMetrics.verdicts, ["route": r.name])
        func by(_ verdict: String) -> [MetricsText.Sample] { verdicts.filter { $0.label("verdict") == verdict } }
        let k = "route.\(r.name)"
        let rows = [
            Self.row("accepted", windows(by("accepted")), key: k + ".accepted"),
            Self.row("refused", windows(by("refused")), key: k + ".refused"),
            Self.row("flagged", windows(by("flagged")), key: k + ".flagged"),
            Self.row("shadowed", windows(by("would_refuse")), key: k + ".shadowed"),
            Self.row("fail open", windows(by("fail_open")), key: k + ".fail_open"),
        ]
        var block = OperatorPage.Block(
            title: r.name, badges: [OperatorPage.Cell(text: r.mode, kind: r.mode == "shadow" ? .warn : .text, key: k + ".mode")],
            lines: ["upstream: \(r.upstream)"])
        let accepted = by("accepted").map(\.key)
        let refused = (by("refused") + by("would_refuse")).map(\.key)
        let a = history.buckets(
            accepted, current: by("accepted").reduce(0) { $0 + $1.value }, nowMillis: facts.nowMillis, bucketMillis: 60_000, count: 60)
        let f = history.buckets(
            refused, current: (by("refused") + by("would_refuse")).reduce(0) { $0 + $1.value }, nowMillis: facts.nowMillis,
            bucketMillis: 60_000, count: 60)
        block.spark = (
            "the last hour, per minute: accepted (green), refused or shadowed (red)",
            zip(a, f).map { OperatorPage.Bar(accepted: $0, refused: $1) }
        )
        block.tables.append(OperatorPage.Table(head: Self.windowHead, rows: rows))
        // Top refusal reasons over the hour (refused and shadowed alike).
        var reasons: [String: [MetricsText.Sample]] = [:]
        for s in by("refused") + by("would_refuse") { reasons[s.label("reason") ?? "-", default: []].append(s) }
        var top: [(reason: String, w: Windows)] = reasons.map { (reason: $0.key, w: windows($0.value)) }
        top = top.filter { $0.w.h1 > 0 }
        top.sort { $0.w.h1 != $1.w.h1 ? $0.w.h1 > $1.w.h1 : $0.reason < $1.reason }
        var reasonRows: [[OperatorPage.Cell]] = []
        for (reason, w) in top.prefix(5) {
            reasonRows.append([.t(reason), .n(w.m5, key: "\(k).reason.\(reason).5m"), .n(w.h1, key: "\(k).reason.\(reason).1h")])
        }
        block.tables.append(
            OperatorPage.Table(
                caption: "top refusal reasons (1 h)", head: ["reason", "5 min", "1 h"], rows: reasonRows,
                empty: "no refusal in the last hour"))
        let latest = refusals.filter { $0.route == r.name }.prefix(5)
        block.tables.append(
            OperatorPage.Table(
                caption: "latest refusals", head: ["when", "reason, status", "explain"],
                rows: latest.map { e in
                    let what = e.verdict == "refused" ? e.reason : "\(e.reason) (\(e.verdict))"
                    return [
                        OperatorPage.Cell(text: Self.ago(facts.nowMillis - e.atMillis), kind: .nowrap),
                        .t(what + ", " + (e.status.map(String.init) ?? "-")),
                        OperatorPage.Cell(text: e.id, kind: Self.linkable(e.id) ? .link("/explain/" + e.id) : .nowrap),
                    ]
                }, empty: "none kept"))
        if let max = r.fallbackMaxShare {
            let share = now.sum(AttestMetrics.fallbackShareGauge, ["route": r.name])
            block.lines.append("DeviceCheck fallback share \(Self.percent(share)) of max_share \(Self.percent(max))")
            block.badges.append(
                OperatorPage.Cell(text: "fallback \(Self.percent(share))", kind: share > max ? .bad : .good, key: k + ".fallback_share"))
        }
        let unsupported = windows(AttestMetrics.unsupportedClaims, ["route": r.name])
        if unsupported.total > 0 { block.lines.append("says App Attest unsupported: \(Self.count(unsupported.h1)) in 1 h") }
        return block
    }

    // MARK: Registrations, challenges, limits, store

    func attestSection() -> OperatorPage.Section {
        let reg = now.select(AttestMetrics.registrations)
        var regRows = [Self.row("registered", windows(reg.filter { $0.label("result") == "registered" }), key: "registrations.registered")]
        var refusedBy: [String: [MetricsText.Sample]] = [:]
        for s in reg where s.label("result") == "refused" { refusedBy[s.label("reason") ?? "-", default: []].append(s) }
        let refusedRows = refusedBy.map { ($0.key, windows($0.value)) }.filter { $0.1.total > 0 }.sorted { $0.1.total > $1.1.total }
        regRows.append(Self.row("refused", windows(reg.filter { $0.label("result") == "refused" }), key: "registrations.refused"))
        for (reason, w) in refusedRows { regRows.append(Self.row("refused: \(reason)", w, key: "registrations.refused.\(reason)")) }
        let registrations = OperatorPage.Block(title: "Registrations", tables: [OperatorPage.Table(head: Self.windowHead, rows: regRows)])

        let limits = OperatorPage.Block(
            title: "Challenges and limits",
            lines: ["live challenges: \(Self.count(now.sum(AttestMetrics.storeChallenges)))"],
            tables: [
                OperatorPage.Table(
                    head: Self.windowHead,
                    rows: [
                        Self.row("challenges issued", windows(AttestMetrics.challengesIssued), key: "challenges.issued"),
                        Self.row("expired unused", windows(AttestMetrics.challengesExpired), key: "challenges.expired"),
                        Self.row("429 per client", windows(AttestMetrics.rateLimitedTotal, ["limit": "client"]), key: "limits.client"),
                        Self.row(
                            "429 registration budget", windows(AttestMetrics.rateLimitedTotal, ["limit": "registration"]),
                            key: "limits.registration"),
                        Self.row("challenges replaced (budget full)", windows(AttestMetrics.challengesEvicted), key: "challenges.evicted"),
                    ])
            ])

        let keys = now.sum(AttestMetrics.storeKeys)
        let capacity = now.sum(AttestMetrics.keyCapacityGauge)
        var store = OperatorPage.Block(
            title: "Store", badges: [OperatorPage.Cell(text: facts.storeKind, key: "store.kind")],
            lines: ["keys: \(Self.count(keys)) of \(Self.count(capacity)) (\(Self.percent(capacity > 0 ? keys / capacity : 0)))"])
        var storeRows: [[OperatorPage.Cell]] = []
        if now.samples.contains(where: { $0.name == AttestMetrics.snapshotAge }) {
            let age = now.sum(AttestMetrics.snapshotAge)
            storeRows.append([
                .t("snapshot age"), OperatorPage.Cell(text: Self.duration(Int64(age * 1000)), kind: age > 300 ? .bad : .good),
            ])
            storeRows.append([.t("snapshot failures"), .n(now.sum(AttestMetrics.snapshotFailures), key: "store.snapshot_failures")])
            let fsyncs = windows("attest_gateway_store_journal_fsync_duration_seconds_count")
            let fsyncSum = now.sum("attest_gateway_store_journal_fsync_duration_seconds_sum")
            storeRows.append([.t("journal fsyncs (5 min / 1 h)"), .t("\(Self.count(fsyncs.m5)) / \(Self.count(fsyncs.h1))")])
            if fsyncs.total > 0 {
                storeRows.append([.t("journal fsync, mean since start"), .t(Self.millis(fsyncSum / fsyncs.total))])
            }
            storeRows.append([.t("write errors"), .n(now.sum(AttestMetrics.storeWriteErrors), key: "store.write_errors")])
        }
        if facts.storeKind.hasPrefix("redis") {
            let reachable = facts.ready || !facts.notReadyReasons.contains { $0.hasPrefix("store:") }
            storeRows.append([.t("Redis reachable"), OperatorPage.Cell(text: reachable ? "yes" : "no", kind: reachable ? .good : .bad)])
            storeRows.append([.t("Redis connections"), .n(now.sum(RedisMetrics.connections))])
            let errors = windows(RedisMetrics.operationErrors)
            storeRows.append([.t("operation errors (5 min / 1 h)"), .t("\(Self.count(errors.m5)) / \(Self.count(errors.h1))")])
        }
        for reason in facts.notReadyReasons where reason.hasPrefix("store:") { store.lines.append(reason) }
        store.tables.append(OperatorPage.Table(head: ["", "now"], rows: storeRows, empty: "no data directory: nothing on disk"))
        return OperatorPage.Section(id: "attest", title: "Registrations, challenges, store", blocks: [registrations, limits, store])
    }

    // MARK: Upstreams

    func upstreamsSection() -> OperatorPage.Section {
        let blocks = upstreams.map { u -> OperatorPage.Block in
            let servers = now.select(GatewayMetrics.upstreamServerUp, ["upstream": u])
            let rows = servers.map { s -> [OperatorPage.Cell] in
                let server = s.label("server") ?? "-"
                let m = ["upstream": u, "server": server]
                let requests = windows(GatewayMetrics.upstreamServerRequests, m)
                let key = "upstream.\(u).\(server)"
                return [
                    .t(server), OperatorPage.Cell(text: s.value == 1 ? "up" : "out", kind: s.value == 1 ? .good : .bad, key: key + ".up"),
                    .n(requests.m5, key: key + ".requests.5m"), .n(requests.h1, key: key + ".requests.1h"),
                    .n(windows(GatewayMetrics.upstreamServerEjections, m).h1, key: key + ".ejections.1h"),
                    .n(windows(GatewayMetrics.upstreamServerFailures, m).h1, key: key + ".failures.1h"),
                ]
            }
            let retries = windows(GatewayMetrics.upstreamRetries, ["upstream": u])
            let busy = now.sum(GatewayMetrics.poolConnections, ["upstream": u, "state": "busy"])
            let idle = now.sum(GatewayMetrics.poolConnections, ["upstream": u, "state": "idle"])
            var block = OperatorPage.Block(
                title: u,
                lines: [
                    "retries on another server: \(Self.count(retries.m5)) in 5 min, \(Self.count(retries.h1)) in 1 h",
                    "pool: \(Self.count(busy)) busy, \(Self.count(idle)) idle",
                ],
                tables: [
                    OperatorPage.Table(head: ["server", "state", "req 5 min", "req 1 h", "ejections 1 h", "failures 1 h"], rows: rows)
                ])
            var errors: [(String, Double)] = []
            for s in now.select(GatewayMetrics.upstreamErrorsTotal, ["upstream": u]) {
                let w = windows([s])
                if w.h1 > 0 { errors.append((s.label("reason") ?? "-", w.h1)) }
            }
            block.tables.append(
                OperatorPage.Table(
                    caption: "errors (1 h)", head: ["reason", "1 h"], rows: errors.sorted { $0.1 > $1.1 }.map { [.t($0.0), .n($0.1)] },
                    empty: "no error in the last hour"))
            return block
        }
        return OperatorPage.Section(
            id: "upstreams", title: "Upstreams",
            note: blocks.isEmpty ? "Only the in-process demo upstream is configured." : "Server health is updated once a second.",
            blocks: blocks)
    }

    // MARK: Apple

    func appleSection() -> OperatorPage.Section {
        var blocks: [OperatorPage.Block] = []
        if facts.apple {
            let answered = now.select(RiskMetrics.refreshes)
            let last = history.lastIncrease(answered.map(\.key))
            let pausing = answered.filter {
                ["unauthorized", "rate_limited", "server_error", "unavailable"].contains($0.label("result") ?? "")
            }
            let paused = facts.refreshPausedMillis
            let backingOff = paused > 0
            let lag = now.sum(RiskMetrics.lag)
            blocks.append(
                OperatorPage.Block(
                    title: "Risk metric refresh (App Attest data)",
                    badges: [
                        OperatorPage.Cell(
                            text: backingOff ? "paused \(Self.duration(paused))" : "running", kind: backingOff ? .warn : .good,
                            key: "apple.refresh")
                    ],
                    lines: [
                        "last answer: " + (last.map { Self.ago(facts.nowMillis - $0) } ?? "none in the last hour"),
                        "answers that pause every refresh (unauthorized, rate_limited, server_error, unavailable): "
                            + "\(Self.count(windows(pausing).h1)) in 1 h",
                        "oldest due refresh late by \(Self.duration(Int64(lag * 1000)))",
                    ],
                    tables: [
                        OperatorPage.Table(
                            head: Self.windowHead,
                            rows: answered.compactMap { s in
                                let w = windows([s])
                                return w.total > 0
                                    ? Self.row(s.label("result") ?? "-", w, key: "apple.refresh.\(s.label("result") ?? "-")") : nil
                            }, empty: "no refresh since start")
                    ]))
        }
        let fallbacks = routes.filter { $0.fallbackMaxShare != nil }
        if !fallbacks.isEmpty {
            let calls = now.select(AttestMetrics.deviceCheckRequests)
            var byResult: [String: [MetricsText.Sample]] = [:]
            for s in calls { byResult[s.label("result") ?? "-", default: []].append(s) }
            let rows = byResult.map { ($0.key, windows($0.value)) }.filter { $0.1.total > 0 }.sorted { $0.0 < $1.0 }
                .map { Self.row($0.0, $0.1, key: "devicecheck.\($0.0)") }
            let shares = fallbacks.map { r -> [OperatorPage.Cell] in
                let share = now.sum(AttestMetrics.fallbackShareGauge, ["route": r.name])
                let max = r.fallbackMaxShare ?? 1
                return [.t(r.name), OperatorPage.Cell(text: Self.percent(share), kind: share > max ? .bad : .good), .t(Self.percent(max))]
            }
            let paused = facts.deviceCheckPausedMillis
            blocks.append(
                OperatorPage.Block(
                    title: "DeviceCheck (fallback)",
                    badges: [
                        OperatorPage.Cell(
                            text: paused > 0 ? "paused \(Self.duration(paused))" : "running", kind: paused > 0 ? .warn : .good,
                            key: "devicecheck.state")
                    ],
                    tables: [
                        OperatorPage.Table(caption: "calls by result", head: Self.windowHead, rows: rows, empty: "no call since start"),
                        OperatorPage.Table(caption: "fallback share per route", head: ["route", "share", "max_share"], rows: shares),
                    ]))
        }
        return OperatorPage.Section(id: "apple", title: "Apple services", blocks: blocks)
    }

    // MARK: The gateway

    func gatewaySection() -> OperatorPage.Section {
        var lines = facts.versionLines.isEmpty ? ["build \(facts.version), commit \(facts.commit)"] : facts.versionLines
        lines += [
            "up \(Self.duration(facts.nowMillis - facts.startedMillis))",
            "admin \(facts.admin)" + (facts.tokenRequired ? " (token required)" : ""),
        ]
        if let r = facts.reload {
            lines.append(
                "last reload \(RFC3339.format(millis: r.atMillis)): "
                    + (r.applied ? "applied" : "refused, the running configuration kept: \(r.detail)"))
        } else {
            lines.append("no reload since start")
        }
        let reloads = now.select(GatewayMetrics.configReloads)
        lines.append(
            "reloads since start: \(Self.count(reloads.filter { $0.label("result") == "success" }.reduce(0) { $0 + $1.value })) applied, "
                + "\(Self.count(reloads.filter { $0.label("result") == "failure" }.reduce(0) { $0 + $1.value })) refused")
        if now.sum(GatewayMetrics.configReloadPendingRestart) > 0 {
            lines.append("the file sets workers or store.* otherwise than this process: a restart applies them")
        }
        let listeners = OperatorPage.Table(
            caption: "listeners", head: ["name", "address", "protocols"],
            rows: facts.listeners.map { [.t($0.name), .t($0.address), .t($0.protocols)] })
        return OperatorPage.Section(
            id: "gateway", title: "The gateway",
            blocks: [
                OperatorPage.Block(
                    title: "gatewayd",
                    badges: [OperatorPage.Cell(text: facts.ready ? "ready" : "not ready", kind: facts.ready ? .good : .bad)],
                    lines: lines, tables: [listeners])
            ])
    }

    // MARK: Formatting

    /// Whether a request id can stand in a link's path as it is: the bytes `RequestID` allows, and
    /// not `.` or `..` (which a browser would resolve to another path).
    static func linkable(_ id: String) -> Bool {
        id != "." && id != ".." && !id.isEmpty
            && id.utf8.allSatisfy { c in
                (c >= 0x61 && c <= 0x7a) || (c >= 0x41 && c <= 0x5a) || (c >= 0x30 && c <= 0x39) || "-_.:+=".utf8.contains(c)
            }
    }

    static func count(_ v: Double) -> String { OperatorPage.count(v) }

    static func percent(_ share: Double) -> String {
        let tenths = Int((share * 1000).rounded())
        return "\(tenths / 10).\(tenths % 10) %"
    }

    static func millis(_ seconds: Double) -> String {
        let hundredths = Int((seconds * 100_000).rounded())
        return "\(hundredths / 100).\(hundredths % 100 < 10 ? "0" : "")\(hundredths % 100) ms"
    }

    /// `45 s`, `12 min`, `3 h 5 min`, `2 d 4 h`.
    static func duration(_ millis: Int64) -> String {
        let s = max(0, millis / 1000)
        if s < 60 { return "\(s) s" }
        if s < 3600 { return "\(s / 60) min" }
        if s < 86_400 { return "\(s / 3600) h \(s % 3600 / 60) min" }
        return "\(s / 86_400) d \(s % 86_400 / 3600) h"
    }

    static func ago(_ millis: Int64) -> String { duration(millis) + " ago" }
}
