import GatewayStore
import GatewayWire

/// Fleet-wide documents and leases on Redis (docs/redis.md, "Shared documents"): a document is one
/// hash `<prefix>doc:<name>` with fields `e` (the origin's ETag), `t` (fetched, Unix ms) and `b` (the
/// bytes), written by one `HSET` + `PEXPIRE` in a `MULTI` (never half written); a lease is
/// `<prefix>lease:<name>`, taken by `SET … NX PX`. A `304` moves only `t` (`touchSharedDocument`). On Cluster each lives in its own key's slot.
extension RedisAttestStore: SharedDocumentStore {
    static let hset = Array("HSET".utf8)
    static let pexpire = Array("PEXPIRE".utf8)
    static let multi = Array("MULTI".utf8)
    static let exec = Array("EXEC".utf8)

    func documentName(_ name: String) -> [UInt8] { Array((options.keyPrefix + "doc:" + name).utf8) }
    func leaseName(_ name: String) -> [UInt8] { Array((options.keyPrefix + "lease:" + name).utf8) }

    public func sharedDocument(_ name: String, completion: @escaping @Sendable (Result<SharedDocument?, StoreError>) -> Void) {
        let key = documentName(name)
        send(key: key, [RedisCommand([Self.hmget, key, Array("e".utf8), Array("t".utf8), Array("b".utf8)])]) { result in
            switch result {
            case .failure(let e):
                completion(.failure(e))
            case .success(let replies):
                guard case .array(let f)? = replies.first, f.count == 3 else {
                    return completion(.failure(Self.protocolError("HMGET", replies)))
                }
                guard let etag = f[0].text, let fetched = f[1].integer, let body = f[2].bytes else { return completion(.success(nil)) }
                completion(.success(SharedDocument(etag: etag, fetchedMillis: fetched, body: body)))
            }
        }
    }

    public func putSharedDocument(
        _ name: String, _ document: SharedDocument, ttlMillis: Int64, completion: @escaping @Sendable (Result<Void, StoreError>) -> Void
    ) {
        let key = documentName(name)
        let commands = [
            RedisCommand([Self.multi]),
            RedisCommand([
                Self.hset, key, Array("e".utf8), Array(document.etag.utf8), Array("t".utf8), Self.decimal(document.fetchedMillis),
                Array("b".utf8), document.body,
            ]),
            RedisCommand([Self.pexpire, key, Self.decimal(max(1, ttlMillis))]),
            RedisCommand([Self.exec]),
        ]
        send(key: key, commands) { result in
            switch result {
            case .failure(let e):
                completion(.failure(e))
            case .success(let replies):
                guard case .array(let done)? = replies.last, done.count == 2 else {
                    return completion(.failure(Self.protocolError("MULTI HSET PEXPIRE EXEC", replies)))
                }
                completion(.success(()))
            }
        }
    }

    public func touchSharedDocument(
        _ name: String, fetchedMillis: Int64, ttlMillis: Int64, completion: @escaping @Sendable (Result<Void, StoreError>) -> Void
    ) {
        let key = documentName(name)
        // Only `t` and the expiry: a document that expired meanwhile comes back as a hash without
        // `e` and `b`, which reads as none (and expires again).
        let commands = [
            RedisCommand([Self.multi]), RedisCommand([Self.hset, key, Array("t".utf8), Self.decimal(fetchedMillis)]),
            RedisCommand([Self.pexpire, key, Self.decimal(max(1, ttlMillis))]), RedisCommand([Self.exec]),
        ]
        send(key: key, commands) { result in
            switch result {
            case .failure(let e): completion(.failure(e))
            case .success(let replies):
                guard case .array(let done)? = replies.last, done.count == 2 else {
                    return completion(.failure(Self.protocolError("MULTI HSET PEXPIRE EXEC", replies)))
                }
                completion(.success(()))
            }
        }
    }

    public func takeLease(_ name: String, ttlMillis: Int64, completion: @escaping @Sendable (Result<Bool, StoreError>) -> Void) {
        let key = leaseName(name)
        send(key: key, [RedisCommand([Self.set, key, Self.one, Self.nx, Self.px, Self.decimal(max(1, ttlMillis))])]) { result in
            switch result {
            case .failure(let e):
                completion(.failure(e))
            case .success(let replies):
                switch replies.first {
                case .status("OK")?: completion(.success(true))
                case .null?: completion(.success(false))
                default: completion(.failure(Self.protocolError("SET NX PX", replies)))
                }
            }
        }
    }
}
