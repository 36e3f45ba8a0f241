import CoreMetrics
import GatewayConfig
import GatewayProxy
import Synchronization

/// Every metric the gateway exports, with bounded labels: route and upstream names come from the
/// configuration, status classes and reasons from fixed lists. Key ids, paths and client addresses
/// are never labels. The backend (Prometheus in `gatewayd`, a test kit in tests) is handed in as a
/// factory; nothing here bootstraps a global. Per-request handles live in each loop's `LoopMetrics`.
public final class GatewayMetrics: Sendable {
    let factory: any MetricsFactory
    private let pools = Mutex<[String: [Int: (open: Int, idle: Int)]]>([:])
    private let poolGauges = Mutex<[String: (busy: Meter, idle: Meter)]>([:])
    private let activeConnections: Meter
    private let refusedConnections: Counter
    private let reloadsOK: Counter
    private let reloadsFailed: Counter
    private let reloadPendingRestart: Meter
    private let h2Counters = Mutex<[String: Counter]>([:])

    public static let requestsTotal = "attest_gateway_requests_total"
    public static let requestDuration = "attest_gateway_request_duration_seconds"
    public static let upstreamDuration = "attest_gateway_upstream_duration_seconds"
    public static let upstreamErrorsTotal = "attest_gateway_upstream_errors_total"
    public static let activeConnectionsName = "attest_gateway_active_connections"
    public static let refusedConnectionsName = "attest_gateway_connections_refused_total"
    public static let poolConnections = "attest_gateway_upstream_pool_connections"
    public static let configReloads = "attest_gateway_config_reloads_total"
    public static let configReloadPendingRestart = "attest_gateway_config_reload_pending_restart"
    public static let h2StreamsReset = "attest_gateway_h2_streams_reset_total"
    public static let h2Goaways = "attest_gateway_h2_goaway_total"
    public static let tlsHandshakes = "attest_gateway_tls_handshakes_total"
    public static let tlsHandshakeFailures = "attest_gateway_tls_handshake_failures_total"
    public static let upstreamTLSFailures = "attest_gateway_upstream_tls_failures_total"
    public static let proxyProtocolFailures = "attest_gateway_proxy_protocol_failures_total"
    public static let upstreamServerUp = "attest_gateway_upstream_server_up"
    public static let upstreamServerEjections = "attest_gateway_upstream_server_ejections_total"
    public static let upstreamServerRequests = "attest_gateway_upstream_server_requests_total"
    public static let upstreamServerFailures = "attest_gateway_upstream_server_failures_total"
    public static let upstreamRetries = "attest_gateway_upstream_retries_total"
    public static let upstreamDNSResolutions = "attest_gateway_upstream_dns_resolutions_total"
    /// Per-server counters and gauges by label set: bounded by the configured servers. One lock per
    /// event (a failure, a lookup) or per loop and second (request counts), never per request.
    private let serverCounters = Mutex<[String: Counter]>([:])
    private let serverGauges = Mutex<[String: Meter]>([:])
    /// TLS counters by label set (`listener|version|resumed`, `listener|reason`): bounded by the
    /// listeners, two versions and the fixed failure reasons. One lock per handshake, not per request.
    private let tlsCounters = Mutex<[String: Counter]>([:])

    public init(factory: any MetricsFactory) {
        self.factory = factory
        activeConnections = Meter(label: Self.activeConnectionsName, dimensions: [], factory: factory)
        refusedConnections = Counter(label: Self.refusedConnectionsName, dimensions: [], factory: factory)
        reloadsOK = Counter(label: Self.configReloads, dimensions: [("result", "success")], factory: factory)
        reloadsFailed = Counter(label: Self.configReloads, dimensions: [("result", "failure")], factory: factory)
        reloadPendingRestart = Meter(label: Self.configReloadPendingRestart, dimensions: [], factory: factory)
    }

