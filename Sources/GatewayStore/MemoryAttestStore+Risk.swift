import Synchronization

/// The risk refresher's side of the memory store (docs/store.md, "Risk refresh"): the schedule is
/// each record's `nextRefresh` (no other index: a scan finds what is due), a refresh's outcome is a
/// journal record (type 4) and, with a new receipt, that receipt appended to the receipts file, as
/// a registration's is. A memory-only store keeps no receipts: it has nothing to refresh.
extension MemoryAttestStore: RiskRefreshStore {
    public func claimDueRefreshes(
        nowMillis: Int64, leaseMillis: Int64, limit: Int, scanBudget: Int,
        completion: @escaping @Sendable (Result<DueRefreshes, StoreError>) -> Void
    ) {
        if closed.load(ordering: .relaxed) { return completion(.failure(Self.closedError)) }
        let now = storedSeconds(nowMillis)
        let leased = riskSeconds(nowMillis + max(1_000, leaseMillis))
        var keys: [KeyID] = []
        var oldest: UInt32 = .max
        var scanned = 0
        var complete = false
        // A pass starts where the last call stopped (shard and record), so a large store is covered
        // in several calls of `scanBudget` records.
        var (shardIndex, recordIndex) = scanCursor.withLock { $0 }
        while scanned < max(1, scanBudget) {
            let (next, seen) = shards[shardIndex].state.withLock { s -> (Int?, Int) in
                var i = recordIndex
                var seen = 0
                while i < s.count && scanned + seen < scanBudget {
                    let due = s.record(at: i).nextRefresh
                    if due != 0 && due <= now {
                        oldest = min(oldest, due)
                        if keys.count < limit {
                            s.update(at: i) { $0.nextRefresh = leased }
                            keys.append(s.record(at: i).key.keyID)
                        }
                    }
                    i += 1
                    seen += 1
                }
                return (i < s.count ? i : nil, seen)
            }
            scanned += seen
            if let next {
                recordIndex = next
                continue
            }
            recordIndex = 0
            shardIndex += 1
            if shardIndex == shards.count {
                shardIndex = 0
                complete = true
                break
            }
        }
        scanCursor.withLock { $0 = (shardIndex, recordIndex) }
        completion(
            .success(
                DueRefreshes(
                    keys: keys, oldestDueMillis: oldest == .max ? nil : Int64(oldest) * 1000, complete: complete)))
    }

    public func refreshCandidate(_ id: KeyID, completion: @escaping @Sendable (Result<RefreshCandidate?, StoreError>) -> Void) {
        if closed.load(ordering: .relaxed) { return completion(.failure(Self.closedError)) }
        guard journal != nil else { return completion(.success(nil)) }
        let key = KeyBits(id)
        // Under the gate: a compaction moves offsets and the file together.
        let found = registrationGate.withLock { _ -> (DeviceKeyRecord, UInt64, UInt32, FileHandle?)? in
            let read = shard(key.w0).state.withLock { s -> (KeyRecord, String?, String?)? in
                guard let i = s.find(key) else { return nil }
                let r = s.record(at: i)
                return (r, s.string(r.appIndex), s.string(r.bundleIndex))
            }
            guard let (r, app, bundle) = read, r.receiptLength > 0 else { return nil }
            return (
                Self.deviceKeyRecord(id, r, app: app, bundle: bundle), r.receiptOffset, r.receiptLength, receipts.withLock { $0.reader }
            )
        }
        guard let (record, offset, length, reader) = found, let reader, let risk = record.risk else {
            return completion(.success(nil))
        }
        guard let receipt = Journal.readReceipt(reader, offset: offset, length: length) else {
            return completion(.failure(StoreError(.unavailable, "the receipt of key \(id) cannot be read from \(reader.path)")))
        }
        completion(.success(RefreshCandidate(record: record, receipt: receipt, risk: risk)))
    }

    public func recordRefresh(
        _ update: RiskUpdate, completion: @escaping @Sendable (Result<RiskUpdateOutcome, StoreError>) -> Void
    ) {
        if closed.load(ordering: .relaxed) { return completion(.failure(Self.closedError)) }
        let key = KeyBits(update.keyID)
        let r = update.risk
        var entry = JournalRecord.Risk(
            key: key, metric: r.metric.map { min($0, KeyRisk.maxMetric) } ?? KeyRecord.noMetric, stale: r.stale,
            receiptCreated: max(1, storedSeconds(r.receiptCreatedMillis)), receiptNotBefore: riskSeconds(r.notBeforeMillis),
            receiptExpires: riskSeconds(r.expiresMillis), nextRefresh: riskSeconds(r.nextRefreshMillis))
        let based = storedSeconds(update.basedOnCreatedMillis)
        let receipt = journal == nil ? nil : update.receipt
        func step() -> Result<RiskUpdateOutcome, StoreError> {
            shard(key.w0).state.withLock { s -> Result<RiskUpdateOutcome, StoreError> in
                guard let i = s.find(key) else { return .success(.keyGone) }
                let current = s.record(at: i)
                guard current.receiptCreated == based else { return .success(.superseded) }
                if let journal {
                    do {
                        if let written = try journal.appendRisk(entry, receipt: receipt) {
                            entry.receiptOffset = written.offset
                            entry.receiptLength = written.length
                            liveReceiptBytes.wrappingAdd(Int(written.length) - Int(current.receiptLength), ordering: .relaxed)
                        }
                    } catch {
                        return .failure(StoreError.from(error))
                    }
                }
                _ = Self.apply(&s, risk: entry)
                return .success(.stored)
            }
        }
        // A new receipt is written under the gate, as a registration's: a compaction moves offsets meanwhile.
        let result = receipt == nil ? step() : registrationGate.withLock { _ in step() }
        completion(result)
    }

    /// Sets a risk refresh's fields (also journal replay); the receipt's location only when the
    /// refresh wrote one. False when the key is not there.
    @discardableResult
    static func apply(_ s: inout ShardState, risk r: JournalRecord.Risk) -> Bool {
        guard let i = s.find(r.key) else { return false }
        s.update(at: i) { x in
            x.riskMetric = r.metric
            if r.stale { x.flags |= KeyRecord.flagStale } else { x.flags &= ~KeyRecord.flagStale }
            x.receiptCreated = r.receiptCreated
            x.receiptNotBefore = r.receiptNotBefore
            x.receiptExpires = r.receiptExpires
            x.nextRefresh = r.nextRefresh
            if r.receiptLength > 0 {
                x.receiptOffset = r.receiptOffset
                x.receiptLength = r.receiptLength
            }
        }
        return true
    }
}
