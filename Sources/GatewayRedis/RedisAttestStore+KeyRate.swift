import GatewayStore
import GatewayWire

/// Issue 27, `assertion.key_rate`: the bucket of one (key, route) lives in Redis next to the key's
/// record, under the same hash tag (one Cluster slot), and the commit scripts read and take it in
/// the commit's own round trip (`RedisScripts.keyRate`). No other command is sent for it.
extension RedisAttestStore {
    /// `<prefix>r:{8 hex}` ‖ 56 hex ‖ `:` ‖ route name: the key's hash tag, then the scope.
    func keyRateName(_ id: KeyID, _ limit: KeyRateLimit) -> [UInt8] {
        Self.tagged(Array((options.keyPrefix + "r:").utf8), id.bytes) + Array((":" + limit.scope).utf8)
    }

    /// The commit scripts' key-rate arguments: count, period ms, burst, idle ms (`RedisScripts.keyRate`).
    static func appendKeyRate(_ limit: KeyRateLimit, to w: inout RESPCommandWriter) {
        w.append(decimal: Int64(limit.count))
        w.append(decimal: limit.periodMillis)
        w.append(decimal: Int64(limit.burst))
        w.append(decimal: limit.idleMillis)
    }

    /// Arguments the key rate adds to a commit script call: its bucket's name and the four above.
    static func keyRateArguments(_ commit: AssertionCommit) -> Int { commit.keyRate == nil ? 0 : 5 }
}
