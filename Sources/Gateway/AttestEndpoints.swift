import AppAttest
import Dispatch
import Foundation
import GatewayHTTP
import GatewayIO
import GatewayPolicy
import GatewayProxy
import GatewayStore
import GatewayWire

/// What every loop's router shares for App Attest: the store, the explain log and the metrics.
final class AttestContext: Sendable {
    let store: any AttestStore
    let explain: ExplainLog
    let metrics: AttestMetrics
    /// The store binds every challenge to a key (Redis Cluster): the challenge endpoint requires `keyId`.
    let requiresKeyID: Bool
    /// Chain verification of registrations (milliseconds each) runs here, off the event loops.
    let registrationQueue = DispatchQueue(label: "gateway.register", qos: .userInitiated, attributes: .concurrent)

    init(store: any AttestStore, requiresKeyID: Bool, explain: ExplainLog, metrics: AttestMetrics) {
        self.store = store
        self.requiresKeyID = requiresKeyID
        self.explain = explain
        self.metrics = metrics
    }

    static func nowMillis() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec) / 1_000_000
    }
}

/// Runs store continuations on their loop: inline when already on it (the memory store answers
/// synchronously), else queued to it.
final class EventLoopExecutor: LoopExecutor {
    private static let key = DispatchSpecificKey<UInt>()
    private let queue: DispatchQueue
    private let tag: UInt

    init(loop: EventLoop) {
        queue = loop.queue
        tag = UInt(bitPattern: ObjectIdentifier(loop).hashValue)
        queue.setSpecific(key: Self.key, value: tag)
    }

    func run(_ work: @escaping @Sendable () -> Void) {
        if DispatchQueue.getSpecific(key: Self.key) == tag { work() } else { queue.async(execute: work) }
    }
}

extension GatewayRouter {
    // MARK: - POST challenge_path

