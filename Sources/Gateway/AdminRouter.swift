import GatewayHTTP
import GatewayIO
import GatewayProxy
import GatewayWire

/// The admin listener (loopback by default): `/healthz` (the process answers) and `/readyz`
/// (serving, not draining).
final class AdminRouter: RequestRouter, @unchecked Sendable {
    unowned let server: GatewayServer

    init(server: GatewayServer) { self.server = server }

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
        default:
            return .respond(routeName: "admin", LocalResponse.error(404, "no_route"))
        }
    }

    func exchangeDidFinish(_ record: ExchangeRecord) {}
}
