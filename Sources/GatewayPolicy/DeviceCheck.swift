import Foundation
import GatewayWire
import Synchronization

/// Apple's DeviceCheck, as the fallback and the two bits use it ("Accessing and modifying
/// per-device data", developer.apple.com/documentation/devicecheck/accessing-and-modifying-per-device-data):
/// three `POST` endpoints taking JSON (`device_token`, `transaction_id`, `timestamp` in ms since
/// 1970; `bit0`/`bit1` for an update) with `Authorization: Bearer <ES256 JWT>`. Pure: what is sent,
/// and what one answer means. docs/verification.md, "Devices without App Attest", has the same
/// table in prose.
public enum DeviceCheck {
    /// One of DeviceCheck's endpoints (the `endpoint` label of `attest_gateway_devicecheck_requests_total`).
    public enum Call: String, Sendable, CaseIterable {
        case validate = "validate_device_token"
        case query = "query_two_bits"
        case update = "update_two_bits"

        /// After the base url.
        public var path: String { "/v1/" + rawValue }
    }

    /// The `result` label: what one answer was.
    public enum Result: String, Sendable, CaseIterable {
        /// `200`: the token is valid (validate, update), or its bits (query).
        case ok
        /// `200` to a query with the plain-text body `Bit State Not Found`: the bits were never set.
        case bitsNotFound = "bits_not_found"
        /// `400` `Missing or incorrectly formatted device token payload`: the device's token is refused.
        case invalidToken = "invalid_token"
        /// `400` about the timestamp: the gateway's clock, not the device.
        case badTimestamp = "bad_timestamp"
        /// `400` about the authorization token, or `401`: the team's key, key id or team id.
        case unauthorized
        /// Any other `400` (bits, payload): the gateway's request.
        case badRequest = "bad_request"
        /// `429`: too many requests for the team; every call pauses.
        case rateLimited = "rate_limited"
        /// `5xx`: every call pauses.
        case serverError = "server_error"
        /// No answer (connection, TLS, timeout): every call pauses.
        case unavailable
        /// `200` whose body is not what the endpoint answers, or any other status.
        case error
    }

    /// What a fallback request gets for an answer, and whether every call pauses.
    public struct Decision: Sendable, Equatable {
        public var result: Result
        /// nil: the device's token is valid. Else the refusal (`device_token_invalid`, or
        /// `devicecheck_unavailable` for anything that is not the device's fault).
        public var refusal: GateError?
        /// The bits, for a query answered `200` (nil inside: never set).
        public var bits: Bits??
        /// Every call waits: `Retry-After` (ms), or the caller's growing back-off (nil inside).
        public var pause: Int64??
        /// Why, for the log and explain.
        public var detail: String

        public init(result: Result, refusal: GateError?, bits: Bits??, pause: Int64??, detail: String) {
            self.result = result
            self.refusal = refusal
            self.bits = bits
            self.pause = pause
            self.detail = detail
        }
    }

    /// A device's two bits as a query answers them (`bit0`, `bit1`, `last_update_time` as `YYYY-MM`).
    public struct Bits: Sendable, Equatable {
        public var bit0: Bool
        public var bit1: Bool
        public var lastUpdate: String?

        public init(bit0: Bool, bit1: Bool, lastUpdate: String? = nil) {
            self.bit0 = bit0
            self.bit1 = bit1
            self.lastUpdate = lastUpdate
        }
    }

    /// The value of `X-Device-Check-Bits` upstream: `bit0=1; bit1=0; updated=2026-11`, or `unset`
    /// when Apple has no state for the device (its bits were never set).
    public static func bitsHeader(_ bits: Bits?) -> String {
        guard let bits else { return "unset" }
        var text = "bit0=\(bits.bit0 ? 1 : 0); bit1=\(bits.bit1 ? 1 : 0)"
        if let month = bits.lastUpdate { text += "; updated=\(month)" }
        return text
    }

    /// The request body: `{"device_token":…,"transaction_id":…,"timestamp":…}` (plus `bit0` and
    /// `bit1` for an update: both, always, since they belong to the device and every app of the team).
    public static func body(deviceToken: String, transactionID: String, timestampMillis: Int64, update: Bits? = nil) -> [UInt8] {
        var o = JSONObject()
        o.set("device_token", deviceToken)
        o.set("transaction_id", transactionID)
        o.set("timestamp", timestampMillis)
        if let update {
            o.set("bit0", update.bit0)
            o.set("bit1", update.bit1)
        }
        return Array(o.description.utf8)
    }

