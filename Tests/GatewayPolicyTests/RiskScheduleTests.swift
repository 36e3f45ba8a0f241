import AppAttest
import AppAttestSimulator
import Foundation
import GatewayCrypto
import GatewayPolicy
import GatewayStore
import GatewayTestSupport
import Testing

/// What one answer of Apple's App Attest data service does to a key ("Assessing fraud risk": 200,
/// 304, 400, 401, 404, 429, 500, 503, and no answer), as one table; the schedule's own rules (first
/// refresh after the attest receipt's not-before, at most once per `refresh`, jitter by key) and
/// `Retry-After` both ways.
@Suite("RiskSchedule: the data service's answers as one table")
struct RiskScheduleTests {
    static let t: Int64 = 1_800_000_000_000
    static let day: Int64 = 86_400_000
    static let settings = RiskSchedule.Settings(refreshMillis: day, staleProbeMillis: 3 * day)
    static let key = KeyID((0..<32).map { UInt8($0 * 7 & 0xff) })!
    static let current = KeyRisk(
        metric: 2, stale: false, receiptCreatedMillis: t - day, notBeforeMillis: t + 3_600_000, expiresMillis: t + 89 * day,
        nextRefreshMillis: t)
    static var jitter: Int64 { RiskSchedule.jitter(key, span: day / 10) }

    /// A RECEIPT as the stand-in makes them (created now, not-before a day on).
    static func receipt(metric: Int64) throws -> AppAttestReceipt {
        let ca = try TestCA()
        let contents = ReceiptContents(
            appID: "ABCDE12345.com.example.app", attestedCertificate: [1, 2, 3], clientHash: [4], token: "t", type: "ATTEST",
            environment: "sandbox", creationTime: Date(timeIntervalSince1970: Double(t - 1_000) / 1000),
            expirationTime: Date(timeIntervalSince1970: Double(t + 90 * day) / 1000))
        let refreshed = contents.refreshed(riskMetric: metric, at: Date(timeIntervalSince1970: Double(t) / 1000))
        return try AppAttestReceipt.parseStored(try ca.issueReceipt(refreshed))
    }

    @Test("every answer: the result label, what is written, whether refreshes pause")
    func table() throws {
        let r = try Self.receipt(metric: 4)
        typealias P = RiskSchedule.Decision.Pause
        // (answer, result, metric, stale, next refresh, keeps the receipt, pause)
        let rows: [(RiskSchedule.Answer, RiskSchedule.Result, UInt32?, Bool?, Int64?, Bool, P?)] = [
            (.receipt(r), .refreshed, 4, false, Self.t + Self.day + Self.jitter, true, nil),
            (
                .status(304, retryAfterSeconds: nil), .notModified, 2, false,
                Self.t + 3_600_000 + RiskSchedule.jitter(Self.key, span: RiskSchedule.firstRefreshSpreadMillis), false, nil
            ),
            (.status(404, retryAfterSeconds: nil), .stale, 2, true, Self.t + 3 * Self.day, false, nil),
            (.status(400, retryAfterSeconds: nil), .badRequest, 2, false, Self.t + Self.day + Self.jitter, false, nil),
            (.status(403, retryAfterSeconds: nil), .error, 2, false, Self.t + Self.day + Self.jitter, false, nil),
            (.invalidReceipt("bad"), .invalidReceipt, 2, false, Self.t + Self.day + Self.jitter, false, nil),
            (.status(429, retryAfterSeconds: 7), .rateLimited, nil, nil, nil, false, .retryAfter(millis: 7_000)),
            (.status(429, retryAfterSeconds: nil), .rateLimited, nil, nil, nil, false, .backOff),
            (.status(500, retryAfterSeconds: nil), .serverError, nil, nil, nil, false, .backOff),
            (.status(503, retryAfterSeconds: 99_999), .serverError, nil, nil, nil, false, .retryAfter(millis: 3_600_000)),
            (.status(401, retryAfterSeconds: nil), .unauthorized, nil, nil, nil, false, .backOff),
            (.unavailable("refused"), .unavailable, nil, nil, nil, false, .backOff),
        ]
        for (answer, result, metric, stale, next, keeps, pause) in rows {
            let d = RiskSchedule.decide(answer, keyID: Self.key, current: Self.current, nowMillis: Self.t, settings: Self.settings)
            #expect(d.result == result, "\(answer)")
            #expect(d.storeReceipt == keeps, "\(answer)")
            #expect(d.pause == pause, "\(answer)")
            if pause != nil {
                #expect(d.risk == nil, "\(answer): nothing is written when every refresh pauses")
                continue
            }
            let risk = try #require(d.risk, "\(answer)")
            #expect(risk.metric == metric, "\(answer)")
            #expect(risk.stale == stale, "\(answer)")
            #expect(risk.nextRefreshMillis == next, "\(answer)")
        }
        // The refreshed receipt's dates replace the old ones.
        let d = RiskSchedule.decide(.receipt(r), keyID: Self.key, current: Self.current, nowMillis: Self.t, settings: Self.settings)
        #expect(d.risk?.receiptCreatedMillis == Self.t && d.risk?.notBeforeMillis == Self.t + Self.day)
        #expect(d.risk?.expiresMillis == Self.t + 90 * Self.day)
        #expect(RiskSchedule.Result.allCases.count == 10)
    }

