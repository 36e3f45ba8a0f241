import AppAttest
import Foundation
import GatewayStore

/// When a key's risk metric is refreshed, and what one answer of Apple's App Attest data service
/// does ("Assessing fraud risk": `200` a new receipt, `304` before the receipt's not-before, `400`
/// bad payload or environment, `401` token, `404` no data (older than 30 days), `429` too many
/// requests, `500`/`503`). Pure: the answer, the key's stored risk, the settings and the instant
/// in, the key's new risk (or nothing to write) and whether every refresh must pause out.
/// docs/verification.md, "The risk metric", has the same table in prose.
public enum RiskSchedule {
    /// The `result` label of `attest_gateway_receipt_refreshes_total`.
    public enum Result: String, Sendable, CaseIterable {
        /// `200` and a `RECEIPT` of this key that verified: stored with its metric.
        case refreshed
        /// `304`: asked before the receipt's not-before; asked again then.
        case notModified = "not_modified"
        /// `404`: Apple has no data for the receipt (none younger than 30 days): the last metric is
        /// kept and marked stale; asked again at `risk.stale_probe`.
        case stale
        /// `429`: every refresh pauses (`Retry-After`, else a growing back-off).
        case rateLimited = "rate_limited"
        /// `5xx`: every refresh pauses, as for `429`.
        case serverError = "server_error"
        /// `401`: Apple refused the token (team id, key id, key or clock): every refresh pauses.
        case unauthorized
        /// `400`: the receipt or its environment was refused; this key is asked again after `refresh`.
        case badRequest = "bad_request"
        /// `200` with a body that is not a receipt of this key (signature, chain, app id, key, type).
        case invalidReceipt = "invalid_receipt"
        /// No answer (connection, TLS, timeout): every refresh pauses.
        case unavailable
        /// Any other status: this key is asked again after `refresh`.
        case error
    }

    /// What the service answered for one key.
    public enum Answer: Sendable {
        /// `200` whose body verified as a `RECEIPT` of the key (`ReceiptVerifier`).
        case receipt(AppAttestReceipt)
        /// `200` whose body did not: why.
        case invalidReceipt(String)
        /// Any other status, with its `Retry-After` in seconds when it had one.
        case status(Int, retryAfterSeconds: Int64?)
        /// No answer: why.
        case unavailable(String)
    }

    public struct Settings: Sendable, Equatable {
        /// `risk.refresh`: at most one refresh per key per this long (plus up to a tenth, by key).
        public var refreshMillis: Int64
        /// `risk.stale_probe`: how often a stale key is asked again (fixed, no back-off).
        public var staleProbeMillis: Int64

        public init(refreshMillis: Int64, staleProbeMillis: Int64) {
            self.refreshMillis = max(1_000, refreshMillis)
            self.staleProbeMillis = max(1_000, staleProbeMillis)
        }
    }

    public struct Decision: Sendable, Equatable {
        public var result: Result
        /// The key's risk to store (only over the receipt the refresh started from); nil: nothing is
        /// written, the key stays due and is taken again when the pause ends.
        public var risk: KeyRisk?
        /// Keep the new receipt in place of the old (`refreshed`).
        public var storeReceipt: Bool
        /// Every refresh waits: for the service's `Retry-After` (milliseconds), or (nil inside) for
        /// the refresher's growing back-off. nil: no pause.
        public var pause: Pause?

        public enum Pause: Sendable, Equatable {
            case retryAfter(millis: Int64)
            case backOff
        }
    }

    /// A key's share of a spread, from its id (stable, so that keys registered together spread over
    /// the span, and a key keeps its place): 0 ..< `span` milliseconds.
    public static func jitter(_ keyID: KeyID, span: Int64) -> Int64 {
        guard span > 0 else { return 0 }
        let word = keyID.bytes[8..<16].reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        return Int64(word % UInt64(span))
    }

    /// The spread of a first refresh: keys that attest together are not all sent at once.
    public static let firstRefreshSpreadMillis: Int64 = 60_000

    /// A key just registered with its `ATTEST` receipt: the receipt's dates, and the first refresh
    /// once its not-before has passed (Apple answers `304` before), spread over `spreadMillis` (a
    /// minute, or a tenth of `risk.refresh` when that is shorter: `AttestPolicy`).
    public static func registered(
        receipt: AppAttestReceipt, keyID: KeyID, nowMillis: Int64, spreadMillis: Int64 = firstRefreshSpreadMillis
    ) -> KeyRisk {
        let ready = max(receipt.notBefore?.millis ?? receipt.creationTime.millis, nowMillis)
        return KeyRisk(
            receiptCreatedMillis: receipt.creationTime.millis, notBeforeMillis: receipt.notBefore?.millis,
            expiresMillis: receipt.expirationTime?.millis, nextRefreshMillis: ready + jitter(keyID, span: spreadMillis))
    }

    /// The next regular refresh: `refresh` from now plus the key's share of a tenth of it, and never
    /// before the receipt's not-before.
    public static func nextRefresh(_ keyID: KeyID, notBeforeMillis: Int64?, nowMillis: Int64, settings: Settings) -> Int64 {
        let regular = nowMillis + settings.refreshMillis + jitter(keyID, span: settings.refreshMillis / 10)
        return max(regular, notBeforeMillis ?? 0)
    }

