import GatewayConfig
import GatewayHTTP
import GatewayIO
import GatewayPolicy
import GatewayProxy
import GatewayStore
import GatewayWire

/// The router of one event loop: matches routes against the current runtime and owns this loop's
/// upstream pools (one per server) and balancers, and its assertion gate. Loop-confined; a reload
/// swaps `runtime` on the loop. The first loop's router also runs the upstreams' active health
/// checks and schedules the re-resolution of server names (`UpstreamMaintenance`).
final class GatewayRouter: RequestRouter {
    let loop: EventLoop
    private(set) var runtime: GatewayRuntime
    private var upstreams: [String: LoopUpstream] = [:]
    /// The first loop only: health checks, DNS, the per-server gauges.
    private var maintenance: UpstreamMaintenance?
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
    /// The next challenge's expiry as text, its date made once per second (`RFC3339.Cached`).
    var expiryText = RFC3339.Cached()

    init(loop: EventLoop, runtime: GatewayRuntime, events: GatewayEvents, metrics: GatewayMetrics, attest: AttestContext) {
        self.loop = loop
        self.runtime = runtime
        accessLog = AccessLogWriter(loop: loop, target: events.accessLog)
        self.metrics = LoopMetrics(shared: metrics, loop: loop.index)
        self.attest = attest
        attestMetrics = AttestLoopMetrics(shared: attest.metrics)
        executor = EventLoopExecutor(loop: loop)
        gate = AssertionGate(store: attest.store, executor: executor)
        if loop.index == 0 { maintenance = UpstreamMaintenance(loop: loop, metrics: metrics) }
        rebuildPools(previous: [:])
        maintainEverySecond()
    }

    /// Once a second per loop, off the request path: pool gauges and per-server request counts
    /// (they move with every request; a scrape needs no more), servers' new addresses taken; on
    /// the first loop also the servers' gauges and due name lookups.
    private func maintainEverySecond() {
        loop.timers.schedule(afterMillis: 1000) { [weak self] in
            guard let self else { return }
            for (name, u) in self.upstreams {
                u.syncAddresses()
                self.metrics.upstream(name, u)
            }
            self.maintenance?.tick()
            self.maintainEverySecond()
        }
    }

    /// Adopts a new runtime: pools whose server and target are unchanged are kept, the rest replaced
    /// (their idle connections closed; busy ones finish their exchange and are closed on release).
    func adopt(_ new: GatewayRuntime) {
        runtime = new
        let old = upstreams
        upstreams = [:]
        rebuildPools(previous: old)
    }

    private func rebuildPools(previous: [String: LoopUpstream]) {
        var kept = Set<ObjectIdentifier>()
        for (name, plan) in runtime.upstreamPlans {
            let pools = plan.servers.map { s -> UpstreamPool in
                if let p = previous[name]?.pools.first(where: { $0.server === s.shared }), Self.sameTarget(p.target, s.target) {
                    kept.insert(ObjectIdentifier(p))
                    return p
                }
                return makePool(s, upstream: name)
            }
            upstreams[name] = LoopUpstream(plan: plan, pools: pools)
        }
        for (_, u) in previous {
            for p in u.pools where !kept.contains(ObjectIdentifier(p)) { p.retire() }
        }
        maintenance?.adopt(runtime, upstreams)
        routeTargets = runtime.routes.map { resolveTarget($0, runtime) }
        plainDecisions = runtime.routes.map { r -> RouteDecision? in
            guard r.assertion.mode == .off, case .upstream(let u) = routeTargets[r.index] else { return nil }
            return .forward(u.forward(r, editHeaders: runtime.stripVerifiedHeader, responseHeaders: HTTPFields(), responseHook: nil))
        }
    }

    private static func sameTarget(_ a: GatewayProxy.UpstreamTarget, _ b: GatewayProxy.UpstreamTarget) -> Bool {
        a.maxConnections == b.maxConnections && a.connectTimeoutMillis == b.connectTimeoutMillis
            && a.responseTimeoutMillis == b.responseTimeoutMillis && a.idleTimeoutMillis == b.idleTimeoutMillis
            && a.tls === b.tls && a.tlsServerName == b.tlsServerName
    }

    private func makePool(_ s: GatewayRuntime.UpstreamPlan.Server, upstream name: String) -> UpstreamPool {
        let pool = UpstreamPool(target: s.target, loop: loop, server: s.shared)
        let shared = metrics.shared
        pool.onTLSFailure = { f in
            shared.upstreamTLSFailed(upstream: name, reason: f.kind.rawValue)
            GatewayEvents.log("warning", "upstream TLS handshake failed", [("upstream", name), ("error", f.description)])
        }
        let server = s.shared
        pool.onServerEvent = { event in UpstreamMaintenance.report(event, server, metrics: shared) }
        return pool
    }