    func connectionOpened() { activeConnections.increment() }
    func connectionClosed() { activeConnections.decrement() }
    /// Connections closed at accept: over `limits.max_connections`, or out of descriptors.
    func connectionRefused() { refusedConnections.increment() }
    func reloaded(success: Bool) { (success ? reloadsOK : reloadsFailed).increment() }
    /// Whether the file (as last reloaded) sets a key only a restart applies (`workers`, `store.*`)
    /// to another value than the process runs with.
    func pendingRestart(_ pending: Bool) { reloadPendingRestart.set(pending ? 1 : 0) }

    /// An HTTP/2 stream reset: `client_<code>` when the client sent RST_STREAM, else why we reset it
    /// (`upstream_closed`, `upstream_bad_response`, `upstream_timeout`, …: the exchange error codes).
    func http2StreamReset(reason: String) { h2Counter(Self.h2StreamsReset, reason).increment() }
    /// An HTTP/2 GOAWAY: `drain`, `reload`, `idle_timeout`, `header_timeout`, `client_goaway` (received), or the error code of a
    /// connection error (`protocol_error`, `enhance_your_calm`, …).
    func http2Goaway(reason: String) { h2Counter(Self.h2Goaways, reason).increment() }

    private func h2Counter(_ label: String, _ reason: String) -> Counter {
        h2Counters.withLock { cache in
            let key = label + "|" + reason
            if let c = cache[key] { return c }
            let c = Counter(label: label, dimensions: [("reason", reason)], factory: factory)
            cache[key] = c
            return c
        }
    }

    /// A completed TLS handshake on a listener.
    func tlsHandshake(listener: String, version: String, resumed: Bool) {
        tlsCounter(
            "\(listener)|\(version)|\(resumed)", Self.tlsHandshakes,
            [("listener", listener), ("version", version), ("resumed", resumed ? "true" : "false")]
        ).increment()
    }

    /// A failed TLS handshake on a listener; `reason` is a `TLSFailure.Kind` raw value or `timeout`.
    func tlsHandshakeFailed(listener: String, reason: String) {
        tlsCounter("\(listener)|\(reason)", Self.tlsHandshakeFailures, [("listener", listener), ("reason", reason)]).increment()
    }

    /// A connection on a `proxy_protocol` listener closed without a valid PROXY header: `reason` is
    /// `untrusted_peer`, `not_proxy_protocol`, `malformed`, `too_large`, `timeout` or `closed`.
    func proxyProtocolFailed(listener: String, reason: String) {
        tlsCounter("pp|\(listener)|\(reason)", Self.proxyProtocolFailures, [("listener", listener), ("reason", reason)]).increment()
    }

    /// A failed TLS handshake with an https upstream (the request gets 502 `upstream_tls`).
    func upstreamTLSFailed(upstream: String, reason: String) {
        tlsCounter("up|\(upstream)|\(reason)", Self.upstreamTLSFailures, [("upstream", upstream), ("reason", reason)]).increment()
    }

    private func tlsCounter(_ key: String, _ label: String, _ dimensions: [(String, String)]) -> Counter {
        tlsCounters.withLock { cache in
            if let c = cache[key] { return c }
            let c = Counter(label: label, dimensions: dimensions, factory: factory)
            cache[key] = c
            return c
        }
    }

    /// A request to an upstream server failed (`reason`: `connect_failed`, `connect_timeout`, `tls`,
    /// `closed`, `health_check`).
    func upstreamServerFailed(upstream: String, server: String, reason: String) {
        serverCounter(Self.upstreamServerFailures, [("upstream", upstream), ("server", server), ("reason", reason)]).increment()
    }

    func upstreamServerEjected(upstream: String, server: String) {
        serverCounter(Self.upstreamServerEjections, [("upstream", upstream), ("server", server)]).increment()
    }

    func upstreamServerRequests(upstream: String, server: String, count: Int) {
        serverCounter(Self.upstreamServerRequests, [("upstream", upstream), ("server", server)]).increment(by: count)
    }

