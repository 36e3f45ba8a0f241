import Foundation
import GatewayConfig
import GatewayPolicy
import Testing

/// DeviceCheck's answers as one table (`DeviceCheck.decide`), the bits' header and update formats,
/// the route's fallback share, and the fallback's refusals through `RouteVerdict`.
@Suite("DeviceCheck: answers, bits, the fallback share, verdicts")
struct DeviceCheckTests {
    static func decide(_ call: DeviceCheck.Call, _ status: Int, _ body: String, retryAfter: Int64? = nil) -> DeviceCheck.Decision {
        DeviceCheck.decide(call, status: status, body: Array(body.utf8), retryAfterSeconds: retryAfter)
    }

    @Test("each answer of Apple's table: result, refusal (device or DeviceCheck), bits, pause")
    func answers() {
        let valid = Self.decide(.validate, 200, "")
        #expect(valid.result == .ok && valid.refusal == nil && valid.pause == nil)
        let bits = Self.decide(.query, 200, #"{"bit0":true,"bit1":false,"last_update_time":"2026-11"}"#)
        #expect(bits.result == .ok && bits.refusal == nil)
        #expect(bits.bits == .some(DeviceCheck.Bits(bit0: true, bit1: false, lastUpdate: "2026-11")))
        // Never set: 200 with a plain-text body, not JSON.
        let unset = Self.decide(.query, 200, "Bit State Not Found")
        #expect(unset.result == .bitsNotFound && unset.refusal == nil && unset.bits == .some(nil))
        let garbage = Self.decide(.query, 200, "<html>")
        #expect(garbage.result == .error && garbage.refusal == .deviceCheckUnavailable)
        // 400 is read by its body: the device's token, or our own request.
        let token = Self.decide(.validate, 400, "Missing or incorrectly formatted device token payload")
        #expect(token.result == .invalidToken && token.refusal == .deviceTokenInvalid && token.pause == nil)
        let clock = Self.decide(.validate, 400, "Missing or incorrectly formatted time stamp")
        #expect(clock.result == .badTimestamp && clock.refusal == .deviceCheckUnavailable && clock.pause == nil)
        let auth = Self.decide(.query, 400, "Unable to verify authorization token")
        #expect(auth.result == .unauthorized && auth.refusal == .deviceCheckUnavailable && auth.pause == .some(nil))
        let bitsBad = Self.decide(.update, 400, "Missing or incorrectly formatted bits")
        #expect(bitsBad.result == .badRequest && bitsBad.refusal == .deviceCheckUnavailable)
        #expect(Self.decide(.validate, 401, "").result == .unauthorized)
        // 429 and 5xx pause every call: Retry-After (bounded to an hour), else the back-off.
        let limited = Self.decide(.validate, 429, "", retryAfter: 7)
        #expect(limited.result == .rateLimited && limited.refusal == .deviceCheckUnavailable && limited.pause == .some(7_000))
        #expect(Self.decide(.validate, 429, "", retryAfter: 99_999).pause == .some(3_600_000))
        #expect(Self.decide(.validate, 503, "").pause == .some(nil))
        #expect(Self.decide(.validate, 500, "").result == .serverError)
        #expect(Self.decide(.validate, 418, "").result == .error)
    }

    @Test("the request body: device_token, transaction_id, timestamp in ms; an update writes both bits")
    func body() throws {
        let b = DeviceCheck.body(deviceToken: "dG9r", transactionID: "t-1", timestampMillis: 1_700_000_000_123)
        let o = try #require(try JSONSerialization.jsonObject(with: Data(b)) as? [String: Any])
        #expect(o["device_token"] as? String == "dG9r" && o["transaction_id"] as? String == "t-1")
        #expect((o["timestamp"] as? NSNumber)?.int64Value == 1_700_000_000_123)
        #expect(o["bit0"] == nil && o["bit1"] == nil)
        let u = DeviceCheck.body(deviceToken: "dG9r", transactionID: "t-2", timestampMillis: 1, update: .init(bit0: true, bit1: false))
        let uo = try #require(try JSONSerialization.jsonObject(with: Data(u)) as? [String: Any])
        #expect(uo["bit0"] as? Bool == true && uo["bit1"] as? Bool == false)
    }

    @Test("X-Device-Check-Bits and X-Device-Check-Update: formats, refusals of anything else, the unnamed bit kept")
    func bitsFormats() {
        #expect(DeviceCheck.bitsHeader(.init(bit0: true, bit1: false, lastUpdate: "2026-11")) == "bit0=1; bit1=0; updated=2026-11")
        #expect(DeviceCheck.bitsHeader(nil) == "unset")
        #expect(DeviceCheck.parseUpdate("bit0=1")! == (true, nil))
        #expect(DeviceCheck.parseUpdate("bit1=0; bit0=true")! == (true, false))
        #expect(DeviceCheck.parseUpdate("BIT1 = 1")! == (nil, true))
        for bad in ["", "bit2=1", "bit0=yes", "bit0", "bit0=1; bit0=0"] { #expect(DeviceCheck.parseUpdate(bad) == nil, "\(bad)") }
        #expect(DeviceCheck.merged((true, nil), over: .init(bit0: false, bit1: true)) == .init(bit0: true, bit1: true))
        #expect(DeviceCheck.merged((nil, true), over: nil) == .init(bit0: false, bit1: true))
        #expect(DeviceCheck.parseBits(Array(#"{"bit0":1,"bit1":0,"last_update_time":"nope"}"#.utf8)) == .init(bit0: true, bit1: false))
        #expect(DeviceCheck.parseBits(Array(#"{"bit0":true}"#.utf8)) == nil)
        #expect(DeviceCheck.tokenBytes("not base64!") == nil)
        #expect(DeviceCheck.tokenBytes("AAAA") == nil)  // too short to be a token
    }

    @Test("the share: not judged under min_requests, refused above max_share, the window slides, logged once per window")
    func share() {
        let f = FallbackPolicy(maxShareBasisPoints: 2_000, windowMillis: 10_000, minRequests: 10)
        let share = FallbackShare(FallbackShare.Settings(f))
        var t: Int64 = 1_000_000
        // Alone in a quiet window: 100 % but under min_requests.
        #expect(!share.record(fallback: true, nowMillis: t).exceeded)
        for _ in 0..<8 { _ = share.record(fallback: false, nowMillis: t) }
        // 10 requests, 2 fallback (this one): 20 % is not above 20 %.
        let at = share.record(fallback: true, nowMillis: t)
        #expect(at.total == 10 && at.fallback == 2 && !at.exceeded)
        let over = share.record(fallback: true, nowMillis: t)
        #expect(over.exceeded && over.firstInWindow)
        #expect(
            share.record(fallback: true, nowMillis: t + 100).exceeded && !share.record(fallback: true, nowMillis: t + 200).firstInWindow)
        // An App Attest request is never refused for the share.
        #expect(!share.record(fallback: false, nowMillis: t).exceeded)
        #expect(share.read(nowMillis: t).share > 0.2)
        // Eleven seconds later the window holds none of it.
        t += 11_000
        #expect(share.read(nowMillis: t).total == 0)
        #expect(!share.record(fallback: true, nowMillis: t).exceeded)
    }

    @Test("the fallback's refusals through the verdict: enforced, shadowed, devicecheck_unavailable fails open like the store")
    func verdicts() {
        let route = RoutePolicy(mode: .enforce, onStoreError: .failOpen, fallback: FallbackPolicy())
        for e in [GateError.deviceTokenInvalid, .deviceTokenReplayed, .fallbackShareExceeded] {
            let v = RouteVerdict(route: route, mode: .enforce, outcome: .refused(e))
            #expect(v.action == .refuse(status: 401) && v.verdict == .refused && v.reason == e.code)
            let s = RouteVerdict(route: route, mode: .shadow, outcome: .refused(e))
            #expect(s.action == .forwardUnverified(recordedStatus: 401) && s.verdict == .wouldRefuse)
        }
        let open = RouteVerdict(route: route, mode: .enforce, outcome: .refused(.deviceCheckUnavailable))
        #expect(open.verdict == .failOpen && open.action == .forwardUnverified(recordedStatus: 503))
        var closed = route
        closed.onStoreError = .failClosed
        #expect(RouteVerdict(route: closed, mode: .enforce, outcome: .refused(.deviceCheckUnavailable)).action == .refuse(status: 503))
        // A fallback request has no key id: a partial rollout shadows it.
        var partial = closed
        partial.rolloutBasisPoints = 5_000
        #expect(RouteVerdict.mode(route: partial, keyID: nil) == .shadow)
        for e in [GateError.deviceTokenInvalid, .deviceTokenReplayed, .fallbackShareExceeded, .deviceCheckUnavailable] {
            Contract.check(Explanation(step: "devicecheck", error: e), on: .route, e.code)
        }
    }
}
