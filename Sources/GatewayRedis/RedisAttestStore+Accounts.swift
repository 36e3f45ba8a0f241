import GatewayStore
import GatewayWire

/// Keys per account on Redis (docs/redis.md, "Keys per account"): per account a sorted set
/// `<prefix>a:{8 hex}<56 hex>` (the account's SHA-256, tagged by its first 4 bytes) of key ids
/// scored by the time of their latest association (Unix ms), trimmed to the window and expiring
/// with it; on the key record the fields `ah` (the account's SHA-256, 32 bytes), `an` (the
/// account's key count when the association was recorded) and `at` (its time, Unix ms), which the
/// gate reads with the record (`deviceKeyFields`) and the commit returns (`commitNext`): no round
/// trip is added to a protected request.
///
/// An association is written after the response, in two steps (the account's set and the key
/// record are in different Cluster slots, and in one server the same code runs): `accountAdd` on
/// the set (add, trim, count), then `keyAccount` on the record (store, answer the previous
/// account), then, when the key moved, a `ZREM` from the previous account's set (answered after it).
extension RedisAttestStore: AccountStore {
    /// `ag:a:{8 hex}` ‖ 56 hex.
    func accountName(_ digest: [UInt8]) -> [UInt8] { Self.tagged(Array((options.keyPrefix + "a:").utf8), digest) }

    public func associate(
        _ id: KeyID, account digest: [UInt8], nowMillis: Int64, windowMillis: Int64,
        completion: @escaping @Sendable (Result<AccountAssociationOutcome, StoreError>) -> Void
    ) {
        let completion = timed(.associateAccount, completion)
        guard digest.count == 32 else {
            return completion(.failure(StoreError(.unavailable, "an account digest is a SHA-256 (32 bytes), not \(digest.count) bytes")))
        }
        let window = max(1_000, windowMillis)
        let set = accountName(digest)
        let add = RedisCommand([
            Self.evalsha, accountAddSHA, Self.one, set, Self.decimal(nowMillis), Self.decimal(nowMillis - window), id.bytes,
            Self.decimal(window),
        ])
        send(key: set, [add]) { [self] result in
            switch result {
            case .failure(let e):
                completion(.failure(e))
            case .success(let replies):
                guard let count = replies.first?.integer else {
                    return completion(.failure(Self.protocolError("the account-add script", replies)))
                }
                storeAccount(id, digest: digest, set: set, count: count, nowMillis: nowMillis, completion: completion)
            }
        }
    }

    /// The second step: the key record's `ah an at`; the previous account's set loses the key.
    private func storeAccount(
        _ id: KeyID, digest: [UInt8], set: [UInt8], count: Int64, nowMillis: Int64,
        completion: @escaping @Sendable (Result<AccountAssociationOutcome, StoreError>) -> Void
    ) {
        let name = keyName(id)
        let command = RedisCommand([
            Self.evalsha, keyAccountSHA, Self.one, name, digest, Self.decimal(count), Self.decimal(nowMillis),
        ])
        send(key: name, [command]) { [self] result in
            switch result {
            case .failure(let e):
                completion(.failure(e))
            case .success(let replies):
                guard case .array(let a)? = replies.first, a.count == 2, let status = a[0].text else {
                    return completion(.failure(Self.protocolError("the key-account script", replies)))
                }
                // The set that must lose the key (answered once it did: the association is done
                // when every step is, and a failed step is the association's failure).
                if status == "key_gone" {
                    return send(key: set, [RedisCommand([Self.zrem, set, id.bytes])]) { result in
                        completion(result.map { _ in .keyGone })
                    }
                }
                forgetCached(id)
                let previous = a[1].bytes ?? []
                let moved = previous.count == 32 && previous != digest
                guard moved else { return completion(.success(.recorded(keyCount: Int(count), moved: false))) }
                let old = accountName(previous)
                send(key: old, [RedisCommand([Self.zrem, old, id.bytes])]) { result in
                    completion(result.map { _ in .recorded(keyCount: Int(count), moved: true) })
                }
            }
        }
    }

    public func accountKeyCount(
        account digest: [UInt8], nowMillis: Int64, windowMillis: Int64,
        completion: @escaping @Sendable (Result<Int, StoreError>) -> Void
    ) {
        guard digest.count == 32 else { return completion(.success(0)) }
        let set = accountName(digest)
        let command = RedisCommand([
            Array("ZCOUNT".utf8), set, Self.decimal(nowMillis - max(1_000, windowMillis)), Array("+inf".utf8),
        ])
        send(key: set, [command]) { result in
            switch result {
            case .failure(let e): completion(.failure(e))
            case .success(let replies):
                guard let n = replies.first?.integer else { return completion(.failure(Self.protocolError("ZCOUNT", replies))) }
                completion(.success(Int(n)))
            }
        }
    }

    static let zrem = Array("ZREM".utf8)

    /// The account fields at the end of a key record's `HMGET` (`deviceKeyFields`): nil unless all are there.
    static func keyAccount(_ f: ArraySlice<RedisValue>) -> KeyAccount? {
        guard f.count == 3, let digest = f[f.startIndex].bytes, digest.count == 32, let n = f[f.startIndex + 1].integer,
            let at = f[f.startIndex + 2].integer
        else { return nil }
        return KeyAccount(digest: digest, keyCount: Int(clamping: n), associatedMillis: at)
    }
}

/// The scripts of keys per account (loaded with `RedisScripts.all`).
enum RedisAccountScripts {
    /// KEYS[1] the account's set. ARGV: now (ms), cutoff (ms: entries scored below it are dropped),
    /// key id, window (ms: the set's expiry). Returns the account's key count within the window.
    static let accountAdd = """
        redis.call('ZADD', KEYS[1], ARGV[1], ARGV[3])
        redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[2])
        redis.call('PEXPIRE', KEYS[1], ARGV[4])
        return redis.call('ZCARD', KEYS[1])
        """

    /// KEYS[1] key record. ARGV: the account's SHA-256, its key count, now (ms). Returns
    /// {'stored', previous account or ''} | {'key_gone', ''}.
    static let keyAccount = """
        if redis.call('EXISTS', KEYS[1]) == 0 then return {'key_gone', ''} end
        local old = redis.call('HGET', KEYS[1], 'ah')
        redis.call('HSET', KEYS[1], 'ah', ARGV[1], 'an', ARGV[2], 'at', ARGV[3])
        return {'stored', old or ''}
        """
}
