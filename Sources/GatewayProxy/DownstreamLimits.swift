import GatewayHTTP
import GatewayIO

/// Limits and timeouts of the downstream side.
public struct DownstreamLimits: Sendable {
    public var parser: HTTP1Parser.Limits
    public var idleTimeoutMillis: Int64
    public var headerTimeoutMillis: Int64
    public var bodyTimeoutMillis: Int64
    /// `limits.send_timeout`: the socket's send timeout (`Connection.sendTimeoutMillis`), and how
    /// long an HTTP/2 stream's response may wait on the client's flow-control window.
    public var sendTimeoutMillis: Int64
    /// `limits.discard_body`: the largest request body an HTTP/1.1 connection reads and drops after
    /// refusing the request from its head, to keep the connection (0: always close).
    public var discardBodyBytes: Int = 64 << 10
    /// Buffered-but-unsent bytes above which the other side stops being read (back-pressure).
    public var highWaterMark: Int
    /// The listener's rule (`listeners[].underscores_in_headers`): true (`drop`) leaves every client
    /// field with a foldable name (`_`, `.`…: `FoldedNames`) out of the upstream request.
    public var dropFoldableNames: Bool = true
    /// The listener's `trusted_proxies`: peers whose X-Forwarded-For, -Proto and -Host are kept and
    /// name the client (`ClientAddress`), and who alone may send a PROXY protocol header.
    public var trustedProxies: TrustedProxies = .none
    /// The listener's `proxy_protocol`: every connection starts with a PROXY protocol header (v1 or
    /// v2) from a trusted peer, whose source becomes the connection's peer; any other is closed.
    public var proxyProtocol: Bool = false

    public init(
        parser: HTTP1Parser.Limits = .init(), idleTimeoutMillis: Int64 = 60_000, headerTimeoutMillis: Int64 = 10_000,
        bodyTimeoutMillis: Int64 = 30_000, sendTimeoutMillis: Int64 = 60_000, highWaterMark: Int = 256 * 1024
    ) {
        self.sendTimeoutMillis = sendTimeoutMillis
        self.parser = parser
        self.idleTimeoutMillis = idleTimeoutMillis
        self.headerTimeoutMillis = headerTimeoutMillis
        self.bodyTimeoutMillis = bodyTimeoutMillis
        self.highWaterMark = highWaterMark
    }
}
