/// Strict, bounded HTTP/1.1 head parsing (RFC 9112), with no I/O. The caller keeps bytes in a buffer
/// and asks for a head; `nil` means "need more data". Anything ambiguous is an error, which a server
/// answers (with the status of the proxy's `ProxyError` table) and then closes: no request smuggling
/// through lenient framing.
///
/// Refused: bare CR or LF, obs-fold, whitespace before a colon, invalid tokens, control characters in
/// values, Transfer-Encoding together with Content-Length, differing Content-Length values, transfer
/// codings other than a single `chunked`, a missing or repeated Host in HTTP/1.1, oversized heads.
/// Header values are kept as Latin-1 strings so that obs-text bytes are forwarded unchanged.
public struct HTTP1Parser: Sendable {
    public struct Limits: Sendable, Equatable {
        public var maxRequestLine: Int
        public var maxHeaderBytes: Int
        public var maxHeaderCount: Int

        public init(maxRequestLine: Int = 8192, maxHeaderBytes: Int = 32 * 1024, maxHeaderCount: Int = 100) {
            self.maxRequestLine = maxRequestLine
            self.maxHeaderBytes = maxHeaderBytes
            self.maxHeaderCount = maxHeaderCount
        }
    }

    public let limits: Limits

    public init(limits: Limits = Limits()) { self.limits = limits }

    /// Parses a request head starting at `start`. Returns the head and the offset just past its
    /// final CRLF, or nil when the head is not complete yet (and within limits).
    @_spi(Testing) public func parseRequestHead(_ buf: UnsafeRawBufferPointer, from start: Int = 0) throws(HTTPParseError)
        -> (HTTPRequestHead, Int)?
    {
        return try withHeadLines(buf, from: Self.skipEmptyLines(buf, start), isRequest: true) { lines throws(HTTPParseError) in
            let first = lines[0]
            let (method, target, minor) = try parseRequestLine(buf, first)
            let headers = try Self.parseFields(buf, lines[1...])
            try Self.checkHost(count: headers.count(of: "Host"), minor: minor, at: first.lowerBound) {
                headers["Host"].map(RequestSyntax.isValidHost)
            }
            let framing = try requestFraming(headers, minor: minor, at: first.lowerBound)
            return HTTPRequestHead(method: method, target: target, minorVersion: minor, headers: headers, framing: framing)
        }
    }

    /// Parses a request head like `parseRequestHead`, with the same checks and errors in the same
    /// order, but keeps the method, target and fields as ranges of `buf`: for a proxy that forwards
    /// the head's bytes. The field ranges go into `fields`' storage, which is cleared and reused (a
    /// connection passes the array of its previous request back in: no allocation per request).
    public func parseRequestHeadLines(
        _ buf: UnsafeRawBufferPointer, from start: Int = 0,
        reusing fields: inout [HTTPFieldRange]
    ) throws(HTTPParseError)
        -> (HTTPRequestHeadLines, Int)?
    {
        var memo = HostMemo()
        return try parseRequestHeadLines(buf, from: start, reusing: &fields, hostMemo: &memo)
    }

    /// The same, with the connection's `HostMemo`: a Host value that the previous request on the
    /// connection had, byte for byte, is not checked again.
    public func parseRequestHeadLines(
        _ buf: UnsafeRawBufferPointer, from start: Int = 0,
        reusing fields: inout [HTTPFieldRange], hostMemo: inout HostMemo
    ) throws(HTTPParseError)
        -> (HTTPRequestHeadLines, Int)?
    {
        try withHeadLines(buf, from: Self.skipEmptyLines(buf, start), isRequest: true) { lines throws(HTTPParseError) in
            try requestHeadLines(buf, lines, &fields, &hostMemo)
        }
    }

    /// The last Host value a connection's parser found valid, up to 32 bytes: keep-alive clients
    /// repeat their Host, whose syntax check (`RequestSyntax.hostLength`) then costs one comparison.
    public struct HostMemo: Sendable {
        private var count = -1
        private var w0: UInt64 = 0, w1: UInt64 = 0, w2: UInt64 = 0, w3: UInt64 = 0

        public init() {}

        /// Up to 8 bytes of `buf` at `offset`, `n` of them (the rest zero), little-endian order.
        @inline(__always) private static func word(_ buf: UnsafeRawBufferPointer, _ offset: Int, _ n: Int) -> UInt64 {
            guard n > 0 else { return 0 }
            if n >= 8 { return UInt64(littleEndian: buf.loadUnaligned(fromByteOffset: offset, as: UInt64.self)) }
            if offset + 8 <= buf.count {
                return UInt64(littleEndian: buf.loadUnaligned(fromByteOffset: offset, as: UInt64.self)) & ((1 << UInt64(n * 8)) &- 1)
            }
            var w: UInt64 = 0
            for k in 0..<n { w |= UInt64(buf[offset + k]) << UInt64(k * 8) }
            return w
        }

        @inline(__always) func matches(_ buf: UnsafeRawBufferPointer, _ r: Range<Int>) -> Bool {
            guard r.count == count else { return false }
            let o = r.lowerBound
            let n = r.count
            return Self.word(buf, o, n) == w0 && Self.word(buf, o + 8, n - 8) == w1 && Self.word(buf, o + 16, n - 16) == w2
                && Self.word(buf, o + 24, n - 24) == w3
        }

        mutating func remember(_ buf: UnsafeRawBufferPointer, _ r: Range<Int>) {
            guard r.count <= 32 else { return }
            let o = r.lowerBound
            let n = r.count
            (w0, w1, w2, w3) = (
                Self.word(buf, o, n), Self.word(buf, o + 8, n - 8), Self.word(buf, o + 16, n - 16), Self.word(buf, o + 24, n - 24)
            )
            count = n
        }
    }