    /// What `status` and `body` (and `Retry-After`, in seconds) mean for `call`.
    public static func decide(_ call: Call, status: Int, body: [UInt8], retryAfterSeconds: Int64?) -> Decision {
        let text = String(decoding: body.prefix(512), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        let lower = text.lowercased()
        func unavailable(_ result: Result, _ detail: String, pause: Int64?? = nil) -> Decision {
            Decision(result: result, refusal: .deviceCheckUnavailable, bits: nil, pause: pause, detail: detail)
        }
        let retryAfter: Int64?? = .some(retryAfterSeconds.map { min(max($0, 1), 3_600) * 1000 })
        switch status {
        case 200:
            guard call == .query else { return Decision(result: .ok, refusal: nil, bits: nil, pause: nil, detail: "valid") }
            if lower.hasPrefix("bit state not found") {
                return Decision(result: .bitsNotFound, refusal: nil, bits: .some(nil), pause: nil, detail: "bit state not found")
            }
            guard let bits = parseBits(body) else {
                return unavailable(.error, "a 200 query answer that is neither bits nor \"Bit State Not Found\"")
            }
            return Decision(result: .ok, refusal: nil, bits: .some(bits), pause: nil, detail: "bits")
        case 400:
            if lower.contains("device token") {
                return Decision(result: .invalidToken, refusal: .deviceTokenInvalid, bits: nil, pause: nil, detail: text)
            }
            if lower.contains("time stamp") || lower.contains("timestamp") { return unavailable(.badTimestamp, text) }
            if lower.contains("authorization") || lower.contains("authentication") {
                return unavailable(.unauthorized, text, pause: .some(nil))
            }
            return unavailable(.badRequest, text)
        case 401, 403: return unavailable(.unauthorized, text.isEmpty ? "status \(status)" : text, pause: .some(nil))
        case 429: return unavailable(.rateLimited, "status 429", pause: retryAfter)
        case 500...599: return unavailable(.serverError, "status \(status)", pause: retryAfter)
        default: return unavailable(.error, "status \(status)")
        }
    }

    /// A query's `200` JSON body: `bit0` and `bit1` (booleans; 0 and 1 read as such), and
    /// `last_update_time` (`YYYY-MM`) when it is one.
    public static func parseBits(_ body: [UInt8]) -> Bits? {
        guard let o = (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any] else { return nil }
        func bit(_ key: String) -> Bool? {
            guard let n = o[key] as? NSNumber else { return nil }
            let v = n.intValue
            return v == 0 || v == 1 ? v == 1 : nil
        }
        guard let b0 = bit("bit0"), let b1 = bit("bit1") else { return nil }
        let month = (o["last_update_time"] as? String).flatMap { isMonth($0) ? $0 : nil }
        return Bits(bit0: b0, bit1: b1, lastUpdate: month)
    }

    /// `YYYY-MM`.
    static func isMonth(_ s: String) -> Bool {
        let u = Array(s.utf8)
        guard u.count == 7, u[4] == UInt8(ascii: "-") else { return false }
        return u.enumerated().allSatisfy { $0.offset == 4 || ($0.element >= 0x30 && $0.element <= 0x39) }
    }

    /// An upstream's `X-Device-Check-Update`: `bit0=1`, `bit1=0`, or both (`;` or `,` between them;
    /// values 0/1 or false/true). nil when it says anything else (nothing is written then).
    public static func parseUpdate(_ value: String) -> (bit0: Bool?, bit1: Bool?)? {
        var bit0: Bool?
        var bit1: Bool?
        for part in value.split(whereSeparator: { $0 == ";" || $0 == "," }) {
            let item = part.trimmingCharacters(in: .whitespaces)
            guard !item.isEmpty else { continue }
            let kv = item.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces).lowercased() }
            guard kv.count == 2 else { return nil }
            let v: Bool
            switch kv[1] {
            case "1", "true": v = true
            case "0", "false": v = false
            default: return nil
            }
            switch kv[0] {
            case "bit0" where bit0 == nil: bit0 = v
            case "bit1" where bit1 == nil: bit1 = v
            default: return nil
            }
        }
        guard bit0 != nil || bit1 != nil else { return nil }
        return (bit0, bit1)
    }

    /// The bits an update writes: those the upstream named, the others as the device had them
    /// (read at the request; unset reads as 0).
    public static func merged(_ update: (bit0: Bool?, bit1: Bool?), over current: Bits?) -> Bits {
        Bits(bit0: update.bit0 ?? current?.bit0 ?? false, bit1: update.bit1 ?? current?.bit1 ?? false)
    }

    /// A device token as `X-Apple-Device-Token` carries it: standard base64 of `DCDevice`'s token
    /// (about 2.5 KB decoded); nil when it is not base64 or not of a plausible size.
    public static func tokenBytes(_ header: String) -> [UInt8]? {
        guard header.utf8.count <= maxTokenBase64, let bytes = try? Base64.decode(header), bytes.count >= minTokenBytes else { return nil }
        return bytes
    }

    static let maxTokenBase64 = 8 * 1024
    static let minTokenBytes = 16
}

