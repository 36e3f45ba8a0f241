import Dispatch
import Foundation

/// The operator's page's I/O: every `CounterHistory.intervalMillis` a timer on this type's own
/// queue reads the `/metrics` text (what a Prometheus scrape reads) and keeps its counters in the
/// history; a request for the page is answered from that queue too (the text read once more, now,
/// so the page's "since start" counts are what `/metrics` says at that moment). Nothing of it runs on
/// an event loop or on the request path, and the request path does nothing for it.
///
/// A nonisolated class with its own serial queue: the timer's handler never runs on the main actor.
final class OperatorSampler: @unchecked Sendable {
    /// What the page needs besides the metrics, gathered when it is asked for.
    struct Inputs: Sendable {
        var facts: OperatorReport.Facts
        var routes: [OperatorReport.Route]
        var upstreams: [String]
        var refusals: [OperatorReport.Refusal]
    }

    private let queue = DispatchQueue(label: "gateway.operator-page", qos: .utility)
    private let exposition: @Sendable () -> [UInt8]
    private let clock: @Sendable () -> Int64
    /// Confined to `queue`.
    private var history = CounterHistory()
    private var timer: (any DispatchSourceTimer)?

    init(exposition: @escaping @Sendable () -> [UInt8], clock: @escaping @Sendable () -> Int64 = { AttestContext.nowMillis() }) {
        self.exposition = exposition
        self.clock = clock
    }

    /// Takes the first point now (the counters at start), then one every interval.
    func start() {
        queue.sync {
            guard timer == nil else { return }
            sample()
            let t = DispatchSource.makeTimerSource(queue: queue)
            let every = Int(CounterHistory.intervalMillis)
            t.schedule(deadline: .now() + .milliseconds(every), repeating: .milliseconds(every), leeway: .milliseconds(500))
            t.setEventHandler { [weak self] in self?.sample() }
            t.resume()
            timer = t
        }
    }

    func stop() {
        queue.sync {
            timer?.cancel()
            timer = nil
        }
    }

    private func sample() {
        history.append(MetricsText(exposition()), atMillis: clock())
    }

    /// The page's HTML, built on the sampler's queue from `inputs()` (called there) and the metrics
    /// now; `completion` is called on that queue.
    func page(_ inputs: @escaping @Sendable () -> Inputs, completion: @escaping @Sendable ([UInt8]) -> Void) {
        queue.async { [self] in
            var gathered = inputs()
            let now = MetricsText(exposition())
            gathered.facts.nowMillis = clock()
            if let started = now.select("process_start_time_seconds").first?.value {
                gathered.facts.startedMillis = Int64(started * 1000)
            }
            let report = OperatorReport(
                now: now, history: history, facts: gathered.facts, routes: gathered.routes, upstreams: gathered.upstreams,
                refusals: gathered.refusals)
            completion(Array(report.page().html().utf8))
        }
    }
}
