import CoreMetrics
import GatewayPolicy
import GatewayStore
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
    static let storeWriteErrors = "attest_gateway_store_write_errors_total"
    static let journalCorruptRecords = "attest_gateway_store_journal_corrupt_records_total"
    static let rateLimitedTotal = "attest_gateway_rate_limited_total"
    static let challengesEvicted = "attest_gateway_challenges_evicted_total"
    // Devices without App Attest (issue 14).
    static let fallbackRequests = "attest_gateway_fallback_requests_total"
    static let fallbackShareGauge = "attest_gateway_fallback_share"
    static let unsupportedClaims = "attest_gateway_unsupported_claims_total"
    static let deviceCheckRequests = "attest_gateway_devicecheck_requests_total"
    // Budgets per attested key (issue 27).
    static let keyRateLimitedTotal = "attest_gateway_key_rate_limited_total"
    // Keys per account (issue 27).
    static let accountKeys = AccountMetrics.keys
    static let accountAssociations = AccountMetrics.associations
    static let accountHeaderInvalid = AccountMetrics.headerInvalid
    /// The `result` label of `attest_gateway_account_associations_total`.
    static let associationResults = ["recorded", "moved", "key_gone", "capacity", "store_error"]
    /// The `result` label of `attest_gateway_fallback_requests_total`: `accepted`, or the refusal's code.
    static let fallbackResults: [String] =
        ["accepted"]
        + [
            GateError.deviceTokenInvalid, .deviceTokenReplayed, .fallbackShareExceeded, .deviceCheckUnavailable,
        ].map(\.code)

    private let keys: Meter
    private let liveChallenges: Meter
    private let expired: Counter
    /// The data directory's metrics (snapshots, restore, journal, receipts file): only for a memory
    /// store with `data_dir`, the only store that has them (a store without snapshots shows no snapshot age).
    private struct Persistence {
        let snapshotTimer: CoreMetrics.Timer
        let snapshotAgeGauge: Meter
        let snapshotFailed: Counter
        let restoreGauge: Meter
        let fsyncTimer: CoreMetrics.Timer
        let receiptsLive: Meter
        let receiptsFile: Meter
        let compactions: Counter
        let compactionFailures: Counter
    }
    private let persistence: Persistence?
    private let keyCapacityMeter: Meter
    private let keysEvictedCounter: Counter
    private let counters = Mutex<[String: Counter]>([:])
    /// In `IssuedChallengePurpose.allCases` order: no hashing per issued challenge.
    private let issued: [Counter]
    /// By `Limit` then `LimitedEndpoint` (index `limit × 2 + endpoint`): no key built per 429.
    private let limitedCounters: [Counter]
    private let evicted: [EvictionBudget: Counter]
    private let gauges = Mutex<[String: Meter]>([:])

    /// The `limit` label of a 429: the client's bucket (`attest.challenge_rate`) or the process's
    /// registration budget (`attest.registration_rate`).
    enum Limit: String, CaseIterable, Sendable {
        case client, registration

        var index: Int { self == .client ? 0 : 1 }
    }

    /// The `endpoint` label of a 429.
    enum LimitedEndpoint: String, CaseIterable, Sendable {
        case challenge, register

        var index: Int { self == .challenge ? 0 : 1 }
    }

    /// The `budget` label of a challenge removed to make room (docs/store.md, "Challenge budgets").
    enum EvictionBudget: String, CaseIterable, Sendable {
        case anonymous, keyBound = "key_bound", perKey = "per_key"
    }

    /// The `purpose` label of issued challenges: asked for at the endpoint (register, assert, or any
    /// when unbound), or sent with a verified response (`next`).
    enum IssuedChallengePurpose: String, CaseIterable {
        case register, assert, any, next

        var index: Int {
            switch self {
            case .register: 0
            case .assert: 1
            case .any: 2
            case .next: 3
            }
        }
    }

    /// - Parameter persistent: the store writes a data directory (memory store with `data_dir`).
    init(factory: any MetricsFactory, persistent: Bool) {
        self.factory = factory
        keys = Meter(label: Self.storeKeys, dimensions: [], factory: factory)
        liveChallenges = Meter(label: Self.storeChallenges, dimensions: [], factory: factory)
        expired = Counter(label: Self.challengesExpired, dimensions: [], factory: factory)
        persistence =
            persistent
            ? Persistence(
                snapshotTimer: CoreMetrics.Timer(label: Self.snapshotDuration, dimensions: [], factory: factory),
                snapshotAgeGauge: Meter(label: Self.snapshotAge, dimensions: [], factory: factory),
                snapshotFailed: Counter(label: Self.snapshotFailures, dimensions: [], factory: factory),
                restoreGauge: Meter(label: Self.restoreDuration, dimensions: [], factory: factory),
                fsyncTimer: CoreMetrics.Timer(label: Self.fsyncDuration, dimensions: [], factory: factory),
                receiptsLive: Meter(label: Self.receiptBytesGauge, dimensions: [("state", "live")], factory: factory),
                receiptsFile: Meter(label: Self.receiptBytesGauge, dimensions: [("state", "file")], factory: factory),
                compactions: Counter(label: Self.receiptCompactions, dimensions: [("result", "success")], factory: factory),
                compactionFailures: Counter(label: Self.receiptCompactions, dimensions: [("result", "failure")], factory: factory))
            : nil
        keyCapacityMeter = Meter(label: Self.keyCapacityGauge, dimensions: [], factory: factory)
        keysEvictedCounter = Counter(label: Self.keysEvicted, dimensions: [], factory: factory)
        issued = IssuedChallengePurpose.allCases.map {
            Counter(label: Self.challengesIssued, dimensions: [("purpose", $0.rawValue)], factory: factory)
        }
        limitedCounters = Limit.allCases.flatMap { l in
            LimitedEndpoint.allCases.map { e in
                Counter(label: Self.rateLimitedTotal, dimensions: [("limit", l.rawValue), ("endpoint", e.rawValue)], factory: factory)
            }
        }
        evicted = Dictionary(
            uniqueKeysWithValues: EvictionBudget.allCases.map {
                ($0, Counter(label: Self.challengesEvicted, dimensions: [("budget", $0.rawValue)], factory: factory))
            })
        accountKeysHistogram = AccountMetrics.keysHistogram(factory)
        for result in Self.associationResults { _ = counter(Self.accountAssociations, [("result", result)]) }
        _ = counter(Self.accountHeaderInvalid, [])
    }

    /// Keys per account: an association recorded (and the account's key count then), or why not.
    private let accountKeysHistogram: any RecorderHandler
    func accountAssociation(result: String, keyCount: Int? = nil) {
        counter(Self.accountAssociations, [("result", result)]).increment()
        if let keyCount { accountKeysHistogram.record(Double(keyCount)) }
    }
    /// An upstream's `X-App-Attest-Account` that is not 1 to 128 visible ASCII characters: ignored.
    func accountHeaderInvalid() { counter(Self.accountHeaderInvalid, []).increment() }

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

    /// A fallback request's outcome (`accepted` or the refusal's code), whatever the mode.
    func fallback(route: String, result: String) { counter(Self.fallbackRequests, [("route", route), ("result", result)]).increment() }
    /// A verified request over its key's `key_rate` on the route, whatever the mode (refused where
    /// enforced, forwarded unverified where shadowed).
    func keyRateLimited(route: String) { counter(Self.keyRateLimitedTotal, [("route", route)]).increment() }
    /// A request saying App Attest is unsupported on its device (`X-App-Attest-Unsupported: 1`).
    func unsupportedClaim(route: String) { counter(Self.unsupportedClaims, [("route", route)]).increment() }
    /// One call to DeviceCheck and what it answered.
    func deviceCheck(_ call: DeviceCheck.Call, _ result: DeviceCheck.Result) {
        counter(Self.deviceCheckRequests, [("endpoint", call.rawValue), ("result", result.rawValue)]).increment()
    }
    /// The route's share of fallback requests over its window (what `max_share` is held against).
    func fallbackShare(route: String, _ share: Double) {
        let meter = gauges.withLock { table in
            if let m = table[route] { return m }
            let m = Meter(label: Self.fallbackShareGauge, dimensions: [("route", route)], factory: factory)
            table[route] = m
            return m
        }
        meter.set(share)
    }

    func registration(result: String, reason: String) { counter(Self.registrations, [("result", result), ("reason", reason)]).increment() }
    func challengeIssued(_ purpose: IssuedChallengePurpose) { issued[purpose.index].increment() }
    func challengesExpired(_ n: Int) { if n > 0 { expired.increment(by: Int64(n)) } }
    func rateLimited(_ limit: Limit, _ endpoint: LimitedEndpoint) { limitedCounters[limit.index * 2 + endpoint.index].increment() }
    func challengesEvicted(_ budget: EvictionBudget, _ n: Int) { if n > 0 { evicted[budget]?.increment(by: Int64(n)) } }
    func storeSizes(keys k: Int, challenges c: Int) {
        keys.set(k)
        liveChallenges.set(c)
    }
    func snapshot(seconds: Double) { persistence?.snapshotTimer.recordNanoseconds(Int64(seconds * 1e9)) }
    func snapshotFailed(_: String) { persistence?.snapshotFailed.increment() }
    func snapshotAge(seconds: Double) { persistence?.snapshotAgeGauge.set(seconds) }
    func restored(seconds: Double) { persistence?.restoreGauge.set(seconds) }
    func journalFsync(seconds: Double) { persistence?.fsyncTimer.recordNanoseconds(Int64(seconds * 1e9)) }
    /// `store.max_keys` as in effect (set at start): `attest_gateway_store_keys` over it is the fill ratio.
    func keyCapacity(_ n: Int) { keyCapacityMeter.set(n) }
    func keysEvicted(_ n: Int) { if n > 0 { keysEvictedCounter.increment(by: Int64(n)) } }
    /// The receipts file's size and the part of it keys point to (memory store with a data directory).
    func receiptBytes(live: Int, file: Int) {
        persistence?.receiptsLive.set(live)
        persistence?.receiptsFile.set(file)
    }
    func receiptsCompacted(success: Bool) { if let p = persistence { (success ? p.compactions : p.compactionFailures).increment() } }
    /// A failed system call on a file of the data directory; `file` and `errno` are bounded labels
    /// (journal|receipts|snapshot|marker|directory|probe|lock, the symbolic errno name).
    func storeWriteError(file: String, errno: String) {
        counter(Self.storeWriteErrors, [("file", file), ("errno", errno)]).increment()
    }
    /// Journal records (or byte ranges) a restore could not use (checksum, malformed, unreadable, unknown key).
    func journalCorruptRecords(_ n: Int) {
        let c = counter(Self.journalCorruptRecords, [])
        if n > 0 { c.increment(by: Int64(n)) }
    }

    /// The errno names whose write-error series exist from the start (for every `file`): those the
    /// operations guide and the alert act on. Others appear when they first happen.
    static let writeErrorNames = ["ENOSPC", "EDQUOT", "EIO"]

    /// Refusal reasons a protected route counts (docs/client-contract.md, "Error codes").
    static let routeReasons: [GateError] = [
        .assertionMissing, .malformed, .keyUnknown, .appNotAllowed, .environmentNotAllowed, .validationCategoryNotAllowed,
        .bundleVersionTooOld, .challengeMissing, .challengeUnknown, .challengeExpired, .challengeConsumed,
        .challengeWrongPurpose, .challengeWrongKey, .challengeNotBound, .verification(.appIDMismatch), .verification(.badSignature),
        .verification(.counterReplay),
        .storeUnavailable,
    ]

    /// Refusal reasons of the register endpoint: the request, the challenge, Apple's attestation
    /// algorithm, the app policy and the store.
    static let registrationReasons: [GateError] = [
        .malformed, .badJSON, .missingField, .challengeUnknown, .challengeExpired, .challengeConsumed, .challengeWrongPurpose,
        .challengeWrongKey, .verification(.unsupportedFormat), .verification(.chainUntrusted), .verification(.certificateExpired),
        .verification(.certificateNotYetValid), .verification(.nonceMismatch),
        .verification(.keyIDMismatch), .verification(.publicKeyMismatch), .verification(.appIDMismatch), .verification(.counterNotZero),
        .verification(.environmentMismatch), .verification(.credentialIDMismatch),
        .verification(.invalidPublicKey), .appNotAllowed, .environmentNotAllowed, .validationCategoryNotAllowed, .bundleVersionTooOld,
        .storeUnavailable, .receiptTooLarge, .keyAppConflict, .reregistrationLimited, .keyCapacity, .receiptInvalid,
        .macOSSecurityRequired,
    ]

    /// The series alerts read exist at 0 from the start (an `increase()` sees the first event): per
    /// protected route its verdicts by mode and reason, registrations by result and reason, and
    /// with a data directory the write errors and damaged-record counts. Called again on reload
    /// (new routes); series of removed routes stay.
    func declare(routes: [GatewayRuntime.CompiledRoute]) {
        for r in routes where r.assertion.mode != .off {
            // The verdicts the route can reach, from the policy's own rules (`RouteVerdict.space`),
            // and those it reaches with `on_store_error: fail_closed`: a reload that flips it finds
            // its series there.
            var refusals = Self.routeReasons
            if r.fallback != nil {
                refusals += [.deviceTokenInvalid, .deviceTokenReplayed, .fallbackShareExceeded, .deviceCheckUnavailable]
            }
            if r.assertion.keyRate != nil {
                refusals.append(.keyRateLimited)
                _ = counter(Self.keyRateLimitedTotal, [("route", r.name)])
            }
            var failClosed = r.assertion
            failClosed.onStoreError = .failClosed
            for v in RouteVerdict.space(route: r.assertion, refusals: refusals) + RouteVerdict.space(route: failClosed, refusals: refusals)
            {
                verdictCounter(route: r.name, mode: v.mode.rawValue, verdict: v.verdict.rawValue, reason: v.reason)
            }
            _ = counter(Self.unsupportedClaims, [("route", r.name)])
            if r.fallback != nil {
                for result in Self.fallbackResults { _ = counter(Self.fallbackRequests, [("route", r.name), ("result", result)]) }
                fallbackShare(route: r.name, 0)
                for call in DeviceCheck.Call.allCases where call != .update || r.fallback?.config.bits == .write {
                    for result in DeviceCheck.Result.allCases {
                        _ = counter(Self.deviceCheckRequests, [("endpoint", call.rawValue), ("result", result.rawValue)])
                    }
                }
            }
        }
        _ = counter(Self.registrations, [("result", "registered"), ("reason", "new_key")])
        _ = counter(Self.registrations, [("result", "registered"), ("reason", "existing_key")])
        for reason in Self.registrationReasons { _ = counter(Self.registrations, [("result", "refused"), ("reason", reason.code)]) }
        guard persistence != nil else { return }
        journalCorruptRecords(0)
        for file in StoreWriteFailure.File.allCases {
            for name in Self.writeErrorNames { _ = counter(Self.storeWriteErrors, [("file", file.rawValue), ("errno", name)]) }
        }
    }

    /// The verdict series (the same one `AttestLoopMetrics` counts into: same labels, same order).
    @discardableResult
    func verdictCounter(route: String, mode: String, verdict: String, reason: String) -> Counter {
        Counter(
            label: Self.verdicts, dimensions: [("route", route), ("mode", mode), ("verdict", verdict), ("reason", reason)],
            factory: factory)
    }
}

