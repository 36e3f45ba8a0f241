import AppAttest
import Dispatch
import Foundation
import GatewayConfig
import GatewayHTTP
import GatewayIO
import GatewayPolicy
import GatewayProxy
import GatewayStore
import GatewayWire

/// What every loop's router shares for App Attest: the store, the explain log and the metrics.
final class AttestContext: Sendable {
    let store: any AttestStore
    let explain: ExplainLog
    let metrics: AttestMetrics
    /// The store binds every challenge to a key (Redis Cluster): the challenge endpoint requires `keyId`.
    let requiresKeyID: Bool
    /// Requests refused by the admission limits, for the once-per-interval log line.
    let limitEvents: LimitEvents
    /// Chain verification of registrations (milliseconds each) runs here, off the event loops.
    let registrationQueue = DispatchQueue(label: "gateway.register", qos: .userInitiated, attributes: .concurrent)
    /// Apple's DeviceCheck, for the routes with a fallback (and their two bits).
    let deviceCheck: DeviceCheckService
    /// Google's attestation status list as last fetched, for Android registrations.
    let androidStatus: AndroidStatusList
    /// The store's keys-per-account side (every store has one today), resolved once, not per request.
    let accountStore: (any AccountStore)?

    init(
        store: any AttestStore, requiresKeyID: Bool, explain: ExplainLog, metrics: AttestMetrics, limitEvents: LimitEvents,
        deviceCheck: DeviceCheckService, androidStatus: AndroidStatusList = AndroidStatusList()
    ) {
        self.androidStatus = androidStatus
        accountStore = store as? any AccountStore
        self.deviceCheck = deviceCheck
        self.store = store
        self.requiresKeyID = requiresKeyID
        self.explain = explain
        self.metrics = metrics
        self.limitEvents = limitEvents
    }

    static func nowMillis() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec) / 1_000_000
    }

    /// A request over a limit: counted, and remembered for the interval's log line.
    func limited(_ limit: AttestMetrics.Limit, at endpoint: AttestMetrics.LimitedEndpoint, client: ClientKey?) {
        metrics.rateLimited(limit, endpoint)
        limitEvents.limited(limit, client: client)
    }
}
