import AndroidAttest
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
    }

    private let state = Mutex<Current?>(nil)

    var current: Current? { state.withLock { $0 } }
    var list: AttestationStatusList? { state.withLock { $0?.list } }

    func adopt(_ c: Current) { state.withLock { $0 = c } }

    /// A `304`: the list held is still the origin's.
    func confirm(fetchedMillis: Int64) { state.withLock { $0?.fetchedMillis = fetchedMillis } }
}
