/// A request head as ranges of the buffer it was parsed from (`HTTP1Parser.parseRequestHeadLines`):
/// valid only while those bytes are unchanged. The HTTP/1.1 proxy keeps a copy of the head's bytes
/// for the exchange, decides on method, path, framing and persistence, and writes the upstream head
/// from the bytes (`Forward.writeUpstreamHead`), without a string per field. `materialize` gives
/// the `HTTPRequestHead` of strings that `parseRequestHead` returns, for the paths that need one.
public struct HTTPRequestHeadLines: Sendable, Equatable {
    public var method: Range<Int>
    /// The request-target exactly as in the request line.
    public var target: Range<Int>
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    public var minorVersion: Int
    public var fields: [HTTPFieldRange]
    public var framing: BodyFraming
    /// Whether the connection stays open after this exchange (RFC 9112 §9.3).
    public var keepAlive: Bool
    /// `Expect: 100-continue` in an HTTP/1.1 request (the first Expect field decides, as
    /// `HTTPRequestHead.expectsContinue` does).
    public var expectsContinue: Bool
    /// Whether the target is absolute-form (`http://authority/path`, validated by the parser), whose
    /// authority replaces Host (RFC 9112 §3.2.2; `authority(_:)`).
    public var absoluteForm: Bool = false
    /// Whether some field name is foldable (`FoldedNames`: `_` or another character than letters,
    /// digits and `-`; `HTTP1Parser` sets it): the writer then looks at each name for the listener's
    /// rule; without one, it does not.
    public var foldableNames: Bool = false
    /// The value of the first Host field (the only one in HTTP/1.1); nil when there is none.
    public var host: Range<Int>?

    /// No head (a placeholder for a connection between requests).
    public static let empty = HTTPRequestHeadLines(
        method: 0..<0, target: 0..<0, minorVersion: 1, fields: [], framing: .none, keepAlive: true, expectsContinue: false, host: nil)

    /// The head as `parseRequestHead` returns it (strings for everything).
    public func materialize(_ buf: UnsafeRawBufferPointer) -> HTTPRequestHead {
        var headers: [HTTPFields.Field] = []
        headers.reserveCapacity(fields.count)
        for f in fields { headers.append(HTTPFields.Field(latin1String(buf, f.name), latin1String(buf, f.value))) }
        return HTTPRequestHead(method: latin1String(buf, method), target: latin1String(buf, target), minorVersion: minorVersion,
                               headers: HTTPFields(headers), framing: framing)
    }

    /// An absolute-form target's authority, as a range of `buf`; nil for other targets.
    public func authority(_ buf: UnsafeRawBufferPointer) -> Range<Int>? {
        guard absoluteForm, let base = buf.baseAddress else { return nil }
        let t = UnsafeBufferPointer(start: base.assumingMemoryBound(to: UInt8.self) + target.lowerBound, count: target.count)
        guard let form = try? RequestSyntax.nonOriginTarget(t, methodIsOptions: false) else { return nil }
        return (target.lowerBound + form.authority.lowerBound)..<(target.lowerBound + form.authority.upperBound)
    }

    /// Whether the method is `name` (methods are case-sensitive, RFC 9110 §9.1).
    public func methodIs(_ buf: UnsafeRawBufferPointer, _ name: StaticString) -> Bool {
        guard method.count == name.utf8CodeUnitCount else { return false }
        var i = 0
        while i < method.count {
            if buf[method.lowerBound + i] != name.utf8Start[i] { return false }
            i += 1
        }
        return true
    }
}

