import GatewayHTTP
import GatewayIO

/// What the client sees of an upstream's response head, for HTTP/1.1 and HTTP/2 clients alike:
/// - the fields as received, in order, except the hop-by-hop ones (the fixed list and every field
///   a Connection field names, Host excepted: `ForwardingFilter`);
/// - Content-Length once (repeated fields or a list such as `5, 5` become the first field with its
///   first member), and none when the body goes another way (chunked to an HTTP/1.1 client, DATA
///   frames, until close);
/// - `Via`: the received values joined with ", ", then ours (`UpstreamRequestHead.via`), last;
/// - `X-Request-Id`: the exchange's id (`RequestID`), in place of any the upstream sent;
/// - no `Server` unless the route passes it (`Forward.passServerHeader`, `pass_server_header`): the
///   backend's software and version are not announced (nginx leaves it out too);
/// - a route's response fields (`Forward.responseHeaders`, e.g. the next challenge) set after the
///   upstream's: that rare path goes through strings (`fields(_:routeFields:dropContentLength:)`);
/// - HTTP/1.1 only: `Transfer-Encoding: chunked` and `Connection` as the client's side needs them.
/// The byte writers are held to the string path by tests (`ResponseForwardingTests`).
enum DownstreamResponseHead {
    /// Writes the head for an HTTP/1.1 client (its request's `requestMinor`) to `downstream`. A body
    /// without a length goes chunked to an HTTP/1.1 client, and until the connection closes to an
    /// HTTP/1.0 one; `Connection` says `close` when the connection closes after the response
    /// (`close`, or that HTTP/1.0 body), `keep-alive` to a persistent HTTP/1.0 client. Without route
    /// fields the upstream's field lines are copied as bytes (`writeHTTP1`); with them, through
    /// `HTTPFields`. Returns whether the body goes chunked and whether the connection closes after it.
    static func sendHTTP1(
        _ r: HTTPResponseHeadLines, from buf: UnsafeRawBufferPointer, forward: Forward?, requestMinor: Int,
        close: Bool, requestID: RequestID, to downstream: Connection
    ) -> (chunked: Bool, close: Bool) {
        var chunked = false
        var close = close
        var dropContentLength = false
        switch r.framing {
        case .none, .contentLength:
            break
        case .chunked, .untilClose:
            dropContentLength = true
            if requestMinor == 1 { chunked = true } else { close = true }
        }
        let connection: String? = close ? "close" : requestMinor == 0 ? "keep-alive" : nil
        forward?.accountTap?.read(r, buf)
        if let forward, forward.rewritesResponse {
            let full = r.materialize(buf)
            forward.responseHook?.observe?(full)
            var fields = fields(
                full, routeFields: forward.responseHeaders, dropContentLength: dropContentLength,
                remove: forward.responseHook?.remove ?? [],
                requestID: requestID.text, passServer: forward.passServerHeader)
            if chunked { fields.append("Transfer-Encoding", "chunked") }
            if let connection { fields.set("Connection", connection) }
            downstream.write { HTTP1Serializer.appendResponseHead(status: full.status, reason: full.reason, headers: fields, to: &$0) }
        } else {
            let routeFields = forward?.responseHeaders ?? HTTPFields()
            let passServer = forward?.passServerHeader ?? false
            requestID.withBytes { i in
                downstream.writeHead {
                    writeHTTP1(
                        r, from: buf, dropContentLength: dropContentLength, chunked: chunked, connection: connection,
                        requestID: i, routeFields: routeFields, passServer: passServer, to: &$0)
                }
            }
        }
        return (chunked, close)
    }

    /// The HTTP/1.1 head for the client, from the upstream's bytes: status line (the reason as
    /// received), the kept fields, Via, the route's fields (`routeFields`, set over the upstream's
    /// of the same names: only fields `Forward.responseFieldsAsBytes` allows), X-Request-Id (none
    /// when `requestID` is empty), then `Transfer-Encoding: chunked` when `chunked` and
    /// `Connection: <connection>` when given: what `fields` gives on strings, in the same order.
    static func writeHTTP1(
        _ r: HTTPResponseHeadLines, from buf: UnsafeRawBufferPointer, dropContentLength: Bool,
        chunked: Bool, connection: String?, requestID: UnsafeRawBufferPointer,
        routeFields: HTTPFields = HTTPFields(), passServer: Bool = false, to out: inout HeadWriter
    ) {
        out.appendStatusLineStart(status: r.status)
        out.append(UnsafeRawBufferPointer(rebasing: buf[r.reason]))
        out.crlf()
        let filter = ForwardingFilter(r, buf, passServer: passServer)
        let hasVia: Bool
        if routeFields.count == 0 {
            hasVia = filter.forEachKept(dropContentLength: dropContentLength) { out.appendFieldLine(buf, $0) }
        } else {
            hasVia = filter.forEachKept(dropContentLength: dropContentLength) { f in
                if !Self.named(UnsafeRawBufferPointer(rebasing: buf[f.name]), in: routeFields) { out.appendFieldLine(buf, f) }
            }
        }
        // Via: the received values joined (an all-empty join counts as none), then ours.
        out.append("Via: ")
        if hasVia {
            filter.forEachVia(separator: { out.append(", ") }) { out.append($0) }
            out.append(", ")
        }
        out.append(UpstreamRequestHead.via)
        out.crlf()
        for f in routeFields { out.appendField(f.name, f.value) }
        if !requestID.isEmpty {
            out.append("X-Request-Id: ")
            out.append(requestID)
            out.crlf()
        }
        if chunked { out.append("Transfer-Encoding: chunked\r\n") }
        if let connection {
            out.append("Connection: ")
            out.appendLatin1(connection)
            out.crlf()
        }
        out.crlf()
    }

