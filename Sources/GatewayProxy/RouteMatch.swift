import GatewayHTTP

/// A route's match: methods (any if empty; GET takes HEAD too), a path prefix on segment
/// boundaries or an exact path, folded as `fold` says, and optionally a host (compared as
/// `RequestSyntax.hostMatchKey` gives it: case-insensitive, port and one trailing dot ignored).
public struct RouteMatch: Sendable, Equatable {
    public var methods: Set<String>
    public var pathPrefix: String?
    public var exactPath: String?
    public var host: String?
    public var fold: PathFold

    public init(
        methods: Set<String> = [], pathPrefix: String? = "/", exactPath: String? = nil, host: String? = nil,
        fold: PathFold = []
    ) {
        // A backend runs GET's handler for HEAD (Flask, Rails, Express, Spring): what protects or
        // routes GET takes HEAD too, as nginx's `limit_except GET` does.
        self.methods = methods.contains("GET") ? methods.union(["HEAD"]) : methods
        self.pathPrefix = pathPrefix.map { Self.foldRoutePath($0, fold) }
        self.exactPath = exactPath.map { Self.foldRoutePath($0, fold) }
        self.host = host.flatMap { RequestSyntax.hostMatchKey($0) } ?? host?.lowercased()
        self.fold = fold
    }

    /// A route's own path, folded as requests' are (and lowercase when `fold` has `.case`).
    private static func foldRoutePath(_ path: String, _ fold: PathFold) -> String {
        guard !fold.isEmpty else { return path }
        let folded = PathNormalizer.fold(PathNormalizer.normalize(path) ?? path, fold)
        return fold.contains(.case) ? folded.lowercased() : folded
    }

    /// `path` is already normalised, `host` is the request's Host value (or authority) as sent.
    /// `/api/purchase` matches `/api/purchase` and `/api/purchase/x`, not `/api/purchases`; a
    /// prefix ending in `/` matches anything below it.
    public func matches(method: String, path: String, host requestHost: String?) -> Bool {
        matches(method: method, path: path, hostKey: requestHost.flatMap { RequestSyntax.hostMatchKey($0) })
    }

    /// The same with the request's host already made a match key (`RequestSyntax.hostMatchKey`).
    public func matches(method: String, path: String, hostKey: String?) -> Bool {
        if !methods.isEmpty && !methods.contains(method) { return false }
        if let h = host {
            guard let k = hostKey, k == h else { return false }
        }
        if fold.isEmpty { return matchesPath(path, caseInsensitive: false) }
        return matchesPath(PathNormalizer.fold(path, fold), caseInsensitive: fold.contains(.case))
    }

    @inline(__always)
    private func matchesPath(_ path: String, caseInsensitive ci: Bool) -> Bool {
        if let exact = exactPath { return ci ? path.equalsIgnoringASCIICase(exact) : path == exact }
        guard let prefix = pathPrefix else { return true }
        if prefix == "/" || (ci ? path.equalsIgnoringASCIICase(prefix) : path == prefix) { return true }
        let n = prefix.utf8.count
        guard path.utf8.count > n else { return false }
        let starts = ci ? Self.hasPrefixIgnoringCase(path, prefix) : path.hasPrefix(prefix)
        guard starts else { return false }
        return prefix.hasSuffix("/") || path.utf8[path.utf8.index(path.utf8.startIndex, offsetBy: n)] == UInt8(ascii: "/")
    }

    private static func hasPrefixIgnoringCase(_ s: String, _ prefix: String) -> Bool {
        var a = s
        var b = prefix
        return a.withUTF8 { u in
            b.withUTF8 { p in
                guard u.count >= p.count else { return false }
                for k in 0..<p.count where u[k] != p[k] {
                    let x = u[k] | 0x20
                    guard x == p[k] | 0x20, x >= 0x61, x <= 0x7a else { return false }
                }
                return true
            }
        }
    }
}
