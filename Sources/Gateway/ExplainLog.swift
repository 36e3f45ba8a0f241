import Foundation
import GatewayPolicy
import GatewayWire
import Synchronization

/// The last refusals (and shadow would-refusals), by request id, for the admin `explain` endpoint:
/// which step failed and the computed vs presented values. Bounded (oldest dropped first); holds no
/// secrets (challenges shortened, no assertion or attestation bytes).
final class ExplainLog: Sendable {
    struct Entry: Sendable {
        let id: String
        let atMillis: Int64
        let route: String
        let mode: String
        let method: String
        let target: String
        let peer: String?
        let explanation: Explanation
    }

    private struct Ring {
        var entries: [Entry] = []
        var next = 0
        var byID: [String: Int] = [:]
    }

    let capacity: Int
    private let ring = Mutex(Ring())

    init(capacity: Int = 4096) {
        self.capacity = max(1, capacity)
    }

    /// Records a decision and returns its request id (16 hex digits, random).
    func record(_ e: Explanation, route: String, mode: String, method: String, target: String, peer: String?) -> String {
        var rng = SystemRandomNumberGenerator()
        let id = Hex.encode(withUnsafeBytes(of: rng.next() as UInt64) { Array($0) })
        let entry = Entry(
            id: id, atMillis: AttestContext.nowMillis(), route: route, mode: mode, method: method,
            target: String(target.prefix(256)), peer: peer, explanation: e)
        ring.withLock { r in
            if r.entries.count < capacity {
                r.byID[id] = r.entries.count
                r.entries.append(entry)
            } else {
                r.byID[r.entries[r.next].id] = nil
                r.entries[r.next] = entry
                r.byID[id] = r.next
                r.next = (r.next + 1) % capacity
            }
        }
        return id
    }

    func entry(_ id: String) -> Entry? {
        ring.withLock { r in r.byID[id].map { r.entries[$0] } }
    }

    /// The newest first.
    func recent(_ limit: Int) -> [Entry] {
        ring.withLock { r in
            let n = r.entries.count
            guard n > 0 else { return [] }
            let newest = n < capacity ? n - 1 : (r.next - 1 + capacity) % capacity
            return (0..<min(limit, n)).map { r.entries[(newest - $0 + n) % n] }
        }
    }

    static func json(_ e: Entry) -> JSONObject {
        var o = JSONObject()
        o.set("requestId", e.id)
        o.set("time", RFC3339.format(millis: e.atMillis))
        o.set("route", e.route)
        o.set("mode", e.mode)
        o.set("method", e.method)
        o.set("target", e.target)
        o.set("client", e.peer)
        o.merge(e.explanation.json)
        return o
    }
}
