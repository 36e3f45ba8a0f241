import GatewayHTTP
import GatewayIO

/// The current request head's bytes: one buffer per connection, grown to the largest head seen
/// (released after an exchange when above 8 KiB), copied into once per request. The ranges of
/// `HTTPRequestHeadLines` point into it; it cannot change while lent (`with`), which traps. An
/// HTTP/2 connection keeps one too, to lay out a stream's head as bytes for the upstream writer.
/// `@_spi(Fuzzing)`: fuzz/'s FuzzHTTP1 and FuzzHTTP2 take heads through it to `UpstreamRequestHead`.
@_spi(Fuzzing) public final class HeadBytes {
    private var base: UnsafeMutableRawPointer?
    private var capacity = 0
    private var count = 0
    private var lent = 0

    @_spi(Fuzzing) public init() {}

    @_spi(Fuzzing) public func set(_ bytes: UnsafeRawBufferPointer) {
        precondition(lent == 0, "HeadBytes changed while lent")
        if bytes.count > capacity {
            base?.deallocate()
            capacity = (bytes.count + 63) & ~63  // idle keep-alive connections keep it: no slack
            base = UnsafeMutableRawPointer.allocate(byteCount: capacity, alignment: 8)
        }
        if let src = bytes.baseAddress, let base { base.copyMemory(from: src, byteCount: bytes.count) }
        count = bytes.count
    }

    @inline(__always)
    @_spi(Fuzzing) public func with<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        lent += 1
        defer { lent -= 1 }
        return try body(UnsafeRawBufferPointer(start: base, count: count))
    }

    /// Appends `prefix`, then the bytes at `range` of this buffer, then `literal`, after the head
    /// (a rewritten target or field needs bytes the head does not have); returns where they are.
    @discardableResult
    func append(prefix: UInt8?, copying range: Range<Int>?, literal: StaticString = "") -> Range<Int> {
        precondition(lent == 0, "HeadBytes changed while lent")
        var extra: [UInt8] = []
        if let prefix { extra.append(prefix) }
        if let range, let base { extra += UnsafeRawBufferPointer(start: base + range.lowerBound, count: range.count) }
        extra += UnsafeBufferPointer(start: literal.utf8Start, count: literal.utf8CodeUnitCount)
        let start = count
        let needed = count + extra.count
        if needed > capacity {
            let grown = UnsafeMutableRawPointer.allocate(byteCount: (needed + 63) & ~63, alignment: 8)
            if let base { grown.copyMemory(from: base, byteCount: count) }
            base?.deallocate()
            base = grown
            capacity = (needed + 63) & ~63
        }
        extra.withUnsafeBytes { e in if let src = e.baseAddress { base!.advanced(by: start).copyMemory(from: src, byteCount: e.count) } }
        count = needed
        return start..<needed
    }

    /// After an exchange: a buffer grown by a large head is not kept for the connection's life.
    func trim() {
        precondition(lent == 0, "HeadBytes changed while lent")
        count = 0
        if capacity > 8192 {
            base?.deallocate()
            base = nil
            capacity = 0
        }
    }

    deinit { base?.deallocate() }
}

extension HeadBytes {
    /// Lays out a head of strings (an HTTP/2 stream's, a buffered request's) as the bytes of an
    /// HTTP/1.1 head (Latin-1, one byte per character, as the parsers read them) and returns its
    /// ranges, in `spare`'s storage (hand it over, take it back from the result's `fields`): what
    /// `UpstreamRequestHead` reads. The bytes are what the writer looks at (request line, `name:
    /// value` lines), not a whole message.
    @_spi(Fuzzing) public func set(_ head: HTTPRequestHead, reusing spare: [HTTPFieldRange]) -> HTTPRequestHeadLines {
        var fields = spare
        fields.removeAll(keepingCapacity: true)
        var size = head.method.utf8.count + head.target.utf8.count + 3  // "M T" CRLF
        for f in head.headers { size += f.name.utf8.count + f.value.utf8.count + 4 }
        var lines = HTTPRequestHeadLines.empty
        lines.minorVersion = head.minorVersion
        lines.framing = head.framing
        precondition(lent == 0, "HeadBytes changed while lent")
        if size > capacity {
            base?.deallocate()
            capacity = (size + 63) & ~63
            base = UnsafeMutableRawPointer.allocate(byteCount: capacity, alignment: 8)
        }
        var w = HeadWriter(UnsafeMutableRawBufferPointer(start: base, count: size))
        func latin1(_ s: String) -> Range<Int> {
            let start = w.count
            w.appendLatin1(s)
            return start..<w.count
        }
        lines.method = latin1(head.method)
        w.append(0x20)
        lines.target = latin1(head.target)
        w.crlf()
        var foldable = false
        for f in head.headers {
            let name = latin1(f.name)
            w.append(": ")
            let value = latin1(f.value)
            w.crlf()
            fields.append(HTTPFieldRange(name: name, value: value))
            if !foldable && FoldedNames.isFoldable(f.name) { foldable = true }
            if lines.host == nil && name.count == 4 && f.name.equalsIgnoringASCIICase("Host") { lines.host = value }
        }
        precondition(!w.overflowed, "HeadBytes: a head larger than its UTF-8 size")
        count = w.count
        lines.foldableNames = foldable
        lines.fields = fields
        return lines
    }
}

extension HeadBytes {
    /// An absolute-form target (RFC 9112 §3.2.2, `POST http://shop/api/x HTTP/1.1`): its authority
    /// replaces Host for routing and upstream (the Host field's value becomes the authority's bytes;
    /// an HTTP/1.0 request without Host gets one), and the target goes on in origin-form (`/api/x`;
    /// `/` when the path is empty).
    @_spi(Fuzzing) public func takeAuthority(_ h: inout HTTPRequestHeadLines) {
        let head = h
        guard let authority = with({ head.authority($0) }) else { return }
        let rest = authority.upperBound..<h.target.upperBound
        let slash = !rest.isEmpty && with { $0[rest.lowerBound] } == UInt8(ascii: "/")
        h.target = slash ? rest : append(prefix: UInt8(ascii: "/"), copying: rest)
        if let host = h.host, let i = h.fields.firstIndex(where: { $0.value == host }) {
            h.fields[i].value = authority
        } else {
            let name = append(prefix: nil, copying: nil, literal: "Host")
            h.fields.append(HTTPFieldRange(name: name, value: authority))
        }
        h.host = authority
        h.absoluteForm = false
    }
}

extension HeadBytes {
    /// Parses a request head from `inbound` into `head`, as ranges into these bytes, a copy of the
    /// head's (the field array reused); returns the head's length, nil while it is incomplete. (Only
    /// an `Int` crosses the generic `withReadableBytes`: a struct result would be copied through
    /// value witnesses.)
    func parse(
        _ parser: HTTP1Parser, _ inbound: ByteBuffer, _ fields: inout [HTTPFieldRange],
        _ hostMemo: inout HTTP1Parser.HostMemo, into head: inout HTTPRequestHeadLines
    ) throws -> Int? {
        try inbound.withReadableBytes { buf in
            guard let (lines, end) = try parser.parseRequestHeadLines(buf, reusing: &fields, hostMemo: &hostMemo) else { return nil }
            set(UnsafeRawBufferPointer(rebasing: buf[0..<end]))
            head = lines
            return end
        }
    }
}