    /// RFC 9112 §2.2: a server SHOULD ignore at least one empty line before the request-line (up to
    /// four here).
    private static func skipEmptyLines(_ buf: UnsafeRawBufferPointer, _ start: Int) -> Int {
        var s = start
        var skipped = 0
        while skipped < 4, s + 1 < buf.count, buf[s] == 0x0d, buf[s + 1] == 0x0a {
            s += 2
            skipped += 1
        }
        return s
    }

    /// RFC 9112 §3.2: exactly one Host in HTTP/1.1, at most one in HTTP/1.0, and a valid value
    /// (`RequestSyntax.hostLength`; `valid` gives nil without a Host).
    private static func checkHost(count: Int, minor: Int, at offset: Int, valid: () -> Bool?) throws(HTTPParseError) {
        if count > 1 { throw HTTPParseError(.badHost, at: offset, "more than one Host") }
        if minor == 1 && count == 0 { throw HTTPParseError(.badHost, at: offset, "HTTP/1.1 request without Host") }
        if valid() == false { throw HTTPParseError(.badHost, at: offset, "the Host value is not host[:port]") }
    }

    private func requestHeadLines(
        _ buf: UnsafeRawBufferPointer, _ lines: UnsafeBufferPointer<Range<Int>>,
        _ storage: inout [HTTPFieldRange], _ hostMemo: inout HostMemo
    ) throws(HTTPParseError)
        -> HTTPRequestHeadLines
    {
        let first = lines[0]
        let (method, target, minor, absoluteForm) = try requestLineRanges(buf, first)
        var fields: [HTTPFieldRange] = []
        swap(&fields, &storage)
        var hasTE = false
        var hasCL = false
        var hasConnection = false
        var hosts = 0
        var host: Range<Int>? = nil
        var expect: Range<Int>? = nil
        fields.removeAll(keepingCapacity: true)
        fields.reserveCapacity(lines.count - 1)
        var foldableNames = false
        try Self.forEachField(buf, lines[1...]) { name, value, foldable in
            fields.append(HTTPFieldRange(name: name, value: value))
            if foldable { foldableNames = true }
            switch name.count {
            case 4:
                if equalsIgnoringCase(UnsafeRawBufferPointer(rebasing: buf[name]), "Host") {
                    hosts += 1
                    if host == nil { host = value }
                }
            case 6: if expect == nil && equalsIgnoringCase(UnsafeRawBufferPointer(rebasing: buf[name]), "Expect") { expect = value }
            case 10: if equalsIgnoringCase(UnsafeRawBufferPointer(rebasing: buf[name]), "Connection") { hasConnection = true }
            case 14: if equalsIgnoringCase(UnsafeRawBufferPointer(rebasing: buf[name]), "Content-Length") { hasCL = true }
            case 17: if equalsIgnoringCase(UnsafeRawBufferPointer(rebasing: buf[name]), "Transfer-Encoding") { hasTE = true }
            default: break
            }
        }
        if hosts > 1 || (minor == 1 && hosts == 0) {
            try Self.checkHost(count: hosts, minor: minor, at: first.lowerBound) { nil }
        }
        if let h = host, !hostMemo.matches(buf, h) {
            try Self.checkHost(count: hosts, minor: minor, at: first.lowerBound) {
                RequestSyntax.hostLength(UnsafeRawBufferPointer(rebasing: buf[h]).assumingMemoryBound(to: UInt8.self)) != nil
            }
            hostMemo.remember(buf, h)
        }
        let framing = try framingLines(
            buf, fields, hasTE: hasTE, hasCL: hasCL, requestMinor: minor, status: 0,
            requestMethod: "", at: first.lowerBound)
        let expectsContinue =
            minor == 1 && expect.map { equalsIgnoringCase(UnsafeRawBufferPointer(rebasing: buf[$0]), "100-continue") } == true
        return HTTPRequestHeadLines(
            method: method, target: target, minorVersion: minor, fields: fields, framing: framing,
            keepAlive: keepAliveLines(buf, fields, hasConnection: hasConnection, minor: minor),
            expectsContinue: expectsContinue, absoluteForm: absoluteForm, foldableNames: foldableNames, host: host)
    }

    /// RFC 9112 §9.3 on the field ranges, as `persistentConnection` decides it on strings.
    private func keepAliveLines(_ buf: UnsafeRawBufferPointer, _ fields: [HTTPFieldRange], hasConnection: Bool, minor: Int) -> Bool {
        guard hasConnection else { return minor == 1 }
        let tokens = connectionTokens(buf, fields)
        return !tokens.close && (minor == 1 || tokens.keepAlive)
    }

    /// What the Connection fields list: `keep-alive`, `close`, anything else (case ignored).
    private func connectionTokens(_ buf: UnsafeRawBufferPointer, _ fields: [HTTPFieldRange])
        -> (keepAlive: Bool, close: Bool, others: Bool)
    {
        var t = (keepAlive: false, close: false, others: false)
        for f in fields where f.name.count == 10 && equalsIgnoringCase(UnsafeRawBufferPointer(rebasing: buf[f.name]), "Connection") {
            let v = UnsafeRawBufferPointer(rebasing: buf[f.value])
            // The usual values, a single token (the value is OWS-trimmed already), without a list walk.
            if equalsIgnoringCase(v, "keep-alive") {
                t.keepAlive = true
                continue
            }
            if equalsIgnoringCase(v, "close") {
                t.close = true
                continue
            }
            forEachListElement(v) { e in
                if equalsIgnoringCase(e, "close") {
                    t.close = true
                } else if equalsIgnoringCase(e, "keep-alive") {
                    t.keepAlive = true
                } else {
                    t.others = true
                }
            }
        }
        return t
    }