    func challengeEndpoint(_ head: HTTPRequestHead, runtime rt: GatewayRuntime) -> RouteDecision {
        guard head.method == "POST" else { return refuseEndpoint("attest_challenge", .methodNotAllowed) }
        return .buffer(maxBody: ChallengeEndpoint.maxBody, routeName: "attest_challenge") { [unowned self] request, done in
            let ctx = self.attest
            switch ChallengeEndpoint.request(body: request.body, ttlMillis: rt.attest.challengeTTLMillis, requireKeyID: ctx.requiresKeyID) {
            case .failure(let e):
                done(.respond(self.refusal(e, route: "attest_challenge", mode: "endpoint", request: request)))
            case .success(let wanted):
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

    func registerEndpoint(_ head: HTTPRequestHead, runtime rt: GatewayRuntime) -> RouteDecision {
        guard head.method == "POST" else { return refuseEndpoint("attest_register", .methodNotAllowed) }
        return .buffer(maxBody: Registrar.maxBody, routeName: "attest_register") { [unowned self] request, done in
            let ctx = self.attest
            let bound = LoopBound(done)
            let body = request.body
            let executor = self.executor
            let summary = RequestSummary(request)
            ctx.registrationQueue.async {
                Registrar.register(body: body, policy: rt.attest, store: ctx.store, nowMillis: AttestContext.nowMillis()) { result in
                    executor.run {
                        switch result {
                        case .registered(let key):
                            ctx.metrics.registration(result: "registered", reason: key.existing ? "existing_key" : "new_key")
                            var o = JSONObject()
                            o.set("keyId", key.keyID.description)
                            o.set("environment", key.environment.name)
                            o.set("appId", key.appID)
                            GatewayEvents.log("info", "key registered", [
                                ("key_id", key.keyID.description), ("app_id", key.appID), ("environment", key.environment.name),
                                ("existing", String(key.existing)),
                            ])
                            bound.value(.respond(LocalResponse.json(201, o.description, headers: Self.noStore)))
                        case .refused(let e):
                            ctx.metrics.registration(result: "refused", reason: e.error.code)
                            bound.value(.respond(self.refusal(e, route: "attest_register", mode: "endpoint", about: summary, detail: true)))
                        }
                    }
                }
            }
        }
    }

    private func refuseEndpoint(_ route: String, _ error: GateError) -> RouteDecision {
        .respond(routeName: route, LocalResponse.error(error.status, error.code, extra: [("action", error.action.rawValue)]))
    }

    static let noStore = HTTPFields([("Cache-Control", "no-store")])

    /// The JSON refusal `{"error","action","requestId"[,"detail"]}`, recorded for `explain`.
    func refusal(_ e: Explanation, route: String, mode: String, request: BufferedRequest, status: Int? = nil) -> LocalResponse {
        refusal(e, route: route, mode: mode, about: RequestSummary(request), status: status)
    }

    /// `detail`: the endpoints say which field or step failed; protected routes say only the code.
    func refusal(_ e: Explanation, route: String, mode: String, about request: RequestSummary, detail: Bool = false,
                 status: Int? = nil) -> LocalResponse {
        let id = attest.explain.record(e, route: route, mode: mode, method: request.method, target: request.target, peer: request.peer)
        var o = JSONObject()
        o.set("error", e.error.code)
        o.set("action", e.error.action.rawValue)
        o.set("requestId", id)
        if detail, let d = e.fields.first(where: { $0.0 == "detail" || $0.0 == "field" }) { o.set("detail", d.1) }
        var headers = HTTPFields([(AttestHeaders.requestID, id), ("Cache-Control", "no-store")])
        if let seconds = e.retryAfterSeconds { headers.append("Retry-After", String(max(1, seconds))) }
        return LocalResponse.json(status ?? e.error.status, o.description, headers: headers)
    }

    // MARK: - Protected routes (mode enforce or shadow)

    func protected(
        _ request: BufferedRequest, route r: GatewayRuntime.CompiledRoute, runtime rt: GatewayRuntime,
        done: @escaping (BufferedOutcome) -> Void
    ) {
        let h = request.head
        let keyText = h.headers[AttestHeaders.keyID]
        let share = r.assertion.rollout.basisPoints
        // The key id is decoded for the rollout share only on a partial rollout (the gate decodes it anyway).
        let enforce =
            r.assertion.mode == .enforce
            && (share >= 10_000 || Rollout.enforces(keyID: keyText.flatMap { BinaryEncoding.decode($0).bytes }, basisPoints: share))
        let mode = enforce ? "enforce" : "shadow"
        let gateRequest = GateRequest(
            method: h.method, target: h.target, body: request.body, keyID: keyText,
            challenge: h.headers[AttestHeaders.challenge], assertion: h.headers[AttestHeaders.assertion])
        let verifiedHeader = rt.config.attest.verifiedKeyHeader
        gate.evaluate(gateRequest, route: r.assertion, policy: rt.attest, nowMillis: AttestContext.nowMillis()) { [unowned self] outcome in
            switch outcome {
            case .accepted(let a):
                self.attestMetrics.verdict(route: r.name, mode: mode, verdict: "accepted", reason: "ok")
                let keyID = a.keyID.description
                var response = HTTPFields()
                if let next = a.nextChallenge {
                    self.attest.metrics.challengeIssued(.next)
                    response.append(AttestHeaders.nextChallenge, ChallengeText.encode(next.token))
                    response.append(AttestHeaders.nextChallengeExpires, RFC3339.format(millis: next.expiresAtMillis))
                }
                done(self.forward(request, r, runtime: rt, editHeaders: rt.stripAttestHeaders.adding(verifiedHeader, keyID),
                                  responseHeaders: response))
            case .refused(let e):
                let failOpen = e.error == .storeUnavailable && r.assertion.onStoreError == .failOpen
                if enforce && !failOpen {
                    self.attestMetrics.verdict(route: r.name, mode: mode, verdict: "refused", reason: e.error.code)
                    done(.respond(self.refusal(e, route: r.name, mode: mode, request: request, status: e.error.routeStatus)))
                    return
                }
                let verdict = failOpen && enforce ? "fail_open" : "would_refuse"
                self.attestMetrics.verdict(route: r.name, mode: mode, verdict: verdict, reason: e.error.code)
                let id = self.attest.explain.record(e, route: r.name, mode: mode, method: h.method, target: h.target, peer: request.peer?.host)
                GatewayEvents.log("info", "assertion \(verdict)", [
                    ("route", r.name), ("mode", mode), ("reason", e.error.code), ("step", e.step), ("request_id", id),
                ])
                done(self.forward(request, r, runtime: rt, editHeaders: rt.stripAttestHeaders, responseHeaders: HTTPFields()))
            }
        }
    }
}

/// What a refusal records of its request (Sendable, so it can cross to a registration thread).
struct RequestSummary: Sendable {
    let method: String
    let target: String
    let peer: String?

    init(_ request: BufferedRequest) {
        method = request.head.method
        target = request.head.target
        peer = request.peer?.host
    }
}
