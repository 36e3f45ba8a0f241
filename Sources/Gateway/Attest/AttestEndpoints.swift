import AppAttest
import Dispatch
import Foundation
import GatewayConfig
import GatewayHTTP
import GatewayIO
import GatewayPolicy
import GatewayProxy
import GatewayStore
import GatewayWire

extension GatewayRouter {
    // MARK: - Admission (docs/configuration.md, attest.challenge_rate and attest.registration_rate)

    /// Who a request to the attest endpoints is counted against: for now the peer's address (an
    /// IPv4 address or an IPv6 /64). Once trusted proxies exist, the client address they forward
    /// (read from `head`) is chosen here, and only here.
    static func clientKey(peer: SocketAddress?, head: HTTPRequestHead) -> ClientKey? {
        peer?.withAddressBytes { ClientKey(addressBytes: $0) }
    }

    /// The client's token bucket (`attest.challenge_rate`), taken before the body is read: nil when
    /// admitted, else the 429 to answer.
    func admitClient(
        peer: SocketAddress?, head: HTTPRequestHead, runtime rt: GatewayRuntime,
        endpoint: AttestMetrics.LimitedEndpoint
    ) -> LocalResponse? {
        guard let limit = rt.clientLimit, let key = Self.clientKey(peer: peer, head: head) else { return nil }
        let decision = limit.buckets.admit(
            key, nowMillis: EventLoop.monotonicMillis(), ratePerSecond: limit.ratePerSecond, burst: limit.burst)
        guard case .limited(let seconds) = decision else { return nil }
        attest.limited(.client, at: endpoint, client: key)
        return Self.rateLimited(.client, retryAfter: seconds)
    }

    /// An attest endpoint's first steps, before its body: POST only, the client's token bucket, then
    /// the body (at most `maxBody`) to `handler`.
    func postEndpoint(
        _ route: String, _ endpoint: AttestMetrics.LimitedEndpoint, _ head: HTTPRequestHead, peer: SocketAddress?,
        runtime rt: GatewayRuntime, maxBody: Int,
        _ handler: @escaping (BufferedRequest, @escaping (BufferedOutcome) -> Void) -> Void
    ) -> RouteDecision {
        guard head.method == "POST" else { return refuseEndpoint(route, .methodNotAllowed) }
        if let limited = admitClient(peer: peer, head: head, runtime: rt, endpoint: endpoint) {
            return .respond(routeName: route, limited)
        }
        return .buffer(maxBody: maxBody, routeName: route, handler: handler)
    }

    /// The process's registration bucket (`attest.registration_rate`): nil when admitted (or off),
    /// else the 429 to answer.
    func admitRegistration(
        runtime rt: GatewayRuntime, endpoint: AttestMetrics.LimitedEndpoint, peer: SocketAddress?,
        head: HTTPRequestHead
    ) -> LocalResponse? {
        guard let limit = rt.registrationLimit else { return nil }
        let decision = limit.buckets.take(
            nowMillis: EventLoop.monotonicMillis(), ratePerSecond: limit.ratePerSecond, burst: limit.burst)
        guard case .limited(let seconds) = decision else { return nil }
        attest.limited(.registration, at: endpoint, client: Self.clientKey(peer: peer, head: head))
        return Self.rateLimited(.registration, retryAfter: seconds)
    }

    /// `429 {"error":"rate_limited","action":"retry_later","limit":…,"retryAfter":N}` with
    /// `Retry-After: N`. Not recorded for `explain` (a flood would only push real refusals out).
    /// Built once for waits up to a minute: a flood is answered without building anything.
    static func rateLimited(_ limit: AttestMetrics.Limit, retryAfter seconds: Int) -> LocalResponse {
        let prebuilt = limit == .client ? clientLimited : registrationLimited
        return seconds >= 1 && seconds <= prebuilt.count ? prebuilt[seconds - 1] : makeRateLimited(limit, retryAfter: seconds)
    }

