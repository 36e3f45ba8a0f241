import GatewayWire

/// Why a request was refused (or would have been, in shadow mode): the step that failed and the
/// values computed and presented, for the admin `explain` endpoint. Never holds secrets: challenges
/// are shortened, assertion and attestation bytes are never recorded.
public struct Explanation: Error, Sendable {
    /// The step of the pipeline that decided: `headers`, `key_lookup`, `app_policy`, `verify`,
    /// `commit`, `store`, `attestation`, `receipt`, `body`.
    public var step: String
    public var error: GateError
    /// Ordered `name: value` pairs (computed vs presented values).
    public var fields: [(String, String)]
    /// Sent as `Retry-After` (seconds) with the refusal: when a retry can succeed.
    public var retryAfterSeconds: Int?

    public init(step: String, error: GateError, fields: [(String, String)] = []) {
        self.step = step
        self.error = error
        self.fields = fields
    }

    public mutating func add(_ name: String, _ value: String) { fields.append((name, value)) }

    /// A challenge shortened so it identifies itself in a log without being usable.
    public static func redact(_ challenge: String) -> String {
        let prefix = challenge.prefix(6)
        return challenge.count > 6 ? "\(prefix)…(\(challenge.count) chars)" : "…"
    }

    /// A request-target with every query value replaced by `<redacted>`, the names kept:
    /// `/pay?session=abc&card=4111` → `/pay?session=<redacted>&card=<redacted>`. A query item
    /// without `=` is redacted whole (it may be a bare token); an empty value stays empty. Anything
    /// after a `#` is redacted too.
    public static func redactQuery(_ target: String) -> String {
        guard let start = target.utf8.firstIndex(where: { $0 == UInt8(ascii: "?") || $0 == UInt8(ascii: "#") }) else {
            return target
        }
        var out = String(target[..<start])
        if target.utf8[start] == UInt8(ascii: "#") { return out + "#" + redacted }
        out += "?"
        let query = target.utf8[target.utf8.index(after: start)...]
        let fragment = query.firstIndex(of: UInt8(ascii: "#"))
        var first = true
        for item in query[..<(fragment ?? query.endIndex)].split(separator: UInt8(ascii: "&"), omittingEmptySubsequences: false) {
            if !first { out += "&" }
            first = false
            guard !item.isEmpty else { continue }
            if let eq = item.firstIndex(of: UInt8(ascii: "=")) {
                out += String(Substring(item[..<eq])) + "="
                if item.index(after: eq) != item.endIndex { out += redacted }
            } else {
                out += redacted
            }
        }
        if fragment != nil { out += "#" + redacted }
        return out
    }

    public static let redacted = "<redacted>"

    /// The decision as `explain` shows it. `status` is the HTTP status the client was sent (for a
    /// request forwarded anyway, `RouteVerdict` `would_refuse` or `fail_open`, the one a refusal
    /// would send): on a protected route that is `GateError.routeStatus`, on the endpoints
    /// `GateError.status`.
    /// `status`: what the client was sent (nil: not known, e.g. a forwarded request still in flight).
    public func json(status: Int?) -> JSONObject {
        var o = JSONObject()
        o.set("step", step)
        o.set("error", error.code)
        o.set("status", status.map { .int(Int64($0)) } ?? .null)
        o.set("action", error.action.rawValue)
        var details = JSONObject()
        for (k, v) in fields { details.set(k, v) }
        o.set("details", .object(details))
        return o
    }
}