    @Test("at most once per refresh per key, never before the receipt's not-before; a 304 with the not-before behind waits an hour at most")
    func schedule() {
        let short = RiskSchedule.Settings(refreshMillis: 10_000, staleProbeMillis: 60_000)
        #expect(
            RiskSchedule.nextRefresh(Self.key, notBeforeMillis: nil, nowMillis: Self.t, settings: short)
                == Self.t + 10_000 + RiskSchedule.jitter(Self.key, span: 1_000))
        #expect(
            RiskSchedule.nextRefresh(Self.key, notBeforeMillis: Self.t + Self.day, nowMillis: Self.t, settings: short) == Self.t + Self.day)
        #expect(
            RiskSchedule.afterNotModified(Self.key, notBeforeMillis: Self.t - 5, nowMillis: Self.t, settings: Self.settings)
                == Self.t + 3_600_000)
        #expect(RiskSchedule.afterNotModified(Self.key, notBeforeMillis: nil, nowMillis: Self.t, settings: short) == Self.t + 10_000)
        // Jitter: stable per key, inside its span, spread over keys.
        var seen: Set<Int64> = []
        for i in 0..<200 {
            let k = KeyID((0..<32).map { UInt8(($0 &* 31 &+ i &* 17) & 0xff) })!
            let j = RiskSchedule.jitter(k, span: 60_000)
            #expect(j >= 0 && j < 60_000)
            #expect(j == RiskSchedule.jitter(k, span: 60_000))
            seen.insert(j / 6_000)
        }
        #expect(seen.count >= 8, "200 keys fall into at least 8 of 10 tenths of the span")
        #expect(RiskSchedule.jitter(Self.key, span: 0) == 0)
    }

    @Test("the first refresh: after the attest receipt's not-before (or its creation), within a minute")
    func registered() throws {
        let ca = try TestCA()
        let created = Date(timeIntervalSince1970: Double(Self.t) / 1000)
        var contents = ReceiptContents(
            appID: "ABCDE12345.com.example.app", attestedCertificate: [1], clientHash: [2], token: "t", type: "ATTEST",
            environment: nil, creationTime: created, expirationTime: created.addingTimeInterval(90 * 86_400))
        let plain = try AppAttestReceipt.parseStored(try ca.issueReceipt(contents))
        let first = RiskSchedule.registered(receipt: plain, keyID: Self.key, nowMillis: Self.t + 500)
        #expect(first.metric == nil && !first.stale && first.receiptCreatedMillis == Self.t && first.notBeforeMillis == nil)
        #expect(first.nextRefreshMillis == Self.t + 500 + RiskSchedule.jitter(Self.key, span: 60_000))
        contents.notBefore = created.addingTimeInterval(3_600)
        let dated = try AppAttestReceipt.parseStored(try ca.issueReceipt(contents))
        let later = RiskSchedule.registered(receipt: dated, keyID: Self.key, nowMillis: Self.t + 500)
        #expect(later.nextRefreshMillis == Self.t + 3_600_000 + RiskSchedule.jitter(Self.key, span: 60_000))
    }

    @Test("back-off without Retry-After: 5 s doubling to 10 minutes; Retry-After as seconds or an HTTP date")
    func backOffAndRetryAfter() {
        #expect(
            (1...9).map { RiskSchedule.backOffMillis(failures: $0) }
                == [5_000, 10_000, 20_000, 40_000, 80_000, 160_000, 320_000, 600_000, 600_000])
        #expect(RiskSchedule.retryAfterSeconds("120", nowMillis: 0) == 120)
        #expect(RiskSchedule.retryAfterSeconds(" 3 ", nowMillis: 0) == 3)
        // 1994-11-06T08:49:37Z is 784111777 s after the epoch.
        #expect(RiskSchedule.retryAfterSeconds("Sun, 06 Nov 1994 08:49:37 GMT", nowMillis: 784_111_700_000) == 77)
        #expect(RiskSchedule.retryAfterSeconds("Sun, 06 Nov 1994 08:49:37 GMT", nowMillis: 784_111_800_000) == 0)
        #expect(RiskSchedule.retryAfterSeconds(nil, nowMillis: 0) == nil)
        #expect(RiskSchedule.retryAfterSeconds("soon", nowMillis: 0) == nil)
        #expect(RiskSchedule.retryAfterSeconds("-5", nowMillis: 0) == nil)
    }
}
