/// One field line of a head kept as ranges of its buffer.
public struct HTTPFieldRange: Sendable, Equatable {
    public var name: Range<Int>
    /// OWS-trimmed, as the parser validated it.
    public var value: Range<Int>

    public init(name: Range<Int>, value: Range<Int>) {
        self.name = name
        self.value = value
    }
}

/// A response head as ranges of the buffer it was parsed from (`HTTP1Parser.parseResponseHeadLines`):
/// valid only while that buffer is unchanged. A proxy decides on `status`, `framing` and `keepAlive`
/// and copies the fields it keeps byte for byte (`appendForwarded`), without a string per field.
public struct HTTPResponseHeadLines: Sendable, Equatable {
    public typealias FieldRange = HTTPFieldRange

    public var status: Int
    /// The reason phrase (empty range when absent).
    public var reason: Range<Int>
    public var minorVersion: Int
    /// Set by the parser only: `classes` is indexed by position in it.
    public internal(set) var fields: [FieldRange]
    public var framing: BodyFraming
    public var keepAlive: Bool
    /// Which fields a proxy drops or rewrites, found while parsing.
    var classes = Classes()

    /// Per field (bit i for the field at index i, the first 64 fields): hop-by-hop by name
    /// (`HopByHop.isListed`), `Via`, `Content-Length`; and what the Connection fields list. Set by
    /// the parser (`known`), so that writing the head needs no second pass to classify its fields.
    struct Classes: Sendable, Equatable {
        var known = false
        var listed: UInt64 = 0
        var via: UInt64 = 0
        var contentLength: UInt64 = 0
        /// More than one Content-Length field, or a list in one (`5, 5`).
        var contentLengthList = false
        var hasListed = false
        var hasConnection = false
        var listsKeepAlive = false
        var listsClose = false
        var listsOthers = false
    }

    /// The head as `parseResponseHead` would have returned it (strings for everything).
    public func materialize(_ buf: UnsafeRawBufferPointer) -> HTTPResponseHead {
        var headers: [HTTPFields.Field] = []
        headers.reserveCapacity(fields.count)
        for f in fields { headers.append(HTTPFields.Field(latin1(buf, f.name), latin1(buf, f.value))) }
        return HTTPResponseHead(status: status, reason: latin1(buf, reason), minorVersion: minorVersion,
                                headers: HTTPFields(headers), framing: framing)
    }

    /// Appends the head a proxy sends downstream, byte for byte what serializing the materialized
    /// head after `HopByHop.strip`, a `Via` rewrite (`values("Via")` joined with ", ", then `via`),
    /// removing Content-Length when `dropContentLength`, appending `Transfer-Encoding: chunked` when
    /// `chunked`, and appending `Connection: <connection>` would give (status line in HTTP/1.1, the
    /// reason as received, empty included).
    public func appendForwarded(from buf: UnsafeRawBufferPointer, via: String, dropContentLength: Bool, chunked: Bool,
                                connection: String?, to out: inout [UInt8])
    {
        HeadWriter.appendHead(to: &out) { w in
            writeForwarded(from: buf, via: via, dropContentLength: dropContentLength, chunked: chunked, connection: connection, to: &w)
        }
    }

    /// `appendForwarded` into a `HeadWriter` (the proxy's path: the loop's scratch buffer).
    public func writeForwarded(from buf: UnsafeRawBufferPointer, via: String, dropContentLength: Bool, chunked: Bool,
                               connection: String?, to out: inout HeadWriter)
    {
        // Status line: the reason is copied as received (Latin-1 bytes stay the same bytes).
        out.appendStatusLineStart(status: status)
        out.append(UnsafeRawBufferPointer(rebasing: buf[reason]))
        out.crlf()
        let filter = ForwardingFilter(self, buf)
        let hasVia = filter.forEachKept(dropContentLength: dropContentLength) { out.appendFieldLine(buf, $0) }
        // Via: the received values joined (an all-empty join counts as none), then ours.
        out.append("Via: ")
        if hasVia {
            filter.forEachVia(separator: { out.append(", ") }) { out.append($0) }
            out.append(", ")
        }
        out.appendLatin1(via)
        out.crlf()
        if chunked { out.append("Transfer-Encoding: chunked\r\n") }
        if let connection {
            out.append("Connection: ")
            out.appendLatin1(connection)
            out.crlf()
        }
        out.crlf()
    }

    private func latin1(_ buf: UnsafeRawBufferPointer, _ r: Range<Int>) -> String { latin1String(buf, r) }
}