    private static let clientLimited = (1...60).map { makeRateLimited(.client, retryAfter: $0) }
    private static let registrationLimited = (1...60).map { makeRateLimited(.registration, retryAfter: $0) }

    private static func makeRateLimited(_ limit: AttestMetrics.Limit, retryAfter seconds: Int) -> LocalResponse {
        let e = GateError.rateLimited
        return ErrorResponse.make(
            status: e.status, code: e.code, action: e.action.rawValue,
            extra: [("limit", .string(limit.rawValue)), ("retryAfter", .int(Int64(seconds)))],
            headers: HTTPFields([("Retry-After", String(seconds)), ("Cache-Control", "no-store")]))
    }

    // MARK: - POST challenge_path

    func challengeEndpoint(_ head: HTTPRequestHead, peer: SocketAddress?, runtime rt: GatewayRuntime) -> RouteDecision {
        postEndpoint("attest_challenge", .challenge, head, peer: peer, runtime: rt, maxBody: ChallengeEndpoint.maxBody) {
            [unowned self] request, done in
            let ctx = self.attest
            switch ChallengeEndpoint.request(body: request.body, ttlMillis: rt.attest.challengeTTLMillis, requireKeyID: ctx.requiresKeyID) {
            case .failure(let e):
                done(.respond(self.refusal(e, route: "attest_challenge", mode: "endpoint", request: request)))
            case .success(let wanted):
                // A registration challenge is where a device is told to go and attest: the budget
                // that keeps the app under Apple's attestation rate admits it here.
                if wanted.purpose == .register,
                    let limited = self.admitRegistration(runtime: rt, endpoint: .challenge, peer: request.peer, head: request.head)
                {
                    return done(.respond(limited))
                }
                let purpose: AttestMetrics.IssuedChallengePurpose =
                    switch wanted.purpose {
                    case .register?: .register
                    case .assert?: .assert
                    case nil: .any
                    }
                let bound = LoopBound(done)
                let summary = RequestSummary(request)
                ctx.store.issueChallenge(wanted, nowMillis: AttestContext.nowMillis()) { [executor] result in
                    executor.run {
                        switch result {
                        case .success(let issued):
                            ctx.metrics.challengeIssued(purpose)
                            bound.value(.respond(LocalResponse.json(201, ChallengeEndpoint.json(issued), headers: Self.noStore)))
                        case .failure(let error):
                            let e = Explanation(step: "store", error: GateError(error), fields: [("detail", error.detail)])
                            bound.value(.respond(self.refusal(e, route: "attest_challenge", mode: "endpoint", about: summary)))
                        }
                    }
                }
            }
        }
    }

    // MARK: - POST register_path

