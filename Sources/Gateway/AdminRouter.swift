import GatewayHTTP
import GatewayIO
import GatewayProxy
import GatewayWire
import Synchronization

/// The admin listener (loopback by default): `/healthz` (the process answers), `/readyz`
/// (store restored and accepting writes, serving, not draining; a 503 lists its reasons), `/metrics` (Prometheus text format), and
/// `/explain/<request-id>` (why a request was refused) with `/explain` (the latest refusals).
///
/// With `admin.token_file`, every path but the health endpoints (and `/metrics` unless
/// `admin.protect_metrics`) answers `401 {"error":"unauthorized"}` without
/// `Authorization: Bearer <token>`, before anything else is decided (method, path): so any path
/// added later, mutating ones included, is guarded too.
final class AdminRouter: RequestRouter, @unchecked Sendable {
    unowned let server: GatewayServer
    let exposition: (@Sendable () -> [UInt8])?
    let explain: ExplainLog
    /// Replaced by a reload (the token file is read again).
    private let access: Mutex<AdminAccess>

    init(server: GatewayServer, exposition: (@Sendable () -> [UInt8])?, explain: ExplainLog, access: AdminAccess) {
        self.server = server
        self.exposition = exposition
        self.explain = explain
        self.access = Mutex(access)
    }

    func adopt(_ access: AdminAccess) { self.access.withLock { $0 = access } }

    /// `admin.allow` of the running configuration (replaced by a reload) for a connection's peer.
    func admits(_ peer: SocketAddress) -> Bool {
        let access = self.access.withLock { $0 }
        return peer.withAddressBytes { access.admits(address: $0) }
    }

    static let unauthorized = LocalResponse.json(
        401, "{\"error\":\"unauthorized\"}",
        headers: HTTPFields([("WWW-Authenticate", "Bearer realm=\"attest-gateway admin\""), ("Cache-Control", "no-store")]))

    func route(_ head: HTTPRequestHead, path: String, peer: SocketAddress?) -> RouteDecision {
        let access = self.access.withLock { $0 }
        if access.guards(path: path), !access.authorizes(head.headers["Authorization"]) {
            return .respond(routeName: "admin", Self.unauthorized)
        }
        guard head.method == "GET" || head.method == "HEAD" else {
            return .respond(routeName: "admin", LocalResponse.error(405, "method_not_allowed"))
        }
        switch path {
        case "/healthz":
            return .respond(routeName: "admin", LocalResponse.json(200, "{\"status\":\"ok\"}"))
        case "/readyz":
            if server.isReady { return .respond(routeName: "admin", LocalResponse.json(200, "{\"status\":\"ready\"}")) }
            var o = JSONObject()
            o.set("error", "not_ready")
            o.set("ready", false)
            o.set("reasons", .array(server.readinessReasons.map { .string($0) }))
            return .respond(routeName: "admin", LocalResponse.json(503, o.description))
        case "/metrics" where exposition != nil:
            let body = exposition!()
            return .respond(
                routeName: "admin",
                LocalResponse(status: 200, headers: HTTPFields([("Content-Type", "text/plain; version=0.0.4; charset=utf-8")]), body: body))
        case "/explain":
            var items: [JSONObject.Value] = []
            for e in explain.recent(50) { items.append(.object(ExplainLog.json(e))) }
            var o = JSONObject()
            o.set("refusals", .array(items))
            return .respond(routeName: "admin", LocalResponse.json(200, o.description, headers: Self.noStore))
        case let p where p.hasPrefix("/explain/"):
            let id = String(p.dropFirst("/explain/".count))
            guard let e = explain.entry(id) else {
                return .respond(routeName: "admin", LocalResponse.error(404, "unknown_request_id"))
            }
            return .respond(routeName: "admin", LocalResponse.json(200, ExplainLog.json(e).description, headers: Self.noStore))
        default:
            return .respond(routeName: "admin", LocalResponse.error(404, "no_route"))
        }
    }

    static let noStore = HTTPFields([("Cache-Control", "no-store")])

    func exchangeDidFinish(_ record: ExchangeRecord) {}
}