/// One loop's verdict counters, cached without locks (the verdict is counted on every protected request).
final class AttestLoopMetrics {
    private let shared: AttestMetrics
    private struct VerdictKey: Hashable {
        let route: String, mode: String, verdict: String, reason: String
    }
    private var verdicts: [VerdictKey: Counter] = [:]
    /// Per route (by its index), the last verdict counted and its counter: a route's requests mostly
    /// repeat the same verdict, and four equal strings (the same storage) compare without hashing.
    /// (An entry is a class: reading it retains one reference, where a tuple of the key's four
    /// strings and the counter was copied through the runtime's generic tuple witnesses.)
    private final class Last {
        let key: VerdictKey
        let counter: Counter
        init(_ key: VerdictKey, _ counter: Counter) {
            self.key = key
            self.counter = counter
        }
        func matches(_ route: String, _ mode: String, _ verdict: String, _ reason: String) -> Bool {
            key.reason == reason && key.verdict == verdict && key.mode == mode && key.route == route
        }
    }
    private var last: [Last?] = []

    init(shared: AttestMetrics) { self.shared = shared }

    /// `verdict`: accepted, refused, would_refuse (shadow), fail_open (store down, route fails open).
    /// `routeIndex`: the route's position in the configuration (the last-verdict cache's slot).
    func verdict(routeIndex: Int, route: String, mode: String, verdict: String, reason: String) {
        if routeIndex >= 0, routeIndex < last.count, let hit = last[routeIndex], hit.matches(route, mode, verdict, reason) {
            return hit.counter.increment()
        }
        let key = VerdictKey(route: route, mode: mode, verdict: verdict, reason: reason)
        let c: Counter
        if let found = verdicts[key] {
            c = found
        } else {
            c = shared.verdictCounter(route: route, mode: mode, verdict: verdict, reason: reason)
            verdicts[key] = c
        }
        if routeIndex >= 0, routeIndex < 4096 {
            if routeIndex >= last.count { last += Array(repeating: nil, count: routeIndex + 1 - last.count) }
            last[routeIndex] = Last(key, c)
        }
        c.increment()
    }
}

