import CoreMetrics
import GatewayPolicy

/// The risk metric's metrics: each refresh's result, the metrics Apple returned, and how late the
/// oldest due refresh is. Present with `apple` (every result series from the start, at 0).
public final class RiskMetrics: Sendable {
    public static let refreshes = "attest_gateway_receipt_refreshes_total"
    public static let riskMetric = "attest_gateway_receipt_risk_metric"
    public static let lag = "attest_gateway_receipt_refresh_lag_seconds"
    /// The histogram's buckets: Apple's metric is a small count (1 to 3 on most devices).
    public static let buckets: [Double] = [1, 2, 3, 4, 5, 7, 10, 15, 20, 30, 50, 100]

    private let results: [RiskSchedule.Result: Counter]
    private let metric: any RecorderHandler
    private let lagGauge: Meter

    init(factory: any MetricsFactory) {
        results = Dictionary(
            uniqueKeysWithValues: RiskSchedule.Result.allCases.map {
                ($0, Counter(label: Self.refreshes, dimensions: [("result", $0.rawValue)], factory: factory))
            })
        metric = Self.histogram(label: Self.riskMetric, dimensions: [], factory)
        lagGauge = Meter(label: Self.lag, dimensions: [], factory: factory)
        lagGauge.set(0)
    }

    private static func histogram(label: String, dimensions: [(String, String)], _ factory: any MetricsFactory)
        -> any RecorderHandler
    {
        factory.makeRecorder(label: label, dimensions: dimensions, aggregate: true)
    }

    func refreshed(_ result: RiskSchedule.Result) { results[result]?.increment() }
    func observed(metric m: UInt32) { metric.record(Double(m)) }
    func lag(seconds: Double) { lagGauge.set(seconds) }
}
