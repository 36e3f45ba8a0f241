import GatewayHTTP
import GatewayIO
import GatewayProxy
import GatewayWire

/// The admin listener (loopback by default): `/healthz` (the process answers), `/readyz`
/// (serving, not draining) and `/metrics` (Prometheus text format).
final class AdminRouter: RequestRouter, @unchecked Sendable {
    unowned let server: GatewayServer
    let exposition: (@Sendable () -> [UInt8])?

    init(server: GatewayServer, exposition: (@Sendable () -> [UInt8])?) {
        self.server = server
        self.exposition = exposition
    }

    func route(_ head: HTTPRequestHead, path: String, peer: SocketAddress?) -> RouteDecision {
        guard head.method == "GET" || head.method == "HEAD" else {
            return .respond(routeName: "admin", LocalResponse.error(405, "method_not_allowed"))
        }
        switch path {
        case "/healthz":
            return .respond(routeName: "admin", LocalResponse.json(200, "{\"status\":\"ok\"}"))
        case "/readyz":
            return server.isReady
                ? .respond(routeName: "admin", LocalResponse.json(200, "{\"status\":\"ready\"}"))
                : .respond(routeName: "admin", LocalResponse.error(503, "not_ready"))
        case "/metrics" where exposition != nil:
            let body = exposition!()
            return .respond(
                routeName: "admin",
                LocalResponse(status: 200, headers: HTTPFields([("Content-Type", "text/plain; version=0.0.4; charset=utf-8")]), body: body))
        default:
            return .respond(routeName: "admin", LocalResponse.error(404, "no_route"))
        }
    }

    func exchangeDidFinish(_ record: ExchangeRecord) {}
}
