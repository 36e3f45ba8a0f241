import GatewayHTTP
import GatewayIO

/// Where and how a request is forwarded. A class (immutable): a route's forward is made once and
/// shared by its requests, and passing it along costs one reference count, not one per field.
public final class Forward {
    public let routeName: String
    /// The upstream's only server, or its first (`balancer` chooses); its target names the upstream.
    public let pool: UpstreamPool
    public let maxBody: Int
    /// Applied to the upstream request's fields with the proxy's own rewriting (`UpstreamRequestHead`),
    /// e.g. to remove assertion headers and add the verified key id.
    public let editHeaders: HeaderEdit
    /// Added to the downstream response after the upstream's fields.
    public let responseHeaders: HTTPFields
    /// An upstream with several servers: the server of each attempt; nil: `pool` is the only one.
    public let balancer: UpstreamBalancer?
    /// From the request's end to the response head, and to connect: the route's, else the upstream's.
    public let responseTimeoutMillis: Int64
    public let connectTimeoutMillis: Int64
    /// What the route does with the upstream's response head first (fields only the gateway reads,
    /// such as `X-Device-Check-Update`); nil on most routes, whose heads are copied as bytes.
    public let responseHook: ResponseHook?
    /// On a protected route: the verdict that let the request go on, for the access line.
    public let verdict: AccessVerdict?
    /// The route's `pass_server_header`: the upstream's `Server` field reaches the client (else it
    /// is left out, as nginx does).
    public let passServerHeader: Bool
    /// Keys per account: a verified request's reading of the upstream's `X-App-Attest-Account`
    /// (which never reaches the client either way); nil on other requests.
    public let accountTap: AccountFieldTap?

    /// - Parameters:
    ///   - balancer: several servers (`pool` is then its first).
    ///   - responseTimeoutMillis, connectTimeoutMillis: a route's own; nil: `pool.target`'s.
    public init(
        routeName: String, pool: UpstreamPool, maxBody: Int, editHeaders: HeaderEdit = HeaderEdit(),
        responseHeaders: HTTPFields = HTTPFields(), responseHook: ResponseHook? = nil, balancer: UpstreamBalancer? = nil,
        responseTimeoutMillis: Int64? = nil, connectTimeoutMillis: Int64? = nil, verdict: AccessVerdict? = nil,
        passServerHeader: Bool = false, accountTap: AccountFieldTap? = nil
    ) {
        self.accountTap = accountTap
        self.passServerHeader = passServerHeader
        self.routeName = routeName
        self.pool = pool
        self.maxBody = maxBody
        self.editHeaders = editHeaders
        self.responseHeaders = responseHeaders
        self.balancer = balancer
        self.responseTimeoutMillis = responseTimeoutMillis ?? pool.target.responseTimeoutMillis
        self.connectTimeoutMillis = connectTimeoutMillis ?? pool.target.connectTimeoutMillis
        self.responseHook = responseHook
        self.verdict = verdict
        responseFieldsAsBytes = Self.writableAsBytes(responseHeaders)
    }

    /// `responseFieldsAsBytes` for these route fields.
    static func writableAsBytes(_ routeFields: HTTPFields) -> Bool {
        routeFields.allSatisfy { f in
            !HopByHop.isListed(f.name) && !f.name.equalsIgnoringASCIICase("Via") && !f.name.equalsIgnoringASCIICase("Content-Length")
                && !f.name.equalsIgnoringASCIICase(RequestID.field)
        }
    }

    /// Whether the response head goes through strings (`DownstreamResponseHead.fields`): a hook, or
    /// route fields the byte writers cannot set (below).
    var rewritesResponse: Bool { responseHook != nil || (responseHeaders.count > 0 && !responseFieldsAsBytes) }
    /// Whether the route's response fields can be written next to the upstream's bytes (set over the
    /// upstream's fields of the same names, after Via): true unless one of them names a field the
    /// proxy itself rewrites (hop-by-hop, Via, Content-Length, X-Request-Id), whose rules the
    /// string path applies. A protected route's next challenge takes the byte path.
    let responseFieldsAsBytes: Bool
}

/// A route's look at an upstream's response head before the client's: `observe` sees the head as
/// received (on the loop), then every field named in `remove` (any ASCII case) is left out of what
/// the client gets.
public struct ResponseHook {
    public let remove: [String]
    public let observe: ((HTTPResponseHead) -> Void)?

    public init(remove: [String], observe: ((HTTPResponseHead) -> Void)? = nil) {
        self.remove = remove
        self.observe = observe
    }
}