    func registerEndpoint(_ head: HTTPRequestHead, peer: SocketAddress?, runtime rt: GatewayRuntime) -> RouteDecision {
        postEndpoint("attest_register", .register, head, peer: peer, runtime: rt, maxBody: Registrar.maxBody) {
            [unowned self] request, done in
            let ctx = self.attest
            let bound = LoopBound(done)
            let body = request.body
            let executor = self.executor
            let summary = RequestSummary(request)
            let register: @Sendable () -> Void = {
                ctx.registrationQueue.async {
                    Registrar.register(
                        body: body, policy: rt.attest, store: ctx.store, nowMillis: AttestContext.nowMillis(),
                        androidStatusList: ctx.androidStatus.list
                    ) { result in
                        executor.run {
                            switch result {
                            case .registered(let key):
                                ctx.metrics.registration(result: "registered", reason: key.existing ? "existing_key" : "new_key")
                                var o = JSONObject()
                                o.set("keyId", key.keyID.description)
                                o.set("environment", key.environment.name)
                                o.set("appId", key.appID)
                                var fields = [
                                    ("key_id", key.keyID.description), ("app_id", key.appID), ("environment", key.environment.name),
                                    ("existing", String(key.existing)),
                                    ("receipt", key.receipt.map { "verified \($0.type) created \($0.creationTime)" } ?? "not verified"),
                                ]
                                if let expires = key.receipt?.expirationTime { fields.append(("receipt_expires", expires.text)) }
                                if let acl = key.keyAccessControl { fields.append(("key_access_control", acl.summary)) }
                                GatewayEvents.log("info", "key registered", fields)
                                bound.value(.respond(LocalResponse.json(201, o.description, headers: Self.noStore)))
                            case .refused(let e):
                                ctx.metrics.registration(result: "refused", reason: e.error.code)
                                bound.value(
                                    .respond(self.refusal(e, route: "attest_register", mode: "endpoint", about: summary, detail: true)))
                            }
                        }
                    }
                }
            }
            // A registration presenting a challenge of purpose `register` was admitted when that
            // challenge was issued; one presenting a valid challenge of no purpose is admitted here.
            // Anything else is refused by the registration itself and costs the budget nothing.
            guard rt.registrationLimit != nil, let token = Registrar.presentedChallenge(body: body) else { return register() }
            let head = request.head
            let peer = request.peer
            ctx.store.challengeState(token, nowMillis: AttestContext.nowMillis()) { result in
                executor.run {
                    if case .success(.valid(purpose: nil, _, _)) = result,
                        let limited = self.admitRegistration(runtime: rt, endpoint: .register, peer: peer, head: head)
                    {
                        return bound.value(.respond(limited))
                    }
                    register()
                }
            }
        }
    }

    private func refuseEndpoint(_ route: String, _ error: GateError) -> RouteDecision {
        .respond(routeName: route, ErrorResponse.make(status: error.status, code: error.code, action: error.action.rawValue))
    }

    static let noStore = HTTPFields([("Cache-Control", "no-store")])

    /// The JSON refusal `{"error","action","requestId"[,"detail"]}`, recorded for `explain`.
    func refusal(_ e: Explanation, route: String, mode: String, request: BufferedRequest, surface: RefusalSurface = .endpoint)
        -> LocalResponse
    {
        refusal(e, route: route, mode: mode, about: RequestSummary(request), surface: surface)
    }

    /// `detail`: the endpoints say which field or step failed; protected routes say only the code.
    func refusal(
        _ e: Explanation, route: String, mode: String, about request: RequestSummary, detail: Bool = false,
        surface: RefusalSurface = .endpoint
    ) -> LocalResponse {
        Refusals.respond(e, surface: surface, route: route, mode: mode, about: request, detail: detail, log: attest.explain)
    }

    // MARK: - Protected routes (mode enforce or shadow)