/// A route's share of fallback requests over its `window` (`fallback.max_share`): every request on
/// the route is counted, and those that took the fallback. Buckets of a tenth of the window; a
/// request is judged with itself counted. Shared by the event loops (one lock per request on a
/// fallback route); time is given, never read.
public final class FallbackShare: Sendable {
    public struct Settings: Sendable, Equatable {
        public var maxShareBasisPoints: Int
        public var windowMillis: Int64
        public var minRequests: Int

        public init(_ f: FallbackPolicy) {
            maxShareBasisPoints = f.maxShareBasisPoints
            windowMillis = max(10, f.windowMillis)
            minRequests = f.minRequests
        }
    }

    public struct Reading: Sendable, Equatable {
        /// Requests and fallback requests in the window, this one included.
        public var total: Int
        public var fallback: Int
        /// Over `max_share` (and at least `min_requests` in the window): a fallback request is refused.
        public var exceeded: Bool
        /// The first refusal of this window (for the once-per-window log line).
        public var firstInWindow: Bool

        public var share: Double { total == 0 ? 0 : Double(fallback) / Double(total) }
    }

    static let bucketCount = 10
    public let settings: Settings
    private struct State {
        var buckets: [(epoch: Int64, total: Int, fallback: Int)]
        var loggedWindow: Int64 = -1
    }
    private let state: Mutex<State>

    public init(_ settings: Settings) {
        self.settings = settings
        state = Mutex(State(buckets: Array(repeating: (-1, 0, 0), count: Self.bucketCount)))
    }

    private var bucketMillis: Int64 { max(1, settings.windowMillis / Int64(Self.bucketCount)) }

    /// Counts one request (`fallback`: it took the fallback) at `nowMillis` and reads the share.
    public func record(fallback: Bool, nowMillis: Int64) -> Reading {
        let epoch = nowMillis / bucketMillis
        return state.withLock { s in
            let i = Int(epoch % Int64(Self.bucketCount))
            if s.buckets[i].epoch != epoch { s.buckets[i] = (epoch, 0, 0) }
            s.buckets[i].total += 1
            if fallback { s.buckets[i].fallback += 1 }
            var total = 0
            var fb = 0
            for b in s.buckets where b.epoch > epoch - Int64(Self.bucketCount) {
                total += b.total
                fb += b.fallback
            }
            let exceeded = fallback && total >= settings.minRequests && fb * 10_000 > settings.maxShareBasisPoints * total
            var first = false
            if exceeded {
                let window = epoch / Int64(Self.bucketCount)
                if s.loggedWindow != window {
                    s.loggedWindow = window
                    first = true
                }
            }
            return Reading(total: total, fallback: fb, exceeded: exceeded, firstInWindow: first)
        }
    }

    /// The share now, without counting a request (the gauge).
    public func read(nowMillis: Int64) -> Reading {
        let epoch = nowMillis / bucketMillis
        return state.withLock { s in
            var total = 0
            var fb = 0
            for b in s.buckets where b.epoch > epoch - Int64(Self.bucketCount) && b.epoch <= epoch {
                total += b.total
                fb += b.fallback
            }
            return Reading(total: total, fallback: fb, exceeded: false, firstInWindow: false)
        }
    }
}
