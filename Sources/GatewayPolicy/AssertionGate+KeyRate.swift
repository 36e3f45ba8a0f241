import GatewayStore

extension AssertionGate {
    /// Issue 27: a verified assertion whose key is over the route's `key_rate` (the store's commit
    /// said so and changed nothing). `explain` and the access log name the limit that refused it;
    /// the client is sent `Retry-After`.
    static func keyRateRefusal(_ base: [(String, String)], limit: KeyRateLimit?, retryAfterSeconds seconds: Int) -> Explanation {
        var e = Explanation(step: "commit", error: .keyRateLimited, fields: base)
        if let limit {
            e.add("key_rate", limit.description)
            e.add("key_rate_burst", String(limit.burst))
        }
        e.add("retry_after", String(max(1, seconds)))
        e.retryAfterSeconds = max(1, seconds)
        return e
    }
}