/// Which fields of a response head a proxy passes on (RFC 9110 §7.6.1, Go's ReverseProxy rules, as
/// `HopByHop.strip` decides them on strings): the fixed hop-by-hop list, and every field named in a
/// Connection field except Host, are dropped. Built once per head; the HTTP/1.1 and HTTP/2 writers
/// of a proxied response both ask it.
struct ForwardingFilter {
    private let fields: [HTTPResponseHeadLines.FieldRange]
    private let buf: UnsafeRawBufferPointer
    private let classes: HTTPResponseHeadLines.Classes

    init(_ head: HTTPResponseHeadLines, _ buf: UnsafeRawBufferPointer) {
        fields = head.fields
        self.buf = buf
        precondition(head.classes.known, "ForwardingFilter: a head not made by the parser")
        classes = head.classes
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
        var viaBytes = 0
        var viaCount = 0
        for i in fields.indices {
            let f = fields[i]
            let n = UnsafeRawBufferPointer(rebasing: buf[f.name])
            guard keeps(i, n) else { continue }
            if isVia(i, n) {
                viaBytes += f.value.count
                viaCount += 1
                continue
            }
            if dropContentLength && isContentLength(i, n) { continue }
            body(f)
        }
        return viaCount > 0 && viaBytes + 2 * (viaCount - 1) > 0
    }

    /// `forEachKept` for a head with a repeated Content-Length (rare): the first field goes on with
    /// its first value, the others not.
    private func forEachKeptCollapsing(_ body: (HTTPFieldRange) -> Void) -> Bool {
        var sent = false
        return forEachKept(dropContentLength: true) { f in
            // Kept fields come in order: the first Content-Length is written where it stood.
            body(f)
        } onContentLength: { f in
            guard !sent else { return }
            sent = true
            body(HTTPFieldRange(name: f.name, value: HTTPFields.firstListMember(buf, f.value)))
        }
    }

    /// The kept fields in order, Content-Length ones handed to `onContentLength` instead of `body`.
    private func forEachKept(dropContentLength: Bool, _ body: (HTTPFieldRange) -> Void,
                             onContentLength: (HTTPFieldRange) -> Void) -> Bool
    {
        var viaBytes = 0
        var viaCount = 0
        for i in fields.indices {
            let f = fields[i]
            let n = UnsafeRawBufferPointer(rebasing: buf[f.name])
            guard keeps(i, n) else { continue }
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

/// `bytes` equal to the ASCII `name`, ignoring ASCII case.
@inline(__always)
func equalsIgnoringCase(_ bytes: UnsafeRawBufferPointer, _ name: StaticString) -> Bool {
    guard bytes.count == name.utf8CodeUnitCount else { return false }
    return asciiCaseInsensitiveEqual(
        UnsafeBufferPointer(start: bytes.baseAddress?.assumingMemoryBound(to: UInt8.self), count: bytes.count),
        UnsafeBufferPointer(start: name.utf8Start, count: name.utf8CodeUnitCount))
}

/// Whether the comma-separated list in `list` has an element equal to `token` (ASCII case ignored).
func listContains(_ list: UnsafeRawBufferPointer, _ token: UnsafeRawBufferPointer) -> Bool {
    let l = UnsafeBufferPointer(start: list.baseAddress?.assumingMemoryBound(to: UInt8.self), count: list.count)
    let t = UnsafeBufferPointer(start: token.baseAddress?.assumingMemoryBound(to: UInt8.self), count: token.count)
    return listContains(l, t)
}

/// Whether the comma-separated list in `list` has an element equal to the ASCII `token` (case ignored).
func listContains(_ list: UnsafeRawBufferPointer, _ token: StaticString) -> Bool {
    let l = UnsafeBufferPointer(start: list.baseAddress?.assumingMemoryBound(to: UInt8.self), count: list.count)
    return listContains(l, UnsafeBufferPointer(start: token.utf8Start, count: token.utf8CodeUnitCount))
}

/// Calls `body` with each non-empty element of the comma-separated list `list`, OWS trimmed (the
/// elements `HTTPFields.tokens` returns, before lowercasing).
@inline(__always)
func forEachListElement(_ list: UnsafeRawBufferPointer, _ body: (UnsafeRawBufferPointer) -> Void) {
    var i = 0
    let n = list.count
    while i <= n {
        var end = i
        while end < n, list[end] != UInt8(ascii: ",") { end += 1 }
        var s = i
        var e = end
        while s < e, list[s] == 0x20 || list[s] == 0x09 { s += 1 }
        while e > s, list[e - 1] == 0x20 || list[e - 1] == 0x09 { e -= 1 }
        if e > s { body(UnsafeRawBufferPointer(rebasing: list[s..<e])) }
        i = end + 1
    }
}
