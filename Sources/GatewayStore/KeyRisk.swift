/// What the store keeps of a key's App Attest receipt besides its bytes: the dates of the latest
/// receipt, Apple's risk metric (field 17 of the latest `RECEIPT` from Apple's data service) and
/// when the risk refresher takes the key next (docs/verification.md, "The risk metric").
///
/// Times are Unix milliseconds; the memory store keeps whole seconds (`KeyRecord`), Redis milliseconds.
public struct KeyRisk: Sendable, Equatable {
    /// The latest risk metric, nil until the first refresh answered. Kept when Apple stops answering
    /// for the receipt (`stale`) and when the key registers again.
    public var metric: UInt32?
    /// Apple's data service answered `404` for the latest receipt (its data is older than 30 days):
    /// `metric` is the last one known. Cleared by the next new receipt, or a new registration.
    public var stale: Bool
    /// Field 12 of the stored receipt: which receipt this is (a refresh writes only over the
    /// receipt it started from).
    public var receiptCreatedMillis: Int64
    /// Field 19: Apple's data service refreshes the receipt from then on (`304` before).
    public var notBeforeMillis: Int64?
    /// Field 21: after it Apple may no longer refresh the receipt.
    public var expiresMillis: Int64?
    /// When the refresher takes the key next; nil: never.
    public var nextRefreshMillis: Int64?

    public init(
        metric: UInt32? = nil, stale: Bool = false, receiptCreatedMillis: Int64, notBeforeMillis: Int64? = nil,
        expiresMillis: Int64? = nil, nextRefreshMillis: Int64? = nil
    ) {
        self.metric = metric
        self.stale = stale
        self.receiptCreatedMillis = receiptCreatedMillis
        self.notBeforeMillis = notBeforeMillis
        self.expiresMillis = expiresMillis
        self.nextRefreshMillis = nextRefreshMillis
    }

    /// The largest metric kept; a larger one (Apple's are small counts) is kept as this.
    public static let maxMetric = UInt32.max - 1
}

/// The risk refresher's side of a store: which keys are due, what to send, and what came back.
/// Both stores implement it (docs/store.md and docs/redis.md, "Risk refresh").
public protocol RiskRefreshStore: AnyObject, Sendable {
    /// Up to `limit` keys whose next refresh is at or before `nowMillis`, each claimed: its next
    /// refresh moves to `nowMillis + leaseMillis` (in memory only, not journaled), so that neither
    /// the next scan nor another gateway on the same Redis takes it while this refresh runs; a
    /// refresher that dies leaves it due again when the lease ends. `oldestDueMillis`: the earliest
    /// next refresh among the due keys seen (claimed or not), for the lag metric; nil when none
    /// was due. The memory store scans at most `scanBudget` keys per call (a pass over a large
    /// store takes several calls; `complete` says whether this call finished one).
    func claimDueRefreshes(
        nowMillis: Int64, leaseMillis: Int64, limit: Int, scanBudget: Int,
        completion: @escaping @Sendable (Result<DueRefreshes, StoreError>) -> Void)

    /// The key's record and the receipt stored with it (nil: the key is gone, or has no receipt).
    func refreshCandidate(_ id: KeyID, completion: @escaping @Sendable (Result<RefreshCandidate?, StoreError>) -> Void)

    /// Stores what a refresh found, only over the receipt it started from (`basedOnCreatedMillis`).
    func recordRefresh(_ update: RiskUpdate, completion: @escaping @Sendable (Result<RiskUpdateOutcome, StoreError>) -> Void)
}

public struct DueRefreshes: Sendable, Equatable {
    public var keys: [KeyID]
    public var oldestDueMillis: Int64?
    /// A whole pass over the keys ended with this call (always true on Redis).
    public var complete: Bool

    public init(keys: [KeyID], oldestDueMillis: Int64?, complete: Bool = true) {
        self.keys = keys
        self.oldestDueMillis = oldestDueMillis
        self.complete = complete
    }
}

public struct RefreshCandidate: Sendable, Equatable {
    public var record: DeviceKeyRecord
    /// The latest receipt (`ATTEST` from the registration, or the latest `RECEIPT`).
    public var receipt: [UInt8]
    public var risk: KeyRisk

    public init(record: DeviceKeyRecord, receipt: [UInt8], risk: KeyRisk) {
        self.record = record
        self.receipt = receipt
        self.risk = risk
    }
}

public struct RiskUpdate: Sendable, Equatable {
    public var keyID: KeyID
    /// `receiptCreatedMillis` of the receipt the refresh sent: nothing is written when the key's
    /// receipt changed meanwhile (a new registration, another gateway's refresh).
    public var basedOnCreatedMillis: Int64
    /// A new receipt to keep in place of the old one (Apple answered `200`), or nil.
    public var receipt: [UInt8]?
    /// The key's risk after the refresh (with the new receipt's dates when there is one).
    public var risk: KeyRisk

    public init(keyID: KeyID, basedOnCreatedMillis: Int64, receipt: [UInt8]?, risk: KeyRisk) {
        self.keyID = keyID
        self.basedOnCreatedMillis = basedOnCreatedMillis
        self.receipt = receipt
        self.risk = risk
    }
}

public enum RiskUpdateOutcome: String, Sendable, Equatable {
    case stored
    /// The key was removed meanwhile.
    case keyGone = "key_gone"
    /// The key's receipt is no longer the one the refresh started from.
    case superseded
}
