import CoreMetrics
import GatewayRedis
import GatewayStore

/// The Redis store's metrics: latency and errors by operation (a fixed list of labels), and the
/// number of live connections.
final class RedisMetrics: Sendable {
    static let operationDuration = "attest_gateway_store_operation_duration_seconds"
    static let operationErrors = "attest_gateway_store_operation_errors_total"
    static let connections = "attest_gateway_store_redis_connections"
    static let connectionEvents = "attest_gateway_store_redis_connection_events_total"
    static let clusterRedirects = "attest_gateway_store_redis_cluster_redirects_total"

    private let timers: [RedisStoreOperation: CoreMetrics.Timer]
    /// By operation, then by error code.
    private let errors: [RedisStoreOperation: [StoreError.Code: Counter]]
    private let up: Meter
    private let connected: Counter
    private let lost: Counter
    private let redirects: [RedisClusterRedirect: Counter]

    init(factory: any MetricsFactory) {
        var timers: [RedisStoreOperation: CoreMetrics.Timer] = [:]
        var errors: [RedisStoreOperation: [StoreError.Code: Counter]] = [:]
        let codes: [StoreError.Code] = [.unavailable, .challengeCapacity]
        for op in RedisStoreOperation.allCases {
            timers[op] = CoreMetrics.Timer(label: Self.operationDuration, dimensions: [("operation", op.rawValue)], factory: factory)
            var byCode: [StoreError.Code: Counter] = [:]
            for code in codes {
                byCode[code] = Counter(
                    label: Self.operationErrors, dimensions: [("operation", op.rawValue), ("error", code.rawValue)], factory: factory)
            }
            errors[op] = byCode
        }
        self.timers = timers
        self.errors = errors
        up = Meter(label: Self.connections, dimensions: [], factory: factory)
        connected = Counter(label: Self.connectionEvents, dimensions: [("event", "connected")], factory: factory)
        lost = Counter(label: Self.connectionEvents, dimensions: [("event", "lost")], factory: factory)
        var redirects: [RedisClusterRedirect: Counter] = [:]
        for kind in RedisClusterRedirect.allCases {
            redirects[kind] = Counter(label: Self.clusterRedirects, dimensions: [("kind", kind.rawValue)], factory: factory)
        }
        self.redirects = redirects
    }

    func clusterRedirect(_ kind: RedisClusterRedirect) { redirects[kind]?.increment() }

    func operation(_ op: RedisStoreOperation, seconds: Double, error: StoreError?) {
        timers[op]?.recordNanoseconds(Int64(seconds * 1e9))
        if let error { errors[op]?[error.code]?.increment() }
    }

    func connection(up isUp: Bool) {
        if isUp {
            up.increment()
            connected.increment()
        } else {
            up.decrement()
            lost.increment()
        }
    }
}

/// The Redis store's observer, into `RedisMetrics`.
struct RedisMetricsObserver: RedisStoreObserver {
    let metrics: RedisMetrics

    func operation(_ operation: RedisStoreOperation, seconds: Double, error: StoreError?) {
        metrics.operation(operation, seconds: seconds, error: error)
    }

    func connectionChanged(up: Bool) { metrics.connection(up: up) }

    func clusterRedirect(_ kind: RedisClusterRedirect) { metrics.clusterRedirect(kind) }
}