extension HTTPRequestHeadLines {
    /// Writes the request head a proxy sends upstream from the bytes of this head (`buf`): the
    /// client's field lines copied except the hop-by-hop ones (the fixed list and every field named in
    /// a Connection field, Host excepted; `TE: trailers` is kept), the forwarding fields (replaced:
    /// `X-Forwarded-For` and `Via` extend the client's lists, `X-Forwarded-Proto` and
    /// `X-Forwarded-Host` are the gateway's), and `Expect`; then X-Forwarded-*, Via, a `Host` from
    /// `defaultHost` when the client sent none, the route's `add` fields and the framing fields.
    /// Fields named in `remove` (any case, `_` as `-`) are left out, except `add`'s; so are
    /// Content-Length when `framing` has a body and Transfer-Encoding when it has a length. The
    /// client's fields are also held to `clientRemove` (the gateway-owned names with the route's
    /// removals), and a client field with a foldable name is left out when `dropFoldableNames`, or
    /// when it folds into a field the gateway interprets (`FoldedNames`). The same bytes as the
    /// proxy's rules applied to the materialized head (`Forward.writeUpstreamHead`), which tests hold.
    ///
    /// `client` and `proto` are ASCII (an address and a scheme): written as they are.
    public func writeUpstream(from buf: UnsafeRawBufferPointer, client: UnsafeRawBufferPointer, proto: UnsafeRawBufferPointer,
                              via: StaticString = "1.1 attest-gateway", framing: BodyFraming, remove: FieldNames,
                              clientRemove: FieldNames, dropFoldableNames: Bool, add: [(String, String)],
                              defaultHost: () -> String, to out: inout HeadWriter)
    {
        @inline(__always) func bytes(_ r: Range<Int>) -> UnsafeRawBufferPointer { UnsafeRawBufferPointer(rebasing: buf[r]) }
        out.append(bytes(method))
        out.append(0x20)
        out.append(bytes(target))
        out.append(" HTTP/1.1\r\n")
        var hasListed = false
        var hasConnection = false
        var hasForwarding = false
        for f in fields {
            let name = bytes(f.name)
            if HopByHop.isListed(name) {
                hasListed = true
                if name.count == 10 && equalsIgnoringCase(name, "Connection") { hasConnection = true }
            } else if isForwardingField(name) {
                hasForwarding = true
            }
        }
        let dropContentLength: Bool
        switch framing {
        case .chunked, .contentLength: dropContentLength = true
        case .none, .untilClose: dropContentLength = false
        }
        let dropTransferEncoding: Bool = if case .contentLength = framing { true } else { false }
        /// Whether a field named `name` is written: the route's removals, then the framing fields.
        func passes(_ name: UnsafeRawBufferPointer, editable: Bool = true) -> Bool {
            if editable && remove.contains(name) { return false }
            return framingPasses(name)
        }
        func framingPasses(_ name: UnsafeRawBufferPointer) -> Bool {
            switch name.count {
            case 14 where dropContentLength: return !equalsIgnoringCase(name, "Content-Length")
            case 17 where dropTransferEncoding: return !equalsIgnoringCase(name, "Transfer-Encoding")
            default: return true
            }
        }
        func namedInConnection(_ name: UnsafeRawBufferPointer) -> Bool {
            for c in fields where c.name.count == 10 && equalsIgnoringCase(bytes(c.name), "Connection") {
                if listContains(bytes(c.value), name) { return true }
            }
            return false
        }
        /// The client's values of `name` joined with ", " and followed by ", ", as the string rules
        /// extend a list; nothing when there is none or their join is empty.
        /// A field named in Connection is hop-by-hop: it is dropped, not carried into the list.
        func priorField(_ f: HTTPFieldRange, _ name: StaticString) -> Bool {
            equalsIgnoringCase(bytes(f.name), name) && !(hasConnection && namedInConnection(bytes(f.name)))
        }
        func writePrior(_ name: StaticString) {
            guard hasForwarding else { return }
            var count = 0
            var total = 0
            for f in fields where priorField(f, name) {
                count += 1
                total += f.value.count
            }
            guard count > 0 && total + 2 * (count - 1) > 0 else { return }
            var k = 0
            for f in fields where priorField(f, name) {
                if k > 0 { out.append(", ") }
                out.append(bytes(f.value))
                k += 1
            }
            out.append(", ")
        }
        var keepTrailersTE = false
        for f in fields {
            let name = bytes(f.name)
            if foldableNames && FoldedNames.isFoldable(name) && FoldedNames.drops(name, dropAll: dropFoldableNames) { continue }
            if hasListed {
                if HopByHop.isListed(name) {
                    if name.count == 2 && equalsIgnoringCase(name, "TE") && listContains(bytes(f.value), "trailers") {
                        keepTrailersTE = true
                    }
                    continue
                }
                if hasConnection && !equalsIgnoringCase(name, "Host") && namedInConnection(name) { continue }
            }
            if hasForwarding && isForwardingField(name) { continue }
            if name.count == 6 && equalsIgnoringCase(name, "Expect") { continue }
            guard !clientRemove.contains(name) && framingPasses(name) else { continue }
            out.appendFieldLine(buf, f)
        }
        if keepTrailersTE && passes(UnsafeRawBufferPointer(staticString: "TE")) { out.append("TE: trailers\r\n") }
        if passes(UnsafeRawBufferPointer(staticString: "X-Forwarded-For")) {
            out.append("X-Forwarded-For: ")
            writePrior("X-Forwarded-For")
            out.append(client)
            out.crlf()
        }
        if passes(UnsafeRawBufferPointer(staticString: "X-Forwarded-Proto")) {
            out.append("X-Forwarded-Proto: ")
            out.append(proto)
            out.crlf()
        }
        if let host, passes(UnsafeRawBufferPointer(staticString: "X-Forwarded-Host")) {
            out.append("X-Forwarded-Host: ")
            out.append(bytes(host))
            out.crlf()
        }
        if passes(UnsafeRawBufferPointer(staticString: "Via")) {
            out.append("Via: ")
            writePrior("Via")
            out.append(via)
            out.crlf()
        }
        if host == nil, passes(UnsafeRawBufferPointer(staticString: "Host")) { out.appendField("Host", defaultHost()) }
        for (name, value) in add {
            var n = name
            if n.withUTF8({ passes(UnsafeRawBufferPointer($0), editable: false) }) { out.appendField(name, value) }
        }
        out.appendFraming(framing)
        out.crlf()
    }
}

