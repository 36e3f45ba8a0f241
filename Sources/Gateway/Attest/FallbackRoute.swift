import AppAttest
import Foundation
import GatewayConfig
import GatewayCrypto
import GatewayHTTP
import GatewayIO
import GatewayPolicy
import GatewayProxy
import GatewayStore

/// The DeviceCheck fallback of a protected route (docs/verification.md, "Devices without App
/// Attest"): a request without App Attest headers but with `X-Apple-Device-Token` is counted in the
/// route's share (`FallbackShare`) and refused `fallback_share_exceeded` above `max_share`; its
/// token is claimed once in the store (`AttestStore.claimToken`, for `token_ttl`: across a fleet
/// on Redis, across restarts with a data directory) and checked with DeviceCheck
/// (`validate_device_token`, or `query_two_bits` on a `bits` route, which validates it too);
/// accepted, it is forwarded with `X-Device-Check: valid` (and `X-Device-Check-Bits`), and on a
/// `bits: write` route an upstream's `X-Device-Check-Update` writes the device's bits. Refusals go
/// through `RouteVerdict` like assertions' (`enforce`, `shadow`, `rollout`, `on_store_error` for
/// `devicecheck_unavailable`), and are recorded for `explain` with `path: devicecheck`.
extension GatewayRouter {
    /// Counts the request in the route's share and, when it takes the fallback, decides it.
    /// nil: an App Attest request (or no fallback): the assertion path goes on.
    func fallbackDecision(
        _ h: HTTPRequestHead, peer: SocketAddress?, requestID: RequestID, route r: GatewayRuntime.CompiledRoute,
        mode: RouteVerdict.Mode, runtime rt: GatewayRuntime
    ) -> RouteDecision? {
        guard let f = r.fallback else { return nil }
        let isFallback =
            h.headers[AttestHeaders.assertion] == nil && h.headers[AttestHeaders.keyID] == nil
            && h.headers[AttestHeaders.deviceToken] != nil
        let reading = f.share.record(fallback: isFallback, nowMillis: EventLoop.monotonicMillis())
        attest.metrics.fallbackShare(route: r.name, reading.share)
        guard isFallback else { return nil }
        guard reading.exceeded else {
            return .buffer(maxBody: r.maxBody, routeName: r.name) { [unowned self] request, done in
                self.fallback(request, route: r, fallback: f, mode: mode, runtime: rt, done: done)
            }
        }
        var e = Explanation(step: "fallback_share", error: .fallbackShareExceeded)
        e.add("path", "devicecheck")
        e.add("share", String(format: "%.4f", reading.share))
        e.add("max_share", Percentage(basisPoints: f.config.maxShareBasisPoints).description)
        e.add("window", Self.durationText(millis: f.config.windowMillis))
        e.add("requests", String(reading.total))
        e.add("fallback_requests", String(reading.fallback))
        if reading.firstInWindow {
            GatewayEvents.log(
                "warning", "fallback share above max_share: DeviceCheck fallback requests refused",
                [
                    ("route", r.name), ("share", String(format: "%.4f", reading.share)),
                    ("max_share", Percentage(basisPoints: f.config.maxShareBasisPoints).description),
                    ("window", Self.durationText(millis: f.config.windowMillis)), ("requests", String(reading.total)),
                    ("fallback_requests", String(reading.fallback)), ("mode", mode.rawValue),
                ])
        }
        attest.metrics.fallback(route: r.name, result: e.error.code)
        let verdict = RouteVerdict(route: r.assertion, mode: mode, outcome: .refused(e.error))
        let summary = RequestSummary(method: h.method, target: h.target, peer: peer?.host, requestID: requestID.text)
        return decision(
            carryOut(
                verdict, refusal: e, route: r, runtime: rt, about: summary, kind: "fallback", logFields: [("step", e.step)],
                pass: VerifiedPass(editHeaders: rt.stripAttestHeaders), unverifiedHook: Self.dropDeviceCheckUpdate,
                verdictRequest: VerdictRequest(method: h.method, target: h.target, requestID: requestID.text, body: nil)),
            route: r, runtime: rt)
    }