    /// Parses a response head (from an upstream) to a request with `requestMethod`.
    public func parseResponseHead(_ buf: UnsafeRawBufferPointer, from start: Int = 0, requestMethod: String)
        throws(HTTPParseError) -> (HTTPResponseHead, Int)?
    {
        return try withHeadLines(buf, from: start, isRequest: false) { lines throws(HTTPParseError) in
            let first = lines[0]
            let (status, reason, minor) = try parseStatusLine(buf, first)
            let headers = try Self.parseFields(buf, lines[1...])
            let framing = try responseFraming(headers, status: status, requestMethod: requestMethod, at: first.lowerBound)
            return HTTPResponseHead(status: status, reason: reason, minorVersion: minor, headers: headers, framing: framing)
        }
    }

    /// Parses a response head like `parseResponseHead`, with the same checks and errors, but keeps
    /// the reason and the fields as ranges of `buf` instead of strings: for a proxy that copies most
    /// of the head through unchanged. Only the fields that decide framing and persistence
    /// (Content-Length, Transfer-Encoding, Connection) become strings.
    public func parseResponseHeadLines(_ buf: UnsafeRawBufferPointer, from start: Int = 0, requestMethod: String)
        throws(HTTPParseError) -> (HTTPResponseHeadLines, Int)?
    {
        var storage: [HTTPFieldRange] = []
        return try parseResponseHeadLines(buf, from: start, requestMethod: requestMethod, reusing: &storage)
    }

    /// The same, with the field ranges in `fields`' storage, cleared and reused (see
    /// `parseRequestHeadLines`).
    public func parseResponseHeadLines(
        _ buf: UnsafeRawBufferPointer, from start: Int = 0, requestMethod: String,
        reusing fields: inout [HTTPFieldRange]
    ) throws(HTTPParseError)
        -> (HTTPResponseHeadLines, Int)?
    {
        try withHeadLines(buf, from: start, isRequest: false) { lines throws(HTTPParseError) in
            try headLines(buf, lines, requestMethod: requestMethod, &fields)
        }
    }

    private func headLines(
        _ buf: UnsafeRawBufferPointer, _ lines: UnsafeBufferPointer<Range<Int>>, requestMethod: String,
        _ storage: inout [HTTPFieldRange]
    ) throws(HTTPParseError) -> HTTPResponseHeadLines {
        let first = lines[0]
        let (status, reason, minor) = try parseStatusLineRanges(buf, first)
        var fields: [HTTPFieldRange] = []
        swap(&fields, &storage)
        // The fields that decide framing and persistence, and those a proxy drops or rewrites
        // (`HTTPResponseHeadLines.Classes`), are found by length first, then by bytes, once here.
        var hasTE = false
        var hasCL = false
        var classes = HTTPResponseHeadLines.Classes()
        fields.removeAll(keepingCapacity: true)
        fields.reserveCapacity(lines.count - 1)
        try Self.forEachField(buf, lines[1...]) { name, value, _ in
            let bit: UInt64 = fields.count < 64 ? 1 << UInt64(fields.count) : 0
            fields.append(HTTPFieldRange(name: name, value: value))
            let n = UnsafeRawBufferPointer(rebasing: buf[name])
            var listed = false
            switch name.count {
            case 2: listed = equalsIgnoringCase(n, "TE")
            case 3: if equalsIgnoringCase(n, "Via") { classes.via |= bit }
            case 6: if equalsIgnoringCase(n, "Server") { classes.server |= bit }
            case 7: listed = equalsIgnoringCase(n, "Trailer") || equalsIgnoringCase(n, "Upgrade")
            case 10:
                if equalsIgnoringCase(n, "Connection") {
                    classes.hasConnection = true
                    listed = true
                } else {
                    listed = equalsIgnoringCase(n, "Keep-Alive")
                }
            case 14:
                if equalsIgnoringCase(n, "Content-Length") {
                    // A second field, or a list in one, is passed on as one value (`ForwardingFilter`).
                    if hasCL || (value.count >= 3 && HTTPChar.containsInName(buf, value, UInt8(ascii: ","))) {
                        classes.contentLengthList = true
                    }
                    hasCL = true
                    classes.contentLength |= bit
                }
            case 16: listed = equalsIgnoringCase(n, "Proxy-Connection")
            case 17:
                if equalsIgnoringCase(n, "Transfer-Encoding") {
                    hasTE = true
                    listed = true
                }
            case 18: listed = equalsIgnoringCase(n, "Proxy-Authenticate")
            case 19: listed = equalsIgnoringCase(n, "Proxy-Authorization")
            default: break
            }
            if listed {
                classes.hasListed = true
                classes.listed |= bit
            }
        }
        let framing = try framingLines(
            buf, fields, hasTE: hasTE, hasCL: hasCL, requestMinor: nil, status: status,
            requestMethod: requestMethod, at: first.lowerBound)
        var keepAlive = minor == 1
        if classes.hasConnection {
            let t = connectionTokens(buf, fields)
            (classes.listsKeepAlive, classes.listsClose, classes.listsOthers) = t
            keepAlive = !t.close && (minor == 1 || t.keepAlive)  // RFC 9112 §9.3, as `persistentConnection`
        }
        classes.known = true
        return HTTPResponseHeadLines(
            status: status, reason: reason, minorVersion: minor, fields: fields, framing: framing, keepAlive: keepAlive,
            classes: classes)
    }

