import CoreMetrics

/// The status list's metrics (present when an app has `android` and `android.status_url` is set).
final class AndroidStatusMetrics: Sendable {
    static let fetches = "attest_gateway_android_status_list_fetches_total"
    static let age = "attest_gateway_android_status_list_age_seconds"
    static let entries = "attest_gateway_android_status_list_entries"
    /// `fetched` (200), `not_modified` (304), `shared` (read from the fleet's store), `failed`.
    static let results = ["fetched", "not_modified", "shared", "failed"]

    private let counters: [String: Counter]
    private let ageGauge: Meter
    private let entriesGauge: Meter

    init(factory: any MetricsFactory) {
        counters = Dictionary(
            uniqueKeysWithValues: Self.results.map { ($0, Counter(label: Self.fetches, dimensions: [("result", $0)], factory: factory)) })
        ageGauge = Meter(label: Self.age, dimensions: [], factory: factory)
        entriesGauge = Meter(label: Self.entries, dimensions: [], factory: factory)
        ageGauge.set(-1)
        entriesGauge.set(0)
    }

    func result(_ r: String) { counters[r]?.increment() }
    /// -1 while no list is held.
    func age(seconds: Double) { ageGauge.set(seconds) }
    func entries(_ n: Int) { entriesGauge.set(Double(n)) }
}
