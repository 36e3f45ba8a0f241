import GatewayHTTP
import GatewayIO
import GatewayPolicy
import GatewayProxy
import GatewayStore
import GatewayWire

/// One upstream on one loop: a pool per server and, with several servers, the balancer that
/// chooses among them.
final class LoopUpstream {
    let plan: GatewayRuntime.UpstreamPlan
    let pools: [UpstreamPool]
    let balancer: UpstreamBalancer?

    init(plan: GatewayRuntime.UpstreamPlan, pools: [UpstreamPool]) {
        self.plan = plan
        self.pools = pools
        balancer =
            pools.count > 1 ? UpstreamBalancer(name: plan.name, pools: pools, algorithm: plan.algorithm, retries: plan.retries) : nil
    }

    /// A route's forward to this upstream, with the route's own timeouts.
    func forward(
        _ r: GatewayRuntime.CompiledRoute, editHeaders: HeaderEdit, responseHeaders: HTTPFields, responseHook: ResponseHook?,
        verdict: AccessVerdict? = nil, accountTap: AccountFieldTap? = nil
    ) -> Forward {
        Forward(
            routeName: r.name, pool: pools[0], maxBody: r.maxBody, editHeaders: editHeaders, responseHeaders: responseHeaders,
            responseHook: responseHook, balancer: balancer, responseTimeoutMillis: r.responseTimeoutMillis,
            connectTimeoutMillis: r.connectTimeoutMillis, verdict: verdict, passServerHeader: r.passServerHeader,
            accountTap: accountTap)
    }

    func syncAddresses() {
        if let b = balancer { b.syncAddresses() } else { pools[0].syncAddress() }
    }
}
