import CoreMetrics
import Synchronization

/// Every metric the gateway exports, declared once, with bounded labels: route and upstream names
/// come from the configuration, status classes and reasons from fixed lists. Key ids, paths and
/// client addresses are never labels. The backend (Prometheus in `gatewayd`, a test kit in tests)
/// is handed in as a factory; nothing here bootstraps a global.
public final class GatewayMetrics: Sendable {
    private let factory: any MetricsFactory
    private let requests = Mutex<[String: Counter]>([:])
    private let durations = Mutex<[String: CoreMetrics.Timer]>([:])
    private let upstreamDurations = Mutex<[String: CoreMetrics.Timer]>([:])
    private let upstreamErrors = Mutex<[String: Counter]>([:])
    private let pools = Mutex<[String: [Int: (open: Int, idle: Int)]]>([:])
    private let poolGauges = Mutex<[String: Meter]>([:])
    private let activeConnections: Meter
    private let reloadsOK: Counter
    private let reloadsFailed: Counter

    public static let requestsTotal = "attest_gateway_requests_total"
    public static let requestDuration = "attest_gateway_request_duration_seconds"
    public static let upstreamDuration = "attest_gateway_upstream_duration_seconds"
    public static let upstreamErrorsTotal = "attest_gateway_upstream_errors_total"
    public static let activeConnectionsName = "attest_gateway_active_connections"
    public static let poolConnections = "attest_gateway_upstream_pool_connections"
    public static let configReloads = "attest_gateway_config_reloads_total"

    public init(factory: any MetricsFactory) {
        self.factory = factory
        activeConnections = Meter(label: Self.activeConnectionsName, dimensions: [], factory: factory)
        reloadsOK = Counter(label: Self.configReloads, dimensions: [("result", "success")], factory: factory)
        reloadsFailed = Counter(label: Self.configReloads, dimensions: [("result", "failure")], factory: factory)
    }

    /// One finished request: counted by route, status class and protocol; timed by route; upstream
    /// latency and upstream failures by upstream.
    func request(route: String, status: Int, protocolName: String, seconds: Double, upstream: String?, upstreamSeconds: Double?,
                 error: String?)
    {
        let statusClass = status == 0 ? "none" : "\(status / 100)xx"
        let key = "\(route)|\(statusClass)|\(protocolName)"
        let counter = requests.withLock { cache in
            if let c = cache[key] { return c }
            let c = Counter(
                label: Self.requestsTotal, dimensions: [("route", route), ("status_class", statusClass), ("protocol", protocolName)],
                factory: factory)
            cache[key] = c
            return c
        }
        counter.increment()
        let timer = durations.withLock { cache in
            if let t = cache[route] { return t }
            let t = CoreMetrics.Timer(label: Self.requestDuration, dimensions: [("route", route)], factory: factory)
            cache[route] = t
            return t
        }
        timer.recordNanoseconds(Int64(seconds * 1e9))
        guard let upstream else { return }
        if let upstreamSeconds {
            let t = upstreamDurations.withLock { cache in
                if let t = cache[upstream] { return t }
                let t = CoreMetrics.Timer(label: Self.upstreamDuration, dimensions: [("upstream", upstream)], factory: factory)
                cache[upstream] = t
                return t
            }
            t.recordNanoseconds(Int64(upstreamSeconds * 1e9))
        }
        if let error, error.hasPrefix("upstream_") {
            let k = "\(upstream)|\(error)"
            let c = upstreamErrors.withLock { cache in
                if let c = cache[k] { return c }
                let c = Counter(label: Self.upstreamErrorsTotal, dimensions: [("upstream", upstream), ("reason", error)], factory: factory)
                cache[k] = c
                return c
            }
            c.increment()
        }
    }

    func connectionOpened() { activeConnections.increment() }
    func connectionClosed() { activeConnections.decrement() }

    /// One loop's view of one upstream pool; the gauges show the sum over loops.
    func pool(upstream: String, loop: Int, open: Int, idle: Int) {
        let (openSum, idleSum) = pools.withLock { table -> (Int, Int) in
            table[upstream, default: [:]][loop] = (open, idle)
            let all = table[upstream]!.values
            return (all.reduce(0) { $0 + $1.open }, all.reduce(0) { $0 + $1.idle })
        }
        gauge(upstream, "busy").set(openSum - idleSum)
        gauge(upstream, "idle").set(idleSum)
    }

    private func gauge(_ upstream: String, _ state: String) -> Meter {
        poolGauges.withLock { cache in
            let k = "\(upstream)|\(state)"
            if let m = cache[k] { return m }
            let m = Meter(label: Self.poolConnections, dimensions: [("upstream", upstream), ("state", state)], factory: factory)
            cache[k] = m
            return m
        }
    }

    func reloaded(success: Bool) { (success ? reloadsOK : reloadsFailed).increment() }
}
