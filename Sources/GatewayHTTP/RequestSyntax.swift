/// The request syntax the gateway accepts where RFC 9110 leaves room for spellings that a backend
/// may read differently from the gateway's routes (docs/configuration.md, "What reaches the
/// backend"). One rule each, shared by HTTP/1.1 (`HTTP1Parser`) and HTTP/2 (`HTTP2Stream`):
///
/// - **Method**: one or more of `A-Z`, `-`, `_` (nginx's rule). Methods are case-sensitive tokens
///   (RFC 9110 §9.1), but Werkzeug/Flask upper-cases `post` and runs the POST handler: a route that
///   protects `POST` would not match it. Every other token character (lowercase letters, digits,
///   `!#$%&'*+.^`|~`) is refused with `bad_method`, so a backend can only see methods that routes
///   compare exactly.
/// - **Host** (the Host field, `:authority`, an absolute-form target's authority): RFC 3986 §3.2.2
///   `host [":" port]` with a conservative reg-name: an IPv6 literal in brackets (hex digits, `:`
///   and `.`), or dot-separated non-empty labels of `A-Z a-z 0-9 - _` with at most one trailing dot;
///   a port of 1 to 5 digits up to 65535. No userinfo (`@`), percent-encoding, spaces, `/`, `\`,
///   commas or other sub-delims, empty values or empty ports: `bad_host`.
/// - **Request-target** (HTTP/1.1): origin-form, `*` for OPTIONS only, or absolute-form with an
///   `http`/`https` scheme, an authority as above and no userinfo (RFC 9112 §3.2): `bad_target`.
public enum RequestSyntax {
    /// `A-Z`, `-`, `_` by table (one load per byte; "1" or "0" per byte value 0…255).
    @inline(__always) static func isMethodByte(_ c: UInt8) -> Bool {
        methodTable.utf8Start[Int(c)] == UInt8(ascii: "1")
    }

    @inline(__always) static var methodTable: StaticString {
        "0000000000000000000000000000000000000000000001000000000000000000011111111111111111111111111000010000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000"
    }

    /// The method rule spelled out, for the test that checks the table.
    static func isMethodByteByRule(_ c: UInt8) -> Bool {
        (c >= UInt8(ascii: "A") && c <= UInt8(ascii: "Z")) || c == UInt8(ascii: "-") || c == UInt8(ascii: "_")
    }

    /// Whether `method` is non-empty and made of `A-Z`, `-`, `_` only.
    public static func isCanonicalMethod(_ method: String) -> Bool {
        var m = method
        return m.withUTF8 { u in !u.isEmpty && u.allSatisfy(isMethodByte) }
    }

    /// A reg-name label byte: `A-Z a-z 0-9 - _`, by table.
    @inline(__always) static func isLabelByte(_ c: UInt8) -> Bool {
        labelTable.utf8Start[Int(c)] == UInt8(ascii: "1")
    }

    @inline(__always) static var labelTable: StaticString {
        "0000000000000000000000000000000000000000000001001111111111000000011111111111111111111111111000010111111111111111111111111110000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000"
    }

    static func isLabelByteByRule(_ c: UInt8) -> Bool {
        switch c {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"): true
        default: c == UInt8(ascii: "-") || c == UInt8(ascii: "_")
        }
    }

    /// Validates `host [":" port]` (the rule above) and returns the length of the host part (the
    /// port excluded, brackets and a trailing dot included); nil when the value is not valid.
    public static func hostLength(_ p: UnsafeBufferPointer<UInt8>) -> Int? {
        let n = p.count
        guard n > 0 else { return nil }
        var i = 0
        if p[0] == UInt8(ascii: "[") {
            i = 1
            var colons = 0
            while i < n && p[i] != UInt8(ascii: "]") {
                let c = p[i]
                if c == UInt8(ascii: ":") {
                    colons += 1
                } else if !(c == UInt8(ascii: ".") || isHexDigit(c)) {
                    return nil
                }
                i += 1
            }
            guard i < n, colons >= 2 else { return nil }
            i += 1
        } else {
            // Labels of label bytes separated by single dots; one trailing dot.
            while true {
                let start = i
                while i < n && isLabelByte(p[i]) { i += 1 }
                if i == start {
                    // An empty label: only after a last dot (`shop.example.com.`), never first or twice.
                    guard start > 0, p[start - 1] == UInt8(ascii: "."), i == n || p[i] == UInt8(ascii: ":") else { return nil }
                    break
                }
                if i == n || p[i] == UInt8(ascii: ":") { break }
                guard p[i] == UInt8(ascii: ".") else { return nil }
                i += 1
            }
        }
        let hostEnd = i
        if i < n {
            guard p[i] == UInt8(ascii: ":") else { return nil }
            i += 1
            let digits = n - i
            guard digits >= 1 && digits <= 5 else { return nil }
            var port = 0
            while i < n {
                let d = p[i]
                guard d >= 0x30 && d <= 0x39 else { return nil }
                port = port * 10 + Int(d - 0x30)
                i += 1
            }
            guard port <= 65535 else { return nil }
        }
        return hostEnd
    }

