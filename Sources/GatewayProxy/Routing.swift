import GatewayHTTP
import GatewayIO

/// A response the gateway writes itself (errors, local endpoints, the demo upstream).
public struct LocalResponse: Sendable {
    public var status: Int
    public var headers: HTTPFields
    public var body: [UInt8]

    public init(status: Int, headers: HTTPFields = HTTPFields(), body: [UInt8] = []) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    /// `{"error":"<code>", …}` with `Content-Type: application/json` (the gateway's only error shape).
    public static func error(_ status: Int, _ code: String, extra: [(String, String)] = []) -> LocalResponse {
        var body = "{\"error\":\"\(code)\""
        for (k, v) in extra { body += ",\"\(k)\":\"\(v)\"" }
        body += "}\n"
        return LocalResponse(status: status, headers: HTTPFields([("Content-Type", "application/json")]), body: Array(body.utf8))
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
    public let pool: UpstreamPool
    public let maxBody: Int
    /// Applied to the upstream request's fields after the proxy's own rewriting (hop-by-hop removal,
    /// X-Forwarded-*), e.g. to remove assertion headers and add the verified key id.
    public let editHeaders: HeaderEdit
    /// Added to the downstream response after the upstream's fields.
    public let responseHeaders: HTTPFields

    public init(routeName: String, pool: UpstreamPool, maxBody: Int, editHeaders: HeaderEdit = HeaderEdit(),
                responseHeaders: HTTPFields = HTTPFields())
    {
        self.routeName = routeName
        self.pool = pool
        self.maxBody = maxBody
        self.editHeaders = editHeaders
        self.responseHeaders = responseHeaders
    }
}

extension BodyFraming {
    /// The framing of a body read whole (buffered for a local decision): its length, whatever
    /// framing it arrived with; none when it had none and is empty.
    static func whole(_ original: BodyFraming, count: Int) -> BodyFraming {
        original == .none && count == 0 ? .none : .contentLength(UInt64(count))
    }
}

extension Forward {
    /// Writes the request head sent upstream: the client's fields rewritten (hop-by-hop fields
    /// removed, X-Forwarded-*, Via), without `Expect`, with a `Host` (HTTP/1.0 clients may omit it;
    /// the upstream request is HTTP/1.1), edited by the route, then framed as `framing` says; in one
    /// pass over the client's fields, into the loop's head buffer. Tests hold it, byte for byte, to
    /// the same rules applied on a field list (`UpstreamHeadTests`).
    func writeUpstreamHead(_ head: HTTPRequestHead, client: String, proto: String, framing: BodyFraming,
                           dropFoldableNames: Bool = true, to out: inout HeadWriter)
    {
        out.appendLatin1(head.method)
        out.append(0x20)
        out.appendLatin1(head.target)
        out.append(" HTTP/1.1\r\n")
        // What the rewrite needs to know of the client's fields, in one pass.
        var hasListed = false
        var connectionValues: [String] = []
        var hasForwarding = false
        var hostValue: String? = nil
        var foldableNames = false
        for f in head.headers {
            let name = f.name
            if !foldableNames && FoldedNames.isFoldable(name) { foldableNames = true }
            if HopByHop.isListed(name) {
                hasListed = true
                if name.utf8.count == 10 && name.equalsIgnoringASCIICase("Connection") { connectionValues.append(f.value) }
            } else if ForwardedHeaders.isForwardingField(name) {
                hasForwarding = true
            } else if hostValue == nil && name.utf8.count == 4 && name.equalsIgnoringASCIICase("Host") {
                hostValue = f.value
            }
        }
        let edit = editHeaders
        let dropContentLength: Bool
        switch framing {
        case .chunked, .contentLength: dropContentLength = true
        case .none, .untilClose: dropContentLength = false
        }
        let dropTransferEncoding: Bool = if case .contentLength = framing { true } else { false }
        /// The filters that apply after the rewrite: the route's removals (and for the client's
        /// fields, the gateway-owned ones), then the framing fields.
        func emit(_ name: String, _ value: String, editable: Bool = true, fromClient: Bool = false) {
            if fromClient ? edit.removesClientField(name) : editable && edit.removes(name) { return }
            if dropContentLength || dropTransferEncoding {
                switch name.utf8.count {
                case 14 where dropContentLength: if name.equalsIgnoringASCIICase("Content-Length") { return }
                case 17 where dropTransferEncoding: if name.equalsIgnoringASCIICase("Transfer-Encoding") { return }
                default: break
                }
            }
            out.appendField(name, value)
        }
        var priorFor = ""
        var priorForSeen = false
        var priorVia = ""
        var priorViaSeen = false
        var keepTrailersTE = false
        for f in head.headers {
            let name = f.name
            if foldableNames && FoldedNames.isFoldable(name) && (dropFoldableNames || FoldedNames.isInterpretedWhenFolded(name)) {
                continue
            }
            if hasListed {
                if HopByHop.isListed(name) {
                    if name.utf8.count == 2 && name.equalsIgnoringASCIICase("TE") && listContains(f.value, "trailers") {
                        keepTrailersTE = true
                    }
                    continue
                }
                if !connectionValues.isEmpty && !name.equalsIgnoringASCIICase("Host")
                    && connectionValues.contains(where: { listContains($0, name) })
                {
                    continue
                }
            }
            if hasForwarding && ForwardedHeaders.isForwardingField(name) {
                if name.equalsIgnoringASCIICase("X-Forwarded-For") {
                    priorFor = priorForSeen ? priorFor + ", " + f.value : f.value
                    priorForSeen = true
                } else if name.equalsIgnoringASCIICase("Via") {
                    priorVia = priorViaSeen ? priorVia + ", " + f.value : f.value
                    priorViaSeen = true
                }
                continue
            }
            if name.utf8.count == 6 && name.equalsIgnoringASCIICase("Expect") { continue }
            emit(name, f.value, fromClient: true)
        }
        if keepTrailersTE { emit("TE", "trailers") }
        emit("X-Forwarded-For", priorFor.isEmpty ? client : priorFor + ", " + client)
        emit("X-Forwarded-Proto", proto)
        if let hostValue { emit("X-Forwarded-Host", hostValue) }
        emit("Via", priorVia.isEmpty ? ForwardedHeaders.via : priorVia + ", " + ForwardedHeaders.via)
        if hostValue == nil { emit("Host", pool.target.address.description) }
        for (name, value) in edit.add { emit(name, value, editable: false) }
        out.appendFraming(framing)
        out.crlf()
    }
}

extension Forward {
    /// `writeUpstreamHead` for a head kept as ranges of `buf` (the HTTP/1.1 proxy's path): the same
    /// rules in the same order, with the client's field lines copied as bytes. Tests hold the two to
    /// the same output, byte for byte (`UpstreamHeadTests`).
    func writeUpstreamHead(_ head: HTTPRequestHeadLines, _ buf: UnsafeRawBufferPointer, client: String, proto: String,
                           framing: BodyFraming, dropFoldableNames: Bool = true, to out: inout HeadWriter)
    {
        var client = client
        var proto = proto
        client.withUTF8 { c in
            proto.withUTF8 { p in
                head.writeUpstream(from: buf, client: UnsafeRawBufferPointer(c), proto: UnsafeRawBufferPointer(p), framing: framing,
                                   remove: editHeaders.removeNames, clientRemove: editHeaders.clientRemoveNames,
                                   dropFoldableNames: dropFoldableNames, add: editHeaders.add,
                                   defaultHost: { pool.target.address.description }, to: &out)
            }
        }
    }
}

/// The route's edit of the fields sent upstream: every field named in `remove` goes (any case, `_`
/// or `.` as `-`: `FieldNames`), then `add` is appended (e.g. the verified key id). The client's fields are also held
/// to the gateway-owned list (`GatewayOwnedFields`), which no edit can let through.
public struct HeaderEdit: Sendable {
    public var remove: [String] {
        didSet {
            removeNames = FieldNames(remove)
            clientRemoveNames = GatewayOwnedFields.names(with: remove)
        }
    }
    public var add: [(String, String)]
    /// `remove` as bytes, for the byte path.
    public private(set) var removeNames: FieldNames
    /// What a client's field is held to: the gateway-owned names and `remove`.
    public private(set) var clientRemoveNames: FieldNames

