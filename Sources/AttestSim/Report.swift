import Foundation

/// Latency summary by the nearest-rank method: the p-th percentile of n sorted samples is the
/// sample at rank ⌈p/100 · n⌉ (1-based), so every reported value was actually observed.
public struct LatencySummary: Sendable, Equatable {
    public let count: Int
    public let p50: Double
    public let p90: Double
    public let p99: Double
    public let max: Double
    public let mean: Double

    /// nil when there are no samples.
    public init?(samples: [Double]) {
        guard !samples.isEmpty else { return nil }
        let sorted = samples.sorted()
        count = sorted.count
        p50 = Self.percentile(sorted, 50)
        p90 = Self.percentile(sorted, 90)
        p99 = Self.percentile(sorted, 99)
        max = sorted[sorted.count - 1]
        mean = sorted.reduce(0, +) / Double(sorted.count)
    }

    /// Nearest rank on sorted, non-empty samples; p in 0…100 (0 gives the minimum).
    public static func percentile(_ sorted: [Double], _ p: Double) -> Double {
        precondition(!sorted.isEmpty, "percentile of no samples")
        let rank = Int((p / 100 * Double(sorted.count)).rounded(.up))
        return sorted[Swift.min(Swift.max(rank, 1), sorted.count) - 1]
    }
}

/// Counts of outcomes by key: `"201"`, `"401 bad_signature"`, `"transport connect_failed"`.
public struct VerdictCounts: Sendable, Equatable {
    public private(set) var counts: [String: Int] = [:]

    public init() {}

    public mutating func add(_ key: String, _ n: Int = 1) { counts[key, default: 0] += n }

    public mutating func merge(_ other: VerdictCounts) {
        for (k, v) in other.counts { add(k, v) }
    }

    public var total: Int { counts.values.reduce(0, +) }

    /// Keys in a stable order: accepted (2xx) first, then by status and code.
    public var sorted: [(String, Int)] { counts.sorted { $0.key < $1.key } }

    public static func key(_ verdict: Verdict) -> String { verdict.description }
    public static func key(_ error: HTTPClientError) -> String { "transport \(error.code)" }
}

/// Registrations and requests of one platform's devices (`attest-sim run --platform`).
public struct PlatformCounts: Sendable, Equatable {
    public var registrations = VerdictCounts()
    public var requests = VerdictCounts()

    public init() {}

    public mutating func merge(_ other: PlatformCounts) {
        registrations.merge(other.registrations)
        requests.merge(other.requests)
    }

    /// `registrations 201 ×2; requests 200 ×10`.
    public var text: String {
        func list(_ c: VerdictCounts) -> String { c.counts.isEmpty ? "none" : c.sorted.map { "\($0.0) ×\($0.1)" }.joined(separator: ", ") }
        return "registrations \(list(registrations)); requests \(list(requests))"
    }
}

/// What `attest-sim run` measured.
public struct RunReport: Sendable {
    public var gateway: String
    public var devices: Int
    public var requestsPlanned: Int
    public var workers: Int
    public var method: String
    public var path: String
    public var bodySize: Int
    public var binding: Binding
    public var nextChallenge: Bool
    /// Requests sent without registration, challenge or assertion (baseline).
    public var plain: Bool

    public var registrations = VerdictCounts()
    public var registrationLatencies: [Double] = []
    public var challenges = VerdictCounts()
    public var requests = VerdictCounts()
    public var requestLatencies: [Double] = []
    /// Wall time of the request phase (after every worker registered its devices).
    public var requestPhaseSeconds: Double = 0
    public var nextChallengesUsed = 0
    public var connectionsOpened = 0
    /// Requests resent on a new connection after a reused one closed before answering.
    public var retries = 0
    /// 429s waited out (Retry-After plus jitter) before sending the same request again.
    public var rateLimitedWaits = 0
    /// Protected requests answered `429 key_rate_limited` (the route's `key_rate`): every such
    /// answer, including those sent again with `--retry-key-rate`.
    public var keyRateLimited = 0
    /// Requests accepted when sent again after a `key_rate_limited` answer (`--retry-key-rate`).
    public var keyRateRetriedAccepted = 0
    /// Legitimate exchanges (challenge, registration, protected request) that were sent and not
    /// accepted (or failed in transport).
    public var refusedLegitimate = 0
    /// Protected requests never sent, because their device could not register or get a challenge
    /// (not refusals: the gateway never saw them).
    public var requestsNotSent = 0
    /// Details of the first few failures, for the operator.
    public var firstFailures: [String] = []
    /// The platforms of the devices (`--platform`), and what each one's devices saw.
    public var platforms: [String] = ["ios"]
    public var byPlatform: [String: PlatformCounts] = [:]
    /// `--show-verdict`: asked for, and the signed verdict the demo upstream got (nil: none reached it).
    public var showVerdict = false
    public var upstreamVerdict: UpstreamVerdict?