    /// The body is read: the token, its replay, DeviceCheck, the verdict.
    private func fallback(
        _ request: BufferedRequest, route r: GatewayRuntime.CompiledRoute, fallback f: GatewayRuntime.RouteFallback,
        mode: RouteVerdict.Mode, runtime rt: GatewayRuntime, done: @escaping (BufferedOutcome) -> Void
    ) {
        let tokenText = request.head.headers[AttestHeaders.deviceToken] ?? ""
        let call: DeviceCheck.Call = f.config.bits == .off ? .validate : .query
        var early: Explanation?
        var bytes: [UInt8] = []
        if let decoded = DeviceCheck.tokenBytes(tokenText) {
            bytes = decoded
        } else {
            early = Explanation(
                step: "device_token", error: .deviceTokenInvalid,
                fields: [
                    ("path", "devicecheck"), ("detail", "X-Apple-Device-Token is not base64 of a DeviceCheck token"),
                ])
        }
        if rt.apple == nil {
            early = Explanation(
                step: "devicecheck", error: .deviceCheckUnavailable,
                fields: [("path", "devicecheck"), ("detail", "apple is not configured")])
        }
        if let early { return concludeFallback(early, request: request, route: r, mode: mode, runtime: rt, done: done) }
        guard let services = rt.apple else { return }
        let digest = SHA256.hash(bytes)
        let boundRequest = LoopBound(request)
        let boundDone = LoopBound(done)
        let executor = self.executor
        attest.store.claimToken(digest, ttlMillis: f.tokenTTLMillis, nowMillis: AttestContext.nowMillis()) { [unowned self] result in
            executor.run {
                self.claimed(
                    result, digest: digest, call: call, token: tokenText, services: services, request: boundRequest.value, route: r,
                    fallback: f, mode: mode, runtime: rt, done: boundDone.value)
            }
        }
    }

    /// The store answered the token's claim (`AttestStore.claimToken`, shared by a fleet on Redis):
    /// a replay, a full cache or a store failure is refused (`concludeFallback`; a failure is
    /// `store_unavailable`, under the route's `on_store_error`); a fresh claim goes to DeviceCheck,
    /// and is given back when DeviceCheck could not judge the token (the device may send it again).
    private func claimed(
        _ result: Result<TokenClaimOutcome, StoreError>, digest: [UInt8], call: DeviceCheck.Call, token tokenText: String,
        services: AppleServices, request: BufferedRequest, route r: GatewayRuntime.CompiledRoute, fallback f: GatewayRuntime.RouteFallback,
        mode: RouteVerdict.Mode, runtime rt: GatewayRuntime, done: @escaping (BufferedOutcome) -> Void
    ) {
        let refused: Explanation
        switch result {
        case .success(.claimed):
            let boundRequest = LoopBound(request)
            let boundDone = LoopBound(done)
            let executor = self.executor
            let store = attest.store
            attest.deviceCheck.call(call, token: tokenText, services: services) { [unowned self] decision in
                if decision.refusal == .deviceCheckUnavailable { store.releaseToken(digest) { _ in } }
                executor.run {
                    self.checked(
                        decision, call: call, token: tokenText, services: services, request: boundRequest.value, route: r, fallback: f,
                        mode: mode, runtime: rt, done: boundDone.value)
                }
            }
            return
        case .success(.alreadyClaimed):
            refused = Explanation(
                step: "device_token", error: .deviceTokenReplayed,
                fields: [
                    ("path", "devicecheck"), ("detail", "the token was already presented"),
                    ("token_ttl", Self.durationText(millis: f.config.tokenTTLMillis)),
                ])
        case .success(.capacity(let maxTokens)):
            refused = Explanation(
                step: "device_token", error: .deviceCheckUnavailable,
                fields: [
                    ("path", "devicecheck"), ("detail", "the replay cache is full of live tokens (\(maxTokens))"),
                ])
        case .failure(let error):
            refused = Explanation(step: "store", error: GateError(error), fields: [("path", "devicecheck"), ("detail", error.detail)])
        }
        concludeFallback(refused, request: request, route: r, mode: mode, runtime: rt, done: done)
    }

