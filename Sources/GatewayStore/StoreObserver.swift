/// Measurements the memory store reports, for the gateway's metrics. Methods are called from the
/// store's own threads (the journal's sync queue, the caller of `snapshot`, `open` and
/// `sweepExpired`); implementations must be cheap and thread-safe. Every method has a no-op default.
public protocol AttestStoreObserver: Sendable {
    /// One fsync of the journal (and receipts file) took `seconds`.
    func journalSynced(seconds: Double)
    /// A snapshot was written.
    func snapshotWritten(_ report: SnapshotReport)
    /// `open` restored `keys` keys (snapshot + journal) in `seconds`.
    func restored(keys: Int, seconds: Double)
    /// A sweep removed `count` challenges that expired without being consumed.
    func challengesExpired(_ count: Int)
    /// `sweepIdleKeys` removed `count` keys idle for `key_idle_ttl`.
    func keysEvicted(_ count: Int)
    /// A snapshot compacted the receipts file.
    func receiptsCompacted(_ report: ReceiptCompactionReport)
    /// A receipt compaction failed before it changed anything; the snapshot was written without it.
    func receiptCompactionFailed(_ error: StoreError)
    /// A system call on a file of the data directory failed (each failed call, including the
    /// retries of a recovery; requests refused meanwhile make no call). Called with the journal's
    /// lock held: count it, and log at a bounded rate.
    func storeWriteFailed(_ failure: StoreWriteFailure)
    /// The store starts refusing writes (registrations and counter advances answer
    /// `.unavailable`) because of `failure`; a recovery retries with back-off.
    func storeWritesRefused(_ failure: StoreWriteFailure)
    /// The store accepts writes again after `failure` (the latest of the episode) made it refuse
    /// them for `seconds`.
    func storeWritesRecovered(after failure: StoreWriteFailure, seconds: Double)
}

extension AttestStoreObserver {
    public func journalSynced(seconds: Double) {}
    public func snapshotWritten(_ report: SnapshotReport) {}
    public func restored(keys: Int, seconds: Double) {}
    public func challengesExpired(_ count: Int) {}
    public func keysEvicted(_ count: Int) {}
    public func receiptsCompacted(_ report: ReceiptCompactionReport) {}
    public func receiptCompactionFailed(_ error: StoreError) {}
    public func storeWriteFailed(_ failure: StoreWriteFailure) {}
    public func storeWritesRefused(_ failure: StoreWriteFailure) {}
    public func storeWritesRecovered(after failure: StoreWriteFailure, seconds: Double) {}
}