    func upstreamRetries(upstream: String, count: Int) {
        serverCounter(Self.upstreamRetries, [("upstream", upstream)]).increment(by: count)
    }

    func upstreamDNSResolution(upstream: String, server: String, success: Bool) {
        serverCounter(
            Self.upstreamDNSResolutions, [("upstream", upstream), ("server", server), ("result", success ? "success" : "failure")]
        ).increment()
    }

    /// 1 while the server is in the balance, 0 while ejected or failing its health check.
    func upstreamServerUp(upstream: String, server: String, up: Bool) {
        let key = "\(upstream)|\(server)"
        let gauge = serverGauges.withLock { cache -> Meter in
            if let g = cache[key] { return g }
            let g = Meter(label: Self.upstreamServerUp, dimensions: [("upstream", upstream), ("server", server)], factory: factory)
            cache[key] = g
            return g
        }
        gauge.set(up ? 1 : 0)
    }

    private func serverCounter(_ label: String, _ dimensions: [(String, String)]) -> Counter {
        let key = label + "|" + dimensions.map(\.1).joined(separator: "|")
        return serverCounters.withLock { cache in
            if let c = cache[key] { return c }
            let c = Counter(label: label, dimensions: dimensions, factory: factory)
            cache[key] = c
            return c
        }
    }

    /// Why a request to an upstream failed (`upstream_errors_total{reason}`): the exchange error codes.
    static let upstreamErrorReasons = [
        "upstream_unavailable", "upstream_connect_timeout", "upstream_busy", "upstream_closed", "upstream_timeout",
        "upstream_bad_response",
    ]

    /// The series of the configured routes and upstreams exist from the start, at 0, so that a rate
    /// or `increase()` over them sees the first event (and alerts on them are not empty): requests
    /// by route (and the attest endpoints), final status class and each protocol a listener
    /// serves, and the latency histograms; per upstream (not `demo`) its errors by reason (with
    /// `upstream_tls` for https) and its pool gauges. Called again on reload (new names); series
    /// of removed names stay.
    func declare(_ rt: GatewayRuntime) {
        var protocols: [String] = []
        if rt.config.listeners.contains(where: { $0.protocols.contains(.http1) }) { protocols.append("http1") }
        if rt.config.listeners.contains(where: { $0.servesHTTP2 }) { protocols.append("h2") }
        let routes = rt.routes.map(\.name) + ["attest_challenge", "attest_register"]
        for route in routes {
            _ = factory.makeRecorder(label: Self.requestDuration, dimensions: [("route", route)], aggregate: true)
            for protocolName in protocols {
                for statusClass in ["2xx", "3xx", "4xx", "5xx"] {
                    _ = Counter(
                        label: Self.requestsTotal,
                        dimensions: [("route", route), ("status_class", statusClass), ("protocol", protocolName)], factory: factory)
                }
            }
        }
        for u in rt.config.upstreams {
            guard case .url(let url) = u.target else { continue }
            let name = u.name
            _ = factory.makeRecorder(label: Self.upstreamDuration, dimensions: [("upstream", name)], aggregate: true)
            for reason in Self.upstreamErrorReasons + (url.scheme == .https ? ["upstream_tls"] : []) {
                _ = Counter(label: Self.upstreamErrorsTotal, dimensions: [("upstream", name), ("reason", reason)], factory: factory)
            }
            let gauges = poolGauges(name)
            if pools.withLock({ $0[name] == nil }) {
                gauges.busy.set(0)
                gauges.idle.set(0)
            }
            declareServers(u, url: url)
        }
        // A server no longer configured has no `up` (a stale 1 would hide an upstream all down).
        var configured = Set<String>()
        for u in rt.config.upstreams { for s in u.servers { configured.insert("\(u.name)|\(s.label)") } }
        let stale = serverGauges.withLock { cache -> [Meter] in
            let gone = cache.filter { !configured.contains($0.key) }
            for key in gone.keys { cache[key] = nil }
            return Array(gone.values)
        }
        for g in stale { g.destroy() }
    }