/// X-Forwarded-For, -Proto, -Host, Forwarded and Via: the fields a proxy rewrites
/// (`ForwardedHeaders.isForwardingField` on strings).
func isForwardingField(_ name: UnsafeRawBufferPointer) -> Bool {
    switch name.count {
    case 3: equalsIgnoringCase(name, "Via")
    case 9: equalsIgnoringCase(name, "Forwarded")
    case 15: equalsIgnoringCase(name, "X-Forwarded-For")
    case 16: equalsIgnoringCase(name, "X-Forwarded-Host")
    case 17: equalsIgnoringCase(name, "X-Forwarded-Proto")
    default: false
    }
}

extension UnsafeRawBufferPointer {
    init(staticString s: StaticString) { self.init(start: s.utf8Start, count: s.utf8CodeUnitCount) }
}

extension HTTPRequestHeadLines {
    /// The method as a string (Latin-1, like `materialize`); the common ones without building one.
    public func methodString(_ buf: UnsafeRawBufferPointer) -> String {
        switch method.count {
        case 3:
            if methodIs(buf, "GET") { return "GET" }
            if methodIs(buf, "PUT") { return "PUT" }
        case 4:
            if methodIs(buf, "POST") { return "POST" }
            if methodIs(buf, "HEAD") { return "HEAD" }
        default: break
        }
        return latin1String(buf, method)
    }
    /// The request-target as a string.
    public func targetString(_ buf: UnsafeRawBufferPointer) -> String { latin1String(buf, target) }
    /// The first Host value as a string, nil without one.
    public func hostString(_ buf: UnsafeRawBufferPointer) -> String? { host.map { latin1String(buf, $0) } }
}

/// A set of field names, and name prefixes, matched the way CGI, WSGI and PHP read them: without
/// ASCII case, and with `_` (or any character besides letters, digits and `-`: `FoldedNames.fold`)
/// equal to `-` (`X_App_Attest_Key_Id` is `X-App-Attest-Key-Id`). Kept as folded bytes; a name is
/// tested by length, then bytes, with no string per test.
public struct FieldNames: Sendable {
    private let names: [[UInt8]]
    private let prefixes: [[UInt8]]
    private let lengths: UInt64  // bit n: some name has n bytes (n < 64)
    /// The shortest prefix's length (Int.max without prefixes): shorter names skip the prefix test.
    private let shortestPrefix: Int

    public init(_ names: [String], prefixes: [String] = []) {
        self.names = names.map { Array($0.utf8).map(FieldNames.fold) }
        self.prefixes = prefixes.map { Array($0.utf8).map(FieldNames.fold) }.filter { !$0.isEmpty }
        var lengths: UInt64 = 0
        for n in self.names { lengths |= n.count < 64 ? 1 << UInt64(n.count) : 0 }
        self.lengths = lengths
        shortestPrefix = self.prefixes.map(\.count).min() ?? .max
    }

    /// A name byte as compared here (`FoldedNames.fold`).
    @inline(__always) static func fold(_ c: UInt8) -> UInt8 { FoldedNames.fold(c) }

    public var isEmpty: Bool { names.isEmpty && prefixes.isEmpty }

    @inline(__always)
    public func contains(_ name: UnsafeRawBufferPointer) -> Bool {
        let n = name.count
        // Most names have a length no listed name has, and are too short for the prefixes.
        if n < 64 && (lengths >> UInt64(n)) & 1 == 0 && n <= shortestPrefix { return false }
        return containsListed(name)
    }

    private func containsListed(_ name: UnsafeRawBufferPointer) -> Bool {
        let n = name.count
        let bytes = UnsafeBufferPointer(start: name.baseAddress?.assumingMemoryBound(to: UInt8.self), count: n)
        if n >= 64 || (lengths >> UInt64(n)) & 1 != 0 {
            for candidate in names where candidate.count == n {
                if candidate.withUnsafeBufferPointer({ Self.foldedPrefix($0, of: bytes) }) { return true }
            }
        }
        if n > shortestPrefix {
            for p in prefixes where p.count < n {
                if p.withUnsafeBufferPointer({ Self.foldedPrefix($0, of: bytes) }) { return true }
            }
        }
        return false
    }

    public func contains(_ name: String) -> Bool {
        var name = name
        return name.withUTF8 { contains(UnsafeRawBufferPointer($0)) }
    }

    /// Whether `bytes` starts with the folded `p` (equals it when as long).
    @inline(__always) private static func foldedPrefix(_ p: UnsafeBufferPointer<UInt8>, of bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        var k = 0
        while k < p.count {
            if p[k] != fold(bytes[k]) { return false }
            k += 1
        }
        return true
    }
}
