import MetricsTestKit
import Testing

@testable import Gateway

@Suite("A loop's verdict counters")
struct AttestLoopMetricsTests {
    @Test(
        "verdicts alternating on one route, several routes, and a route index reused by another route are each counted under their own labels"
    )
    func lastVerdictCacheCountsEachVerdict() throws {
        let metrics = TestMetrics()
        let loop = AttestLoopMetrics(shared: AttestMetrics(factory: metrics, persistent: false))
        func count(_ route: String, _ verdict: String, _ reason: String) -> Int64 {
            (try? metrics.expectCounter(
                AttestMetrics.verdicts, [("route", route), ("mode", "enforce"), ("verdict", verdict), ("reason", reason)]))?
                .totalValue ?? 0
        }
        for i in 0..<10 {
            loop.verdict(routeIndex: 0, route: "a", mode: "enforce", verdict: "accepted", reason: "")
            if i % 3 == 0 { loop.verdict(routeIndex: 0, route: "a", mode: "enforce", verdict: "refused", reason: "bad_signature") }
            loop.verdict(routeIndex: 1, route: "b", mode: "enforce", verdict: "accepted", reason: "")
        }
        // After a reload, index 0 names another route: its requests are not counted as route a's.
        loop.verdict(routeIndex: 0, route: "c", mode: "enforce", verdict: "accepted", reason: "")
        loop.verdict(routeIndex: 0, route: "a", mode: "enforce", verdict: "accepted", reason: "")
        // A reason built anew each time (not the same storage) still finds its counter.
        loop.verdict(routeIndex: 1, route: "b", mode: "enforce", verdict: "refused", reason: String("bad_" + "signature"))
        loop.verdict(routeIndex: 1, route: "b", mode: "enforce", verdict: "refused", reason: String("bad_" + "signature"))
        // Out-of-range indexes are counted too (no cache slot).
        loop.verdict(routeIndex: -1, route: "d", mode: "enforce", verdict: "accepted", reason: "")
        loop.verdict(routeIndex: 1 << 20, route: "d", mode: "enforce", verdict: "accepted", reason: "")
        #expect(count("a", "accepted", "") == 11)
        #expect(count("a", "refused", "bad_signature") == 4)
        #expect(count("b", "accepted", "") == 10)
        #expect(count("b", "refused", "bad_signature") == 2)
        #expect(count("c", "accepted", "") == 1)
        #expect(count("d", "accepted", "") == 2)
    }
}
