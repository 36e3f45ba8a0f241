/// A request head as ranges of the buffer it was parsed from (`HTTP1Parser.parseRequestHeadLines`):
/// valid only while those bytes are unchanged. The HTTP/1.1 proxy keeps a copy of the head's bytes
/// for the exchange, decides on method, path, framing and persistence, and writes the upstream head
/// from the bytes (the proxy's `UpstreamRequestHead`), without a string per field. `materialize` gives
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

    /// The head as `parseRequestHead` returns it (strings for everything): the common methods and
    /// field names as literals (`methodString`, `fieldNameString`: nothing to allocate, check or
    /// free), the rest as `latin1String` makes them. (The fields' array is reserved and appended to:
    /// `Array(unsafeUninitializedCapacity:)` looks its storage's type up generically per call, ~480
    /// instructions more.)
    public func materialize(_ buf: UnsafeRawBufferPointer) -> HTTPRequestHead {
        var headers: [HTTPFields.Field] = []
        headers.reserveCapacity(fields.count)
        fields.withUnsafeBufferPointer { fs in
            for f in fs { headers.append(HTTPFields.Field(fieldNameString(buf, f.name), latin1String(buf, f.value))) }
        }
        return HTTPRequestHead(
            method: methodString(buf), target: latin1String(buf, target), minorVersion: minorVersion,
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
        guard let base = buf.baseAddress else { return method.isEmpty }
        return spells(base + method.lowerBound, name)
    }
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