    /// `requestFraming` (`requestMinor` set) or `responseFraming` decided on the field ranges: the same
    /// answers and errors, in the same order, without strings.
    private func framingLines(
        _ buf: UnsafeRawBufferPointer, _ fields: [HTTPFieldRange], hasTE: Bool, hasCL: Bool,
        requestMinor: Int?, status: Int, requestMethod: String, at offset: Int
    )
        throws(HTTPParseError) -> BodyFraming
    {
        if requestMinor == nil && (requestMethod == "HEAD" || (100..<200).contains(status) || status == 204 || status == 304) {
            return .none
        }
        var cl: UInt64? = nil
        if hasCL {
            for f in fields where f.name.count == 14 && equalsIgnoringCase(UnsafeRawBufferPointer(rebasing: buf[f.name]), "Content-Length")
            {
                let v = UnsafeRawBufferPointer(rebasing: buf[f.value])
                let parsed = Self.contentLengthValue(
                    UnsafeBufferPointer(start: v.baseAddress?.assumingMemoryBound(to: UInt8.self), count: v.count))
                try Self.fold(parsed, into: &cl, at: offset) { Self.latin1(buf, f.value) }
            }
        }
        if hasTE {
            guard cl == nil else {
                throw HTTPParseError(.badFraming, at: offset, "Transfer-Encoding and Content-Length together")
            }
            if let requestMinor, requestMinor != 1 {
                throw HTTPParseError(.badFraming, at: offset, "Transfer-Encoding in an HTTP/1.0 request")
            }
            // The codings of every Transfer-Encoding field, in order, must be exactly one `chunked`.
            var count = 0
            var lastIsChunked = false
            for f in fields
            where f.name.count == 17 && equalsIgnoringCase(UnsafeRawBufferPointer(rebasing: buf[f.name]), "Transfer-Encoding") {
                let v = UnsafeRawBufferPointer(rebasing: buf[f.value])
                forEachListElement(v) { element in
                    count += 1
                    lastIsChunked = equalsIgnoringCase(element, "chunked")
                }
            }
            guard count == 1, lastIsChunked else {
                if !lastIsChunked {
                    throw HTTPParseError(.badFraming, at: offset, "Transfer-Encoding must end with chunked")
                }
                throw HTTPParseError(.unsupportedTransferCoding, at: offset, "transfer codings other than chunked are not supported")
            }
            return .chunked
        }
        if let cl { return cl == 0 ? .none : .contentLength(cl) }
        return requestMinor == nil ? .untilClose : .none
    }

    // MARK: - Lines

    /// Runs `body` with the head's lines (without CRLF) once its end (CRLF CRLF) is in `buf`, and
    /// returns its result and the offset past the head; nil while the head is incomplete. Bare CR or
    /// LF is an error. The lines live in a temporary allocation (on the stack for usual limits), not
    /// in an array per message.
    private func withHeadLines<R>(
        _ buf: UnsafeRawBufferPointer, from start: Int, isRequest: Bool,
        _ body: (UnsafeBufferPointer<Range<Int>>) throws(HTTPParseError) -> R
    )
        throws(HTTPParseError) -> (R, Int)?
    {
        let needed = limits.maxHeaderCount + 1
        func run(_ storage: UnsafeMutableBufferPointer<Range<Int>>) -> Result<(R, Int)?, HTTPParseError>? {
            do throws(HTTPParseError) {
                switch try splitHead(buf, from: start, isRequest: isRequest, into: storage) {
                case .incomplete: return .success(nil)
                case .overflow: return nil
                case .head(let count, let end): return .success((try body(UnsafeBufferPointer(rebasing: storage[0..<count])), end))
                }
            } catch {
                return .failure(error)
            }
        }
        // 64 lines (1 KiB) fit the stack without a check; a head with more lines (or a limit above
        // 63 fields that a head actually uses) takes a heap buffer for the full limit.
        let small = min(needed, 64)
        if let r = withUnsafeTemporaryAllocation(of: Range<Int>.self, capacity: small, run) { return try r.get() }
        let storage = UnsafeMutableBufferPointer<Range<Int>>.allocate(capacity: needed)
        defer { storage.deallocate() }
        guard let r = run(storage) else { preconditionFailure("HTTP1Parser: a head overflowed its full line limit") }
        return try r.get()
    }

    private enum SplitOutcome {
        case incomplete
        /// More lines than `lines` holds (within the limit): the caller retries with room for all.
        case overflow
        case head(lines: Int, end: Int)
    }

