import GatewayHTTP
import GatewayIO

/// A response the gateway writes itself (errors: `ErrorResponse`; local endpoints, the demo upstream).
public struct LocalResponse: Sendable {
    public var status: Int
    public var headers: HTTPFields
    public var body: [UInt8]
    /// On a protected route: the verdict this answer carries out, for the access line.
    public var verdict: AccessVerdict?

    public init(status: Int, headers: HTTPFields = HTTPFields(), body: [UInt8] = [], verdict: AccessVerdict? = nil) {
        self.status = status
        self.headers = headers
        self.body = body
        self.verdict = verdict
    }

    public static func json(_ status: Int, _ text: String, headers: HTTPFields = HTTPFields()) -> LocalResponse {
        var h = headers
        h.set("Content-Type", "application/json")
        return LocalResponse(status: status, headers: h, body: Array((text + "\n").utf8))
    }
}

/// Where a request goes: streamed to an upstream, buffered (bounded) and handed to a local handler
/// that may answer or forward it, or answered at once.
public enum RouteDecision {
    case forward(Forward)
    case buffer(maxBody: Int, routeName: String, handler: (BufferedRequest, @escaping (BufferedOutcome) -> Void) -> Void)
    case respond(routeName: String, LocalResponse)
}

/// Where and how a request is forwarded. A class (immutable): a route's forward is made once and
/// shared by its requests, and passing it along costs one reference count, not one per field.
public final class Forward {
    public let routeName: String
    /// The upstream's only server, or its first (`balancer` chooses); its target names the upstream.
    public let pool: UpstreamPool
    public let maxBody: Int
    /// Applied to the upstream request's fields with the proxy's own rewriting (`UpstreamRequestHead`),
    /// e.g. to remove assertion headers and add the verified key id.
    public let editHeaders: HeaderEdit
    /// Added to the downstream response after the upstream's fields.
    public let responseHeaders: HTTPFields
    /// An upstream with several servers: the server of each attempt; nil: `pool` is the only one.
    public let balancer: UpstreamBalancer?
    /// From the request's end to the response head, and to connect: the route's, else the upstream's.
    public let responseTimeoutMillis: Int64
    public let connectTimeoutMillis: Int64
    /// What the route does with the upstream's response head first (fields only the gateway reads,
    /// such as `X-Device-Check-Update`); nil on most routes, whose heads are copied as bytes.
    public let responseHook: ResponseHook?
    /// On a protected route: the verdict that let the request go on, for the access line.
    public let verdict: AccessVerdict?

    /// - Parameters:
    ///   - balancer: several servers (`pool` is then its first).
    ///   - responseTimeoutMillis, connectTimeoutMillis: a route's own; nil: `pool.target`'s.
    public init(routeName: String, pool: UpstreamPool, maxBody: Int, editHeaders: HeaderEdit = HeaderEdit(),
                responseHeaders: HTTPFields = HTTPFields(), responseHook: ResponseHook? = nil, balancer: UpstreamBalancer? = nil,
                responseTimeoutMillis: Int64? = nil, connectTimeoutMillis: Int64? = nil, verdict: AccessVerdict? = nil)
    {
        self.routeName = routeName
        self.pool = pool
        self.maxBody = maxBody
        self.editHeaders = editHeaders
        self.responseHeaders = responseHeaders
        self.balancer = balancer
        self.responseTimeoutMillis = responseTimeoutMillis ?? pool.target.responseTimeoutMillis
        self.connectTimeoutMillis = connectTimeoutMillis ?? pool.target.connectTimeoutMillis
        self.responseHook = responseHook
        self.verdict = verdict
    }

    /// Whether the response head goes through strings (`DownstreamResponseHead.fields`): route fields
    /// to set, or a hook.
    var rewritesResponse: Bool { responseHeaders.count > 0 || responseHook != nil }
}

/// A route's look at an upstream's response head before the client's: `observe` sees the head as
/// received (on the loop), then every field named in `remove` (any ASCII case) is left out of what
/// the client gets.
public struct ResponseHook {
    public let remove: [String]
    public let observe: ((HTTPResponseHead) -> Void)?

    public init(remove: [String], observe: ((HTTPResponseHead) -> Void)? = nil) {
        self.remove = remove
        self.observe = observe
    }
}

