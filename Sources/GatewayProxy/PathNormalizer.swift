/// Turns a request-target into the path routes are matched on, so that `/api//purchase`,
/// `/api/./purchase`, `/x/../api/purchase` or `/api/%70urchase` cannot slip past a route that
/// protects `/api/purchase` while the upstream resolves them to it. The original target is what is
/// forwarded (and what an assertion binds to); only matching uses the normalised path.
///
/// - origin-form `/p?q` and absolute-form `http://host/p?q` give `/p`; `*` gives `*`.
/// - Percent-encoded unreserved characters are decoded; other escapes keep uppercase hex.
/// - Encoded `/`, `\`, NUL, and `..` above the root are refused (`nil`): ambiguous on purpose.
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

/// A route's match: methods (any if empty), a path prefix on segment boundaries or an exact path,
/// and optionally a host (case-insensitive, port ignored).
public struct RouteMatch: Sendable, Equatable {
    public var methods: Set<String>
    public var pathPrefix: String?
    public var exactPath: String?
    public var host: String?

    public init(methods: Set<String> = [], pathPrefix: String? = "/", exactPath: String? = nil, host: String? = nil) {
        self.methods = methods
        self.pathPrefix = pathPrefix
        self.exactPath = exactPath
        self.host = host?.lowercased()
    }

    /// `path` is already normalised. `/api/purchase` matches `/api/purchase` and `/api/purchase/x`,
    /// not `/api/purchases`; a prefix ending in `/` matches anything below it.
    public func matches(method: String, path: String, host requestHost: String?) -> Bool {
        if !methods.isEmpty && !methods.contains(method) { return false }
        if let h = host {
            guard let rh = requestHost?.lowercased() else { return false }
            let bare = rh.hasPrefix("[") ? String(rh.prefix { $0 != "]" }) + "]" : String(rh.prefix { $0 != ":" })
            if bare != h { return false }
        }
        if let exact = exactPath { return path == exact }
        guard let prefix = pathPrefix else { return true }
        if prefix == "/" || path == prefix { return true }
        guard path.hasPrefix(prefix) else { return false }
        return prefix.hasSuffix("/") || path.utf8[path.utf8.index(path.utf8.startIndex, offsetBy: prefix.utf8.count)] == UInt8(ascii: "/")
    }
}
