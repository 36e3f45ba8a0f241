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
/// and copies the fields it keeps byte for byte (the proxy's `DownstreamResponseHead`), without a
/// string per field.
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
    /// What kind of field each one is (hop-by-hop, Via, Content-Length), found while parsing.
    public internal(set) var classes = Classes()

    /// Per field (bit i for the field at index i, the first 64 fields): hop-by-hop by name
    /// (`HopByHop.isListed`), `Via`, `Content-Length`; and what the Connection fields list. Set by
    /// the parser (`known`), so that a writer of the head needs no second pass to classify its fields.
    public struct Classes: Sendable, Equatable {
        public internal(set) var known = false
        public internal(set) var listed: UInt64 = 0
        public internal(set) var via: UInt64 = 0
        public internal(set) var contentLength: UInt64 = 0
        /// `Server` fields (a proxy leaves them out unless told to pass them).
        public internal(set) var server: UInt64 = 0
        /// More than one Content-Length field, or a list in one (`5, 5`).
        public internal(set) var contentLengthList = false
        public internal(set) var hasListed = false
        public internal(set) var hasConnection = false
        public internal(set) var listsKeepAlive = false
        public internal(set) var listsClose = false
        public internal(set) var listsOthers = false
    }

    /// The head as `parseResponseHead` would have returned it (strings for everything).
    public func materialize(_ buf: UnsafeRawBufferPointer) -> HTTPResponseHead {
        var headers: [HTTPFields.Field] = []
        headers.reserveCapacity(fields.count)
        for f in fields { headers.append(HTTPFields.Field(latin1(buf, f.name), latin1(buf, f.value))) }
        return HTTPResponseHead(
            status: status, reason: latin1(buf, reason), minorVersion: minorVersion,
            headers: HTTPFields(headers), framing: framing)
    }

    private func latin1(_ buf: UnsafeRawBufferPointer, _ r: Range<Int>) -> String { latin1String(buf, r) }
}

/// `bytes` equal to the ASCII `name`, ignoring ASCII case. (Inlinable: the proxy's writers call it
/// per field.)
@inlinable @inline(__always)
public func equalsIgnoringCase(_ bytes: UnsafeRawBufferPointer, _ name: StaticString) -> Bool {
    guard bytes.count == name.utf8CodeUnitCount else { return false }
    return asciiCaseInsensitiveEqual(
        UnsafeBufferPointer(start: bytes.baseAddress?.assumingMemoryBound(to: UInt8.self), count: bytes.count),
        UnsafeBufferPointer(start: name.utf8Start, count: name.utf8CodeUnitCount))
}

/// Whether the comma-separated list in `list` has an element equal to `token` (ASCII case ignored).
public func listContains(_ list: UnsafeRawBufferPointer, _ token: UnsafeRawBufferPointer) -> Bool {
    let l = UnsafeBufferPointer(start: list.baseAddress?.assumingMemoryBound(to: UInt8.self), count: list.count)
    let t = UnsafeBufferPointer(start: token.baseAddress?.assumingMemoryBound(to: UInt8.self), count: token.count)
    return listContains(l, t)
}

/// Whether the comma-separated list in `list` has an element equal to the ASCII `token` (case ignored).
public func listContains(_ list: UnsafeRawBufferPointer, _ token: StaticString) -> Bool {
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
