import GatewayConfig
import GatewayPolicy
import GatewayWire
import Testing

/// The route verdict as one table: every (mode, rollout share, key in or out of the share, gate
/// outcome, on_store_error) → what is done (forward verified, forward unverified, refuse with a
/// status) and the labels the verdict metric and explain carry.
@Suite("RouteVerdict: enforce, shadow, rollout and fail-open as one table")
struct RouteVerdictTests {
    /// A key id (base64 of 32 bytes) at a known rollout position: its first four bytes, big-endian,
    /// modulo 10 000.
    static func key(at position: UInt32, hex: Bool = false) -> String {
        let bytes =
            [UInt8(position >> 24), UInt8((position >> 16) & 0xff), UInt8((position >> 8) & 0xff), UInt8(position & 0xff)]
            + [UInt8](repeating: 0xa5, count: 28)
        return hex ? Hex.encode(bytes) : Base64.encode(bytes)
    }

    /// The keys of the table, with their rollout position (nil: no usable key id, enforced only at 100 %).
    static let keys: [(name: String, text: String?, position: UInt32?)] = [
        ("position 0", key(at: 0), 0),
        ("position 1", key(at: 1), 1),
        ("position 2499", key(at: 2_499), 2_499),
        ("position 2500", key(at: 2_500), 2_500),
        ("position 9999", key(at: 9_999), 9_999),
        ("position 12500 (2500 modulo 10000)", key(at: 12_500), 2_500),
        ("position 1, in hex", key(at: 1, hex: true), 1),
        ("no key id", nil, nil),
        ("a key id that is not base64", "not base64!", nil),
        ("a key id of 3 bytes", "AAAA", nil),
    ]

    static let shares = [0, 1, 2_500, 9_999, 10_000]

    static let outcomes: [RouteVerdict.Outcome] = [.accepted] + GateError.allCases.map { .refused($0) }

    /// Whether a request is enforced, from the table's own facts: only an enforce route, all of it
    /// at 100 %, below that the keys whose position is under the share.
    static func expectedMode(_ mode: RoutePolicy.Mode, share: Int, position: UInt32?) -> RouteVerdict.Mode? {
        switch mode {
        case .off: return nil
        case .shadow: return .shadow
        case .enforce:
            if share == 10_000 { return .enforce }
            guard let position else { return .shadow }
            return Int(position % 10_000) < share ? .enforce : .shadow
        }
    }

    /// What is done, from the contract: accepted goes on verified; an enforced refusal is refused with
    /// its route status, but the store's failure on a fail_open route goes on unverified; a shadowed
    /// refusal goes on unverified, recorded with the status enforcement would send. DeviceCheck
    /// failing to answer a fallback request is the store's failure for `on_store_error` (issue 14).
    static func expected(_ mode: RouteVerdict.Mode, _ outcome: RouteVerdict.Outcome, _ onStoreError: RoutePolicy.StoreErrorPolicy)
        -> (RouteVerdict.Action, RouteVerdict.Label, String)
    {
        switch outcome {
        case .accepted:
            return (.forwardVerified, .accepted, "ok")
        case .refused(let error):
            let status = Contract.codes[error.code]?.route ?? -1
            switch mode {
            case .shadow: return (.forwardUnverified(recordedStatus: status), .wouldRefuse, error.code)
            case .enforce:
                if ["store_unavailable", "devicecheck_unavailable"].contains(error.code) && onStoreError == .failOpen {
                    return (.forwardUnverified(recordedStatus: 503), .failOpen, error.code)
                }
                return (.refuse(status: status), .refused, error.code)
            }
        }
    }

    @Test("every (mode, share, key, outcome, on_store_error) gives the contract's decision")
    func everyCombination() {
        var checked = 0
        var wrong: [String] = []
        for mode in RoutePolicy.Mode.allCases {
            for share in Self.shares {
                for onStoreError in RoutePolicy.StoreErrorPolicy.allCases {
                    let route = RoutePolicy(mode: mode, rolloutBasisPoints: share, onStoreError: onStoreError)
                    for key in Self.keys {
                        let treated = Self.expectedMode(mode, share: share, position: key.position)
                        if RouteVerdict.mode(route: route, keyID: key.text) != treated {
                            wrong.append(
                                "\(mode) \(share) \(key.name): mode \(String(describing: RouteVerdict.mode(route: route, keyID: key.text)))"
                            )
                        }
                        for outcome in Self.outcomes {
                            checked += 1
                            let verdict = RouteVerdict(route: route, keyID: key.text, outcome: outcome)
                            guard let treated else {
                                if verdict != nil {
                                    wrong.append("\(mode) \(share) \(key.name) \(outcome): a verdict on a route without checks")
                                }
                                continue
                            }
                            let (action, label, reason) = Self.expected(treated, outcome, onStoreError)
                            let want = "\(treated.rawValue) \(label.rawValue) \(reason) \(action)"
                            let got = verdict.map { "\($0.mode.rawValue) \($0.verdict.rawValue) \($0.reason) \($0.action)" } ?? "nil"
                            if got != want {
                                wrong.append("\(mode) \(share) \(onStoreError) \(key.name) \(outcome): \(got), expected \(want)")
                            }
                        }
                    }
                }
            }
        }
        #expect(checked == 3 * Self.shares.count * 2 * Self.keys.count * Self.outcomes.count)
        #expect(wrong.count == 0, "first: \(wrong.prefix(2))")
    }

