import GatewayHTTP
import GatewayIO
import GatewayProxy
import GatewayWire

/// The admin listener (loopback by default): `/healthz` (the process answers), `/readyz`
/// (store restored and accepting writes, serving, not draining; a 503 lists its reasons), `/metrics` (Prometheus text format), and
/// `/explain/<request-id>` (why a request was refused) with `/explain` (the latest refusals).
final class AdminRouter: RequestRouter, @unchecked Sendable {
    unowned let server: GatewayServer
    let exposition: (@Sendable () -> [UInt8])?
    let explain: ExplainLog

    init(server: GatewayServer, exposition: (@Sendable () -> [UInt8])?, explain: ExplainLog) {
        self.server = server
        self.exposition = exposition
        self.explain = explain
    }

    func route(_ head: HTTPRequestHead, path: String, peer: SocketAddress?) -> RouteDecision {
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
            return .respond(routeName: "admin", LocalResponse.json(200, o.description))
        case let p where p.hasPrefix("/explain/"):
            let id = String(p.dropFirst("/explain/".count))
            guard let e = explain.entry(id) else {
                return .respond(routeName: "admin", LocalResponse.error(404, "unknown_request_id"))
            }
            return .respond(routeName: "admin", LocalResponse.json(200, ExplainLog.json(e).description))
        default:
            return .respond(routeName: "admin", LocalResponse.error(404, "no_route"))
        }
    }

    func exchangeDidFinish(_ record: ExchangeRecord) {}
}