    /// Finds the end of the head (CRLF CRLF) and stores its lines (without CRLF) in `lines`; returns
    /// their count and the offset past the head. Bare CR or LF is an error.
    private func splitHead(
        _ buf: UnsafeRawBufferPointer, from start: Int, isRequest: Bool,
        into lines: UnsafeMutableBufferPointer<Range<Int>>
    ) throws(HTTPParseError) -> SplitOutcome {
        var lineCount = 0
        var lineStart = start
        var i = start
        let n = buf.count
        // Past these offsets the limit checks below run; before them, ordinary bytes only advance.
        let requestLineLimit = start + limits.maxRequestLine
        let headLimit = start + limits.maxHeaderBytes
        var checkFrom = min(requestLineLimit, headLimit)
        while i < n {
            // Eight bytes at a time while none of them is CR, LF or below (the only bytes that need
            // a look here) and the limit checks are not due yet.
            let fastEnd = min(n, checkFrom)
            while i + 8 <= fastEnd {
                let below = SWAR.bytesBelow(buf.loadUnaligned(fromByteOffset: i, as: UInt64.self), 0x0e)
                if below != 0 {
                    i += SWAR.firstFlaggedByte(below)  // straight to that byte
                    break
                }
                i += 8
            }
            guard i < n else { break }
            let c = buf[i]
            if c > 0x0d && i < checkFrom {
                i += 1
                continue
            }
            if c == 0x0d {
                guard i + 1 < n else { break }  // need the LF
                guard buf[i + 1] == 0x0a else { throw HTTPParseError(.badHeader, at: i, "bare CR") }
                if i == lineStart {
                    guard lineCount > 0 else {
                        throw HTTPParseError(isRequest ? .badRequestLine : .badStatusLine, at: i, "empty start line")
                    }
                    return .head(lines: lineCount, end: i + 2)
                }
                guard lineCount < limits.maxHeaderCount + 1 else {
                    throw HTTPParseError(.tooManyHeaders, at: i, "more than \(limits.maxHeaderCount) header fields")
                }
                guard lineCount < lines.count else { return .overflow }
                lines[lineCount] = lineStart..<i
                lineCount += 1
                i += 2
                lineStart = i
                checkFrom = headLimit
                continue
            }
            if c == 0x0a { throw HTTPParseError(.badHeader, at: i, "bare LF (lines must end with CRLF)") }
            i += 1
            if lineCount == 0 && i - start > limits.maxRequestLine {
                throw HTTPParseError(
                    isRequest ? .requestLineTooLong : .badStatusLine, at: start,
                    "start line longer than \(limits.maxRequestLine) bytes")
            }
            if i - start > limits.maxHeaderBytes {
                throw HTTPParseError(.headersTooLarge, at: start, "head larger than \(limits.maxHeaderBytes) bytes")
            }
        }
        if n - start > limits.maxHeaderBytes {
            throw HTTPParseError(.headersTooLarge, at: start, "head larger than \(limits.maxHeaderBytes) bytes")
        }
        return .incomplete
    }

    private func parseRequestLine(_ buf: UnsafeRawBufferPointer, _ r: Range<Int>) throws(HTTPParseError) -> (String, String, Int) {
        let (method, target, minor, _) = try requestLineRanges(buf, r)
        return (Self.latin1(buf, method), Self.latin1(buf, target), minor)
    }

    /// The request line's method and target as ranges of `buf`, and whether the target is
    /// absolute-form. The method must be `A-Z - _` (`RequestSyntax`: `bad_method`; other token
    /// characters are that, the rest a bad request line); a target that is not origin-form must be `*`
    /// for OPTIONS or http(s) absolute-form (`bad_target`).
    private func requestLineRanges(_ buf: UnsafeRawBufferPointer, _ r: Range<Int>) throws(HTTPParseError)
        -> (Range<Int>, Range<Int>, Int, Bool)
    {
        var i = r.lowerBound
        while i < r.upperBound, RequestSyntax.isMethodByte(buf[i]) { i += 1 }
        if i < r.upperBound, buf[i] != 0x20, HTTPChar.isTchar(buf[i]) {
            throw HTTPParseError(.badMethod, at: i, "a method is made of A-Z, - and _ only (RFC 9110 §9.1: methods are case-sensitive)")
        }
        guard i > r.lowerBound, i < r.upperBound, buf[i] == 0x20 else {
            throw HTTPParseError(.badRequestLine, at: i, "method must be a token followed by one space")
        }
        let method = r.lowerBound..<i
        let targetStart = i + 1
        var j = targetStart
        while j < r.upperBound, buf[j] > 0x20, buf[j] < 0x7f { j += 1 }
        guard j > targetStart, j < r.upperBound, buf[j] == 0x20 else {
            throw HTTPParseError(.badRequestLine, at: j, "request-target must be visible ASCII followed by one space")
        }
        let minor = try parseVersion(buf, (j + 1)..<r.upperBound, kind: .badRequestLine)
        var absolute = false
        if buf[targetStart] != UInt8(ascii: "/") {
            let t = UnsafeBufferPointer(start: buf.baseAddress!.assumingMemoryBound(to: UInt8.self) + targetStart, count: j - targetStart)
            let isOptions = method.count == 7 && equalsIgnoringCase(UnsafeRawBufferPointer(rebasing: buf[method]), "OPTIONS")
            do throws(RequestSyntax.TargetProblemError) {
                absolute = try RequestSyntax.nonOriginTarget(t, methodIsOptions: isOptions) != nil
            } catch {
                throw HTTPParseError(.badTarget, at: targetStart, Self.describe(error.problem))
            }
        }
        return (method, targetStart..<j, minor, absolute)
    }

    private static func describe(_ p: RequestSyntax.TargetProblem) -> String {
        switch p {
        case .asteriskNotOptions: "the request-target * is for OPTIONS only"
        case .notAbsoluteForm: "the request-target must be /path, http://authority/path or * (OPTIONS)"
        case .scheme: "an absolute-form target must be http:// or https://"
        case .userinfo: "an absolute-form target may not carry userinfo (user@)"
        case .authority: "the authority of the absolute-form target is not host[:port]"
        }
    }

    private func parseStatusLine(_ buf: UnsafeRawBufferPointer, _ r: Range<Int>) throws(HTTPParseError) -> (Int, String, Int) {
        let (status, reason, minor) = try parseStatusLineRanges(buf, r)
        return (status, Self.latin1(buf, reason), minor)
    }

