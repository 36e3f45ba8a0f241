import Foundation
import GatewayPolicy
import GatewayProxy
import GatewayWire
import Synchronization

/// The last refusals (and shadow would-refusals), by request id, for the admin `explain` endpoint:
/// which step failed and the computed vs presented values.
///
/// What it keeps (docs/operations.md, "What /explain keeps"): per refusal the request id, time,
/// route, mode, the HTTP status sent, method, the request-target with every query value redacted,
/// the client address and the gate's details (key id, counters, rpIdHash, a shortened challenge).
/// Never bodies, assertion or attestation bytes, header values, or query values. Bounded three ways:
/// at most `capacity` entries (oldest dropped first), each detail value at most `maxValueBytes` and
/// all details of an entry at most `maxDetailBytes`, and nothing older than `maxAgeMillis` is
/// served or kept. In memory only: a restart forgets everything.
final class ExplainLog: Sendable {
    struct Entry: Sendable {
        let id: String
        let atMillis: Int64
        /// The HTTP status the client was sent. For a request forwarded anyway (`verdict`
        /// `would_refuse`, `fail_open`, `flagged`), the upstream's answer, known once the exchange
        /// ended (nil until then, and when the client got none).
        var status: Int?
        /// For a request forwarded anyway: the status a refusal sends (what an enforcing or
        /// `on_risk: refuse` route would have answered).
        let refusalStatus: Int?
        let route: String
        let mode: String
        /// `refused` (the client got `status`), or the request was forwarded: `would_refuse`
        /// (shadowed), `fail_open` (the store could not answer on an `on_store_error: fail_open` route).
        let verdict: RouteVerdict.Label
        let method: String
        /// Query values redacted, at most `maxValueBytes`.
        let target: String
        let peer: String?
        /// Bounded and scrubbed (`bounded(_:)`).
        let explanation: Explanation
    }

    private struct Ring {
        /// Oldest at `head`; grows up to the capacity, then wraps.
        var entries: [Entry?] = []
        var head = 0
        var count = 0
        var byID: [String: Int] = [:]
    }

    static let defaultCapacity = 4096
    static let maxValueBytes = 256
    static let maxDetailBytes = 2048
    static let defaultMaxAgeMillis: Int64 = 24 * 3600 * 1000

    let capacity: Int
    let maxAgeMillis: Int64
    private let clock: @Sendable () -> Int64
    private let ring = Mutex(Ring())

    init(
        capacity: Int = ExplainLog.defaultCapacity, maxAgeMillis: Int64 = ExplainLog.defaultMaxAgeMillis,
        clock: @escaping @Sendable () -> Int64 = { AttestContext.nowMillis() }
    ) {
        self.capacity = max(1, capacity)
        self.maxAgeMillis = maxAgeMillis
        self.clock = clock
    }

    /// Records a refusal under its exchange's request id (`RequestID`; a new random one when `id`
    /// is empty) and returns the id. `status` is what the client was sent. Ids a client chose need
    /// not be unique: an id names its newest entry.
    func record(
        _ e: Explanation, id: String, status: Int, route: String, mode: String, method: String, target: String, peer: String?
    ) -> String {
        add(
            e, id: id, status: status, refusalStatus: nil, route: route, mode: mode, verdict: .refused, method: method, target: target,
            peer: peer)
    }

    /// Records a decision whose request is forwarded anyway (`verdict` `would_refuse`, `fail_open`,
    /// `flagged`): `refusalStatus` is what a refusal sends; the status the client is sent comes
    /// with `settle` when its exchange ends.
    func record(
        _ e: Explanation, id: String, refusalStatus: Int, route: String, mode: String, verdict: RouteVerdict.Label, method: String,
        target: String, peer: String?
    ) -> String {
        add(
            e, id: id, status: nil, refusalStatus: refusalStatus, route: route, mode: mode, verdict: verdict, method: method,
            target: target, peer: peer)
    }

    /// The status the client was sent for a request forwarded anyway (0, none: the exchange ended
    /// without a response), set once on its entry.
    func settle(_ id: String, status: Int) {
        guard status > 0 else { return }
        ring.withLock { r in
            guard let slot = r.byID[id], var e = r.entries[slot], e.refusalStatus != nil, e.status == nil else { return }
            e.status = status
            r.entries[slot] = e
        }
    }