    /// Whether `value` is a valid Host value or authority (the rule above).
    public static func isValidHost(_ value: String) -> Bool {
        var v = value
        return v.withUTF8 { hostLength($0) != nil }
    }

    /// What a route's `host` is compared with: the host part lowercased, without the port, without
    /// one trailing dot, an IPv6 literal without its brackets. nil when `value` is not valid.
    /// `Shop.Example.com.:80` and `shop.example.com:8443` both give `shop.example.com`.
    public static func hostMatchKey(_ value: String) -> String? {
        var v = value
        return v.withUTF8 { u -> String? in
            guard var end = hostLength(u) else { return nil }
            var start = 0
            if u[0] == UInt8(ascii: "[") {
                start = 1
                end -= 1
            } else if u[end - 1] == UInt8(ascii: ".") {
                end -= 1
            }
            var bytes = [UInt8](UnsafeBufferPointer(rebasing: u[start..<end]))
            for k in bytes.indices where bytes[k] >= 0x41 && bytes[k] <= 0x5a { bytes[k] |= 0x20 }
            return String(decoding: bytes, as: UTF8.self)
        }
    }

    /// Why a request-target that is not origin-form is refused.
    public enum TargetProblem: Sendable, Equatable {
        /// `*` with a method other than OPTIONS.
        case asteriskNotOptions
        /// Neither origin-form, `*`, nor `scheme://authority…`.
        case notAbsoluteForm
        /// A scheme other than http or https.
        case scheme
        /// `user@` before the host.
        case userinfo
        /// The authority is not `host [":" port]` (see `hostLength`).
        case authority
    }

    /// The parts of an absolute-form target (RFC 9112 §3.2.2), as offsets into it: the authority,
    /// and where the path (possibly empty) and query begin.
    public struct AbsoluteForm: Sendable, Equatable {
        public var authority: Range<Int>
        public var pathStart: Int
    }

    /// Classifies a request-target that does not start with `/`: `*` (nil, when the method is
    /// OPTIONS), or an absolute-form target with its parts; throws what is wrong otherwise.
    public static func nonOriginTarget(_ t: UnsafeBufferPointer<UInt8>, methodIsOptions: Bool) throws(TargetProblemError)
        -> AbsoluteForm?
    {
        let n = t.count
        if n == 1 && t[0] == UInt8(ascii: "*") {
            guard methodIsOptions else { throw TargetProblemError(.asteriskNotOptions) }
            return nil
        }
        var i = 0
        while i < n, isSchemeByte(t[i], first: i == 0) { i += 1 }
        guard i > 0, i + 2 < n, t[i] == UInt8(ascii: ":"), t[i + 1] == UInt8(ascii: "/"), t[i + 2] == UInt8(ascii: "/") else {
            throw TargetProblemError(.notAbsoluteForm)
        }
        let scheme = UnsafeBufferPointer(rebasing: t[0..<i])
        guard schemeIs(scheme, "http") || schemeIs(scheme, "https") else {
            throw TargetProblemError(.scheme)
        }
        let start = i + 3
        var end = start
        while end < n, t[end] != UInt8(ascii: "/"), t[end] != UInt8(ascii: "?"), t[end] != UInt8(ascii: "#") {
            if t[end] == UInt8(ascii: "@") { throw TargetProblemError(.userinfo) }
            end += 1
        }
        guard hostLength(UnsafeBufferPointer(rebasing: t[start..<end])) != nil else { throw TargetProblemError(.authority) }
        return AbsoluteForm(authority: start..<end, pathStart: end)
    }

    /// A `TargetProblem` as a typed error.
    public struct TargetProblemError: Error, Sendable, Equatable {
        public let problem: TargetProblem
        init(_ problem: TargetProblem) { self.problem = problem }
    }