    /// The status line with the reason phrase as a range of `buf` (empty when absent).
    private func parseStatusLineRanges(_ buf: UnsafeRawBufferPointer, _ r: Range<Int>) throws(HTTPParseError)
        -> (Int, Range<Int>, Int)
    {
        guard r.count >= 12 else { throw HTTPParseError(.badStatusLine, at: r.lowerBound, "status line too short") }
        let minor = try parseVersion(buf, r.lowerBound..<(r.lowerBound + 8), kind: .badStatusLine)
        var p = r.lowerBound + 8
        guard buf[p] == 0x20 else { throw HTTPParseError(.badStatusLine, at: p, "expected a space after the version") }
        p += 1
        var status = 0
        for k in 0..<3 {
            let d = buf[p + k]
            guard d >= 0x30, d <= 0x39 else { throw HTTPParseError(.badStatusLine, at: p + k, "status code must be 3 digits") }
            status = status * 10 + Int(d - 0x30)
        }
        guard status >= 100 else { throw HTTPParseError(.badStatusLine, at: p, "status code below 100") }
        p += 3
        var reason = r.upperBound..<r.upperBound
        if p < r.upperBound {
            guard buf[p] == 0x20 else { throw HTTPParseError(.badStatusLine, at: p, "expected a space after the status code") }
            for k in (p + 1)..<r.upperBound where !HTTPChar.isFieldValueChar(buf[k]) {
                throw HTTPParseError(.badStatusLine, at: k, "control character in the reason phrase")
            }
            reason = (p + 1)..<r.upperBound
        }
        return (status, reason, minor)
    }

    private func parseVersion(_ buf: UnsafeRawBufferPointer, _ r: Range<Int>, kind: HTTPParseError.Kind) throws(HTTPParseError) -> Int {
        let p = r.lowerBound
        guard r.count == 8, buf[p] == UInt8(ascii: "H"), buf[p + 1] == UInt8(ascii: "T"), buf[p + 2] == UInt8(ascii: "T"),
            buf[p + 3] == UInt8(ascii: "P"), buf[p + 4] == UInt8(ascii: "/"),
            buf[r.lowerBound + 6] == UInt8(ascii: "."), HTTPChar.isDigit(buf[r.lowerBound + 5]),
            HTTPChar.isDigit(buf[r.lowerBound + 7])
        else {
            throw HTTPParseError(kind, at: r.lowerBound, "expected HTTP/1.0 or HTTP/1.1")
        }
        guard buf[r.lowerBound + 5] == UInt8(ascii: "1") else {
            throw HTTPParseError(.unsupportedVersion, at: r.lowerBound, "only HTTP/1.0 and HTTP/1.1 are spoken here")
        }
        let minor = Int(buf[r.lowerBound + 7] - 0x30)
        guard minor <= 1 else { throw HTTPParseError(.unsupportedVersion, at: r.lowerBound, "HTTP/1.\(minor) is not supported") }
        return minor
    }

    /// field-line = field-name ":" OWS field-value OWS (RFC 9112 §5). Needs no limits: the caller
    /// bounded the lines.
    static func parseFields(_ buf: UnsafeRawBufferPointer, _ lines: Slice<UnsafeBufferPointer<Range<Int>>>) throws(HTTPParseError)
        -> HTTPFields
    {
        var fields: [HTTPFields.Field] = []
        fields.reserveCapacity(lines.count)
        try forEachField(buf, lines) { name, value, _ in
            fields.append(HTTPFields.Field(Self.commonName(buf, name) ?? Self.latin1(buf, name), Self.latin1(buf, value)))
        }
        return HTTPFields(fields)
    }

    /// Validates each field line and hands over its name and (OWS-trimmed) value as ranges of `buf`.
    /// `body` also learns whether the name is foldable (`FoldedNames`: a `_` or another character
    /// than letters, digits and `-`), found by the same table walk.
    static func forEachField(
        _ buf: UnsafeRawBufferPointer, _ lines: Slice<UnsafeBufferPointer<Range<Int>>>,
        _ body: (Range<Int>, Range<Int>, Bool) -> Void
    ) throws(HTTPParseError) {
        for r in lines {
            let c0 = buf[r.lowerBound]
            if c0 == 0x20 || c0 == 0x09 {
                throw HTTPParseError(.badHeader, at: r.lowerBound, "obs-fold (a line starting with white space) is not accepted")
            }
            var i = r.lowerBound
            var classes: UInt8 = 0
            while i < r.upperBound {
                let t = HTTPChar.tcharClass(buf[i])
                if t == UInt8(ascii: "0") { break }
                classes |= t
                i += 1
            }
            guard i < r.upperBound, buf[i] == UInt8(ascii: ":") else {
                let what =
                    i < r.upperBound && (buf[i] == 0x20 || buf[i] == 0x09)
                    ? "white space between the field name and the colon" : "field name must be a token followed by ':'"
                throw HTTPParseError(.badHeader, at: i, what)
            }
            guard i > r.lowerBound else { throw HTTPParseError(.badHeader, at: i, "empty field name") }
            var vs = i + 1
            var ve = r.upperBound
            while vs < ve, buf[vs] == 0x20 || buf[vs] == 0x09 { vs += 1 }
            while ve > vs, buf[ve - 1] == 0x20 || buf[ve - 1] == 0x09 { ve -= 1 }
            if let k = HTTPChar.firstInvalidFieldValueByte(buf, vs..<ve) {
                throw HTTPParseError(.badHeader, at: k, "control character in the value of \(Self.latin1(buf, r.lowerBound..<i))")
            }
            body(r.lowerBound..<i, vs..<ve, classes & 0x02 != 0)  // "2" (0x32) has bit 1; "1" (0x31) not
        }
    }

    // MARK: - Framing (RFC 9112 §6)

    private func requestFraming(_ h: HTTPFields, minor: Int, at offset: Int) throws(HTTPParseError) -> BodyFraming {
        let hasTE = h.contains("Transfer-Encoding")
        let cl = try contentLength(h, at: offset)
        if hasTE {
            guard cl == nil else {
                throw HTTPParseError(.badFraming, at: offset, "Transfer-Encoding and Content-Length together")
            }
            guard minor == 1 else { throw HTTPParseError(.badFraming, at: offset, "Transfer-Encoding in an HTTP/1.0 request") }
            try checkChunkedOnly(h, at: offset)
            return .chunked
        }
        if let cl { return cl == 0 ? .none : .contentLength(cl) }
        return .none
    }

