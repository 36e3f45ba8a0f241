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
    /// Where each route of `runtime` goes, resolved once per adopted runtime (not per request).
    private var routeTargets: [RouteTarget] = []
    /// The decision of each route without assertion checks that forwards to a pool, made once per
    /// adopted runtime (nil for the others, decided per request).
    private var plainDecisions: [RouteDecision?] = []
    /// This loop's access log (lines buffered here, written whole).
    let accessLog: AccessLogWriter
    private let metrics: LoopMetrics
    let attest: AttestContext
    let attestMetrics: AttestLoopMetrics
    let gate: AssertionGate
    let executor: EventLoopExecutor

    init(loop: EventLoop, runtime: GatewayRuntime, events: GatewayEvents, metrics: GatewayMetrics, attest: AttestContext) {
        self.loop = loop
        self.runtime = runtime
        accessLog = AccessLogWriter(loop: loop, target: events.accessLog)
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
        routeTargets = runtime.routes.map { resolveTarget($0, runtime) }
        plainDecisions = runtime.routes.map { r -> RouteDecision? in
            guard r.assertion.mode == .off, case .pool(let pool) = routeTargets[r.index] else { return nil }
            return .forward(Forward(routeName: r.name, pool: pool, maxBody: r.maxBody, editHeaders: runtime.stripVerifiedHeader))
        }
    }

    private func resolveTarget(_ r: GatewayRuntime.CompiledRoute, _ rt: GatewayRuntime) -> RouteTarget {
        if rt.demoUpstreams.contains(r.upstream) { return .demo }
        return pools[r.upstream].map(RouteTarget.pool) ?? .missing
    }

    /// A route's target; a request that outlived a reload (its verification finished after it) is
    /// resolved against the current pools by name.
    private func target(_ r: GatewayRuntime.CompiledRoute, _ rt: GatewayRuntime) -> RouteTarget {
        rt === runtime ? routeTargets[r.index] : resolveTarget(r, rt)
    }

    func closeIdle() { for p in pools.values { p.closeIdle() } }

    /// HTTP/1.1's entry: a plain route is decided from method, path and (when some route matches on
    /// hosts) Host, without the head's strings; `head` is built only for the routes that need it.
    func route(method: String, path: String, host: () -> String?, peer: SocketAddress?, requestID: RequestID,
               head: () -> HTTPRequestHead) -> RouteDecision
    {
        let rt = runtime
        // Lengths first: a string comparison that finds no shortcut costs ~60 instructions.
        let n = path.utf8.count
        if n == rt.challengePath.utf8.count && path == rt.challengePath { return challengeEndpoint(head(), peer: peer, runtime: rt) }
        if n == rt.registerPath.utf8.count && path == rt.registerPath { return registerEndpoint(head(), peer: peer, runtime: rt) }
        guard let index = rt.routeIndex(method: method, path: path, host: rt.matchesHosts ? host() : nil) else {
            return .respond(routeName: "-", ProxyError.noRoute.response())
        }
        // A POST to a plain route on a path protected for other methods: its body is read first.
        if rt.guardsBodyOverride, method.utf8.count == 4, method == "POST", rt.routes[index].assertion.mode == .off,
            rt.overrideGuarded(path: path, host: host())
        {
            return bodyOverrideGuard(rt.routes[index], runtime: rt)
        }
        if let decision = plainDecisions[index] { return decision }  // `rt` is `runtime`: read above, on this loop
        let r = rt.routes[index]
        if r.assertion.mode != .off { return protectedDecision(head(), peer: peer, requestID: requestID, route: r, runtime: rt) }
        return forward(r, runtime: rt, editHeaders: rt.stripVerifiedHeader, responseHeaders: HTTPFields())
    }

    /// The body of such a POST is buffered (bounded by the route's `max_body`) and refused with
    /// 400 `method_override` when it carries a `_method` parameter in any spelling
    /// (`RequestSyntax.bodyHasMethodOverride`); otherwise it is forwarded as read.
    private func bodyOverrideGuard(_ r: GatewayRuntime.CompiledRoute, runtime rt: GatewayRuntime) -> RouteDecision {
        .buffer(maxBody: r.maxBody, routeName: r.name) { [unowned self] request, done in
            if RequestSyntax.bodyHasMethodOverride(request.body) {
                done(.respond(ProxyError.methodOverride.response()))
            } else {
                done(self.forward(request, r, runtime: rt, editHeaders: rt.stripVerifiedHeader, responseHeaders: HTTPFields()))
            }
        }
    }

    /// HTTP/2's entry (the head is already made of strings): the same decision.
    func route(_ head: HTTPRequestHead, path: String, peer: SocketAddress?, requestID: RequestID) -> RouteDecision {
        route(method: head.method, path: path, host: { head.headers["Host"] }, peer: peer, requestID: requestID, head: { head })
    }

    /// Where a request that may go on goes, decided before its body is read: the in-process demo
    /// application (which needs the body), or an upstream pool. `editHeaders` always removes a
    /// client-sent verified-key header.
    func forward(
        _ r: GatewayRuntime.CompiledRoute, runtime rt: GatewayRuntime, editHeaders: HeaderEdit,
        responseHeaders: HTTPFields
    ) -> RouteDecision {
        switch target(r, rt) {
        case .demo:
            return .buffer(maxBody: r.maxBody, routeName: r.name) { request, done in
                done(.respond(DemoUpstream.answer(request, route: r.name, upstream: r.upstream, editHeaders: editHeaders,
                                                  responseHeaders: responseHeaders)))
            }
        case .pool(let pool):
            return .forward(Forward(routeName: r.name, pool: pool, maxBody: r.maxBody, editHeaders: editHeaders, responseHeaders: responseHeaders))
        case .missing:
            return .respond(routeName: r.name, ProxyError.upstreamUnavailable.response())
        }
    }

    /// The same, for a request whose body was already buffered for a local decision; `verdict`: a
    /// protected route's, for the access line.
    func forward(
        _ request: BufferedRequest, _ r: GatewayRuntime.CompiledRoute, runtime rt: GatewayRuntime,
        editHeaders: HeaderEdit, responseHeaders: HTTPFields, verdict: AccessVerdict? = nil
    ) -> BufferedOutcome {
        var answer: LocalResponse
        switch target(r, rt) {
        case .demo:
            answer = DemoUpstream.answer(request, route: r.name, upstream: r.upstream, editHeaders: editHeaders,
                                         responseHeaders: responseHeaders)
        case .pool(let pool):
            return .forward(Forward(routeName: r.name, pool: pool, maxBody: r.maxBody, editHeaders: editHeaders,
                                    responseHeaders: responseHeaders, verdict: verdict))
        case .missing:
            answer = ProxyError.upstreamUnavailable.response(requestId: request.requestID.text)
        }
        answer.verdict = verdict
        return .respond(answer)
    }

    func exchangeDidFinish(_ record: ExchangeRecord) {
        accessLog.write(record)
        metrics.record(record)
    }
}

/// Where a route's requests go, as resolved for one runtime.
enum RouteTarget {
    case demo
    case pool(UpstreamPool)
    case missing
}

/// The in-process `demo` upstream: answers what it would have been sent (the head an upstream gets,
/// `BufferedRequest.upstreamFields`), as JSON, so that a newcomer can see routing and forwarding at
/// work without installing anything.
enum DemoUpstream {
    static func answer(
        _ request: BufferedRequest, route: String, upstream: String, editHeaders: HeaderEdit,
        responseHeaders: HTTPFields
    ) -> LocalResponse {
        var headers = JSONObject()
        for f in request.upstreamFields(edit: editHeaders, upstream: upstream) { headers.set(f.name, f.value) }
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