    public init(
        gateway: String, devices: Int, requestsPlanned: Int, workers: Int, method: String, path: String, bodySize: Int,
        binding: Binding, nextChallenge: Bool, plain: Bool = false
    ) {
        self.gateway = gateway
        self.devices = devices
        self.requestsPlanned = requestsPlanned
        self.workers = workers
        self.method = method
        self.path = path
        self.bodySize = bodySize
        self.binding = binding
        self.nextChallenge = nextChallenge
        self.plain = plain
    }

    public var requestsDone: Int { requests.total }
    public var requestsPerSecond: Double { requestPhaseSeconds > 0 ? Double(requestsDone) / requestPhaseSeconds : 0 }
    public var passed: Bool { refusedLegitimate == 0 && requestsDone == requestsPlanned }

    /// The human-readable report.
    public var text: String {
        var out = ""
        out += "attest-sim run → \(gateway): \(devices) devices, \(requestsPlanned) requests, \(workers) workers, "
        out +=
            plain
            ? "\(method) \(path) (plain: no attestation, \(bodySize)-byte body)\n"
            : "\(method) \(path) (bind \(binding.rawValue), \(bodySize)-byte body, next-challenge \(nextChallenge ? "on" : "off"))\n"
        if !plain {
            out += "registrations: \(registrationsAccepted)/\(devices) accepted"
            if let s = LatencySummary(samples: registrationLatencies) { out += ", p50 \(Self.ms(s.p50)) max \(Self.ms(s.max))" }
            out += "\n"
        }
        out += "requests:      \(requestsDone) in \(String(format: "%.3f", requestPhaseSeconds)) s = "
        out += "\(String(format: "%.1f", requestsPerSecond)) req/s; challenges fetched \(challenges.total), "
        out += "next-challenge used \(nextChallengesUsed); connections \(connectionsOpened), retries \(retries)"
        out += rateLimitedWaits > 0 ? ", 429s waited out \(rateLimitedWaits)\n" : "\n"
        if let s = LatencySummary(samples: requestLatencies) {
            out += "latency:       p50 \(Self.ms(s.p50))  p90 \(Self.ms(s.p90))  p99 \(Self.ms(s.p99))  max \(Self.ms(s.max))\n"
        }
        for (title, counts) in [("verdicts", requests), ("registration", registrations), ("challenges", challenges)]
        where !counts.counts.isEmpty {
            out += "\(title):".padding(toLength: 15, withPad: " ", startingAt: 0)
            out += counts.sorted.map { "\($0.0) ×\($0.1)" }.joined(separator: ", ") + "\n"
        }
        if platforms != ["ios"], !plain {
            for p in platforms {
                out += "\(p):".padding(toLength: 15, withPad: " ", startingAt: 0) + (byPlatform[p] ?? PlatformCounts()).text + "\n"
            }
        }
        if keyRateLimited > 0 {
            out += "key_rate:      \(keyRateLimited) answers 429 key_rate_limited"
            out += keyRateRetriedAccepted > 0 ? "; \(keyRateRetriedAccepted) requests sent again after Retry-After and accepted\n" : "\n"
        }
        for f in firstFailures { out += "failure:       \(f)\n" }
        if showVerdict {
            if let v = upstreamVerdict {
                out += "verdict:       the upstream got X-App-Attest-Verdict (decoded, not verified):\n"
                out += "               header \(v.header)\n               claims \(v.claims)\n"
            } else {
                out += "verdict:       no X-App-Attest-Verdict reached the upstream (a route without assertion.verdict_header, "
                out += "or an upstream that does not echo its fields like demo)\n"
            }
        }
        if !passed, let hint = hint { out += "hint:          \(hint)\n" }
        if passed {
            out += "result:        PASS (every legitimate exchange accepted)\n"
        } else if !plain, registrationsAccepted == 0, devices > 0 {
            let refused = registrations.sorted.map { "\($0.0) ×\($0.1)" }.joined(separator: ", ")
            out += "result:        FAIL: no device could register (\(refused.isEmpty ? "no registration sent" : refused)); "
            out += "\(requestsNotSent) requests not sent\n"
        } else {
            out += "result:        FAIL (\(refusedLegitimate) legitimate exchanges refused or failed; \(requestsDone)/\(requestsPlanned) "
            out += "requests done\(requestsNotSent > 0 ? ", \(requestsNotSent) not sent" : ""))\n"
        }
        return out
    }