    private func responseFraming(_ h: HTTPFields, status: Int, requestMethod: String, at offset: Int) throws(HTTPParseError)
        -> BodyFraming
    {
        if requestMethod == "HEAD" || (100..<200).contains(status) || status == 204 || status == 304 { return .none }
        let hasTE = h.contains("Transfer-Encoding")
        let cl = try contentLength(h, at: offset)
        if hasTE {
            guard cl == nil else {
                throw HTTPParseError(.badFraming, at: offset, "Transfer-Encoding and Content-Length together")
            }
            try checkChunkedOnly(h, at: offset)
            return .chunked
        }
        if let cl { return cl == 0 ? .none : .contentLength(cl) }
        return .untilClose
    }

    private func checkChunkedOnly(_ h: HTTPFields, at offset: Int) throws(HTTPParseError) {
        let codings = h.tokens("Transfer-Encoding")
        guard codings == ["chunked"] else {
            if codings.last != "chunked" {
                throw HTTPParseError(.badFraming, at: offset, "Transfer-Encoding must end with chunked")
            }
            throw HTTPParseError(.unsupportedTransferCoding, at: offset, "transfer codings other than chunked are not supported")
        }
    }

    /// All Content-Length values (and list members) must be the same decimal number: each member,
    /// OWS trimmed, 1 to 19 digits. Decided on the bytes of the values, without allocating.
    private func contentLength(_ h: HTTPFields, at offset: Int) throws(HTTPParseError) -> UInt64? {
        var result: UInt64? = nil
        for f in h where f.name.equalsIgnoringASCIICase("Content-Length") {
            var value = f.value
            let parsed: UInt64?? = value.withUTF8 { Self.contentLengthValue($0) }
            try Self.fold(parsed, into: &result, at: offset) { f.value }
        }
        return result
    }

    /// Adds one Content-Length field's `parsed` value to the message's `result`: every field must
    /// give the same number.
    static func fold(_ parsed: UInt64??, into result: inout UInt64?, at offset: Int, value: () -> String) throws(HTTPParseError) {
        switch parsed {
        case .none:
            throw HTTPParseError(.badFraming, at: offset, "differing Content-Length values")
        case .some(nil):
            throw HTTPParseError(.badFraming, at: offset, "invalid Content-Length \"\(value().prefix(40))\"")
        case .some(let n?):
            if let r = result, r != n { throw HTTPParseError(.badFraming, at: offset, "differing Content-Length values") }
            result = n
        }
    }

    /// One Content-Length field value: every list member, OWS trimmed, 1 to 19 digits, all the same
    /// number. `.none` when members differ, `.some(nil)` when one is not a number.
    static func contentLengthValue(_ v: UnsafeBufferPointer<UInt8>) -> UInt64?? {
        var i = 0
        var members: UInt64? = nil
        while i <= v.count {
            var end = i
            while end < v.count, v[end] != UInt8(ascii: ",") { end += 1 }
            var s = i
            var e = end
            while s < e, v[s] == 0x20 || v[s] == 0x09 { s += 1 }
            while e > s, v[e - 1] == 0x20 || v[e - 1] == 0x09 { e -= 1 }
            guard e > s, e - s <= 19 else { return .some(nil) }
            var n: UInt64 = 0
            for k in s..<e {
                guard HTTPChar.isDigit(v[k]) else { return .some(nil) }
                n = n * 10 + UInt64(v[k] - 0x30)  // 19 digits fit in UInt64
            }
            if let m = members, m != n { return .none }
            members = n
            i = end + 1
        }
        return .some(members)
    }

    /// Field names as most clients and servers spell them, shared instead of built per message. A
    /// name is only taken from here when its bytes are exactly these (names keep their case).
    private static let commonNames: [[String]] = {
        let names = [
            "Host", "Date", "Server", "Accept", "Connection", "Content-Type", "Content-Length", "User-Agent",
            "Accept-Encoding", "Accept-Language", "Cache-Control", "Transfer-Encoding", "Keep-Alive", "Last-Modified",
            "ETag", "Accept-Ranges", "Authorization", "Cookie", "Origin", "Referer", "Location", "Vary", "Expires",
            "X-Forwarded-For", "X-Forwarded-Proto", "X-Forwarded-Host", "Via", "Content-Encoding",
            "host", "date", "server", "accept", "connection", "content-type", "content-length", "user-agent",
        ]
        var table = [[String]](repeating: [], count: 32)
        for n in names { table[n.utf8.count].append(n) }
        return table
    }()

    private static func commonName(_ buf: UnsafeRawBufferPointer, _ r: Range<Int>) -> String? {
        guard r.count < commonNames.count else { return nil }
        for candidate in commonNames[r.count] {
            var c = candidate
            let same = c.withUTF8 { u in memcmpEqual(u, buf, r) }
            if same { return candidate }
        }
        return nil
    }

    @inline(__always)
    private static func memcmpEqual(_ u: UnsafeBufferPointer<UInt8>, _ buf: UnsafeRawBufferPointer, _ r: Range<Int>) -> Bool {
        var k = 0
        while k < u.count {
            if u[k] != buf[r.lowerBound + k] { return false }
            k += 1
        }
        return true
    }

    private static func latin1(_ buf: UnsafeRawBufferPointer, _ r: Range<Int>) -> String { latin1String(buf, r) }
}

