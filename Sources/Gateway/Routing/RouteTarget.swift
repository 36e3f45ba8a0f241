import GatewayHTTP
import GatewayIO
import GatewayPolicy
import GatewayProxy
import GatewayStore
import GatewayWire

/// Where a route's requests go, as resolved for one runtime.
enum RouteTarget {
    case demo
    case upstream(LoopUpstream)
    case missing
}
