import Synchronization

/// One key's association with an account as the memory store keeps it (and journals it: type 6;
/// snapshots from version 5): the key, the account's SHA-256, when (Unix seconds) and the account's
/// distinct key count then.
struct AccountAssociation: Equatable {
    var key: KeyBits
    var account: KeyBits
    var at: UInt32
    var count: UInt32
}

/// The memory store's keys per account (docs/store.md, "Keys per account"): each key's latest
/// association, and per account the keys associated with it and when. One `Mutex` (associations
/// are written after responses, not on the request path; the gate reads a key's entry under it).
/// Bounded to `maxAssociations` keys (the store's `max_keys`): when full, associations older than
/// the window are dropped; if it is still full a new key's association is refused.
final class AccountTable: Sendable {
    struct Keys {
        var at: [KeyBits: UInt32] = [:]
        /// No entry is older than this (`UInt32.max`: none).
        var oldest: UInt32 = .max
    }

    struct State {
        var byKey: [KeyBits: AccountAssociation] = [:]
        var byAccount: [KeyBits: Keys] = [:]

        /// Places `a` (a new association, a replayed or restored one): the key leaves its previous
        /// account; with `cutoff`, the account's entries before it are dropped and `a.count` is the
        /// account's key count after. Returns the association as stored and whether the key moved.
        mutating func place(_ a: AccountAssociation, cutoff: UInt32?) -> (AccountAssociation, Bool) {
            var a = a
            var moved = false
            // In place (no copy of an account's entries per association: an account may hold many).
            if let old = byKey[a.key], old.account != a.account {
                moved = true
                byAccount[old.account]?.at[a.key] = nil
                if byAccount[old.account]?.at.isEmpty == true { byAccount[old.account] = nil }
            }
            byAccount[a.account, default: Keys()].at[a.key] = a.at
            byAccount[a.account]!.oldest = min(byAccount[a.account]!.oldest, a.at)
            if let cutoff, byAccount[a.account]!.oldest < cutoff {
                byAccount[a.account]!.at = byAccount[a.account]!.at.filter { $0.value >= cutoff }
                byAccount[a.account]!.oldest = byAccount[a.account]!.at.values.min() ?? .max
            }
            if cutoff != nil { a.count = UInt32(clamping: byAccount[a.account]!.at.count) }
            byKey[a.key] = a
            return (a, moved)
        }

        /// Drops every association recorded before `cutoff`.
        mutating func prune(before cutoff: UInt32) {
            byKey = byKey.filter { $0.value.at >= cutoff }
            var accounts: [KeyBits: Keys] = [:]
            for (account, keys) in byAccount {
                let kept = keys.at.filter { $0.value >= cutoff }
                if !kept.isEmpty { accounts[account] = Keys(at: kept, oldest: kept.values.min() ?? .max) }
            }
            byAccount = accounts
        }
    }

    let state: Mutex<State>
    let maxAssociations: Int
    /// `byKey.count`, read without the lock (the gate skips the lock while no key has an account).
    let live = Atomic<Int>(0)

    /// `restoring`: a snapshot's associations (as they were), then `replaying`: the journal's, in
    /// order, each counted again from its cutoff.
    init(
        maxAssociations: Int, restoring associations: [AccountAssociation] = [],
        replaying journaled: [(AccountAssociation, cutoff: UInt32)] = []
    ) {
        self.maxAssociations = max(1, maxAssociations)
        var s = State()
        for a in associations { _ = s.place(a, cutoff: nil) }
        for (a, cutoff) in journaled { _ = s.place(a, cutoff: cutoff) }
        live.store(s.byKey.count, ordering: .relaxed)
        state = Mutex(s)
    }

    /// Every association held, for a snapshot (copied under the lock, after the journal rotation).
    func copy() -> [AccountAssociation] { state.withLock { Array($0.byKey.values) } }

    /// The key's association, or nil.
    func association(_ key: KeyBits) -> AccountAssociation? {
        guard live.load(ordering: .relaxed) > 0 else { return nil }
        return state.withLock { $0.byKey[key] }
    }
}
