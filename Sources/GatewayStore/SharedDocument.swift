/// A document every gateway of a fleet needs and only one should fetch (the Android attestation
/// status list, docs/android.md "Revocation"): the origin's bytes, its `ETag`, when it was fetched.
public struct SharedDocument: Sendable, Equatable {
    public var etag: String
    /// Wall clock, Unix ms.
    public var fetchedMillis: Int64
    public var body: [UInt8]

    public init(etag: String, fetchedMillis: Int64, body: [UInt8]) {
        self.etag = etag
        self.fetchedMillis = fetchedMillis
        self.body = body
    }
}

/// A store several gateways share (Redis) keeps fleet-wide documents and leases, so that one
/// gateway fetches a document from its origin and the others read it from the store. A store of
/// one process (memory) does not conform: its gateway fetches for itself.
public protocol SharedDocumentStore: AnyObject, Sendable {
    /// The document `name`, or nil when none was stored (or it expired).
    func sharedDocument(_ name: String, completion: @escaping @Sendable (Result<SharedDocument?, StoreError>) -> Void)
    /// Replaces the document `name`; it expires `ttlMillis` after this write.
    func putSharedDocument(
        _ name: String, _ document: SharedDocument, ttlMillis: Int64, completion: @escaping @Sendable (Result<Void, StoreError>) -> Void)
    /// The origin confirmed the document `name` unchanged (a `304`): only its fetch time moves (and
    /// its expiry, `ttlMillis` from now); a document that is gone stays gone.
    func touchSharedDocument(
        _ name: String, fetchedMillis: Int64, ttlMillis: Int64, completion: @escaping @Sendable (Result<Void, StoreError>) -> Void)
    /// Takes the lease `name` for `ttlMillis` when nobody holds it: true when this call took it
    /// (this gateway fetches), false when another gateway holds it.
    func takeLease(_ name: String, ttlMillis: Int64, completion: @escaping @Sendable (Result<Bool, StoreError>) -> Void)
}