    /// A protected route's decision, made from the head before any of the body is read: whether the
    /// request is enforced (`RouteVerdict.mode`: the route's mode and rollout), and step 1 of the
    /// gate (`AssertionGate.readHeaders`). A refusal the head already decides and the verdict
    /// refuses (`RouteVerdict.beforeBody`: an enforced request whose assertion headers are missing
    /// or malformed) is answered now, with the answer the gate would give after the body: no
    /// `100 Continue`, no body read (HTTP/1.1 then closes the connection, HTTP/2 resets the stream's
    /// remaining DATA). Everything else is buffered for `protected`, which goes on from the headers
    /// read here.
    func protectedDecision(
        _ h: HTTPRequestHead, peer: SocketAddress?, requestID: RequestID, route r: GatewayRuntime.CompiledRoute,
        runtime rt: GatewayRuntime
    ) -> RouteDecision {
        // The route's fields in one pass over the head.
        let (keyText, unsupported, challengeText, assertionText, host) = h.headers.firstValues(
            AttestHeaders.keyID, AttestHeaders.unsupported, AttestHeaders.challenge, AttestHeaders.assertion, "Host")
        guard let mode = RouteVerdict.mode(route: r.assertion, keyID: keyText) else {
            return forward(r, runtime: rt, editHeaders: rt.stripVerifiedHeader, responseHeaders: HTTPFields())
        }
        // Apps whose device has no App Attest say so (docs/client-contract.md): counted, fallback or not.
        if unsupported == "1" { attest.metrics.unsupportedClaim(route: r.name) }
        if let decided = fallbackDecision(h, peer: peer, requestID: requestID, route: r, mode: mode, runtime: rt) { return decided }
        let headers = AssertionGate.readHeaders(keyID: keyText, challenge: challengeText, assertion: assertionText, route: r.assertion)
        if case .failure(var e) = headers, let verdict = RouteVerdict.beforeBody(route: r.assertion, mode: mode, refusal: e.error) {
            if r.fallback != nil { e.add("path", "app_attest") }
            let summary = RequestSummary(method: h.method, target: h.target, peer: peer?.host, requestID: requestID.text)
            let carried = carryOut(
                verdict, refusal: e, route: r, runtime: rt, about: summary, kind: "assertion",
                pass: VerifiedPass(editHeaders: rt.stripAttestHeaders))
            return decision(carried, route: r, runtime: rt)
        }
        // Both closures below hold the router strongly: each lives for one request and is never
        // kept by the router, and an unowned reference would cost a slow-path retain at every use
        // (the router's once-a-second timer holds it weakly, which gives it a side table).
        return .buffer(maxBody: r.maxBody, routeName: r.name) { [self] request, done in
            // The fields as read above (the buffered request's head is the same head), moved into
            // the gate (no copy of the request's strings).
            self.protected(
                request,
                GateRequest(
                    method: request.head.method, target: request.head.target, body: request.body, keyID: keyText,
                    challenge: challengeText, assertion: assertionText, host: host, scheme: request.scheme),
                route: r, runtime: rt, mode: mode, headers: headers, done: done)
        }
    }

