import GatewayWire
import Synchronization

/// Keys per account in the memory store (docs/store.md, "Keys per account"): `AccountTable`, each
/// association journaled (type 6) before it is stored, under the table's lock, as a token claim is;
/// in snapshots from version 5; restored whatever the stop was.
extension MemoryAttestStore: AccountStore {
    public func associate(
        _ id: KeyID, account digest: [UInt8], nowMillis: Int64, windowMillis: Int64,
        completion: @escaping @Sendable (Result<AccountAssociationOutcome, StoreError>) -> Void
    ) {
        completion(associateNow(id, account: digest, nowMillis: nowMillis, windowMillis: windowMillis))
    }

    func associateNow(_ id: KeyID, account digest: [UInt8], nowMillis: Int64, windowMillis: Int64)
        -> Result<AccountAssociationOutcome, StoreError>
    {
        if closed.load(ordering: .relaxed) { return .failure(Self.closedError) }
        guard let account = KeyID(digest).map(KeyBits.init) else {
            return .failure(StoreError(.unavailable, "an account digest is a SHA-256 (32 bytes), not \(digest.count) bytes"))
        }
        let key = KeyBits(id)
        guard shard(key.w0).state.withLock({ $0.find(key) != nil }) else { return .success(.keyGone) }
        let now = storedSeconds(nowMillis)
        let cutoff = Self.cutoffSeconds(nowMillis: nowMillis, windowMillis: windowMillis)
        let table = accounts
        let journal = journal
        return table.state.withLock { s -> Result<AccountAssociationOutcome, StoreError> in
            if s.byKey[key] == nil && s.byKey.count >= table.maxAssociations {
                s.prune(before: cutoff)
                table.live.store(s.byKey.count, ordering: .relaxed)
                if s.byKey.count >= table.maxAssociations { return .success(.capacity(maxAssociations: table.maxAssociations)) }
            }
            // Journaled first (the replay recomputes the count from the same cutoff), then stored.
            let association = AccountAssociation(key: key, account: account, at: now, count: 0)
            do {
                try journal?.appendAssociation(association, cutoff: cutoff)
            } catch {
                return .failure(StoreError.from(error))
            }
            let (placed, moved) = s.place(association, cutoff: cutoff)
            table.live.store(s.byKey.count, ordering: .relaxed)
            return .success(.recorded(keyCount: Int(placed.count), moved: moved))
        }
    }

    public func accountKeyCount(
        account digest: [UInt8], nowMillis: Int64, windowMillis: Int64,
        completion: @escaping @Sendable (Result<Int, StoreError>) -> Void
    ) {
        guard let account = KeyID(digest).map(KeyBits.init) else { return completion(.success(0)) }
        let cutoff = Self.cutoffSeconds(nowMillis: nowMillis, windowMillis: windowMillis)
        let n = accounts.state.withLock { s in s.byAccount[account]?.at.values.count(where: { $0 >= cutoff }) ?? 0 }
        completion(.success(n))
    }

    /// The first second still inside the window ending at `nowMillis`.
    static func cutoffSeconds(nowMillis: Int64, windowMillis: Int64) -> UInt32 {
        let start = (nowMillis - max(1_000, windowMillis)) / 1000
        return UInt32(clamping: max(0, start))
    }

    /// The key's account as the gate reads it with the record.
    func keyAccount(_ key: KeyBits) -> KeyAccount? {
        guard let a = accounts.association(key) else { return nil }
        return KeyAccount(digest: a.account.keyID.bytes, keyCount: Int(a.count), associatedMillis: Int64(a.at) * 1000)
    }
}