    /// Per server of `u`: its gauge (1 for a server not yet shown), requests, ejections and failures
    /// by every reason that applies, and lookups by result for a name re-resolved; per upstream, retries.
    private func declareServers(_ u: UpstreamConfig, url: UpstreamURL) {
        let name = u.name
        var reasons = ["connect_failed", "connect_timeout", "closed"]
        if url.scheme == .https { reasons.append("tls") }
        if u.healthCheck != nil { reasons.append("health_check") }
        for s in u.servers {
            let server = s.label
            if serverGauges.withLock({ $0["\(name)|\(server)"] == nil }) { upstreamServerUp(upstream: name, server: server, up: true) }
            _ = serverCounter(Self.upstreamServerRequests, [("upstream", name), ("server", server)])
            _ = serverCounter(Self.upstreamServerEjections, [("upstream", name), ("server", server)])
            for reason in reasons {
                _ = serverCounter(Self.upstreamServerFailures, [("upstream", name), ("server", server), ("reason", reason)])
            }
            if u.resolveInterval != nil, s.url.hostIsName {
                for result in ["success", "failure"] {
                    _ = serverCounter(Self.upstreamDNSResolutions, [("upstream", name), ("server", server), ("result", result)])
                }
            }
        }
        _ = serverCounter(Self.upstreamRetries, [("upstream", name)])
    }

    private func poolGauges(_ upstream: String) -> (busy: Meter, idle: Meter) {
        poolGauges.withLock { cache in
            if let g = cache[upstream] { return g }
            let g = (
                busy: Meter(label: Self.poolConnections, dimensions: [("upstream", upstream), ("state", "busy")], factory: factory),
                idle: Meter(label: Self.poolConnections, dimensions: [("upstream", upstream), ("state", "idle")], factory: factory)
            )
            cache[upstream] = g
            return g
        }
    }

    /// One loop's view of one upstream pool (reported once a second per loop); the gauges show the
    /// sum over loops.
    func pool(upstream: String, loop: Int, open: Int, idle: Int) {
        let (openSum, idleSum) = pools.withLock { table -> (Int, Int) in
            table[upstream, default: [:]][loop] = (open, idle)
            let all = table[upstream]!.values
            return (all.reduce(0) { $0 + $1.open }, all.reduce(0) { $0 + $1.idle })
        }
        let gauges = poolGauges(upstream)
        gauges.busy.set(openSum - idleSum)
        gauges.idle.set(idleSum)
    }
}

/// The per-request metric handles of one event loop, created on first use per label set and cached
/// without locks (loop-confined). The factory returns the same series for the same labels, so loops
/// share series while never sharing a lock on the request path.
final class LoopMetrics {
    let shared: GatewayMetrics
    private let loop: Int
    /// Per route: its duration timer and request counters by protocol and status class, found with
    /// one dictionary lookup per request (no key string built per request).
    private final class RouteHandles {
        let duration: any RecorderHandler
        var counters: [(protocolName: String, byClass: [Counter?])] = []
        init(duration: any RecorderHandler) { self.duration = duration }
    }

    private var routes: [String: RouteHandles] = [:]
    private var lastRoute: (name: String, handles: RouteHandles)?
    private var lastUpstream: (name: String, timer: any RecorderHandler)?

    private func routeHandles(_ route: String, _ factory: any MetricsFactory) -> RouteHandles {
        if let h = routes[route] { return h }
        let h = RouteHandles(
            duration: Self.histogram(label: GatewayMetrics.requestDuration, dimensions: [("route", route)], factory))
        routes[route] = h
        return h
    }
    private var upstreamDurations: [String: any RecorderHandler] = [:]

    private func upstreamTimer(_ upstream: String, _ factory: any MetricsFactory) -> any RecorderHandler {
        if let t = upstreamDurations[upstream] { return t }
        let t = Self.histogram(label: GatewayMetrics.upstreamDuration, dimensions: [("upstream", upstream)], factory)
        upstreamDurations[upstream] = t
        return t
    }