    var registrationsAccepted: Int { registrations.counts.filter { $0.key.hasPrefix("2") }.values.reduce(0, +) }

    /// What a refusal code usually means for a simulator run, when one of the usual ones is seen.
    var hint: String? {
        let keys = Array(registrations.counts.keys) + Array(requests.counts.keys) + Array(challenges.counts.keys)
        let codes = Set(keys.compactMap { $0.split(separator: " ").last.map(String.init) })
        if codes.contains("environment_mismatch") || codes.contains("environment_not_allowed") {
            return "the gateway's apps[].environments does not list the environment the devices attest in: pass "
                + "--environment production or development to match it, or list both in gateway.yaml"
        }
        if codes.contains("signing_cert_not_allowed") {
            return
                "--signing-cert-sha256 (default: the one `attest-sim ca` prints) is not in the gateway's apps[].android.signing_cert_sha256"
        }
        if codes.contains("chain_untrusted") {
            return "the gateway does not trust this CA: list its root.pem in trust.extra_roots of gateway.yaml"
                + (platforms.contains("android") ? " (and android-root.pem in trust.extra_android_roots for Android devices)" : "")
                + " and restart the gateway"
        }
        if codes.contains("key_rate_limited") {
            return "the route's assertion.key_rate limits each key: add --retry-key-rate to send a limited request again after "
                + "Retry-After, as apps do, or --rate / more --devices to stay under each key's budget"
        }
        if codes.contains("app_id_mismatch") || codes.contains("app_not_allowed") {
            return "--app-id (TEAMID.bundle.id) is not in the gateway's apps[] (team_id and bundle_ids)"
                + (platforms.contains("android")
                    ? ", or --package (default: the bundle id) is not in its apps[].android.package_names" : "")
        }
        return nil
    }

    /// One JSON object (latencies in milliseconds).
    public var json: String {
        func summary(_ samples: [Double]) -> Any {
            guard let s = LatencySummary(samples: samples) else { return NSNull() }
            return [
                "count": s.count, "p50_ms": s.p50 * 1000, "p90_ms": s.p90 * 1000, "p99_ms": s.p99 * 1000,
                "max_ms": s.max * 1000, "mean_ms": s.mean * 1000,
            ] as [String: Any]
        }
        var object: [String: Any] = [
            "gateway": gateway, "devices": devices, "requests_planned": requestsPlanned, "requests_done": requestsDone,
            "workers": workers, "method": method, "path": path, "body_size": bodySize, "bind": binding.rawValue,
            "next_challenge": nextChallenge, "plain": plain, "seconds": requestPhaseSeconds, "requests_per_second": requestsPerSecond,
            "latency": summary(requestLatencies), "registration_latency": summary(registrationLatencies),
            "verdicts": requests.counts, "registration_verdicts": registrations.counts, "challenge_verdicts": challenges.counts,
            "challenges_fetched": challenges.total, "next_challenges_used": nextChallengesUsed,
            "connections_opened": connectionsOpened, "retries": retries, "rate_limited_waits": rateLimitedWaits,
            "key_rate_limited": keyRateLimited, "key_rate_retried_accepted": keyRateRetriedAccepted,
            "refused_legitimate": refusedLegitimate, "requests_not_sent": requestsNotSent, "failures": firstFailures,
            "hint": (passed ? nil : hint) ?? NSNull(),
            "platforms": Dictionary(
                uniqueKeysWithValues: platforms.map { p in
                    (
                        p,
                        [
                            "registration_verdicts": byPlatform[p]?.registrations.counts ?? [:],
                            "verdicts": byPlatform[p]?.requests.counts ?? [:],
                        ] as [String: Any]
                    )
                }),
            "passed": passed,
        ]
        if showVerdict {
            object["upstream_verdict"] =
                upstreamVerdict.map { v -> Any in
                    [
                        "header": (try? JSONSerialization.jsonObject(with: Data(v.header.utf8))) ?? NSNull(),
                        "claims": (try? JSONSerialization.jsonObject(with: Data(v.claims.utf8))) ?? NSNull(),
                    ] as [String: Any]
                } ?? NSNull()
        }
        let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data("{}".utf8)
        return String(decoding: data, as: UTF8.self)
    }

    static func ms(_ seconds: Double) -> String { String(format: "%.2f ms", seconds * 1000) }
}