enum HTTPChar {
    /// tchar (RFC 9110 §5.6.2) by table: one load per byte, no branch on the byte's range. The
    /// table is a string literal (a constant in the binary: no lazy global to check per byte), one
    /// "1" or "0" per byte value, 0 to 255 (checked against the rule by `tcharTableMatchesRule`).
    /// tchar: ! # $ % & ' * + - . 0-9 A-Z ^ _ ` a-z | ~.
    @inline(__always) static func isTchar(_ c: UInt8) -> Bool {
        tcharTable.utf8Start[Int(c)] != UInt8(ascii: "0")
    }

    /// The table's entry: "0" not a tchar, "1" a letter, digit or `-`, "2" another tchar (`_` and
    /// `! # $ % & ' * + . ^ \` | ~`, which CGI-style backends may read as `_` in field names:
    /// `FoldedNames`).
    @inline(__always) static func tcharClass(_ c: UInt8) -> UInt8 { tcharTable.utf8Start[Int(c)] }

    @inline(__always) static var tcharTable: StaticString {
        "0000000000000000000000000000000002022222002201201111111111000000011111111111111111111111111000222111111111111111111111111110202000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000"
    }

    /// The rule spelled out (RFC 9110 §5.6.2), for the test that checks the masks.
    static func isTcharByRule(_ c: UInt8) -> Bool {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"): true
        default: "!#$%&'*+-.^_`|~".utf8.contains(c)
        }
    }

    @inline(__always) static func isDigit(_ c: UInt8) -> Bool { c >= 0x30 && c <= 0x39 }

    /// Whether the field name at `r` contains `b`: eight bytes at a time, the last word masked
    /// to the name (a name is followed by at least ":\r\n\r\n" in a head, but the load is bounded
    /// by `buf` anyway).
    @inline(__always) static func containsInName(_ buf: UnsafeRawBufferPointer, _ r: Range<Int>, _ b: UInt8) -> Bool {
        var k = r.lowerBound
        while k < r.upperBound {
            guard k + 8 <= buf.count else { return contains(buf, k..<r.upperBound, b) }
            var w = buf.loadUnaligned(fromByteOffset: k, as: UInt64.self)
            let left = r.upperBound - k
            if left < 8 {
                // Bytes past the name become 0, which is not `b` (b is never 0 here).
                #if _endian(little)
                    w &= (1 << UInt64(left * 8)) &- 1
                #else
                    w &= ~((1 << UInt64((8 - left) * 8)) &- 1)
                #endif
            }
            if SWAR.hasByte(w, b) { return true }
            k += 8
        }
        return false
    }

    /// Whether the bytes of `buf` in `r` contain `b`: eight bytes at a time, then the rest.
    @inline(__always) static func contains(_ buf: UnsafeRawBufferPointer, _ r: Range<Int>, _ b: UInt8) -> Bool {
        var k = r.lowerBound
        while k + 8 <= r.upperBound {
            if SWAR.hasByte(buf.loadUnaligned(fromByteOffset: k, as: UInt64.self), b) { return true }
            k += 8
        }
        while k < r.upperBound {
            if buf[k] == b { return true }
            k += 1
        }
        return false
    }
    /// The offset of the first byte in `r` that `isFieldValueChar` refuses, or nil. Eight bytes at a
    /// time while none is a control character or DEL (a word with a tab is looked at byte by byte).
    @inline(__always) static func firstInvalidFieldValueByte(_ buf: UnsafeRawBufferPointer, _ r: Range<Int>) -> Int? {
        var k = r.lowerBound
        let end = r.upperBound
        while k + 8 <= end {
            let w = buf.loadUnaligned(fromByteOffset: k, as: UInt64.self)
            if SWAR.hasByteBelow(w, 0x20) || SWAR.hasByte(w, 0x7f) {
                for q in k..<(k + 8) where !isFieldValueChar(buf[q]) { return q }
            }
            k += 8
        }
        while k < end {
            if !isFieldValueChar(buf[k]) { return k }
            k += 1
        }
        return nil
    }

    /// field-vchar / SP / HTAB / obs-text; everything but CTLs and DEL.
    @inline(__always) static func isFieldValueChar(_ c: UInt8) -> Bool { c == 0x09 || (c >= 0x20 && c != 0x7f) }
}

/// Byte tests on eight bytes at once (a 64-bit word), exact as yes/no answers for the whole word.
enum SWAR {
    static let ones: UInt64 = 0x0101_0101_0101_0101
    static let highs: UInt64 = 0x8080_8080_8080_8080

    /// Whether some byte of `w` is below `n` (n <= 128). Bytes >= 0x80 never count: their high bit
    /// masks them out, and a borrow only propagates from a byte that is itself below `n`.
    @inline(__always) static func hasByteBelow(_ w: UInt64, _ n: UInt8) -> Bool { bytesBelow(w, n) != 0 }

    /// The high bit of each byte of `w` below `n` (n <= 128) set, and possibly of bytes above the
    /// first such byte (a borrow); the lowest set bit is exact: `trailingZeroBitCount / 8` is the
    /// index of the first byte below `n` (little-endian).
    @inline(__always) static func bytesBelow(_ w: UInt64, _ n: UInt8) -> UInt64 {
        (w &- ones &* UInt64(n)) & ~w & highs
    }

    /// The index (in memory order) of the first byte whose high bit `mask` has set.
    @inline(__always) static func firstFlaggedByte(_ mask: UInt64) -> Int {
        #if _endian(little)
            mask.trailingZeroBitCount >> 3
        #else
            mask.leadingZeroBitCount >> 3
        #endif
    }

    /// Whether some byte of `w` equals `b`.
    @inline(__always) static func hasByte(_ w: UInt64, _ b: UInt8) -> Bool {
        let x = w ^ (ones &* UInt64(b))
        return (x &- ones) & ~x & highs != 0
    }
}
