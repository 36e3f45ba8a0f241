import AppAttest
import AppAttestSimulator
import GatewayCrypto
import GatewayPolicy
import GatewayStore
import Testing

/// Issue 27: a route's `key_rate`, through the gate and the memory store's commit, with the
/// simulator's device and controlled time.
@Suite("AssertionGate: key_rate, the budget of each attested key on a route")
struct AssertionGateKeyRateTests {
    /// 1/m, burst 2: the third request at one instant is over; a token is back 60 s later.
    static let limited = RoutePolicy(mode: .enforce, keyRate: KeyRateLimit(count: 1, periodMillis: 60_000, burst: 2, scope: "pay"))
    static let now = AssertionGateTests.now

    @Test("over the budget: 429 key_rate_limited with Retry-After, nothing consumed; the very same request passes once a token is back")
    func limitedThenRetried() throws {
        let f = try AssertionGateTests.Fixture()
        let route = Self.limited
        for _ in 0..<2 { _ = try f.accepted(f.request(route: route, challenge: try f.challenge()), route: route) }
        let challenge = try f.challenge()
        let request = f.request(route: route, challenge: challenge)
        guard case .refused(let e) = try f.evaluate(request, route: route, at: Self.now + 1_000) else {
            Issue.record("the third request within the burst was accepted")
            return
        }
        #expect(e.error == .keyRateLimited && e.error.status(on: .route) == 429 && e.error.action == .retryLater)
        // 1 s refilled 1/60 of a token: 59 s to go, rounded up.
        #expect(e.retryAfterSeconds == 59)
        #expect(f.after.counter == 2 && f.before.counter == 2)
        #expect(f.after.challenge == f.before.challenge)
        guard case .valid = f.after.challenge else {
            Issue.record("the challenge of the limited request is no longer usable: \(String(describing: f.after.challenge))")
            return
        }
        // Still over one second before the token is back.
        guard case .refused = try f.evaluate(request, route: route, at: Self.now + 59_000) else {
            Issue.record("accepted before Retry-After")
            return
        }
        // The same request (challenge, counter, signature) once the token is back.
        guard case .accepted(let a) = try f.evaluate(request, route: route, at: Self.now + 60_000) else {
            Issue.record("the retried request was refused")
            return
        }
        #expect(a.counter == 3 && f.storedCounter == 3)
        #expect(f.after.challenge == .consumed)
    }

    @Test("a refused assertion takes no token; other routes have their own bucket; a route without key_rate has none")
    func onlyAcceptedCommitsTakeTokens() throws {
        let f = try AssertionGateTests.Fixture()
        let one = RoutePolicy(mode: .enforce, keyRate: KeyRateLimit(count: 1, periodMillis: 3_600_000, burst: 1, scope: "one"))
        let other = RoutePolicy(mode: .enforce, keyRate: KeyRateLimit(count: 1, periodMillis: 3_600_000, burst: 1, scope: "other"))
        // A bad signature and a replayed challenge are refused for what they are, not counted.
        let bad = f.request(
            route: one, challenge: try f.challenge(), mutations: AssertionMutations(signingKey: ECPrivateKey(curve: .p256)))
        guard case .refused(let e) = try f.evaluate(bad, route: one) else {
            Issue.record("a bad signature was accepted")
            return
        }
        #expect(e.error == .verification(.badSignature))
        _ = try f.accepted(f.request(route: one, challenge: try f.challenge()), route: one)
        guard case .refused(let over) = try f.evaluate(f.request(route: one, challenge: try f.challenge()), route: one) else {
            Issue.record("the second request of a 1/h, burst 1 route was accepted")
            return
        }
        #expect(over.error == .keyRateLimited && over.retryAfterSeconds == 3_600)
        // The same key on another route, and on a route without key_rate.
        _ = try f.accepted(f.request(route: other, challenge: try f.challenge()), route: other)
        for _ in 0..<3 { _ = try f.accepted(f.request(challenge: try f.challenge())) }
    }
}