    private func resolveTarget(_ r: GatewayRuntime.CompiledRoute, _ rt: GatewayRuntime) -> RouteTarget {
        if rt.demoUpstreams.contains(r.upstream) { return .demo }
        return upstreams[r.upstream].map(RouteTarget.upstream) ?? .missing
    }

    /// A route's target; a request that outlived a reload (its verification finished after it) is
    /// resolved against the current pools by name.
    private func target(_ r: GatewayRuntime.CompiledRoute, _ rt: GatewayRuntime) -> RouteTarget {
        rt === runtime ? routeTargets[r.index] : resolveTarget(r, rt)
    }

    func closeIdle() {
        maintenance?.stop()
        for u in upstreams.values { for p in u.pools { p.closeIdle() } }
    }

    /// HTTP/1.1's entry: a plain route is decided from method, path and (when some route matches on
    /// hosts) Host, without the head's strings; `head` is built only for the routes that need it.
    func route(
        method: String, path: String, host: () -> String?, peer: SocketAddress?, requestID: RequestID,
        head: () -> HTTPRequestHead
    ) -> RouteDecision {
        let rt = runtime
        // Lengths first: a string comparison that finds no shortcut costs ~60 instructions.
        let n = path.utf8.count
        if n == rt.challengePath.utf8.count && path == rt.challengePath { return challengeEndpoint(head(), peer: peer, runtime: rt) }
        if n == rt.registerPath.utf8.count && path == rt.registerPath { return registerEndpoint(head(), peer: peer, runtime: rt) }
        if rt.publishesJWKS, n == VerdictConfig.jwksPath.utf8.count, path == VerdictConfig.jwksPath, let v = rt.verdict {
            return Self.jwks(v, method: method)
        }
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

    /// `GET /.well-known/jwks.json` with `verdict: {publish: true}`: the verdict's public keys, to
    /// anyone (GET and HEAD only).
    static func jwks(_ v: VerdictSigning, method: String) -> RouteDecision {
        guard method == "GET" || method == "HEAD" else {
            let e = GateError.methodNotAllowed
            return .respond(routeName: "jwks", ErrorResponse.make(status: e.status, code: e.code, action: e.action.rawValue))
        }
        return .respond(routeName: "jwks", v.jwksResponse(nowMillis: AttestContext.nowMillis()))
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
        responseHeaders: HTTPFields, responseHook: ResponseHook? = nil, verdict: AccessVerdict? = nil,
        accountTap: AccountFieldTap? = nil
    ) -> RouteDecision {
        switch target(r, rt) {
        case .demo:
            return .buffer(maxBody: r.maxBody, routeName: r.name) { request, done in
                done(
                    .respond(
                        DemoUpstream.answer(
                            request, route: r.name, upstream: r.upstream, editHeaders: editHeaders,
                            responseHeaders: responseHeaders, accountTap: accountTap)))
            }
        case .upstream(let u):
            return .forward(
                u.forward(
                    r, editHeaders: editHeaders, responseHeaders: responseHeaders,
                    responseHook: responseHook ?? Self.responseHook(r), verdict: verdict, accountTap: accountTap))
        case .missing:
            return .respond(routeName: r.name, ProxyError.upstreamUnavailable.response())
        }
    }

    /// The same, for a request whose body was already buffered for a local decision; `verdict`: a
    /// protected route's, for the access line.
    func forward(
        _ request: BufferedRequest, _ r: GatewayRuntime.CompiledRoute, runtime rt: GatewayRuntime,
        editHeaders: HeaderEdit, responseHeaders: HTTPFields, responseHook: ResponseHook? = nil, verdict: AccessVerdict? = nil,
        accountTap: AccountFieldTap? = nil
    ) -> BufferedOutcome {
        var answer: LocalResponse
        switch target(r, rt) {
        case .demo:
            answer = DemoUpstream.answer(
                request, route: r.name, upstream: r.upstream, editHeaders: editHeaders,
                responseHeaders: responseHeaders, accountTap: accountTap)
        case .upstream(let u):
            return .forward(
                u.forward(
                    r, editHeaders: editHeaders, responseHeaders: responseHeaders,
                    responseHook: responseHook ?? Self.responseHook(r), verdict: verdict, accountTap: accountTap))
        case .missing:
            answer = ProxyError.upstreamUnavailable.response(requestId: request.requestID.text)
        }
        answer.verdict = verdict
        return .respond(answer)
    }

    /// A route with a DeviceCheck fallback takes `X-Device-Check-Update` out of every response
    /// (`FallbackRoute`); other routes copy the upstream's head as bytes.
    static func responseHook(_ r: GatewayRuntime.CompiledRoute) -> ResponseHook? { r.fallback == nil ? nil : dropDeviceCheckUpdate }

    func exchangeDidFinish(_ record: ExchangeRecord) {
        accessLog.write(record)
        metrics.record(record)
        // A decision forwarded anyway: its explain entry learns what the client was sent.
        if let v = record.verdict, v.forwardedRecorded { attest.explain.settle(record.requestID.text, status: record.status) }
    }
}
