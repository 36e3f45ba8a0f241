import AppAttest
import AppAttestSimulator
import GatewayConfig
import GatewayPolicy
import GatewayStore
import Testing

/// The gate on a route with `counter_window`: Apple's counter step checked against the window's
/// floor, the store deciding the rest, and `explain`'s view of the window on each refusal.
@Suite("AssertionGate: counter_window routes")
struct CounterWindowGateTests {
    typealias Fixture = AssertionGateTests.Fixture
    static let window = RoutePolicy(mode: .enforce, counterWindow: 8)
    static let strict = RoutePolicy(mode: .enforce)

    static func refusal(_ outcome: GateOutcome) -> Explanation? {
        if case .refused(let e) = outcome { return e }
        return nil
    }

    static func field(_ e: Explanation?, _ name: String) -> String? { e?.fields.first { $0.0 == name }?.1 }

    @Test("out of order on a windowed route: each counter accepted once, with its challenge; explain names the window")
    func outOfOrder() throws {
        let f = try Fixture()
        let requests = try (0..<3).map { _ in f.request(challenge: try f.challenge()) }  // counters 1, 2, 3
        for i in [2, 0, 1] { _ = try f.accepted(requests[i], route: Self.window) }
        #expect(f.storedCounter == 3)
        // A replay of counter 2 (its challenge consumed too): refused at the commit, counter first.
        let replay = Self.refusal(try f.evaluate(requests[1], route: Self.window))
        #expect(replay?.error == .verification(.counterReplay) && replay?.step == "commit")
        #expect(Self.field(replay, "counter_window") == "8")
        #expect(Self.field(replay, "counter_window_floor") == "1")
        #expect(Self.field(replay, "counter_window_open") == "none")
        #expect(Self.field(replay, "counter_window_reason") == "already_accepted")
        #expect(f.after.counter == 3)

        // A jump to 20 leaves 4…19 open; 5 is below the window of 8 (floor 13): refused by Apple's
        // counter step; 13 and 19 are accepted, each once.
        _ = try f.accepted(f.request(challenge: try f.challenge(), mutations: AssertionMutations(counter: 20)), route: Self.window)
        let old = Self.refusal(
            try f.evaluate(
                f.request(challenge: try f.challenge(), mutations: AssertionMutations(counter: 5)), route: Self.window))
        #expect(old?.error == .verification(.counterReplay) && old?.step == "verify")
        #expect(Self.field(old, "counter_window_floor") == "13" && Self.field(old, "counter_window_reason") == "below_window")
        for c: UInt32 in [13, 19] {
            _ = try f.accepted(f.request(challenge: try f.challenge(), mutations: AssertionMutations(counter: c)), route: Self.window)
        }
        let again = Self.refusal(
            try f.evaluate(
                f.request(challenge: try f.challenge(), mutations: AssertionMutations(counter: 13)), route: Self.window))
        #expect(again?.step == "commit" && Self.field(again, "counter_window_open") == "14,15,16,17,18")
        // Its challenge was not consumed by the refusal.
        #expect(f.before.challenge == f.after.challenge)
    }

    @Test("the same out-of-order request on a route without a window: counter_replay at Apple's counter step, no window fields")
    func strictRouteRefusesOutOfOrder() throws {
        let f = try Fixture()
        let requests = try (0..<2).map { _ in f.request(challenge: try f.challenge()) }
        _ = try f.accepted(requests[1], route: Self.strict)
        let late = Self.refusal(try f.evaluate(requests[0], route: Self.strict))
        #expect(late?.error == .verification(.counterReplay) && late?.step == "verify")
        #expect(Self.field(late, "counter_window") == nil && Self.field(late, "counter_stored") == "2")
        // The key's window still has counter 1 open: a windowed route accepts it (a key on both kinds of route).
        _ = try f.accepted(requests[0], route: Self.window)
    }
}