    /// DeviceCheck answered: refused (`concludeFallback`), or forwarded with `X-Device-Check: valid`.
    private func checked(
        _ decision: DeviceCheck.Decision, call: DeviceCheck.Call, token: String, services: AppleServices, request: BufferedRequest,
        route r: GatewayRuntime.CompiledRoute, fallback f: GatewayRuntime.RouteFallback, mode: RouteVerdict.Mode,
        runtime rt: GatewayRuntime,
        done: @escaping (BufferedOutcome) -> Void
    ) {
        if let refusal = decision.refusal {
            var e = Explanation(
                step: "devicecheck", error: refusal,
                fields: [
                    ("path", "devicecheck"), ("endpoint", call.rawValue), ("result", decision.result.rawValue), ("detail", decision.detail),
                ])
            if refusal == .deviceCheckUnavailable, case .some(.some(let ms)) = decision.pause {
                e.retryAfterSeconds = Int((ms + 999) / 1000)
            }
            return concludeFallback(e, request: request, route: r, mode: mode, runtime: rt, done: done)
        }
        let verdict = RouteVerdict(route: r.assertion, mode: mode, outcome: .accepted)
        attest.metrics.fallback(route: r.name, result: "accepted")
        var edit = rt.stripAttestHeaders.adding(AttestHeaders.deviceCheck, "valid")
        let bits: DeviceCheck.Bits? = decision.bits ?? nil
        if call == .query { edit = edit.adding(AttestHeaders.deviceCheckBits, DeviceCheck.bitsHeader(bits)) }
        var hook = Self.dropDeviceCheckUpdate
        if f.config.bits == .write {
            let deviceCheck = attest.deviceCheck
            let route = r.name
            hook = ResponseHook(remove: [AttestHeaders.deviceCheckUpdate]) { head in
                guard let value = head.headers[AttestHeaders.deviceCheckUpdate] else { return }
                Self.writeBits(value, over: bits, token: token, route: route, services: services, deviceCheck: deviceCheck)
            }
        }
        let carried = carryOut(
            verdict, refusal: nil, route: r, runtime: rt, about: nil, kind: "fallback",
            pass: VerifiedPass(editHeaders: edit, responseHook: hook), verdictRequest: VerdictRequest(request),
            subject: VerdictSubject(
                deviceCheck: "valid", deviceCheckBits: call == .query ? DeviceCheck.bitsHeader(bits) : nil))
        done(outcome(carried, request: request, route: r, runtime: rt))
    }

    /// A refusal of the fallback, carried out as its verdict says (refused, or forwarded unverified
    /// and recorded: shadowed, or `devicecheck_unavailable` on a `fail_open` route).
    private func concludeFallback(
        _ e: Explanation, request: BufferedRequest, route r: GatewayRuntime.CompiledRoute, mode: RouteVerdict.Mode,
        runtime rt: GatewayRuntime, done: (BufferedOutcome) -> Void
    ) {
        attest.metrics.fallback(route: r.name, result: e.error.code)
        let verdict = RouteVerdict(route: r.assertion, mode: mode, outcome: .refused(e.error))
        let carried = carryOut(
            verdict, refusal: e, route: r, runtime: rt, about: RequestSummary(request), kind: "fallback",
            logFields: [("step", e.step)], pass: VerifiedPass(editHeaders: rt.stripAttestHeaders),
            unverifiedHook: Self.dropDeviceCheckUpdate, verdictRequest: VerdictRequest(request))
        done(outcome(carried, request: request, route: r, runtime: rt))
    }

    /// An upstream's `X-Device-Check-Update` on a `bits: write` route: the device's bits written
    /// (both, the unnamed one as read at the request), after the head, without holding the response.
    static func writeBits(
        _ value: String, over current: DeviceCheck.Bits?, token: String, route: String, services: AppleServices,
        deviceCheck: DeviceCheckService
    ) {
        guard let update = DeviceCheck.parseUpdate(value) else {
            GatewayEvents.log(
                "warning", "an upstream's X-Device-Check-Update is not bit0=0|1 and/or bit1=0|1; nothing written",
                [
                    ("route", route), ("value", String(value.prefix(64))),
                ])
            return
        }
        let bits = DeviceCheck.merged(update, over: current)
        deviceCheck.call(.update, token: token, update: bits, services: services) { d in
            guard d.refusal != nil else { return }
            GatewayEvents.log(
                "warning", "the device's bits could not be written (update_two_bits)",
                [
                    ("route", route), ("result", d.result.rawValue), ("detail", d.detail), ("bits", DeviceCheck.bitsHeader(bits)),
                ])
        }
    }

    /// On a route with a fallback, an upstream's `X-Device-Check-Update` never reaches a client.
    nonisolated(unsafe) static let dropDeviceCheckUpdate = ResponseHook(remove: [AttestHeaders.deviceCheckUpdate])

    /// `10m`, `1h`, `90s`: a configured duration as it was most likely written.
    static func durationText(millis ms: Int64) -> String {
        if ms % 3_600_000 == 0 { return "\(ms / 3_600_000)h" }
        if ms % 60_000 == 0 { return "\(ms / 60_000)m" }
        if ms % 1000 == 0 { return "\(ms / 1000)s" }
        return "\(ms)ms"
    }
}