    /// A latency histogram in seconds: the factory's handler for an aggregating `Recorder`, called
    /// directly (the `Recorder` wrapper converts each value through a generic `BinaryFloatingPoint`
    /// initializer, several hundred instructions per request).
    private static func histogram(label: String, dimensions: [(String, String)], _ factory: any MetricsFactory)
        -> any RecorderHandler
    {
        factory.makeRecorder(label: label, dimensions: dimensions, aggregate: true)
    }
    private var upstreamErrors: [String: Counter] = [:]
    private var lastPoolState: [String: (open: Int, idle: Int)] = [:]

    init(shared: GatewayMetrics, loop: Int) {
        self.shared = shared
        self.loop = loop
    }

    /// `none` for 0 (no response), `1xx` … `9xx` otherwise; the index of that label.
    private static let statusClasses = ["none", "1xx", "2xx", "3xx", "4xx", "5xx", "6xx", "7xx", "8xx", "9xx"]

    /// One finished request: counted by route, status class and protocol; timed by route; upstream
    /// latency and upstream failures by upstream.
    func record(_ r: ExchangeRecord) {
        let factory = shared.factory
        // Consecutive requests are mostly of one route: its handles are kept at hand (comparing the
        // same string storage is a word compare; a hash lookup is not).
        let handles: RouteHandles
        if let last = lastRoute, last.name == r.route {
            handles = last.handles
        } else {
            handles = routeHandles(r.route, factory)
            lastRoute = (r.route, handles)
        }
        let classIndex = r.status <= 0 || r.status > 999 ? 0 : r.status / 100
        var p = 0
        while p < handles.counters.count && handles.counters[p].protocolName != r.protocolName { p += 1 }
        if p == handles.counters.count {
            handles.counters.append((r.protocolName, Array(repeating: nil, count: Self.statusClasses.count)))
        }
        let counter =
            handles.counters[p].byClass[classIndex]
            ?? {
                let c = Counter(
                    label: GatewayMetrics.requestsTotal,
                    dimensions: [("route", r.route), ("status_class", Self.statusClasses[classIndex]), ("protocol", r.protocolName)],
                    factory: factory)
                handles.counters[p].byClass[classIndex] = c
                return c
            }()
        counter.increment()
        handles.duration.record(r.durationSeconds)
        guard let upstream = r.upstream else { return }
        if let seconds = r.upstreamSeconds {
            let t: any RecorderHandler
            if let last = lastUpstream, last.name == upstream {
                t = last.timer
            } else {
                t = upstreamTimer(upstream, factory)
                lastUpstream = (upstream, t)
            }
            t.record(seconds)
        }
        if let error = r.error, error.hasPrefix("upstream_") {
            let k = "\(upstream)|\(error)"
            let c =
                upstreamErrors[k]
                ?? {
                    let c = Counter(
                        label: GatewayMetrics.upstreamErrorsTotal, dimensions: [("upstream", upstream), ("reason", error)], factory: factory
                    )
                    upstreamErrors[k] = c
                    return c
                }()
            c.increment()
        }
    }

    /// Publishes this loop's view of an upstream: its pools' state (summed over its servers) when it
    /// changed since the last report, and the requests sent to each server and retried since then.
    func upstream(_ name: String, _ u: LoopUpstream) {
        var now = (open: 0, idle: 0)
        for (pool, server) in zip(u.pools, u.plan.servers) {
            now.open += pool.openCount
            now.idle += pool.idleCount
            let sent = pool.takeRequestsSent()
            if sent > 0 { shared.upstreamServerRequests(upstream: name, server: server.shared.label, count: sent) }
        }
        if let retries = u.balancer?.takeRetries(), retries > 0 { shared.upstreamRetries(upstream: name, count: retries) }
        if let last = lastPoolState[name], last == now { return }
        lastPoolState[name] = now
        shared.pool(upstream: name, loop: loop, open: now.open, idle: now.idle)
    }
}
