import GatewayStore

/// The risk refresher's side of the Redis store (docs/redis.md, "Risk refresh"): the schedule is a
/// sorted set of key ids by next refresh; a claim moves each key it hands out to the end of a short
/// lease, in one script, so that one gateway of a fleet refreshes a key, not every instance; a
/// refresh's outcome is written by a script only over the receipt it started from.
///
/// On Cluster the schedule is one key (one slot) and the key records are in others: the schedule is
/// changed by its own command after the record's script, not atomically with it. A schedule entry
/// missed that way is a key not refreshed until it registers again; one left over names a key that
/// is gone, which the refresh removes.
extension RedisAttestStore: RiskRefreshStore {
    public func claimDueRefreshes(
        nowMillis: Int64, leaseMillis: Int64, limit: Int, scanBudget: Int,
        completion: @escaping @Sendable (Result<DueRefreshes, StoreError>) -> Void
    ) {
        let completion = timed(.claimRefreshes, completion)
        let command = RedisCommand([
            Self.evalsha, claimSHA, Array("1".utf8), refreshScheduleName, Self.decimal(nowMillis),
            Self.decimal(nowMillis + max(1_000, leaseMillis)), Self.decimal(max(1, limit)),
        ])
        send(key: refreshScheduleName, [command]) { result in
            switch result {
            case .failure(let e):
                completion(.failure(e))
            case .success(let replies):
                guard case .array(let a)? = replies.first, a.count == 2, case .array(let members) = a[1] else {
                    return completion(.failure(Self.protocolError("the claim script", replies)))
                }
                let oldest = a[0].text.flatMap { Double($0) }.map { Int64($0) }
                completion(.success(DueRefreshes(keys: members.compactMap { $0.bytes.flatMap(KeyID.init) }, oldestDueMillis: oldest)))
            }
        }
    }

    public func refreshCandidate(_ id: KeyID, completion: @escaping @Sendable (Result<RefreshCandidate?, StoreError>) -> Void) {
        let completion = timed(.deviceKey, completion)
        let name = keyName(id)
        send(key: name, [RedisCommand([Self.hmget, name] + Self.deviceKeyFields + [Array("rc".utf8)])]) { result in
            switch result {
            case .failure(let e):
                completion(.failure(e))
            case .success(let replies):
                guard case .array(let f)? = replies.first, f.count == Self.deviceKeyFields.count + 1 else {
                    return completion(.failure(Self.protocolError("HMGET", replies)))
                }
                guard let record = Self.deviceKeyRecord(id, Array(f.dropLast())), let risk = record.risk,
                    let receipt = f[f.count - 1].bytes, !receipt.isEmpty
                else { return completion(.success(nil)) }
                completion(.success(RefreshCandidate(record: record, receipt: receipt, risk: risk)))
            }
        }
    }

    public func recordRefresh(
        _ update: RiskUpdate, completion: @escaping @Sendable (Result<RiskUpdateOutcome, StoreError>) -> Void
    ) {
        let completion = timed(.recordRefresh, completion)
        let name = keyName(update.keyID)
        let r = update.risk
        let keys = options.cluster ? [Array("1".utf8), name] : [Array("2".utf8), name, refreshScheduleName]
        let command = RedisCommand(
            [Self.evalsha, recordRefreshSHA] + keys + [
                Self.decimal(update.basedOnCreatedMillis), update.receipt ?? [],
                r.metric.map { Self.decimal(min($0, KeyRisk.maxMetric)) } ?? [], Array((r.stale ? "1" : "0").utf8),
                Self.decimal(r.receiptCreatedMillis), r.notBeforeMillis.map(Self.decimal) ?? [], r.expiresMillis.map(Self.decimal) ?? [],
                r.nextRefreshMillis.map(Self.decimal) ?? [], update.keyID.bytes,
            ])
        send(key: name, [command]) { [self] result in
            switch result {
            case .failure(let e):
                completion(.failure(e))
            case .success(let replies):
                guard let status = replies.first?.text, let outcome = RiskUpdateOutcome(rawValue: status) else {
                    return completion(.failure(Self.protocolError("the record-refresh script", replies)))
                }
                if options.cluster {
                    switch outcome {
                    case .stored: scheduleRefresh(update.keyID, at: r.nextRefreshMillis)
                    case .keyGone: scheduleRefresh(update.keyID, at: nil)
                    case .superseded: break
                    }
                }
                completion(.success(outcome))
            }
        }
    }

    /// Cluster: sets (or, with nil, removes) a key's entry in the refresh schedule, on its own.
    func scheduleRefresh(_ id: KeyID, at millis: Int64?) {
        let command =
            millis.map { RedisCommand([Array("ZADD".utf8), refreshScheduleName, Self.decimal($0), id.bytes]) }
            ?? RedisCommand([Array("ZREM".utf8), refreshScheduleName, id.bytes])
        send(key: refreshScheduleName, [command]) { _ in }
    }
}
