import GatewayHTTP

/// Every error of the protocol and proxy layer, in one table: its code (the JSON `error`, the access
/// line's `error`, the metric `reason` of `attest_gateway_upstream_errors_total` for `upstream_*`) and
/// the status it is answered with. A status of nil: never answered (the client is gone, or the
/// response was already under way and is cut: HTTP/1.1 closes the connection, HTTP/2 resets the
/// stream); recorded only. An error with a status that comes after the response head has started is
/// cut the same way. Proxy errors carry no client `action`: a client gets them as the request's answer
/// (docs/client-library.md). docs/errors.md lists every code (`ErrorsDocTests` holds it to `allCases`).
public enum ProxyError: Hashable, Sendable, CustomStringConvertible {
    /// The request head or a chunked body could not be read: the codec's reason (`HTTPParseError.Kind`:
    /// `bad_request_line`, `bad_header`, `bad_host`, `headers_too_large`, …), wrapped, not copied.
    case request(HTTPParseError.Kind)
    /// The target's path is ambiguous on purpose (encoded `/`, `\` or NUL, `..` above the root, a
    /// leading `//`): a backend could resolve it to another path than routes see (400).
    case ambiguousPath
    /// A method override in the target or (on a guarded POST) the body (400).
    case methodOverride
    /// The body is larger than the route's `max_body` (413).
    case bodyTooLarge
    /// Plain HTTP on a TLS listener (400, written in clear before the close: `TLSSession.plainHTTPRejection`).
    case httpsRequired
    /// The request head did not arrive within `limits.header_timeout` (408).
    case headerTimeout
    /// The request body stopped for `limits.body_timeout` (408).
    case bodyTimeout
    /// No route matches (404).
    case noRoute
    /// The upstream refused or failed the connection, or the route's upstream is gone (502).
    case upstreamUnavailable
    /// The upstream did not accept the connection within `connect_timeout` (504).
    case upstreamConnectTimeout
    /// The TLS handshake with an https upstream failed (502).
    case upstreamTLS
    /// Every connection of the pool is busy and its wait list is full, or none came in time (503).
    case upstreamBusy
    /// The upstream closed the connection before its response ended (502 before the head).
    case upstreamClosed
    /// The upstream's response is not valid HTTP/1.1 (502 before the head).
    case upstreamBadResponse
    /// The upstream sent nothing for `response_timeout` (504 before the head).
    case upstreamTimeout
    /// The client closed its connection before the exchange ended.
    case clientClosed
    /// HTTP/2: the session could not take the response any more (stream or connection gone).
    case clientGone
    /// HTTP/2: the client reset the stream.
    case clientReset
    /// HTTP/2: the stream was reset before its response ended.
    case streamReset
    /// The client took none of the response for `limits.send_timeout` (its socket took no byte, or
    /// an HTTP/2 stream's flow-control window stayed shut): the connection is closed, or the
    /// HTTP/2 stream reset.
    case sendTimeout

    /// The table.
    private var entry: (code: String, status: Int?) {
        switch self {
        case .request(let kind): (kind.rawValue, Self.status(of: kind))
        case .ambiguousPath: ("ambiguous_path", 400)
        case .methodOverride: ("method_override", 400)
        case .bodyTooLarge: ("body_too_large", 413)
        case .httpsRequired: ("https_required", 400)
        case .headerTimeout: ("header_timeout", 408)
        case .bodyTimeout: ("body_timeout", 408)
        case .noRoute: ("no_route", 404)
        case .upstreamUnavailable: ("upstream_unavailable", 502)
        case .upstreamConnectTimeout: ("upstream_connect_timeout", 504)
        case .upstreamTLS: ("upstream_tls", 502)
        case .upstreamBusy: ("upstream_busy", 503)
        case .upstreamClosed: ("upstream_closed", 502)
        case .upstreamBadResponse: ("upstream_bad_response", 502)
        case .upstreamTimeout: ("upstream_timeout", 504)
        case .clientClosed: ("client_closed", nil)
        case .clientGone: ("client_gone", nil)
        case .clientReset: ("client_reset", nil)
        case .streamReset: ("stream_reset", nil)
        case .sendTimeout: ("send_timeout", nil)
        }
    }

    /// A request that could not be read (RFC 9112): 414 for a long request line, 431 for a large
    /// head, 501 for a transfer coding other than chunked, 505 for a version other than 1.x, 400
    /// otherwise.
    private static func status(of kind: HTTPParseError.Kind) -> Int {
        switch kind {
        case .requestLineTooLong: 414
        case .headersTooLarge, .tooManyHeaders: 431
        case .unsupportedTransferCoding: 501
        case .unsupportedVersion: 505
        case .badRequestLine, .badHeader, .badFraming, .badChunk, .badMethod, .badTarget, .badHost, .badStatusLine: 400
        }
    }

    public var code: String { entry.code }
    public var status: Int? { entry.status }
    public var description: String { code }

    /// Every error, in the order docs/errors.md lists them. (A status line is a response's: an
    /// upstream's unreadable one is `upstream_bad_response`, so `.request(.badStatusLine)` is never
    /// answered and not listed.)
    public static let allCases: [ProxyError] =
        HTTPParseError.Kind.allCases.filter { $0 != .badStatusLine }.map { .request($0) } + [
            .ambiguousPath, .methodOverride, .bodyTooLarge, .httpsRequired, .headerTimeout, .bodyTimeout, .noRoute,
            .upstreamUnavailable, .upstreamConnectTimeout, .upstreamTLS, .upstreamBusy, .upstreamClosed,
            .upstreamBadResponse, .upstreamTimeout, .clientClosed, .clientGone, .clientReset, .streamReset,
            .sendTimeout,
        ]

    /// The JSON answer (the error must have a status). `requestId`: the exchange's id, where it has
    /// one (sent as `requestId` and `X-Request-Id`).
    public func response(requestId: String? = nil) -> LocalResponse {
        guard let status else { preconditionFailure("\(code) is never answered") }
        return ErrorResponse.make(status: status, code: code, requestId: requestId)
    }
}

extension UpstreamFailure {
    /// The proxy error a failed acquire answers.
    var proxyError: ProxyError {
        switch self {
        case .connectFailed: .upstreamUnavailable
        case .connectTimeout: .upstreamConnectTimeout
        case .poolExhausted: .upstreamBusy
        case .closed: .upstreamClosed
        case .tls: .upstreamTLS
        }
    }
}
