import GatewayHTTP
import GatewayIO

/// Per loop: decides each request's disposition and hears about finished exchanges.
public protocol RequestRouter: AnyObject {
    /// `peer` is the request's client (`ClientAddress`): the connection's peer, or the client a
    /// trusted proxy named. `requestID`: the exchange's id (`RequestID`), for what the router records
    /// of it (`/explain`).
    func route(_ head: HTTPRequestHead, path: String, peer: SocketAddress?, requestID: RequestID) -> RouteDecision
    /// The HTTP/1.1 connection's entry: the method, the normalized path and the Host value (asked
    /// for only when a route matches on hosts) decide a plain route; `head` builds the whole head of
    /// strings, for the routes that need it. By default: `route(head(), …)`.
    func route(
        method: String, path: String, host: () -> String?, peer: SocketAddress?, requestID: RequestID,
        head: () -> HTTPRequestHead
    ) -> RouteDecision
    func exchangeDidFinish(_ record: ExchangeRecord)
}

extension RequestRouter {
    public func route(
        method: String, path: String, host: () -> String?, peer: SocketAddress?, requestID: RequestID,
        head: () -> HTTPRequestHead
    ) -> RouteDecision {
        route(head(), path: path, peer: peer, requestID: requestID)
    }
}
