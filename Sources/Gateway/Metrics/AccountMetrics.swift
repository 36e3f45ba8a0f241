import CoreMetrics

/// Keys per account's metric names (issue 27), public for the metrics backend's buckets
/// (`gatewayd`); counted by `AttestMetrics`.
public enum AccountMetrics {
    public static let keys = "attest_gateway_account_keys"
    public static let associations = "attest_gateway_account_associations_total"
    public static let headerInvalid = "attest_gateway_account_header_invalid_total"
    /// The histogram's buckets: keys per account (one or two on most accounts).
    public static let buckets: [Double] = [1, 2, 3, 4, 5, 7, 10, 15, 20, 50, 100, 1000]

    /// The keys-per-account histogram (an aggregating recorder: a Prometheus histogram).
    static func keysHistogram(_ factory: any MetricsFactory) -> any RecorderHandler {
        histogram(label: AccountMetrics.keys, factory)
    }

    private static func histogram(label: String, _ factory: any MetricsFactory) -> any RecorderHandler {
        factory.makeRecorder(label: label, dimensions: [], aggregate: true)
    }
}
