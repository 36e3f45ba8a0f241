import GatewayHTTP
import GatewayIO

/// Where a request goes: streamed to an upstream, buffered (bounded) and handed to a local handler
/// that may answer or forward it, or answered at once.
public enum RouteDecision {
    case forward(Forward)
    case buffer(maxBody: Int, routeName: String, handler: (BufferedRequest, @escaping (BufferedOutcome) -> Void) -> Void)
    case respond(routeName: String, LocalResponse)
}
