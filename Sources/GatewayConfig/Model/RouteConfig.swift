/// A route: which requests it matches, where they go, and how assertions are checked on them.
/// Routes are tried in file order; the first match wins.
public struct RouteConfig: Sendable, Equatable {
    /// Unique among routes; used in logs and metric labels.
    public var name: String
    public var match: RouteMatch
    /// The name of an upstream (checked to exist).
    public var upstream: String
    /// Largest request body in bytes: the route's `max_body`, else `limits.max_body`.
    public var maxBody: Int
    /// `.off` when the route has no `assertion` block.
    public var assertion: AssertionPolicy

    public init(name: String, match: RouteMatch, upstream: String, maxBody: Int, assertion: AssertionPolicy = .off) {
        self.name = name
        self.match = match
        self.upstream = upstream
        self.maxBody = maxBody
        self.assertion = assertion
    }
}

/// What a request must look like for a route to take it. Every given condition must hold.
public struct RouteMatch: Sendable, Equatable {
    public enum Path: Sendable, Equatable {
        /// `path_prefix`: the request path starts with this string.
        case prefix(String)
        /// `path`: the request path is exactly this string.
        case exact(String)
    }

    /// Uppercase method tokens, unique; empty matches every method.
    public var methods: [String]
    public var path: Path
    /// The request's host (without port) must equal this, compared lowercased; nil matches any host.
    public var host: String?

    public init(methods: [String] = [], path: Path, host: String? = nil) {
        self.methods = methods
        self.path = path
        self.host = host
    }
}
