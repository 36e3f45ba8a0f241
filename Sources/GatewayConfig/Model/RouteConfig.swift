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
    /// The route's own upstream timeouts (`timeouts`); each one not given is the upstream's.
    public var timeouts: RouteTimeouts
    /// `pass_server_header`: the upstream's `Server` field reaches the client (default: left out,
    /// as nginx does, so the backend's software and version are not announced).
    public var passServerHeader: Bool

    public init(
        name: String, match: RouteMatch, upstream: String, maxBody: Int, assertion: AssertionPolicy = .off,
        timeouts: RouteTimeouts = RouteTimeouts(), passServerHeader: Bool = false
    ) {
        self.name = name
        self.match = match
        self.upstream = upstream
        self.maxBody = maxBody
        self.assertion = assertion
        self.timeouts = timeouts
        self.passServerHeader = passServerHeader
    }
}

/// `routes[].timeouts`: the upstream's `response_timeout` and `connect_timeout` for this route's
/// requests only; nil keeps the upstream's.
public struct RouteTimeouts: Sendable, Equatable {
    public var response: Duration?
    public var connect: Duration?

    public init(response: Duration? = nil, connect: Duration? = nil) {
        self.response = response
        self.connect = connect
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
    /// The request's host (without port and one trailing dot) must equal this, compared lowercased;
    /// nil matches any host.
    public var host: String?
    /// `fold`: the path spellings folded for matching; nil when not given (then `defaultFold`).
    public var fold: Set<Fold>?

    /// What a route folds when it matches paths (docs/configuration.md, `routes[].match.fold`).
    public enum Fold: String, Sendable, Hashable, CaseIterable {
        /// ASCII case.
        case `case`
        /// Matrix parameters (`;…`) in every segment.
        case params
        /// The last segment's extension (`.json`).
        case suffix
        /// Encoded spaces and control characters around segments, trailing dots, a trailing slash.
        case trim
    }

    public init(methods: [String] = [], path: Path, host: String? = nil, fold: Set<Fold>? = nil) {
        self.methods = methods
        self.path = path
        self.host = host
        self.fold = fold
    }

    /// `fold` as given, else everything on a route that verifies assertions (mode `enforce` or
    /// `shadow`: a spelling the backend folds must not skip it) and nothing on the others.
    public func effectiveFold(assertion: AssertionPolicy.Mode) -> Set<Fold> {
        fold ?? (assertion == .off ? [] : Set(Fold.allCases))
    }
}