    /// After a `304` with the receipt's not-before ahead: then, plus the key's share of a minute;
    /// with it behind (clocks disagree): in `refresh`, at most an hour.
    public static func afterNotModified(_ keyID: KeyID, notBeforeMillis: Int64?, nowMillis: Int64, settings: Settings) -> Int64 {
        if let notBefore = notBeforeMillis, notBefore > nowMillis {
            return notBefore + jitter(keyID, span: firstRefreshSpreadMillis)
        }
        return nowMillis + min(settings.refreshMillis, 3_600_000)
    }

    /// What one answer does to the key whose stored risk is `current`.
    public static func decide(_ answer: Answer, keyID: KeyID, current: KeyRisk, nowMillis: Int64, settings: Settings) -> Decision {
        func later(_ result: Result) -> Decision {
            var risk = current
            risk.nextRefreshMillis = nextRefresh(keyID, notBeforeMillis: nil, nowMillis: nowMillis, settings: settings)
            return Decision(result: result, risk: risk, storeReceipt: false, pause: nil)
        }
        func pause(_ result: Result, _ retryAfterSeconds: Int64?) -> Decision {
            Decision(
                result: result, risk: nil, storeReceipt: false,
                pause: retryAfterSeconds.map { .retryAfter(millis: min(max($0, 1), 3_600) * 1000) } ?? .backOff)
        }
        switch answer {
        case .receipt(let r):
            let metric = r.riskMetric.map { UInt32(clamping: max(0, $0)) }
            let risk = KeyRisk(
                metric: metric.map { min($0, KeyRisk.maxMetric) }, stale: false, receiptCreatedMillis: r.creationTime.millis,
                notBeforeMillis: r.notBefore?.millis, expiresMillis: r.expirationTime?.millis,
                nextRefreshMillis: nextRefresh(keyID, notBeforeMillis: r.notBefore?.millis, nowMillis: nowMillis, settings: settings))
            return Decision(result: .refreshed, risk: risk, storeReceipt: true, pause: nil)
        case .invalidReceipt:
            return later(.invalidReceipt)
        case .unavailable:
            return Decision(result: .unavailable, risk: nil, storeReceipt: false, pause: .backOff)
        case .status(let status, let retryAfter):
            switch status {
            case 304:
                var risk = current
                risk.nextRefreshMillis = afterNotModified(
                    keyID, notBeforeMillis: current.notBeforeMillis, nowMillis: nowMillis, settings: settings)
                return Decision(result: .notModified, risk: risk, storeReceipt: false, pause: nil)
            case 404:
                var risk = current
                risk.stale = true
                risk.nextRefreshMillis = nowMillis + settings.staleProbeMillis
                return Decision(result: .stale, risk: risk, storeReceipt: false, pause: nil)
            case 429: return pause(.rateLimited, retryAfter)
            case 500...599: return pause(.serverError, retryAfter)
            case 401: return pause(.unauthorized, retryAfter)
            case 400: return later(.badRequest)
            default: return later(.error)
            }
        }
    }

    /// The pause after `failures` answers in a row that asked for one without `Retry-After`: 5 s,
    /// doubling, at most 10 minutes.
    public static func backOffMillis(failures: Int) -> Int64 {
        let shift = min(max(failures, 1) - 1, 7)
        return min(5_000 << Int64(shift), 600_000)
    }

    /// `Retry-After` as seconds from `nowMillis`: delta-seconds, or an HTTP-date (RFC 9110 §10.2.3,
    /// the IMF-fixdate form); nil when absent or unreadable.
    public static func retryAfterSeconds(_ value: String?, nowMillis: Int64) -> Int64? {
        guard let value = value?.trimmingCharacters(in: .whitespaces), !value.isEmpty else { return nil }
        if value.allSatisfy({ $0.isASCII && $0.isNumber }) { return value.count <= 9 ? Int64(value) : nil }
        guard let date = HTTPDate.parse(value) else { return nil }
        return max(0, (date - nowMillis + 999) / 1000)
    }
}

/// The IMF-fixdate of RFC 9110 (`Sun, 06 Nov 1994 08:49:37 GMT`), to Unix milliseconds.
enum HTTPDate {
    static func parse(_ text: String) -> Int64? {
        let parts = text.split(separator: " ")
        guard parts.count == 6, parts[0].hasSuffix(","), parts[5] == "GMT", let day = Int(parts[1]), let year = Int(parts[3]),
            let month = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"].firstIndex(
                of: String(parts[2]))
        else { return nil }
        let clock = parts[4].split(separator: ":")
        guard clock.count == 3, let h = Int(clock[0]), let m = Int(clock[1]), let s = Int(clock[2]), h < 24, m < 60, s < 61,
            (1...31).contains(day)
        else { return nil }
        let stamp = String(format: "%04d-%02d-%02dT%02d:%02d:%02dZ", year, month + 1, day, h, m, s)
        return ReceiptTime(stamp)?.millis
    }
}