    private func add(
        _ e: Explanation, id: String, status: Int?, refusalStatus: Int?, route: String, mode: String, verdict: RouteVerdict.Label,
        method: String, target: String, peer: String?
    ) -> String {
        let id = id.isEmpty ? RequestIDGenerator().next().text : id
        let now = clock()
        let entry = Entry(
            id: id, atMillis: now, status: status, refusalStatus: refusalStatus, route: route, mode: mode, verdict: verdict,
            method: Self.cap(method, 32),
            target: Self.cap(Explanation.redactQuery(target), Self.maxValueBytes), peer: peer, explanation: Self.bounded(e))
        ring.withLock { r in
            expire(&r, now: now)
            if r.count == capacity { removeOldest(&r) }
            let slot = (r.head + r.count) % capacity
            if slot == r.entries.count { r.entries.append(entry) } else { r.entries[slot] = entry }
            r.count += 1
            r.byID[id] = slot
        }
        return id
    }

    func entry(_ id: String) -> Entry? {
        let now = clock()
        return ring.withLock { r in
            expire(&r, now: now)
            return r.byID[id].flatMap { r.entries[$0] }
        }
    }

    /// The newest first.
    func recent(_ limit: Int) -> [Entry] {
        let now = clock()
        return ring.withLock { r in
            expire(&r, now: now)
            return (0..<min(limit, r.count)).compactMap { r.entries[(r.head + r.count - 1 - $0) % capacity] }
        }
    }

    var count: Int { ring.withLock { $0.count } }

    private func expire(_ r: inout Ring, now: Int64) {
        while r.count > 0, let oldest = r.entries[r.head], now - oldest.atMillis > maxAgeMillis { removeOldest(&r) }
    }

    private func removeOldest(_ r: inout Ring) {
        // A newer entry under the same id (a client's id used twice) keeps its place.
        if let oldest = r.entries[r.head], r.byID[oldest.id] == r.head { r.byID[oldest.id] = nil }
        r.entries[r.head] = nil
        r.head = (r.head + 1) % capacity
        r.count -= 1
    }

    /// The details as kept: each value scrubbed of byte dumps (`h'…'` from CBOR diagnostics) and cut
    /// to `maxValueBytes`, and no more than `maxDetailBytes` of them in all (the rest counted in
    /// `truncated_fields`).
    static func bounded(_ e: Explanation) -> Explanation {
        var out = Explanation(step: e.step, error: e.error)
        var used = 0
        for (i, (name, value)) in e.fields.enumerated() {
            let v = cap(scrub(value), maxValueBytes)
            let cost = name.utf8.count + v.utf8.count
            if used + cost > maxDetailBytes {
                out.add("truncated_fields", String(e.fields.count - i))
                break
            }
            used += cost
            out.add(name, v)
        }
        return out
    }

    /// `h'0a1b…'` byte strings (a CBOR diagnostic's rendering of part of the client's assertion or
    /// attestation) become `h'…'`.
    static func scrub(_ value: String) -> String {
        guard value.contains("h'") else { return value }
        var out = ""
        var rest = Substring(value)
        while let r = rest.range(of: "h'") {
            out += rest[..<r.upperBound]
            let after = rest[r.upperBound...]
            guard let close = after.firstIndex(of: "'") else {
                out += "…'"
                return out
            }
            out += "…'"
            rest = after[after.index(after: close)...]
        }
        return out + rest
    }

    /// At most `bytes` UTF-8 bytes, cut on a character boundary, `…` marking a cut.
    static func cap(_ s: String, _ bytes: Int) -> String {
        guard s.utf8.count > bytes else { return s }
        var out = ""
        var n = 0
        for c in s {
            let w = c.utf8.count
            if n + w > bytes - 3 { break }
            out.append(c)
            n += w
        }
        return out + "…"
    }

    static func json(_ e: Entry) -> JSONObject {
        var o = JSONObject()
        o.set("requestId", e.id)
        o.set("time", RFC3339.format(millis: e.atMillis))
        o.set("route", e.route)
        o.set("mode", e.mode)
        o.set("verdict", e.verdict.rawValue)
        o.set("method", e.method)
        o.set("target", e.target)
        o.set("client", e.peer)
        o.merge(e.explanation.json(status: e.status))
        if let refusal = e.refusalStatus { o.set("refusalStatus", refusal) }
        return o
    }
}
