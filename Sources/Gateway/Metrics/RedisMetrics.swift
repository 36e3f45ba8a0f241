import CoreMetrics
import Foundation
import GatewayRedis
import GatewayStore
import Synchronization

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

/// The Redis store's observer, into `RedisMetrics` and the event log.
struct RedisMetricsObserver: RedisStoreObserver {
    let metrics: RedisMetrics
    var connectionLog: RedisConnectionLog?

    func operation(_ operation: RedisStoreOperation, seconds: Double, error: StoreError?) {
        metrics.operation(operation, seconds: seconds, error: error)
    }

    func connectionChanged(up: Bool) {
        metrics.connection(up: up)
        connectionLog?.changed(up: up)
    }

    func clusterRedirect(_ kind: RedisClusterRedirect) { metrics.clusterRedirect(kind) }
}

/// The event log's account of the store's Redis connections (each connection of the pool, or of
/// each cluster primary, comes and goes on its own): after start-up, every connection lost is a
/// `warning` (`store connection lost`, with the error and how many are still up), the last one an
/// `error` (the store is unavailable: protected routes answer 503 `store_unavailable` or fail open,
/// `/readyz` 503); every connection regained is `info` (`store connection regained`), with how long
/// the store was unavailable when it had none.
final class RedisConnectionLog: Sendable {
    private struct State {
        var up = 0
        var armed = false
        var unavailableSince: Date?
        var lastError: (@Sendable () -> String)?
    }

    private let url: String
    private let state = Mutex(State())

    init(url: String) { self.url = url }

    /// Start-up is over (it logged `store connected`, or why not): changes are logged from now on.
    func arm(lastError: @escaping @Sendable () -> String) {
        state.withLock { s in
            s.armed = true
            s.lastError = lastError
            if s.up == 0 { s.unavailableSince = Date() }
        }
    }

    func changed(up: Bool) {
        let (armed, count, downFor, error) = state.withLock { s -> (Bool, Int, Double?, (@Sendable () -> String)?) in
            s.up = max(0, s.up + (up ? 1 : -1))
            var downFor: Double?
            if up, s.up == 1, let since = s.unavailableSince {
                downFor = Date().timeIntervalSince(since)
                s.unavailableSince = nil
            } else if !up, s.up == 0, s.armed {
                s.unavailableSince = Date()
            }
            return (s.armed, s.up, downFor, s.lastError)
        }
        guard armed else { return }
        var fields = [("kind", "redis"), ("url", url), ("connections_up", String(count))]
        if up {
            if let downFor { fields.append(("unavailable_seconds", String(format: "%.3f", downFor))) }
            GatewayEvents.log("info", "store connection regained", fields)
        } else {
            fields.append(("error", error?() ?? ""))
            if count == 0 {
                GatewayEvents.log(
                    "error",
                    "store connection lost: no connection to Redis is left; protected routes answer 503 store_unavailable (or fail open) and /readyz 503 until one is regained",
                    fields)
            } else {
                GatewayEvents.log("warning", "store connection lost", fields)
            }
        }
    }
}