/// A protected route's verdict as the access line shows it: `verdict` (`accepted`, `refused`,
/// `would_refuse`, `fail_open`) and `reason` (`ok` or the refusal's code). Never assertion bytes.
/// A class: one reference in the answers that carry it (`LocalResponse`, `Forward`), which every
/// request's decision copies.
public final class AccessVerdict: Sendable {
    public let verdict: String
    public let reason: String

    public init(verdict: String, reason: String) {
        self.verdict = verdict
        self.reason = reason
    }
}

extension BodyFraming {
    /// The framing of a body read whole (buffered for a local decision): its length, whatever
    /// framing it arrived with; none when it had none and is empty.
    static func whole(_ original: BodyFraming, count: Int) -> BodyFraming {
        original == .none && count == 0 ? .none : .contentLength(UInt64(count))
    }
}

/// The connection's peer as the forwarding rules see it (`UpstreamRequestHead`): the address that
/// goes last in `X-Forwarded-For`, and whether it is a trusted proxy (`TrustedProxies`).
public struct ForwardingPeer: Sendable {
    public var address: String
    public var trusted: Bool

    public init(address: String, trusted: Bool) {
        self.address = address
        self.trusted = trusted
    }
}

public struct BufferedRequest {
    public let head: HTTPRequestHead
    public let path: String
    public let body: [UInt8]
    /// The request's client (`ClientAddress`): the connection's peer, or the client a trusted proxy
    /// named in X-Forwarded-For. What rate limits and `/explain` count and show.
    public let peer: SocketAddress?
    /// `http` or `https` (a TLS listener): for X-Forwarded-Proto.
    public let scheme: String
    /// The listener's rule for foldable names (`DownstreamLimits.dropFoldableNames`), for a local
    /// handler that forwards (the demo upstream).
    public var dropFoldableNames: Bool = true
    /// The connection's peer when it is a trusted proxy (nil: `peer` is the connection's peer, not
    /// trusted), for a local handler that forwards (the demo upstream).
    public var forwardingPeer: ForwardingPeer? = nil
    /// The exchange's id: refusals are recorded for `/explain` under it.
    public var requestID = RequestID("")
}

public enum BufferedOutcome {
    case respond(LocalResponse)
    case forward(Forward)
}

/// One finished exchange, for the access log and metrics. Made on the exchange's loop and read
/// there, during `exchangeDidFinish` only: `fields` may point into the connection's buffers.
public struct ExchangeRecord {
    public var route: String
    public var method: String
    public var target: String
    public var status: Int
    public var requestBytes: Int
    public var responseBytes: Int
    public var durationSeconds: Double
    public var upstream: String?
    public var upstreamSeconds: Double?
    /// The client's address as text (`-` when unknown): the one value the access line and
    /// X-Forwarded-For take the client from.
    public var peer: String
    public var error: String?
    /// `http1` or `h2`.
    public var protocolName: String
    /// The exchange's id.
    public var requestID = RequestID("")
    /// `HTTP/1.0`, `HTTP/1.1` or `HTTP/2.0`, as nginx's `$server_protocol` says it.
    public var httpVersion: StaticString = "HTTP/1.1"
    /// Host, User-Agent and Referer as the client sent them.
    public var fields = LoggedFields()
    /// On a protected route: the verdict and its reason.
    public var verdict: AccessVerdict?
}

/// A request field's value for the access line, without a copy: Latin-1 bytes of the connection's
/// head (HTTP/1.1, valid only during `exchangeDidFinish`), or the string of an HTTP/2 head.
public enum LoggedValue {
    case none
    case bytes(UnsafeRawBufferPointer)
    case string(String)
}

/// The request fields the access line shows.
public struct LoggedFields {
    public var host: LoggedValue = .none
    public var userAgent: LoggedValue = .none
    public var referer: LoggedValue = .none

    public init(host: LoggedValue = .none, userAgent: LoggedValue = .none, referer: LoggedValue = .none) {
        self.host = host
        self.userAgent = userAgent
        self.referer = referer
    }

    /// From an HTTP/1.1 head (ranges of `buf`) and what `HeadExtras` found in it.
    static func of(_ head: HTTPRequestHeadLines, _ extras: HeadExtras, _ buf: UnsafeRawBufferPointer) -> LoggedFields {
        func value(_ r: Range<Int>?) -> LoggedValue { r.map { .bytes(UnsafeRawBufferPointer(rebasing: buf[$0])) } ?? .none }
        return LoggedFields(host: value(head.host), userAgent: value(extras.userAgent), referer: value(extras.referer))
    }