    /// The gate's outcome carried out as its `RouteVerdict` says.
    func protected(
        _ request: BufferedRequest, _ gateRequest: consuming GateRequest, route r: GatewayRuntime.CompiledRoute, runtime rt: GatewayRuntime,
        mode: RouteVerdict.Mode, headers: Result<AssertionHeaders, Explanation>, done: @escaping (BufferedOutcome) -> Void
    ) {
        let verifiedHeader = rt.config.attest.verifiedKeyHeader
        gate.evaluate(gateRequest, headers: headers, route: r.assertion, policy: rt.attest, nowMillis: AttestContext.nowMillis()) {
            [self] outcome in
            let window = rt.accountWindowMillis
            let now = AttestContext.nowMillis()  // one reading for the verdict and the count upstream
            let verdict = RouteVerdict(route: r.assertion, mode: mode, outcome: outcome, accountWindowMillis: window, nowMillis: now)
            let carried: CarriedVerdict
            switch outcome {
            case .accepted(let a):
                // Verified: forwarded as verified, with the key id (and its risk metric, and the next
                // challenge to the client); a key over the route's max_risk_metric is flagged or
                // shadowed (recorded with its risk), or refused where `on_risk: refuse` enforces.
                let keyID = a.keyIDText
                var response = HTTPFields()
                if let next = a.nextChallenge {
                    self.attest.metrics.challengeIssued(.next)
                    // Both fields at once: one array, no growth.
                    response = HTTPFields([
                        HTTPFields.Field(AttestHeaders.nextChallenge, ChallengeText.encode(next.token)),
                        HTTPFields.Field(AttestHeaders.nextChallengeExpires, self.expiryText.format(millis: next.expiresAtMillis)),
                    ])
                }
                var edit =
                    if let metric = a.risk?.metric {
                        rt.stripAttestHeaders.adding((verifiedHeader, keyID), (AttestHeaders.riskMetric, String(metric)))
                    } else {
                        rt.stripAttestHeaders.adding(verifiedHeader, keyID)
                    }
                // Keys per account: the account's key count upstream (when known and in the window),
                // and the upstream's X-App-Attest-Account read from its answer.
                let accountKeys = RouteVerdict.accountKeys(a.account, windowMillis: window, nowMillis: now)
                if let accountKeys { edit = edit.adding(AttestHeaders.accountKeys, String(accountKeys)) }
                let tap = self.accountTap(a, route: r.name, runtime: rt)
                if verdict.recordsRefusal {
                    let forAccount = verdict.reason == GateError.accountKeyLimit.code
                    carried = self.carryOut(
                        verdict,
                        refusal: forAccount
                            ? Self.accountExplanation(a, route: r.assertion, windowMillis: window)
                            : Self.riskExplanation(a, route: r.assertion), route: r, runtime: rt,
                        about: RequestSummary(request),
                        kind: "assertion",
                        logFields: [("key_id", keyID)]
                            + (forAccount
                                ? [("account_keys", accountKeys.map { String($0) } ?? "-")]
                                : [("risk_metric", a.risk?.metric.map { String($0) } ?? "-")]),
                        pass: VerifiedPass(editHeaders: edit, responseHeaders: response, accountTap: tap),
                        verdictRequest: VerdictRequest(request), subject: VerdictSubject(a))
                } else {
                    carried = self.carryOut(
                        verdict, refusal: nil, route: r, runtime: rt, about: nil, kind: "assertion",
                        pass: VerifiedPass(editHeaders: edit, responseHeaders: response, accountTap: tap),
                        verdictRequest: VerdictRequest(request), subject: VerdictSubject(a))
                }
            case .refused(var e):
                if r.fallback != nil { e.add("path", "app_attest") }
                var logFields = [("step", e.step)]
                if e.error == .keyRateLimited, let limit = r.assertion.keyRate {
                    self.attest.metrics.keyRateLimited(route: r.name)
                    logFields += [("key_rate", limit.description), ("key_rate_burst", String(limit.burst))]
                }
                carried = self.carryOut(
                    verdict, refusal: e, route: r, runtime: rt, about: RequestSummary(request), kind: "assertion",
                    logFields: logFields,
                    pass: VerifiedPass(editHeaders: rt.stripAttestHeaders), verdictRequest: VerdictRequest(request))
            }
            done(self.outcome(carried, request: request, route: r, runtime: rt))
        }
    }

    /// Why a verified request is refused (or flagged) for its key's risk metric, with the key's
    /// receipt dates: what `explain` shows.
    static func riskExplanation(_ a: AcceptedAssertion, route: RoutePolicy) -> Explanation {
        var e = Explanation(step: "risk", error: .riskMetricExceeded)
        e.add("key_id", a.keyID.description)
        e.add("app_id", a.appID)
        if let risk = a.risk {
            e.add("risk_metric", risk.metric.map { String($0) } ?? "none")
            e.add("stale", String(risk.stale))
            e.add("receipt_created", RFC3339.format(millis: risk.receiptCreatedMillis))
            if let nb = risk.notBeforeMillis { e.add("receipt_not_before", RFC3339.format(millis: nb)) }
            if let ex = risk.expiresMillis { e.add("receipt_expires", RFC3339.format(millis: ex)) }
            if let next = risk.nextRefreshMillis { e.add("next_refresh", RFC3339.format(millis: next)) }
        }
        if let max = route.maxRiskMetric { e.add("max_risk_metric", String(max)) }
        e.add("on_risk", route.onRisk.rawValue)
        return e
    }

    /// The verdict metric `{route, mode, verdict, reason}`.
    func recordVerdict(_ verdict: RouteVerdict, route r: GatewayRuntime.CompiledRoute) {
        attestMetrics.verdict(
            routeIndex: r.index, route: r.name, mode: verdict.mode.rawValue, verdict: verdict.verdict.rawValue, reason: verdict.reason)
    }
}