    /// The same decisions, a few spelled out as an operator reads them.
    @Test(
        arguments: [
            // (mode, share, key position or nil, outcome, on_store_error) → (mode label, verdict label, action)
            (.enforce, 10_000, nil, .refused(.assertionMissing), .failClosed, "enforce", "refused", .refuse(status: 401)),
            (.enforce, 10_000, 5, .refused(GateError.malformed), .failClosed, "enforce", "refused", .refuse(status: 401)),
            (.enforce, 10_000, 5, .refused(.appNotAllowed), .failOpen, "enforce", "refused", .refuse(status: 403)),
            (.enforce, 10_000, 5, .accepted, .failClosed, "enforce", "accepted", .forwardVerified),
            (.enforce, 10_000, 5, .refused(.storeUnavailable), .failClosed, "enforce", "refused", .refuse(status: 503)),
            (.enforce, 10_000, 5, .refused(.storeUnavailable), .failOpen, "enforce", "fail_open", .forwardUnverified(recordedStatus: 503)),
            (.enforce, 10_000, 5, .refused(.challengeCapacity), .failOpen, "enforce", "refused", .refuse(status: 503)),
            (.enforce, 2_500, 5, .refused(GateError.verification(.badSignature)), .failClosed, "enforce", "refused", .refuse(status: 401)),
            (
                .enforce, 2_500, 9_999, .refused(GateError.verification(.badSignature)), .failClosed, "shadow", "would_refuse",
                .forwardUnverified(recordedStatus: 401)
            ),
            (
                .enforce, 2_500, 9_999, .refused(.storeUnavailable), .failOpen, "shadow", "would_refuse",
                .forwardUnverified(recordedStatus: 503)
            ),
            (
                .enforce, 2_500, nil, .refused(.assertionMissing), .failClosed, "shadow", "would_refuse",
                .forwardUnverified(recordedStatus: 401)
            ),
            (.enforce, 0, 0, .accepted, .failClosed, "shadow", "accepted", .forwardVerified),
            (.shadow, 10_000, 5, .refused(.keyUnknown), .failClosed, "shadow", "would_refuse", .forwardUnverified(recordedStatus: 401)),
            (.shadow, 10_000, 5, .refused(.storeUnavailable), .failOpen, "shadow", "would_refuse", .forwardUnverified(recordedStatus: 503)),
            (.shadow, 10_000, 5, .accepted, .failClosed, "shadow", "accepted", .forwardVerified),
        ] as [(RoutePolicy.Mode, Int, UInt32?, RouteVerdict.Outcome, RoutePolicy.StoreErrorPolicy, String, String, RouteVerdict.Action)])
    func spelledOut(
        _ mode: RoutePolicy.Mode, _ share: Int, _ position: UInt32?, _ outcome: RouteVerdict.Outcome,
        _ onStoreError: RoutePolicy.StoreErrorPolicy, _ modeLabel: String, _ label: String, _ action: RouteVerdict.Action
    ) throws {
        let route = RoutePolicy(mode: mode, rolloutBasisPoints: share, onStoreError: onStoreError)
        let verdict = try #require(RouteVerdict(route: route, keyID: position.map { Self.key(at: $0) }, outcome: outcome))
        #expect(verdict.mode.rawValue == modeLabel)
        #expect(verdict.verdict.rawValue == label)
        #expect(verdict.action == action)
    }

    @Test("a route without checks has no verdict")
    func offRoutes() {
        #expect(RouteVerdict.mode(route: .off, keyID: Self.key(at: 1)) == nil)
        #expect(RouteVerdict(route: .off, keyID: nil, outcome: .accepted) == nil)
    }

    @Test("a refusal from the head alone is answered before the body exactly when the verdict refuses")
    func beforeBody() {
        for onStoreError in RoutePolicy.StoreErrorPolicy.allCases {
            let route = RoutePolicy(mode: .enforce, onStoreError: onStoreError)
            for error in GateError.allCases {
                let after = RouteVerdict(route: route, mode: .enforce, outcome: .refused(error))
                let now = RouteVerdict.beforeBody(route: route, mode: .enforce, refusal: error)
                if case .refuse = after.action {
                    #expect(now == after, "\(error)")
                } else {
                    #expect(now == nil, "\(error) on \(onStoreError)")
                }
                // Shadowed: the body is read and the request forwarded.
                #expect(RouteVerdict.beforeBody(route: route, mode: .shadow, refusal: error) == nil, "\(error)")
            }
        }
        let early = RouteVerdict.beforeBody(route: RoutePolicy(mode: .enforce), mode: .enforce, refusal: .malformed)
        #expect(early?.action == .refuse(status: 401) && early?.verdict == .refused && early?.reason == "malformed")
    }