/// What the admission limits and the challenge budgets did since the last report: read and reset
/// once per interval by the store's upkeep, which logs one line when anything bit (never a line
/// per request).
final class LimitEvents: Sendable {
    private struct Counts {
        var client = 0
        var registration = 0
        var lastClient: ClientKey?
        var evictions = ChallengeEvictions()
    }

    private let counts = Mutex(Counts())

    func limited(_ limit: AttestMetrics.Limit, client: ClientKey?) {
        counts.withLock { c in
            switch limit {
            case .client: c.client += 1
            case .registration: c.registration += 1
            }
            if let client { c.lastClient = client }
        }
    }

    func evicted(_ e: ChallengeEvictions) {
        counts.withLock { c in
            c.evictions.anonymous += e.anonymous
            c.evictions.keyBound += e.keyBound
            c.evictions.perKey += e.perKey
        }
    }

    /// The counts of the last `seconds` as log fields, nil when nothing bit; resets them.
    func report(seconds: Int) -> [(String, String)]? {
        let c = counts.withLock { c -> Counts in
            defer { c = Counts() }
            return c
        }
        let e = c.evictions
        guard c.client + c.registration + e.anonymous + e.keyBound + e.perKey > 0 else { return nil }
        var fields = [
            ("seconds", String(seconds)), ("rate_limited_client", String(c.client)),
            ("rate_limited_registration", String(c.registration)), ("evicted_anonymous", String(e.anonymous)),
            ("evicted_key_bound", String(e.keyBound)), ("replaced_per_key", String(e.perKey)),
        ]
        if let client = c.lastClient { fields.append(("last_limited_client", client.description)) }
        return fields
    }
}