    public init(remove: [String] = [], add: [(String, String)] = []) {
        self.remove = remove
        self.add = add
        removeNames = FieldNames(remove)
        clientRemoveNames = GatewayOwnedFields.names(with: remove)
    }

    /// Whether a field the gateway writes (X-Forwarded-*, Via, a default Host) is removed.
    func removes(_ name: String) -> Bool { removeNames.contains(name) }

    /// Whether a client's field is removed: gateway-owned, or named in `remove`.
    func removesClientField(_ name: String) -> Bool { clientRemoveNames.contains(name) }

    /// `remove` then `add`, on fields that the forwarding rewrite has made
    /// (`ForwardedHeaders.rewriteRequest`, which removed the gateway-owned ones).
    public func apply(_ fields: inout HTTPFields) {
        if !remove.isEmpty { fields.removeAll { removeNames.contains($0.name) } }
        for (name, value) in add { fields.append(name, value) }
    }

    /// The same removals, then `extra` appended.
    /// (Per protected request: the byte names of the removals are carried over, not rebuilt.)
    public func adding(_ name: String, _ value: String) -> HeaderEdit {
        var edit = self
        edit.add.append((name, value))
        return edit
    }
}

public struct BufferedRequest {
    public let head: HTTPRequestHead
    public let path: String
    public let body: [UInt8]
    public let peer: SocketAddress?
    /// `http` or `https` (a TLS listener): for X-Forwarded-Proto.
    public let scheme: String
    /// The listener's rule for foldable names (`DownstreamLimits.dropFoldableNames`), for a local
    /// handler that forwards (the demo upstream).
    public var dropFoldableNames: Bool = true
}

public enum BufferedOutcome {
    case respond(LocalResponse)
    case forward(Forward)
}

/// One finished exchange, for the access log and metrics.
public struct ExchangeRecord: Sendable {
    public var route: String
    public var method: String
    public var target: String
    public var status: Int
    public var requestBytes: Int
    public var responseBytes: Int
    public var durationSeconds: Double
    public var upstream: String?
    public var upstreamSeconds: Double?
    public var peer: String
    public var error: String?
    public var protocolName: String
}

/// Per loop: decides each request's disposition and hears about finished exchanges.
public protocol RequestRouter: AnyObject {
    func route(_ head: HTTPRequestHead, path: String, peer: SocketAddress?) -> RouteDecision
    /// The HTTP/1.1 connection's entry: the method, the normalized path and the Host value (asked
    /// for only when a route matches on hosts) decide a plain route; `head` builds the whole head of
    /// strings, for the routes that need it. By default: `route(head(), …)`.
    func route(method: String, path: String, host: () -> String?, peer: SocketAddress?, head: () -> HTTPRequestHead) -> RouteDecision
    func exchangeDidFinish(_ record: ExchangeRecord)
}

extension RequestRouter {
    public func route(method: String, path: String, host: () -> String?, peer: SocketAddress?, head: () -> HTTPRequestHead)
        -> RouteDecision
    {
        route(head(), path: path, peer: peer)
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
