import GatewayStore
import GatewayWire

/// The DeviceCheck fallback's replay cache on Redis (docs/redis.md, "Device token claims"): one key
/// per claimed token, `<prefix>dt:<hex SHA-256>`, written by one `SET … NX PX <ttl>` (atomic on its
/// own, so no script; on Cluster it lives in its own key's slot). Every gateway of a fleet claims a
/// token in the same key, so a token is accepted once across the fleet. A release is `DEL`.
extension RedisAttestStore {
    static let set = Array("SET".utf8)
    static let del = Array("DEL".utf8)
    static let one = Array("1".utf8)
    static let nx = Array("NX".utf8)
    static let px = Array("PX".utf8)

    /// `ag:dt:` ‖ 64 hex.
    func deviceTokenName(_ digest: [UInt8]) -> [UInt8] { Array((options.keyPrefix + "dt:" + Hex.encode(digest)).utf8) }

    public func claimToken(
        _ digest: [UInt8], ttlMillis: Int64, nowMillis: Int64,
        completion: @escaping @Sendable (Result<TokenClaimOutcome, StoreError>) -> Void
    ) {
        let completion = timed(.claimToken, completion)
        guard digest.count == 32 else {
            return completion(
                .failure(StoreError(.unavailable, "a device token digest is a SHA-256 (32 bytes), not \(digest.count) bytes")))
        }
        let name = deviceTokenName(digest)
        // Redis' clock runs the expiry (a relative PX): the claim lives ttl from when Redis set it.
        send(key: name, [RedisCommand([Self.set, name, Self.one, Self.nx, Self.px, Self.decimal(max(1, ttlMillis))])]) { result in
            switch result {
            case .failure(let e):
                completion(.failure(e))
            case .success(let replies):
                switch replies.first {
                case .status("OK")?: completion(.success(.claimed))
                case .null?: completion(.success(.alreadyClaimed))
                default: completion(.failure(Self.protocolError("SET NX PX", replies)))
                }
            }
        }
    }

    public func releaseToken(_ digest: [UInt8], completion: @escaping @Sendable (Result<Void, StoreError>) -> Void) {
        let completion = timed(.releaseToken, completion)
        guard digest.count == 32 else { return completion(.success(())) }
        let name = deviceTokenName(digest)
        send(key: name, [RedisCommand([Self.del, name])]) { result in
            switch result {
            case .failure(let e): completion(.failure(e))
            case .success(let replies):
                if case .integer? = replies.first { return completion(.success(())) }
                completion(.failure(Self.protocolError("DEL", replies)))
            }
        }
    }
}
