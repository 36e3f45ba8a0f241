import AndroidAttest
import CoreMetrics
import Synchronization

/// The attestation status list Android registrations are checked against (docs/android.md,
/// "Revocation"): the latest one the `StatusListRefresher` fetched or read from the fleet's store,
/// readable from any thread. nil until the first one arrives: until then no certificate is known
/// revoked (the log and `attest_gateway_android_status_list_age_seconds` say so).
final class AndroidStatusList: Sendable {
    struct Current: Sendable {
        var list: AttestationStatusList
        var etag: String
        /// Wall clock, Unix ms: when the origin last answered with it (200 or 304).
        var fetchedMillis: Int64
        var body: [UInt8]
    }

    private let state = Mutex<Current?>(nil)

    var current: Current? { state.withLock { $0 } }
    var list: AttestationStatusList? { state.withLock { $0?.list } }

    func adopt(_ c: Current) { state.withLock { $0 = c } }

    /// A `304`: the list held is still the origin's.
    func confirm(fetchedMillis: Int64) { state.withLock { $0?.fetchedMillis = fetchedMillis } }
}

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
