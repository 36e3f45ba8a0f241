import GatewayHTTP
import GatewayIO
import GatewayPolicy
import GatewayProxy
import GatewayStore
import GatewayWire

/// The router of one event loop: matches routes against the current runtime and owns this loop's
/// upstream pools and assertion gate. Loop-confined; a reload swaps `runtime` on the loop.
final class GatewayRouter: RequestRouter {
    let loop: EventLoop
    private(set) var runtime: GatewayRuntime
    private var pools: [String: UpstreamPool] = [:]
    private let events: GatewayEvents
    private let metrics: LoopMetrics
    let attest: AttestContext
    let attestMetrics: AttestLoopMetrics
    let gate: AssertionGate
    let executor: EventLoopExecutor

    init(loop: EventLoop, runtime: GatewayRuntime, events: GatewayEvents, metrics: GatewayMetrics, attest: AttestContext) {
        self.loop = loop
        self.runtime = runtime
        self.events = events
        self.metrics = LoopMetrics(shared: metrics, loop: loop.index)
        self.attest = attest
        attestMetrics = AttestLoopMetrics(shared: attest.metrics)
        executor = EventLoopExecutor(loop: loop)
        gate = AssertionGate(store: attest.store, executor: executor)
        rebuildPools(previous: [:])
        reportPoolsEverySecond()
    }

    /// Pool gauges move with every request; once a second per loop is enough for a scrape and keeps
    /// them off the request path.
    private func reportPoolsEverySecond() {
        loop.timers.schedule(afterMillis: 1000) { [weak self] in
            guard let self else { return }
            for (name, p) in self.pools { self.metrics.pool(name, p) }
            self.reportPoolsEverySecond()
        }
    }

    /// Adopts a new runtime: pools whose target is unchanged are kept, the rest replaced (their idle
    /// connections closed; busy ones finish their exchange and are closed on release).
    func adopt(_ new: GatewayRuntime) {
        runtime = new
        let old = pools
        pools = [:]
        rebuildPools(previous: old)
    }

    private func rebuildPools(previous: [String: UpstreamPool]) {
        for (name, target) in runtime.targets {
            if let p = previous[name], p.target.address == target.address, p.target.maxConnections == target.maxConnections,
                p.target.connectTimeoutMillis == target.connectTimeoutMillis,
                p.target.responseTimeoutMillis == target.responseTimeoutMillis, p.target.tls === target.tls
            {
                pools[name] = p
            } else {
                let pool = UpstreamPool(target: target, loop: loop)
                let shared = metrics.shared
                pool.onTLSFailure = { f in
                    shared.upstreamTLSFailed(upstream: name, reason: f.kind.rawValue)
                    GatewayEvents.log("warning", "upstream TLS handshake failed", [("upstream", name), ("error", f.description)])
                }
                pools[name] = pool
            }
        }
        for (name, p) in previous where pools[name] !== p { p.retire() }
    }

    func closeIdle() { for p in pools.values { p.closeIdle() } }

    func route(_ head: HTTPRequestHead, path: String, peer: SocketAddress?) -> RouteDecision {
        let rt = runtime
        if path == rt.config.attest.challengePath { return challengeEndpoint(head, runtime: rt) }
        if path == rt.config.attest.registerPath { return registerEndpoint(head, runtime: rt) }
        guard let r = rt.route(method: head.method, path: path, host: head.headers["Host"]) else {
            return .respond(routeName: "-", LocalResponse.error(404, "no_route"))
        }
        if r.assertion.mode != .off {
            return .buffer(maxBody: r.maxBody, routeName: r.name) { [unowned self] request, done in
                self.protected(request, route: r, runtime: rt, done: done)
            }
        }
        return forward(r, runtime: rt, editHeaders: rt.stripVerifiedHeader, responseHeaders: HTTPFields())
    }

    /// Where a request that may go on goes: the in-process demo application, or an upstream pool.
    /// `editHeaders` always removes a client-sent verified-key header.
    func forward(
        _ r: GatewayRuntime.CompiledRoute, runtime rt: GatewayRuntime, editHeaders: @escaping (inout HTTPFields) -> Void,
        responseHeaders: HTTPFields
    ) -> RouteDecision {
        if rt.demoUpstreams.contains(r.upstream) {
            return .buffer(maxBody: r.maxBody, routeName: r.name) { request, done in
                done(.respond(DemoUpstream.answer(request, route: r.name, upstream: r.upstream, editHeaders: editHeaders,
                                                  responseHeaders: responseHeaders)))
            }
        }
        guard let pool = pools[r.upstream] else {
            return .respond(routeName: r.name, LocalResponse.error(502, "upstream_unavailable"))
        }
        return .forward(Forward(routeName: r.name, pool: pool, maxBody: r.maxBody, editHeaders: editHeaders, responseHeaders: responseHeaders))
    }

    func exchangeDidFinish(_ record: ExchangeRecord) {
        events.exchangeDidFinish(record)
        metrics.record(record)
    }
}

/// The in-process `demo` upstream: answers what it would have been sent, as JSON, so that a newcomer
/// can see routing and forwarding at work without installing anything.
enum DemoUpstream {
    static func answer(
        _ request: BufferedRequest, route: String, upstream: String, editHeaders: (inout HTTPFields) -> Void,
        responseHeaders: HTTPFields
    ) -> LocalResponse {
        var fields = request.head.headers
        ForwardedHeaders.rewriteRequest(&fields, peer: request.peer, proto: request.scheme, host: request.head.headers["Host"])
        editHeaders(&fields)
        var headers = JSONObject()
        for f in fields { headers.set(f.name, f.value) }
        var out = JSONObject()
        out.set("upstream", upstream)
        out.set("route", route)
        out.set("method", request.head.method)
        out.set("target", request.head.target)
        out.set("bodyBytes", request.body.count)
        out.set("headers", .object(headers))
        return LocalResponse.json(200, out.description, headers: responseHeaders)
    }
}
