/// The counters the operator's page shows over windows (5 minutes, an hour), sampled from the
/// `/metrics` text every `intervalMillis` by `OperatorSampler`, off the request path: the request
/// path does nothing for it. Each point keeps the value of every tracked series then, by series
/// index (one `Double` per series and point: an hour of points for 500 series is 1.4 MB).
///
/// A window's count is the value now minus the value at its start: the newest point at or before
/// it, or 0 when the window starts before the first point and no point was ever dropped (the
/// process's counters start at 0 and the first point is taken at start).
struct CounterHistory: Sendable {
    static let intervalMillis: Int64 = 10_000
    /// An hour of points, and two more, so that a point at or before an hour ago is always kept.
    static let capacity = 362

    /// The families whose series are kept (counters the page shows in windows).
    static let families: Set<String> = [
        AttestMetrics.verdicts, AttestMetrics.registrations, AttestMetrics.challengesIssued, AttestMetrics.challengesExpired,
        AttestMetrics.challengesEvicted, AttestMetrics.rateLimitedTotal, AttestMetrics.fallbackRequests,
        AttestMetrics.deviceCheckRequests, AttestMetrics.unsupportedClaims, GatewayMetrics.upstreamServerRequests,
        GatewayMetrics.upstreamServerEjections, GatewayMetrics.upstreamServerFailures, GatewayMetrics.upstreamRetries,
        GatewayMetrics.upstreamErrorsTotal, GatewayMetrics.requestsTotal, RiskMetrics.refreshes,
        "attest_gateway_store_journal_fsync_duration_seconds_count",
        RedisMetrics.operationErrors,
    ]

    struct Point: Sendable {
        let atMillis: Int64
        var values: [Double]
    }

    private(set) var keys: [String] = []
    private var index: [String: Int] = [:]
    private(set) var points: [Point] = []
    /// Whether the oldest point is not the first one taken.
    private(set) var dropped = false

    init() {}

    /// Keeps the tracked series of `text` as the point at `atMillis` (after the newest).
    mutating func append(_ text: MetricsText, atMillis: Int64) {
        var values = [Double](repeating: 0, count: keys.count)
        for s in text.samples where Self.families.contains(s.name) {
            if let i = index[s.key] {
                values[i] = s.value
            } else {
                index[s.key] = keys.count
                keys.append(s.key)
                values.append(s.value)
            }
        }
        points.append(Point(atMillis: atMillis, values: values))
        if points.count > Self.capacity {
            points.removeFirst(points.count - Self.capacity)
            dropped = true
        }
    }

    var oldestMillis: Int64? { points.first?.atMillis }

    /// The sum of the series `keys` at `atMillis`: at the newest point at or before it; 0 before the
    /// first point when none was dropped; the oldest point's otherwise (the window is then shorter
    /// than asked, by less than an interval).
    func value(_ keys: [String], at atMillis: Int64) -> Double {
        let slots = keys.compactMap { index[$0] }
        guard let first = points.first else { return 0 }
        let point: Point
        if atMillis < first.atMillis {
            guard dropped else { return 0 }
            point = first
        } else {
            var lo = 0
            var hi = points.count - 1
            while lo < hi {
                let mid = (lo + hi + 1) / 2
                if points[mid].atMillis <= atMillis { lo = mid } else { hi = mid - 1 }
            }
            point = points[lo]
        }
        var total = 0.0
        for s in slots where s < point.values.count { total += point.values[s] }
        return total
    }

    /// How much the series `keys` grew in the `windowMillis` before `nowMillis`, `current` being
    /// their sum now.
    func delta(_ keys: [String], current: Double, nowMillis: Int64, windowMillis: Int64) -> Double {
        max(0, current - value(keys, at: nowMillis - windowMillis))
    }

    /// Growth per bucket of `bucketMillis`, `count` buckets ending now (oldest first); buckets before
    /// the first point are 0.
    func buckets(_ keys: [String], current: Double, nowMillis: Int64, bucketMillis: Int64, count: Int) -> [Double] {
        var out: [Double] = []
        var end = current
        var at = nowMillis
        for _ in 0..<count {
            let start = value(keys, at: at - bucketMillis)
            out.append(max(0, end - start))
            end = start
            at -= bucketMillis
        }
        return out.reversed()
    }

    /// The newest time at which the series `keys` grew (between two points), nil when they did not
    /// in the kept history.
    func lastIncrease(_ keys: [String]) -> Int64? {
        let slots = keys.compactMap { index[$0] }
        guard points.count > 1 else { return nil }
        func sum(_ p: Point) -> Double { slots.reduce(0) { $0 + ($1 < p.values.count ? p.values[$1] : 0) } }
        var later = sum(points[points.count - 1])
        for i in stride(from: points.count - 2, through: 0, by: -1) {
            let earlier = sum(points[i])
            if later > earlier { return points[i + 1].atMillis }
            later = earlier
        }
        return dropped || sum(points[0]) == 0 ? nil : points[0].atMillis
    }
}