    /// From a head of strings (HTTP/2: the authority is the first field, as Host).
    static func of(_ head: HTTPRequestHead) -> LoggedFields {
        var out = LoggedFields()
        if let host = head.headers.fields.first?.value { out.host = .string(host) }
        for f in head.headers {
            switch f.name.utf8.count {
            case 10:
                if case .none = out.userAgent, f.name.equalsIgnoringASCIICase("User-Agent") { out.userAgent = .string(f.value) }
            case 7:
                if case .none = out.referer, f.name.equalsIgnoringASCIICase("Referer") { out.referer = .string(f.value) }
            default: break
            }
        }
        return out
    }
}

/// What the HTTP/1.1 connection reads of a head besides what the parser found (`HTTPRequestHeadLines`),
/// in one pass over its field lines when the head arrives: its `X-Request-Id` fields (`RequestID`),
/// the first `User-Agent` and the first `Referer` (the access line). Ranges of the head's bytes.
struct HeadExtras {
    var requestID: Range<Int>?
    /// How many `X-Request-Id` fields (more than one: none is the client's id).
    var requestIDCount = 0
    var userAgent: Range<Int>?
    var referer: Range<Int>?

    static let none = HeadExtras()

    static func scan(_ head: HTTPRequestHeadLines, _ buf: UnsafeRawBufferPointer) -> HeadExtras {
        var out = HeadExtras()
        for f in head.fields {
            // Names of other lengths (most) are passed over without a look at their bytes.
            switch f.name.count {
            case 12:
                if equalsIgnoringCase(UnsafeRawBufferPointer(rebasing: buf[f.name]), "X-Request-Id") {
                    out.requestIDCount += 1
                    out.requestID = f.value
                }
            case 10:
                if out.userAgent == nil, equalsIgnoringCase(UnsafeRawBufferPointer(rebasing: buf[f.name]), "User-Agent") {
                    out.userAgent = f.value
                }
            case 7:
                if out.referer == nil, equalsIgnoringCase(UnsafeRawBufferPointer(rebasing: buf[f.name]), "Referer") {
                    out.referer = f.value
                }
            default: break
            }
        }
        return out
    }
}

/// Per loop: decides each request's disposition and hears about finished exchanges.
public protocol RequestRouter: AnyObject {
    /// `peer` is the request's client (`ClientAddress`): the connection's peer, or the client a
    /// trusted proxy named. `requestID`: the exchange's id (`RequestID`), for what the router records
    /// of it (`/explain`).
    func route(_ head: HTTPRequestHead, path: String, peer: SocketAddress?, requestID: RequestID) -> RouteDecision
    /// The HTTP/1.1 connection's entry: the method, the normalized path and the Host value (asked
    /// for only when a route matches on hosts) decide a plain route; `head` builds the whole head of
    /// strings, for the routes that need it. By default: `route(head(), …)`.
    func route(method: String, path: String, host: () -> String?, peer: SocketAddress?, requestID: RequestID,
               head: () -> HTTPRequestHead) -> RouteDecision
    func exchangeDidFinish(_ record: ExchangeRecord)
}

extension RequestRouter {
    public func route(method: String, path: String, host: () -> String?, peer: SocketAddress?, requestID: RequestID,
                      head: () -> HTTPRequestHead) -> RouteDecision
    {
        route(head(), path: path, peer: peer, requestID: requestID)
    }
}

/// Limits and timeouts of the downstream side.
public struct DownstreamLimits: Sendable {
    public var parser: HTTP1Parser.Limits
    public var idleTimeoutMillis: Int64
    public var headerTimeoutMillis: Int64
    public var bodyTimeoutMillis: Int64
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

    public init(parser: HTTP1Parser.Limits = .init(), idleTimeoutMillis: Int64 = 60_000, headerTimeoutMillis: Int64 = 10_000,
                bodyTimeoutMillis: Int64 = 30_000, highWaterMark: Int = 256 * 1024)
    {
        self.parser = parser
        self.idleTimeoutMillis = idleTimeoutMillis
        self.headerTimeoutMillis = headerTimeoutMillis
        self.bodyTimeoutMillis = bodyTimeoutMillis
        self.highWaterMark = highWaterMark
    }
}
