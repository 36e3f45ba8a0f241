import GatewayStore
import Testing

@testable import GatewayPolicy

/// Keys per account in the route verdict (`RouteVerdict`): `max_keys_per_account` with `on_keys:
/// flag | refuse`, the same rules as `max_risk_metric` / `on_risk`.
@Suite("route verdict: keys per account")
struct AccountVerdictTests {
    @Test("every (mode, max, on_keys, keys) of a verified request: flagged, refused where enforced, would_refuse where shadowed")
    func table() {
        for mode in RouteVerdict.Mode.allCases {
            for max in [nil, 0, 3] as [Int?] {
                for onKeys in RoutePolicy.KeysAction.allCases {
                    for keys in [nil, 1, 3, 4, 100] as [Int?] {
                        let route = RoutePolicy(mode: mode == .enforce ? .enforce : .shadow, maxKeysPerAccount: max, onKeys: onKeys)
                        let v = RouteVerdict(route: route, mode: mode, outcome: .accepted, accountKeys: keys)
                        let over = max != nil && keys != nil && keys! > max!
                        let label = "\(mode) \(String(describing: max)) \(onKeys) \(String(describing: keys))"
                        guard over else {
                            #expect(v.verdict == .accepted && v.action == .forwardVerified && v.reason == "ok", "\(label)")
                            continue
                        }
                        #expect(v.reason == "account_key_limit", "\(label)")
                        switch (onKeys, mode) {
                        case (.flag, _):
                            #expect(v.verdict == .flagged && v.action == .forwardVerifiedRecorded(recordedStatus: 403), "\(label)")
                        case (.refuse, .enforce):
                            #expect(v.verdict == .refused && v.action == .refuse(status: 403), "\(label)")
                        case (.refuse, .shadow):
                            #expect(v.verdict == .wouldRefuse && v.action == .forwardVerifiedRecorded(recordedStatus: 403), "\(label)")
                        }
                    }
                }
            }
        }
    }

    @Test("a key over both limits is judged by its risk metric; a refusal of the assertion stays that refusal")
    func precedence() {
        let route = RoutePolicy(mode: .enforce, maxRiskMetric: 2, onRisk: .flag, maxKeysPerAccount: 1, onKeys: .refuse)
        let both = RouteVerdict(route: route, mode: .enforce, outcome: .accepted, riskMetric: 5, accountKeys: 9)
        #expect(both.reason == "risk_metric_exceeded" && both.verdict == .flagged)
        let keysOnly = RouteVerdict(route: route, mode: .enforce, outcome: .accepted, riskMetric: 1, accountKeys: 2)
        #expect(keysOnly.reason == "account_key_limit" && keysOnly.verdict == .refused)
        let refused = RouteVerdict(route: route, mode: .enforce, outcome: .refused(.keyUnknown), accountKeys: 9)
        #expect(refused.reason == "key_unknown")
    }

    @Test("the account's count counts only inside the window; the verdict space declares the series")
    func window() {
        let a = KeyAccount(digest: Array(repeating: 1, count: 32), keyCount: 7, associatedMillis: 1_000_000)
        #expect(RouteVerdict.accountKeys(a, windowMillis: 60_000, nowMillis: 1_060_000) == 7)
        #expect(RouteVerdict.accountKeys(a, windowMillis: 60_000, nowMillis: 1_060_001) == nil)
        #expect(RouteVerdict.accountKeys(nil, windowMillis: 60_000, nowMillis: 1_000_000) == nil)
        #expect(RouteVerdict.accountKeys(a, windowMillis: nil, nowMillis: 1_000_000) == nil)
        let route = RoutePolicy(mode: .enforce, rolloutBasisPoints: 5_000, maxKeysPerAccount: 3, onKeys: .refuse)
        let space = RouteVerdict.space(route: route, refusals: [])
        #expect(space.contains { $0.mode == .enforce && $0.verdict == .refused && $0.reason == "account_key_limit" })
        #expect(space.contains { $0.mode == .shadow && $0.verdict == .wouldRefuse && $0.reason == "account_key_limit" })
        #expect(GateError.accountKeyLimit.code == "account_key_limit")
        #expect(GateError.accountKeyLimit.status(on: .route) == 403 && GateError.accountKeyLimit.action == .none)
    }
}