    /// The same fields for an HTTP/2 client, appended to the session's header block (whose HTTP/2
    /// rules then apply: names lowercased, fields HTTP/2 cannot carry dropped).
    static func appendHTTP2(
        _ r: HTTPResponseHeadLines, from buf: UnsafeRawBufferPointer, dropContentLength: Bool,
        requestID: UnsafeRawBufferPointer, routeFields: HTTPFields = HTTPFields(), passServer: Bool = false,
        to block: inout HTTP2HeaderBlock
    ) {
        let filter = ForwardingFilter(r, buf, passServer: passServer)
        let hasVia = filter.forEachKept(dropContentLength: dropContentLength) { f in
            let name = UnsafeRawBufferPointer(rebasing: buf[f.name])
            if routeFields.count > 0 && Self.named(name, in: routeFields) { return }
            block.append(name: name, value: UnsafeRawBufferPointer(rebasing: buf[f.value]))
        }
        let (n, v) = block.beginField(name: "via")
        if hasVia {
            filter.forEachVia(separator: { block.appendValue(", ") }) { block.appendValue($0) }
            block.appendValue(", ")
        }
        block.appendValue(UnsafeRawBufferPointer(staticString: UpstreamRequestHead.via))
        block.commit(nameStart: n, valueStart: v)
        for f in routeFields { block.append(name: f.name, value: f.value) }
        if !requestID.isEmpty {
            let (n, v) = block.beginField(name: "x-request-id")
            block.appendValue(requestID)
            block.commit(nameStart: n, valueStart: v)
        }
    }

    /// Whether `name` (bytes of a received field) names one of `fields`, in any ASCII case (no copy
    /// of a field, only names of its length compared: `HTTPFields.contains(name:)`).
    static func named(_ name: UnsafeRawBufferPointer, in fields: HTTPFields) -> Bool {
        fields.contains(name: name)
    }

    /// The same rules on strings, for a route that sets response fields: the upstream's fields
    /// (hop-by-hop and the route's `remove` removed, Content-Length once, Via extended), then the route's set over them, then
    /// Content-Length removed when `dropContentLength`; the exchange's `X-Request-Id` (none when
    /// `requestID` is empty) in place of the upstream's.
    static func fields(
        _ head: HTTPResponseHead, routeFields: HTTPFields, dropContentLength: Bool, remove: [String] = [],
        requestID: String = "", passServer: Bool = false
    ) -> HTTPFields {
        var fields = head.headers
        fields.remove(RequestID.field)
        fields.remove(AccountResponseField.name)
        if !passServer { fields.remove("Server") }
        HopByHop.strip(&fields, isRequest: false)
        for name in remove { fields.remove(name) }
        fields.collapseContentLength()
        let via = fields.values("Via").joined(separator: ", ")
        fields.remove("Via")
        let ours = UpstreamRequestHead.via.description
        fields.append("Via", via.isEmpty ? ours : via + ", " + ours)
        for e in routeFields { fields.set(e.name, e.value) }
        if dropContentLength { fields.remove("Content-Length") }
        if !requestID.isEmpty { fields.append(RequestID.field, requestID) }
        return fields
    }
}

/// Which fields of a response head a proxy passes on (RFC 9110 §7.6.1, Go's ReverseProxy rules, as
/// `HopByHop.strip` decides them on strings): the fixed hop-by-hop list, and every field named in a
/// Connection field except Host, are dropped. Built once per head; the HTTP/1.1 and HTTP/2 writers
/// of a proxied response both ask it.
struct ForwardingFilter {
    private let fields: [HTTPFieldRange]
    private let buf: UnsafeRawBufferPointer
    private let classes: HTTPResponseHeadLines.Classes
    /// `Server` fields go on (`Forward.passServerHeader`); else they are left out.
    private let passServer: Bool

    init(_ head: HTTPResponseHeadLines, _ buf: UnsafeRawBufferPointer, passServer: Bool = false) {
        fields = head.fields
        self.buf = buf
        precondition(head.classes.known, "ForwardingFilter: a head not made by the parser")
        classes = head.classes
        self.passServer = passServer
    }