    @Test("the labels are the metric's and explain's spellings")
    func labels() {
        #expect(RouteVerdict.Mode.allCases.map(\.rawValue) == ["enforce", "shadow"])
        #expect(RouteVerdict.Label.allCases.map(\.rawValue) == ["accepted", "refused", "would_refuse", "fail_open", "flagged"])
    }

    // MARK: - The risk metric (issue 13): max_risk_metric, on_risk

    /// What a verified request is, from the contract: a key with no metric, a route without a
    /// maximum, or a metric at or under it: accepted; over it, `flag` forwards it verified and
    /// counts it `flagged` (either mode), `refuse` refuses it 403 where enforced and forwards it
    /// verified counted `would_refuse` where shadowed. Refusals of the gate are untouched by it.
    static func expectedRisk(
        _ mode: RouteVerdict.Mode, max: Int?, onRisk: RoutePolicy.RiskAction, metric: UInt32?
    ) -> (RouteVerdict.Action, RouteVerdict.Label, String) {
        guard let max, let metric, Int(metric) > max else { return (.forwardVerified, .accepted, "ok") }
        switch (onRisk, mode) {
        case (.flag, _): return (.forwardVerifiedRecorded(recordedStatus: 403), .flagged, "risk_metric_exceeded")
        case (.refuse, .enforce): return (.refuse(status: 403), .refused, "risk_metric_exceeded")
        case (.refuse, .shadow): return (.forwardVerifiedRecorded(recordedStatus: 403), .wouldRefuse, "risk_metric_exceeded")
        }
    }

    @Test("every (mode, rollout, max_risk_metric, on_risk, metric) of a verified request gives the contract's decision")
    func riskTable() {
        let maxima: [Int?] = [nil, 0, 2, 5]
        let metrics: [UInt32?] = [nil, 0, 1, 2, 3, 5, 6, 1_000]
        var checked = 0
        var wrong: [String] = []
        for mode in [RoutePolicy.Mode.enforce, .shadow] {
            for share in [10_000, 0] where !(mode == .shadow && share == 0) {
                for max in maxima {
                    for onRisk in RoutePolicy.RiskAction.allCases {
                        let route = RoutePolicy(
                            mode: mode, rolloutBasisPoints: share, maxRiskMetric: max, onRisk: onRisk)
                        for metric in metrics {
                            checked += 1
                            let verdict = RouteVerdict(route: route, keyID: Self.key(at: 1), outcome: .accepted, riskMetric: metric)!
                            let treated = Self.expectedMode(mode, share: share, position: 1)!
                            let (action, label, reason) = Self.expectedRisk(treated, max: max, onRisk: onRisk, metric: metric)
                            if verdict.mode != treated || verdict.action != action || verdict.verdict != label || verdict.reason != reason {
                                wrong.append(
                                    "\(mode) \(share) max \(String(describing: max)) \(onRisk) metric \(String(describing: metric)): \(verdict)"
                                )
                            }
                            // A refusal of the gate is the gate's, whatever the metric.
                            let refused = RouteVerdict(
                                route: route, keyID: Self.key(at: 1), outcome: .refused(.keyUnknown), riskMetric: metric)!
                            if refused.reason != "key_unknown" { wrong.append("\(mode) refused: \(refused)") }
                        }
                    }
                }
            }
        }
        #expect(checked == 3 * maxima.count * 2 * metrics.count)
        #expect(wrong.isEmpty, "first: \(wrong.prefix(5))")
    }

    @Test("risk, spelled out: no metric yet passes; flag counts and forwards; refuse is a 403 only where enforced")
    func riskSpelledOut() throws {
        let refuse = RoutePolicy(mode: .enforce, maxRiskMetric: 3, onRisk: .refuse)
        #expect(try #require(RouteVerdict(route: refuse, keyID: nil, outcome: .accepted, riskMetric: nil)).action == .forwardVerified)
        #expect(try #require(RouteVerdict(route: refuse, keyID: nil, outcome: .accepted, riskMetric: 3)).action == .forwardVerified)
        let over = try #require(RouteVerdict(route: refuse, keyID: nil, outcome: .accepted, riskMetric: 4))
        #expect(over.action == .refuse(status: 403) && over.verdict == .refused && over.reason == "risk_metric_exceeded")
        #expect(GateError.riskMetricExceeded.status(on: .route) == 403 && GateError.riskMetricExceeded.action == .none)
        let flag = RoutePolicy(mode: .enforce, maxRiskMetric: 3)
        #expect(flag.onRisk == .flag)
        let flagged = try #require(RouteVerdict(route: flag, keyID: nil, outcome: .accepted, riskMetric: 4))
        #expect(flagged.action == .forwardVerifiedRecorded(recordedStatus: 403) && flagged.verdict == .flagged)
        let shadow = RoutePolicy(mode: .shadow, maxRiskMetric: 3, onRisk: .refuse)
        let shadowed = try #require(RouteVerdict(route: shadow, keyID: nil, outcome: .accepted, riskMetric: 9))
        #expect(shadowed.action == .forwardVerifiedRecorded(recordedStatus: 403) && shadowed.verdict == .wouldRefuse)
    }
}
