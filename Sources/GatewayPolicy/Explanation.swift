import GatewayWire

/// Why a request was refused (or would have been, in shadow mode): the step that failed and the
/// values computed and presented, for the admin `explain` endpoint. Never holds secrets: challenges
/// are shortened, assertion and attestation bytes are never recorded.
public struct Explanation: Error, Sendable {
    /// The step of the pipeline that decided: `headers`, `key_lookup`, `app_policy`, `verify`,
    /// `commit`, `store`, `attestation`, `body`.
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

    public var json: JSONObject {
        var o = JSONObject()
        o.set("step", step)
        o.set("error", error.code)
        o.set("status", error.status)
        o.set("action", error.action.rawValue)
        var details = JSONObject()
        for (k, v) in fields { details.set(k, v) }
        o.set("details", .object(details))
        return o
    }
}