    /// Whether the field at `index`, named `name`, goes on.
    func keeps(_ index: Int, _ name: UnsafeRawBufferPointer) -> Bool {
        guard classes.hasListed else { return true }  // no listed field: no Connection field either
        if index < 64 ? (classes.listed >> UInt64(index)) & 1 != 0 : HopByHop.isListed(name) { return false }
        return !(classes.hasConnection && !equalsIgnoringCase(name, "Host") && namedInConnection(name))
    }

    /// Calls `body` with each field that goes on unchanged, in order (Via, rewritten by the caller,
    /// and Content-Length when `dropContentLength` are not among them). Returns whether the kept Via
    /// values join to something (an all-empty join counts as none), for `forEachVia`.
    /// Content-Length goes on once (RFC 9112 §6.3 allows collapsing identical values; differing ones
    /// were refused by the parser where they frame the body): repeated fields or a list (`5, 5`)
    /// become the first field with its first member (`HTTPFields.collapseContentLength`).
    func forEachKept(dropContentLength: Bool, _ body: (HTTPFieldRange) -> Void) -> Bool {
        if !dropContentLength && classes.contentLengthList { return forEachKeptCollapsing(body) }
        return forEachKept(body) { f in if !dropContentLength { body(f) } }
    }

    /// `forEachKept` for a head with a repeated Content-Length (rare): the first field goes on with
    /// its first value, the others not.
    private func forEachKeptCollapsing(_ body: (HTTPFieldRange) -> Void) -> Bool {
        var sent = false
        // Kept fields come in order: the first Content-Length is written where it stood.
        return forEachKept(body) { f in
            guard !sent else { return }
            sent = true
            body(HTTPFieldRange(name: f.name, value: HTTPFields.firstListMember(buf, f.value)))
        }
    }

    /// The kept fields in order, Content-Length ones handed to `onContentLength` instead of `body`.
    @inline(__always)
    private func forEachKept(_ body: (HTTPFieldRange) -> Void, onContentLength: (HTTPFieldRange) -> Void) -> Bool {
        var viaBytes = 0
        var viaCount = 0
        for i in fields.indices {
            let f = fields[i]
            let n = UnsafeRawBufferPointer(rebasing: buf[f.name])
            guard keeps(i, n) else { continue }
            if n.count == 12 && equalsIgnoringCase(n, "X-Request-Id") { continue }  // the gateway's (`RequestID`)
            if AccountResponseField.matches(n) { continue }  // the gateway's alone (`AccountResponseField`)
            if !passServer && isServer(i, n) { continue }
            if isVia(i, n) {
                viaBytes += f.value.count
                viaCount += 1
                continue
            }
            if isContentLength(i, n) {
                onContentLength(f)
                continue
            }
            body(f)
        }
        return viaCount > 0 && viaBytes + 2 * (viaCount - 1) > 0
    }

    /// The kept Via values in order, `separator` between them (the caller appends the proxy's own).
    func forEachVia(separator: () -> Void, _ body: (UnsafeRawBufferPointer) -> Void) {
        var k = 0
        for i in fields.indices {
            let n = UnsafeRawBufferPointer(rebasing: buf[fields[i].name])
            guard isVia(i, n) && keeps(i, n) else { continue }
            if k > 0 { separator() }
            body(UnsafeRawBufferPointer(rebasing: buf[fields[i].value]))
            k += 1
        }
    }

    func isVia(_ index: Int, _ name: UnsafeRawBufferPointer) -> Bool {
        index < 64 ? (classes.via >> UInt64(index)) & 1 != 0 : equalsIgnoringCase(name, "Via")
    }

    func isServer(_ index: Int, _ name: UnsafeRawBufferPointer) -> Bool {
        index < 64 ? (classes.server >> UInt64(index)) & 1 != 0 : equalsIgnoringCase(name, "Server")
    }

    func isContentLength(_ index: Int, _ name: UnsafeRawBufferPointer) -> Bool {
        index < 64 ? (classes.contentLength >> UInt64(index)) & 1 != 0 : equalsIgnoringCase(name, "Content-Length")
    }

    private func namedInConnection(_ name: UnsafeRawBufferPointer) -> Bool {
        // Usually Connection lists only `keep-alive` or `close`: then which of those two it lists
        // decides, without looking at the Connection fields again.
        if !classes.listsOthers {
            return (classes.listsClose && equalsIgnoringCase(name, "close"))
                || (classes.listsKeepAlive && equalsIgnoringCase(name, "keep-alive"))
        }
        for c in fields where c.name.count == 10 {
            let cn = UnsafeRawBufferPointer(rebasing: buf[c.name])
            if equalsIgnoringCase(cn, "Connection") && listContains(UnsafeRawBufferPointer(rebasing: buf[c.value]), name) {
                return true
            }
        }
        return false
    }
}
