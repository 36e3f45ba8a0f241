/// Downstream limits and timeouts, shared by every listener. Sizes are bytes.
public struct LimitsConfig: Sendable, Equatable {
    /// Longest request line (method, target, version). Default 8KiB.
    public var maxRequestLine: Int
    /// Largest header block. Default 32KiB.
    public var maxHeaderBytes: Int
    /// Most header fields in one request. Default 100.
    public var maxHeaderCount: Int
    /// Largest request body unless a route overrides it. Default 10MiB.
    public var maxBody: Int
    /// Keep-alive idle time before the gateway closes a downstream connection. Default 60s.
    public var idleTimeout: Duration
    /// Time allowed to receive a whole request head. Default 10s.
    public var headerTimeout: Duration
    /// Time allowed between body bytes. Default 30s.
    public var bodyTimeout: Duration
    /// Time the client may take none of a response before the gateway gives up on it (nginx's
    /// `send_timeout`): a socket that takes no byte for this long is closed, and an HTTP/2 stream whose
    /// response waits this long on the client's flow-control window is reset. Default 60s.
    public var sendTimeout: Duration
    /// A request refused from its head on HTTP/1.1 (its body not read): a body at most this large
    /// (declared, or chunked as it comes), or already received whole, is read and dropped and the
    /// connection kept for the next request; a larger one closes the connection after the answer
    /// (nginx's `discard_request_body`). 0: always close. Default 64KiB.
    public var discardBody: Int
    /// Graceful-stop deadline for in-flight requests. Default 30s.
    public var drainTimeout: Duration
    /// Open downstream connections per process. Default 10000.
    public var maxConnections: Int
    /// Largest `attStmt.receipt` a registration may carry (Apple's are 3.6–4.0 KB): the store keeps
    /// it (on disk, or in Redis), so it bounds the receipt bytes per key. 4KiB to 32KiB. Default 16KiB.
    public var maxReceipt: Int
    /// The bounds of `maxReceipt`.
    public static let maxReceiptRange = (4 << 10)...(32 << 10)

    public init(
        maxRequestLine: Int = 8 << 10,
        maxHeaderBytes: Int = 32 << 10,
        maxHeaderCount: Int = 100,
        maxBody: Int = 10 << 20,
        idleTimeout: Duration = .seconds(60),
        headerTimeout: Duration = .seconds(10),
        bodyTimeout: Duration = .seconds(30),
        sendTimeout: Duration = .seconds(60),
        discardBody: Int = 64 << 10,
        drainTimeout: Duration = .seconds(30),
        maxConnections: Int = 10_000,
        maxReceipt: Int = 16 << 10
    ) {
        self.maxRequestLine = maxRequestLine
        self.maxHeaderBytes = maxHeaderBytes
        self.maxHeaderCount = maxHeaderCount
        self.maxBody = maxBody
        self.idleTimeout = idleTimeout
        self.headerTimeout = headerTimeout
        self.bodyTimeout = bodyTimeout
        self.sendTimeout = sendTimeout
        self.discardBody = discardBody
        self.drainTimeout = drainTimeout
        self.maxConnections = maxConnections
        self.maxReceipt = maxReceipt
    }
}