    /// Whether a POST's query carries a method override: a parameter that Symfony/Laravel (query
    /// and body `_method`), Express's `methodOverride('_method')` or Rack read as another method
    /// (`POST /api/item?_method=DELETE` runs DELETE's handler). Keys are compared as PHP reads them:
    /// percent-decoded, `+` as a space, and space, `.` and `[` as `_` (`?.method=`, `?%5Fmethod=`).
    /// Only POST is overridden by those frameworks; other methods are never looked at.
    public static func hasMethodOverride(method: String, target: String) -> Bool {
        guard method.utf8.count == 4, method == "POST" else { return false }
        var t = target
        return t.withUTF8 { u -> Bool in
            guard var i = u.firstIndex(where: { $0 == UInt8(ascii: "?") || $0 == UInt8(ascii: "#") }), u[i] == UInt8(ascii: "?") else {
                return false
            }
            i += 1
            while i < u.count {
                var end = i
                while end < u.count, u[end] != UInt8(ascii: "&"), u[end] != UInt8(ascii: "#") { end += 1 }
                if isMethodKey(UnsafeBufferPointer(rebasing: u[i..<end])) { return true }
                if end < u.count, u[end] == UInt8(ascii: "#") { return false }
                i = end + 1
            }
            return false
        }
    }

    /// Whether a request body may carry a method override: the bytes `_method` in any letter case
    /// anywhere (a JSON key, which Laravel reads as input; a multipart field `name="_method"`), or
    /// a form pair (`&`-separated) whose key reads as `_method` the way PHP decodes it
    /// (`%5Fmethod=`, `.method=`, `+method=`). Deliberately broad: it is asked only of POSTs to a
    /// plain route on a path that a route protects for other methods.
    public static func bodyHasMethodOverride(_ body: [UInt8]) -> Bool {
        let needle = Array("_method".utf8)
        return body.withUnsafeBufferPointer { u -> Bool in
            if u.count >= needle.count {
                var i = 0
                while i + needle.count <= u.count {
                    var k = 0
                    while k < needle.count, u[i + k] | (k == 0 ? 0 : 0x20) == needle[k] { k += 1 }
                    if k == needle.count { return true }
                    i += 1
                }
            }
            var start = 0
            while start < u.count {
                var end = start
                while end < u.count, u[end] != UInt8(ascii: "&") { end += 1 }
                if isMethodKey(UnsafeBufferPointer(rebasing: u[start..<end])) { return true }
                start = end + 1
            }
            return false
        }
    }

    /// Whether a `key[=value]` pair's key reads as `_method` (see `hasMethodOverride`).
    private static func isMethodKey(_ pair: UnsafeBufferPointer<UInt8>) -> Bool {
        let expected = Array("_method".utf8)
        var k = 0
        var i = 0
        while i < pair.count, pair[i] != UInt8(ascii: "=") {
            var c = pair[i]
            if c == UInt8(ascii: "%"), i + 2 < pair.count, let hi = hexValue(pair[i + 1]), let lo = hexValue(pair[i + 2]) {
                c = hi << 4 | lo
                i += 2
            }
            if c == UInt8(ascii: "+") || c == UInt8(ascii: " ") || c == UInt8(ascii: ".") || c == UInt8(ascii: "[") {
                c = UInt8(ascii: "_")
            }
            guard k < expected.count, c == expected[k] else { return false }
            k += 1
            i += 1
        }
        return k == expected.count
    }

    @inline(__always) private static func hexValue(_ c: UInt8) -> UInt8? {
        switch c {
        case 0x30...0x39: c - 0x30
        case 0x41...0x46: c - 0x41 + 10
        case 0x61...0x66: c - 0x61 + 10
        default: nil
        }
    }

    @inline(__always) private static func isSchemeByte(_ c: UInt8, first: Bool) -> Bool {
        let alpha = (c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a)
        if first { return alpha }
        return alpha || (c >= 0x30 && c <= 0x39) || c == UInt8(ascii: "+") || c == UInt8(ascii: "-") || c == UInt8(ascii: ".")
    }

    @inline(__always) private static func isHexDigit(_ c: UInt8) -> Bool {
        (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x46) || (c >= 0x61 && c <= 0x66)
    }

    /// `a` (scheme bytes: letters, digits, `+-.`) equals the lowercase `b`, letters compared without case.
    private static func schemeIs(_ a: UnsafeBufferPointer<UInt8>, _ b: StaticString) -> Bool {
        guard a.count == b.utf8CodeUnitCount else { return false }
        for k in 0..<a.count where a[k] | 0x20 != b.utf8Start[k] { return false }
        return true
    }
}
