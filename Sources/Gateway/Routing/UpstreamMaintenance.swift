import Dispatch
import GatewayIO
import GatewayProxy

/// What the upstreams need besides requests, run by the first event loop's router: the active
/// health checks (on that loop, over its pools: `UpstreamHealthChecker`), the re-resolution of
/// server names (scheduled here, looked up off the loops: `UpstreamResolver`), and the per-server
/// `up` gauge (from the servers' shared state, once a second, so that an ejection's end shows
/// without traffic). Every change is logged. Loop-confined.
final class UpstreamMaintenance {
    private let loop: EventLoop
    private let metrics: GatewayMetrics
    private let resolver: UpstreamResolver
    private var checkers: [UpstreamHealthChecker] = []
    private var servers: [UpstreamServer] = []
    /// The gauge's last value per server (set only when it changes).
    private var shownUp: [ObjectIdentifier: Bool] = [:]

    init(loop: EventLoop, metrics: GatewayMetrics, resolve: UpstreamResolver.Resolve? = nil) {
        self.loop = loop
        self.metrics = metrics
        let report: @Sendable (UpstreamServer, UpstreamResolver.Outcome) -> Void = { server, outcome in
            Self.report(outcome, server, metrics: metrics)
        }
        if let resolve {
            resolver = UpstreamResolver(resolve: resolve, report: report)
        } else {
            resolver = UpstreamResolver(report: report)
        }
    }

    /// A new runtime (start or reload): health checks restarted over this loop's pools, the names to
    /// resolve replaced.
    func adopt(_ rt: GatewayRuntime, _ upstreams: [String: LoopUpstream]) {
        stopCheckers()
        var watched: [(server: UpstreamServer, intervalMillis: Int64)] = []
        servers = []
        for (name, u) in upstreams.sorted(by: { $0.key < $1.key }) {
            let plan = u.plan
            servers += plan.servers.map(\.shared)
            if let interval = plan.resolveIntervalMillis {
                for s in plan.servers where UpstreamURLHost.isName(s.shared.host) { watched.append((s.shared, interval)) }
            }
            guard let spec = plan.healthCheck else { continue }
            let checker = UpstreamHealthChecker(spec: spec, pools: u.pools, loop: loop)
            let metrics = self.metrics
            let loop = self.loop
            checker.onResult = { pool, passed, detail in
                guard let server = pool.server else { return }
                let changed = server.recordCheck(passed: passed, now: loop.timers.nowMillis)
                if !passed { metrics.upstreamServerFailed(upstream: name, server: server.label, reason: "health_check") }
                guard changed else { return }
                if passed {
                    GatewayEvents.log(
                        "info", "upstream server passes its health check again", [("upstream", name), ("server", server.label)])
                } else {
                    GatewayEvents.log(
                        "warning", "upstream server failed its health check: out of the balance until it passes",
                        [("upstream", name), ("server", server.label), ("path", spec.path), ("error", detail)])
                }
            }
            checkers.append(checker)
            checker.start()
        }
        let live = Set(servers.map(ObjectIdentifier.init))
        shownUp = shownUp.filter { live.contains($0.key) }
        resolver.watch(watched, now: loop.timers.nowMillis)
    }

    /// Once a second: the gauges, and the lookups that are due.
    func tick() {
        let now = loop.timers.nowMillis
        for s in servers {
            let up = s.isAvailable(now: now)
            let id = ObjectIdentifier(s)
            if shownUp[id] != up {
                shownUp[id] = up
                metrics.upstreamServerUp(upstream: s.upstream, server: s.label, up: up)
            }
        }
        resolver.tick(now: now)
    }

    func stop() { stopCheckers() }

    private func stopCheckers() {
        for c in checkers { c.stop() }
        checkers = []
    }

    /// A pool's report of a failure or recovery (on any loop): counted and logged.
    static func report(_ event: UpstreamServerEvent, _ server: UpstreamServer, metrics: GatewayMetrics) {
        switch event {
        case .failed(let reason, let health):
            metrics.upstreamServerFailed(upstream: server.upstream, server: server.label, reason: reason)
            guard case .ejected(let millis, let ejections)? = health else { return }
            metrics.upstreamServerEjected(upstream: server.upstream, server: server.label)
            GatewayEvents.log(
                "warning", "upstream server ejected: out of the balance for a while",
                [
                    ("upstream", server.upstream), ("server", server.label), ("reason", reason), ("ejections", String(ejections)),
                    ("for_ms", String(millis)),
                ])
        case .recovered:
            GatewayEvents.log("info", "upstream server answers again", [("upstream", server.upstream), ("server", server.label)])
        }
    }

    /// A name lookup's outcome: counted; changes and the first failure of a streak logged.
    static func report(_ outcome: UpstreamResolver.Outcome, _ server: UpstreamServer, metrics: GatewayMetrics) {
        let fields = [("upstream", server.upstream), ("server", server.label)]
        switch outcome {
        case .changed(let from, let to):
            metrics.upstreamDNSResolution(upstream: server.upstream, server: server.label, success: true)
            GatewayEvents.log("info", "upstream server address changed", fields + [("from", from.description), ("to", to.description)])
        case .unchanged:
            metrics.upstreamDNSResolution(upstream: server.upstream, server: server.label, success: true)
        case .recovered(let address):
            metrics.upstreamDNSResolution(upstream: server.upstream, server: server.label, success: true)
            GatewayEvents.log("info", "upstream server name resolves again", fields + [("address", address.description)])
        case .failed(let error, let first):
            metrics.upstreamDNSResolution(upstream: server.upstream, server: server.label, success: false)
            if first {
                GatewayEvents.log(
                    "warning", "upstream server name lookup failed: the last address is kept",
                    fields + [("address", server.address.description), ("error", error)])
            }
        }
    }
}

/// Whether a configured host is a name (re-resolved) rather than an IP address.
enum UpstreamURLHost {
    static func isName(_ host: String) -> Bool {
        (try? SocketAddress(host: host, port: 0)) == nil
    }
}
