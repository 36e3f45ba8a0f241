import GatewayHTTP

/// Turns a request-target into the path routes are matched on, so that `/api//purchase`,
/// `/api/./purchase`, `/x/../api/purchase` or `/api/%70urchase` cannot slip past a route that
/// protects `/api/purchase` while the upstream resolves them to it. The original target is what is
/// forwarded (and what an assertion binds to); only matching uses the normalised path.
///
/// - origin-form `/p?q` and absolute-form `http://host/p?q` give `/p`; `*` gives `*`.
/// - Percent-encoded unreserved characters are decoded; other escapes keep uppercase hex.
/// - Encoded `/`, `\`, NUL, `..` above the root and a leading `//` are refused (`nil`): ambiguous
///   on purpose.
/// - Repeated slashes collapse; `.` and `..` segments are resolved.
public enum PathNormalizer {
    public static func normalize(_ target: String) -> String? {
        if let plain = alreadyNormal(target) { return plain }
        var path = Substring(target)
        if path == "*" { return "*" }
        if !path.hasPrefix("/") {
            // absolute-form: scheme "://" authority path
            guard let colon = path.firstIndex(of: ":"), path[colon...].hasPrefix("://") else { return nil }
            let afterAuthority = path[path.index(colon, offsetBy: 3)...]
            if let slash = afterAuthority.firstIndex(of: "/") {
                path = afterAuthority[slash...]
            } else {
                return "/"
            }
        }
        if let q = path.firstIndex(where: { $0 == "?" || $0 == "#" }) { path = path[..<q] }
        // `//x/api/purchase` is a network-path reference to parsers that split URLs (authority `x`,
        // path `/api/purchase`) and `/x/api/purchase` to those that merge slashes: refused.
        if path.hasPrefix("//") { return nil }

        // Percent-decoding of unreserved characters, validation of escapes.
        var decoded: [UInt8] = []
        decoded.reserveCapacity(path.utf8.count)
        let bytes = Array(path.utf8)
        var i = 0
        while i < bytes.count {
            let c = bytes[i]
            if c == UInt8(ascii: "%") {
                guard i + 2 < bytes.count, let hi = hex(bytes[i + 1]), let lo = hex(bytes[i + 2]) else { return nil }
                let v = hi << 4 | lo
                if v == UInt8(ascii: "/") || v == UInt8(ascii: "\\") || v == 0 { return nil }
                if isUnreserved(v) {
                    decoded.append(v)
                } else {
                    decoded += [UInt8(ascii: "%"), upperHex(hi), upperHex(lo)]
                }
                i += 3
                continue
            }
            if c == UInt8(ascii: "\\") { return nil }
            decoded.append(c)
            i += 1
        }

        // Segments: collapse empty ones, resolve dot segments.
        var segments: [ArraySlice<UInt8>] = []
        let trailingSlash = decoded.last == UInt8(ascii: "/") && decoded.count > 1
        for seg in decoded.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: true) {
            if seg.elementsEqual([UInt8(ascii: ".")]) { continue }
            if seg.elementsEqual([UInt8(ascii: "."), UInt8(ascii: ".")]) {
                guard !segments.isEmpty else { return nil }
                segments.removeLast()
                continue
            }
            segments.append(seg)
        }
        var out: [UInt8] = [UInt8(ascii: "/")]
        for (k, s) in segments.enumerated() {
            if k > 0 { out.append(UInt8(ascii: "/")) }
            out += s
        }
        if trailingSlash && !segments.isEmpty { out.append(UInt8(ascii: "/")) }
        return String(decoding: out, as: UTF8.self)
    }

    /// The fast path: an origin-form target whose path has no escapes, backslashes, empty or dot
    /// segments is its own normal form (up to `?` or `#`). Nil when the full algorithm must run.
    static func alreadyNormal(_ target: String) -> String? {
        var t = target
        return t.withUTF8 { u -> String? in
            guard let first = u.first, first == UInt8(ascii: "/") else { return nil }
            var i = 0
            var end = u.count
            while i < u.count {
                let c = u[i]
                if c == UInt8(ascii: "?") || c == UInt8(ascii: "#") {
                    end = i
                    break
                }
                if c == UInt8(ascii: "%") || c == UInt8(ascii: "\\") { return nil }
                if c == UInt8(ascii: "/") {
                    // "//", "/." (dot segments, and names starting with a dot: left to the full path)
                    if i + 1 < u.count, u[i + 1] == UInt8(ascii: "/") || u[i + 1] == UInt8(ascii: ".") { return nil }
                }
                i += 1
            }
            if end == u.count { return target }
            return String(decoding: UnsafeBufferPointer(rebasing: u[0..<end]), as: UTF8.self)
        }
    }

    /// A route's path folding (`routes[].match.fold`): the spellings of a path that common backends
    /// read as the same resource, folded away for matching (never for forwarding). On a normalised
    /// path (`normalize`), in this order:
    ///
    /// - `params`: in every segment, `;` (or `%3B`) and what follows it (matrix parameters,
    ///   `;jsessionid=…`: Tomcat, Jetty, Spring); then `.` and `..` segments that this uncovers are
    ///   resolved (`/a/..;/b` is `/b` to Tomcat).
    /// - `trim`: in every segment, leading and trailing encoded control characters and spaces
    ///   (`%01`…`%20`: Java's `trim`, Spring's `trimTokens`), then trailing dots (IIS, Windows);
    ///   empty segments go, so a trailing slash does too (Express, Spring's trailing-slash match).
    /// - `suffix`: the last segment from its first `.` after the first character (`.json`, `.xml`,
    ///   `.a.b`: Rails' `(.:format)`, Spring's suffix patterns), then `trim` again on it.
    /// - `case` is not applied here: routes compare ASCII case-insensitively (Express, ASP.NET, IIS).
    public static func fold(_ path: String, _ options: PathFold) -> String {
        let opts = options.subtracting(.case)
        guard !opts.isEmpty, path != "*" else { return path }
        var p = path
        // Fast path: nothing to fold.
        let plain = p.withUTF8 { u -> Bool in
            for c in u where c == UInt8(ascii: ";") || c == UInt8(ascii: ".") || c == UInt8(ascii: "%") { return false }
            return !(opts.contains(.trim) && u.count > 1 && u.last == UInt8(ascii: "/"))
        }
        if plain { return path }
        let params = opts.contains(.params)
        let trim = opts.contains(.trim)
        let segments = Array(path.utf8).split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false).dropFirst()
        var out: [ArraySlice<UInt8>] = []
        for (k, var seg) in segments.enumerated() {
            let isLast = k == segments.count - 1
            if params, let semi = paramsStart(seg) { seg = seg[..<semi] }
            if trim { seg = trimEncodedSpace(seg) }
            if params || trim {
                if seg.elementsEqual([UInt8(ascii: ".")]) { continue }
                if seg.elementsEqual([UInt8(ascii: "."), UInt8(ascii: ".")]) {
                    if !out.isEmpty { out.removeLast() }
                    continue
                }
            }
            if trim { seg = trimTrailingDots(seg) }
            // Empty segments go (a trailing slash stays without `trim`).
            if seg.isEmpty && (trim || !isLast) { continue }
            out.append(seg)
        }
        if opts.contains(.suffix), let last = out.lastIndex(where: { !$0.isEmpty }) {
            var seg = out[last]
            if let dot = seg.dropFirst().firstIndex(of: UInt8(ascii: ".")) { seg = seg[..<dot] }
            if trim { seg = trimTrailingDots(trimEncodedSpace(seg)) }
            if seg.isEmpty { out.remove(at: last) } else { out[last] = seg }
        }
        var bytes: [UInt8] = [UInt8(ascii: "/")]
        for (k, seg) in out.enumerated() {
            if k > 0 { bytes.append(UInt8(ascii: "/")) }
            bytes += seg
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Where a segment's matrix parameters start: its first `;` or `%3B`.
    private static func paramsStart(_ s: ArraySlice<UInt8>) -> Int? {
        var i = s.startIndex
        while i < s.endIndex {
            if s[i] == UInt8(ascii: ";") { return i }
            if s[i] == UInt8(ascii: "%"), i + 2 < s.endIndex, s[i + 1] == UInt8(ascii: "3"), s[i + 2] == UInt8(ascii: "B") { return i }
            i += 1
        }
        return nil
    }

    /// Whether `s` has `%01`…`%20` at `i` (the normaliser writes escapes in uppercase hex).
    private static func isSpaceEscape(_ s: ArraySlice<UInt8>, at i: Int) -> Bool {
        guard i >= s.startIndex, i + 2 < s.endIndex, s[i] == UInt8(ascii: "%") else { return false }
        switch s[i + 1] {
        case UInt8(ascii: "0"): return s[i + 2] != UInt8(ascii: "0")
        case UInt8(ascii: "1"): return true
        case UInt8(ascii: "2"): return s[i + 2] == UInt8(ascii: "0")
        default: return false
        }
    }

    /// Without leading and trailing `%01`…`%20`.
    private static func trimEncodedSpace(_ seg: ArraySlice<UInt8>) -> ArraySlice<UInt8> {
        var s = seg
        while isSpaceEscape(s, at: s.startIndex) { s = s.dropFirst(3) }
        while isSpaceEscape(s, at: s.endIndex - 3) { s = s.dropLast(3) }
        return s
    }

    /// Without trailing dots and `%01`…`%20`, in any mix (`a.%20.`).
    private static func trimTrailingDots(_ seg: ArraySlice<UInt8>) -> ArraySlice<UInt8> {
        var s = seg
        while true {
            if s.last == UInt8(ascii: ".") {
                s = s.dropLast()
            } else if isSpaceEscape(s, at: s.endIndex - 3) {
                s = s.dropLast(3)
            } else {
                return s
            }
        }
    }

    private static func hex(_ c: UInt8) -> UInt8? {
        switch c {
        case 0x30...0x39: c - 0x30
        case 0x41...0x46: c - 0x41 + 10
        case 0x61...0x66: c - 0x61 + 10
        default: nil
        }
    }

    private static func upperHex(_ v: UInt8) -> UInt8 { v < 10 ? 0x30 + v : 0x41 + v - 10 }

    private static func isUnreserved(_ c: UInt8) -> Bool {
        (c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a) || (c >= 0x30 && c <= 0x39) || c == 0x2d || c == 0x2e
            || c == 0x5f || c == 0x7e
    }
}

/// What a route folds when it matches paths (`routes[].match.fold`, `PathNormalizer.fold`).
public struct PathFold: OptionSet, Sendable, Hashable {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }
    /// ASCII case.
    public static let `case` = PathFold(rawValue: 1)
    /// Matrix parameters (`;…`) in every segment.
    public static let params = PathFold(rawValue: 2)
    /// The last segment's extension (`.json`).
    public static let suffix = PathFold(rawValue: 4)
    /// Encoded spaces and control characters around segments, trailing dots, a trailing slash.
    public static let trim = PathFold(rawValue: 8)
    public static let all: PathFold = [.case, .params, .suffix, .trim]
}
