import CoreMetrics
import Synchronization

/// The App Attest metrics. Labels come from config names (routes) and fixed lists (modes, verdicts,
/// the gateway's error codes, challenge purposes): never key ids or paths.
final class AttestMetrics: Sendable {
    let factory: any MetricsFactory

    static let verdicts = "attest_gateway_assertion_verdicts_total"
    static let registrations = "attest_gateway_registrations_total"
    static let challengesIssued = "attest_gateway_challenges_issued_total"
    static let challengesExpired = "attest_gateway_challenges_expired_total"
    static let storeKeys = "attest_gateway_store_keys"
    static let storeChallenges = "attest_gateway_store_live_challenges"
    static let snapshotDuration = "attest_gateway_store_snapshot_duration_seconds"
    static let snapshotAge = "attest_gateway_store_snapshot_age_seconds"
    static let snapshotFailures = "attest_gateway_store_snapshot_failures_total"
    static let restoreDuration = "attest_gateway_store_restore_duration_seconds"
    static let fsyncDuration = "attest_gateway_store_journal_fsync_duration_seconds"
    static let keyCapacityGauge = "attest_gateway_store_key_capacity"
    static let keysEvicted = "attest_gateway_store_keys_evicted_total"
    static let receiptBytesGauge = "attest_gateway_store_receipt_bytes"
    static let receiptCompactions = "attest_gateway_store_receipt_compactions_total"

    private let keys: Meter
    private let liveChallenges: Meter
    private let expired: Counter
    private let snapshotTimer: CoreMetrics.Timer
    private let snapshotAgeGauge: Meter
    private let snapshotFailed: Counter
    private let restoreGauge: Meter
    private let fsyncTimer: CoreMetrics.Timer
    private let keyCapacityMeter: Meter
    private let evicted: Counter
    private let receiptsLive: Meter
    private let receiptsFile: Meter
    private let compactions: Counter
    private let compactionFailures: Counter
    private let counters = Mutex<[String: Counter]>([:])
    private let issued: [IssuedChallengePurpose: Counter]

    /// The `purpose` label of issued challenges: asked for at the endpoint (register, assert, or any
    /// when unbound), or sent with a verified response (`next`).
    enum IssuedChallengePurpose: String, CaseIterable {
        case register, assert, any, next
    }

    init(factory: any MetricsFactory) {
        self.factory = factory
        keys = Meter(label: Self.storeKeys, dimensions: [], factory: factory)
        liveChallenges = Meter(label: Self.storeChallenges, dimensions: [], factory: factory)
        expired = Counter(label: Self.challengesExpired, dimensions: [], factory: factory)
        snapshotTimer = CoreMetrics.Timer(label: Self.snapshotDuration, dimensions: [], factory: factory)
        snapshotAgeGauge = Meter(label: Self.snapshotAge, dimensions: [], factory: factory)
        snapshotFailed = Counter(label: Self.snapshotFailures, dimensions: [], factory: factory)
        restoreGauge = Meter(label: Self.restoreDuration, dimensions: [], factory: factory)
        fsyncTimer = CoreMetrics.Timer(label: Self.fsyncDuration, dimensions: [], factory: factory)
        keyCapacityMeter = Meter(label: Self.keyCapacityGauge, dimensions: [], factory: factory)
        evicted = Counter(label: Self.keysEvicted, dimensions: [], factory: factory)
        receiptsLive = Meter(label: Self.receiptBytesGauge, dimensions: [("state", "live")], factory: factory)
        receiptsFile = Meter(label: Self.receiptBytesGauge, dimensions: [("state", "file")], factory: factory)
        compactions = Counter(label: Self.receiptCompactions, dimensions: [("result", "success")], factory: factory)
        compactionFailures = Counter(label: Self.receiptCompactions, dimensions: [("result", "failure")], factory: factory)
        issued = Dictionary(uniqueKeysWithValues: IssuedChallengePurpose.allCases.map {
            ($0, Counter(label: Self.challengesIssued, dimensions: [("purpose", $0.rawValue)], factory: factory))
        })
    }

    /// Counters off the request path's hot loop (registrations, challenges): one lock, created once.
    private func counter(_ label: String, _ dimensions: [(String, String)]) -> Counter {
        let key = label + dimensions.map { "|\($0.0)=\($0.1)" }.joined()
        return counters.withLock { table in
            if let c = table[key] { return c }
            let c = Counter(label: label, dimensions: dimensions, factory: factory)
            table[key] = c
            return c
        }
    }

    func registration(result: String, reason: String) { counter(Self.registrations, [("result", result), ("reason", reason)]).increment() }
    func challengeIssued(_ purpose: IssuedChallengePurpose) { issued[purpose]?.increment() }
    func challengesExpired(_ n: Int) { if n > 0 { expired.increment(by: Int64(n)) } }
    func storeSizes(keys k: Int, challenges c: Int) {
        keys.set(k)
        liveChallenges.set(c)
    }
    func snapshot(seconds: Double) { snapshotTimer.recordNanoseconds(Int64(seconds * 1e9)) }
    func snapshotFailed(_: String) { snapshotFailed.increment() }
    func snapshotAge(seconds: Double) { snapshotAgeGauge.set(seconds) }
    func restored(seconds: Double) { restoreGauge.set(seconds) }
    func journalFsync(seconds: Double) { fsyncTimer.recordNanoseconds(Int64(seconds * 1e9)) }
    /// `store.max_keys` as in effect (set at start): `attest_gateway_store_keys` over it is the fill ratio.
    func keyCapacity(_ n: Int) { keyCapacityMeter.set(n) }
    func keysEvicted(_ n: Int) { if n > 0 { evicted.increment(by: Int64(n)) } }
    /// The receipts file's size and the part of it keys point to (memory store with a data directory).
    func receiptBytes(live: Int, file: Int) {
        receiptsLive.set(live)
        receiptsFile.set(file)
    }
    func receiptsCompacted(success: Bool) { (success ? compactions : compactionFailures).increment() }
}

/// One loop's verdict counters, cached without locks (the verdict is counted on every protected request).
final class AttestLoopMetrics {
    private let shared: AttestMetrics
    private struct VerdictKey: Hashable {
        let route: String, mode: String, verdict: String, reason: String
    }
    private var verdicts: [VerdictKey: Counter] = [:]

    init(shared: AttestMetrics) { self.shared = shared }

    /// `verdict`: accepted, refused, would_refuse (shadow), fail_open (store down, route fails open).
    func verdict(route: String, mode: String, verdict: String, reason: String) {
        let key = VerdictKey(route: route, mode: mode, verdict: verdict, reason: reason)
        if let c = verdicts[key] { return c.increment() }
        let c = Counter(
            label: AttestMetrics.verdicts,
            dimensions: [("route", route), ("mode", mode), ("verdict", verdict), ("reason", reason)], factory: shared.factory)
        verdicts[key] = c
        c.increment()
    }
}
