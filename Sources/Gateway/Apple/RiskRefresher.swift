import AppAttest
import CoreMetrics
import Dispatch
import Foundation
import GatewayIO
import GatewayPolicy
import GatewayProxy
import GatewayStore
import GatewayWire

/// Refreshes every key's risk metric in the background, off the request path (docs/verification.md,
/// "The risk metric"): each tick claims the keys whose refresh is due (`RiskRefreshStore`: on Redis
/// one gateway of the fleet per key, under a lease), sends each key's latest receipt to Apple's App
/// Attest data service through the `AppleClient` (base64 body, the team's ES256 token bare in
/// `Authorization`), verifies a new receipt exactly as at registration but for field 4 (type
/// `RECEIPT`, the stored key, app id, chain to Apple Root CA - G3, created within five minutes),
/// and stores what `RiskSchedule.decide` says: the receipt and its metric, a stale mark, the next
/// refresh. At most `risk.concurrency` refreshes in flight and `risk.rate` started per second; a
/// `429`, a `5xx`, a `401` or no answer pauses every refresh (`Retry-After`, else a growing back-off).
///
/// Its state is confined to one serial queue; the HTTP calls run on an event loop; nothing blocks a loop.
final class RiskRefresher: @unchecked Sendable {
    struct Settings: Sendable {
        var services: AppleServices
        var schedule: RiskSchedule.Settings
        var concurrency: Int
        var ratePerSecond: Double
        var verifier: ReceiptVerifier

        init?(_ rt: GatewayRuntime) {
            guard let services = rt.apple, let refresh = rt.config.risk.refresh else { return nil }
            self.services = services
            schedule = RiskSchedule.Settings(refreshMillis: refresh.millis, staleProbeMillis: rt.config.risk.staleProbe.millis)
            concurrency = rt.config.risk.concurrency
            ratePerSecond = rt.config.risk.rate.perSecond
            verifier = rt.attest.receiptVerifier
        }
    }

    private let queue = DispatchQueue(label: "gateway.risk-refresh", qos: .utility)
    private let store: any RiskRefreshStore
    private let client: AppleClient
    private let metrics: RiskMetrics
    private let tickMillis: Int
    private var settings: Settings?
    private var timer: (any DispatchSourceTimer)?
    private var stopped = false
    /// Keys claimed and not yet sent.
    private var queued: [KeyID] = []
    private var claiming = false
    private var inFlight = 0
    /// Every refresh waits until then (monotonic ms): a `Retry-After`, or the back-off.
    private var pausedUntil: Int64 = 0
    private var failures = 0
    /// Token bucket of `risk.rate` (burst: one second's worth, at least one).
    private var tokens: Double = 1
    private var tokensAt: Int64 = 0
    /// Resolved service hosts, by host, with when they were resolved (monotonic ms).
    private let addresses = AppleHostAddresses()
    /// The oldest due refresh the current scan pass saw (wall ms), for the lag gauge.
    private var passOldest: Int64?

    /// How long a claimed key is held before another claim (here or on another gateway) takes it
    /// again: longer than any refresh (its request's timeouts, twice) and its wait in the queue.
    var leaseMillis: Int64 {
        guard let s = settings else { return 60_000 }
        return 2 * (s.services.connectTimeoutMillis + s.services.responseTimeoutMillis) + 60_000
    }
    /// Memory store: records looked at per claim (a pass over a large store takes several ticks).
    static let scanBudget = 131_072

    init(store: any RiskRefreshStore, client: AppleClient, metrics: RiskMetrics, tickMillis: Int = 1_000) {
        self.store = store
        self.client = client
        self.metrics = metrics
        self.tickMillis = tickMillis
    }

    /// Starts (or, with nil settings, pauses) the refresh; called at start and on every reload.
    func adopt(_ next: Settings?) {
        queue.async { [self] in
            guard !stopped else { return }
            settings = next
            tokens = min(tokens, max(1, next?.ratePerSecond ?? 1))
            if next != nil, timer == nil {
                let t = DispatchSource.makeTimerSource(queue: queue)
                t.schedule(deadline: .now() + .milliseconds(tickMillis), repeating: .milliseconds(tickMillis), leeway: .milliseconds(50))
                t.setEventHandler { [weak self] in self?.tick() }
                t.resume()
                timer = t
            }
            if next == nil {
                timer?.cancel()
                timer = nil
                queued = []
            }
        }
    }

    /// How long every refresh stays paused (back-off after a pausing answer); 0: not paused. For the
    /// operator's page, off the request path.
    var pausedForMillis: Int64 { queue.sync { max(0, pausedUntil - EventLoop.monotonicMillis()) } }

    /// Stops for good (drain): no new refresh starts; those in flight end on their own.
    func stop() {
        queue.sync {
            stopped = true
            timer?.cancel()
            timer = nil
            queued = []
        }
    }

    // MARK: - The loop of work (on `queue`)

    private func tick() {
        guard !stopped, let s = settings else { return }
        let now = EventLoop.monotonicMillis()
        if now < pausedUntil { return }
        if !claiming, queued.count < s.concurrency * 2 {
            claiming = true
            let wall = AttestContext.nowMillis()
            store.claimDueRefreshes(
                nowMillis: wall, leaseMillis: leaseMillis, limit: s.concurrency * 4 - queued.count, scanBudget: Self.scanBudget
            ) { [self] result in
                queue.async { self.claimed(result, at: wall) }
            }
        }
        startWhatCan()
    }

    private func claimed(_ result: Result<DueRefreshes, StoreError>, at wall: Int64) {
        claiming = false
        switch result {
        case .failure(let e):
            GatewayEvents.log("warning", "risk refresh: the store cannot say which keys are due; trying again", [("error", "\(e)")])
        case .success(let due):
            if let oldest = due.oldestDueMillis { passOldest = min(passOldest ?? oldest, oldest) }
            if due.complete {
                metrics.lag(seconds: passOldest.map { max(0, Double(wall - $0) / 1000) } ?? 0)
                passOldest = nil
            }
            if !stopped, settings != nil { queued += due.keys }
        }
        startWhatCan()
    }

    /// Starts refreshes while the concurrency, the rate and the pause allow.
    private func startWhatCan() {
        guard !stopped, let s = settings else { return }
        let now = EventLoop.monotonicMillis()
        guard now >= pausedUntil else { return }
        let burst = max(1, s.ratePerSecond)
        tokens = min(burst, tokens + Double(now - tokensAt) / 1000 * s.ratePerSecond)
        tokensAt = now
        while inFlight < s.concurrency, !queued.isEmpty, tokens >= 1 {
            tokens -= 1
            inFlight += 1
            refresh(queued.removeFirst(), s)
        }
        if !queued.isEmpty, inFlight < s.concurrency, tokens < 1 {
            // Out of tokens: come back when the next one is there, not at the next tick.
            let wait = Int(((1 - tokens) / s.ratePerSecond * 1000).rounded(.up))
            queue.asyncAfter(deadline: .now() + .milliseconds(max(1, wait))) { [weak self] in self?.startWhatCan() }
        }
    }

    private func refresh(_ key: KeyID, _ s: Settings) {
        store.refreshCandidate(key) { [self] result in
            queue.async { [self] in
                switch result {
                case .failure(let e):
                    GatewayEvents.log(
                        "warning", "risk refresh: the key's receipt cannot be read", [("key_id", key.description), ("error", "\(e)")])
                    finished()
                case .success(nil):
                    finished()  // removed, registered again without a receipt: nothing to refresh
                case .success(let candidate?):
                    send(candidate, s)
                }
            }
        }
    }

    private func send(_ candidate: RefreshCandidate, _ s: Settings) {
        let endpoint = s.services.attestData(candidate.record.environment)
        guard let address = resolve(endpoint) else {
            return answered(.unavailable("cannot resolve \(endpoint.host)"), candidate, newReceipt: nil, s)
        }
        // "A body composed entirely of the Base64-encoded receipt" (Assessing fraud risk).
        let body = Array(Base64.encode(candidate.receipt).utf8)
        client.post(
            endpoint, at: address, services: s.services, token: .bare, fields: [("Content-Type", "application/octet-stream")],
            body: body, queue: queue
        ) { [self] result in
            switch result {
            case .failure(let e):
                if case .failed(.exchange(let p)) = e, [.upstreamUnavailable, .upstreamConnectTimeout].contains(p) {
                    addresses.forget(endpoint)  // resolved again before the next call
                }
                answered(.unavailable(e.description), candidate, newReceipt: nil, s)
            case .success(let response):
                interpret(response, candidate, s)
            }
        }
    }

    /// The response, read: a `200` body verified as a `RECEIPT` of this key, or the status.
    private func interpret(_ response: UpstreamResponse, _ candidate: RefreshCandidate, _ s: Settings) {
        guard response.status == 200 else {
            let retryAfter = RiskSchedule.retryAfterSeconds(response.headers["Retry-After"], nowMillis: AttestContext.nowMillis())
            return answered(.status(response.status, retryAfterSeconds: retryAfter), candidate, newReceipt: nil, s)
        }
        let text = String(decoding: response.body, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        guard let bytes = try? Base64.decode(text), !bytes.isEmpty else {
            return answered(.invalidReceipt("the 200 body is not a base64 receipt"), candidate, newReceipt: nil, s)
        }
        let record = candidate.record
        let expectation = ReceiptVerifier.Expectation(
            appID: try? AppID(record.appID), attestedKey: .publicKey(record.publicKey), kind: .receipt,
            maxAgeMillis: Self.maxReceiptAgeMillis)
        do {
            let verified = try s.verifier.verify(bytes, expecting: expectation, at: Date())
            answered(.receipt(verified.receipt), candidate, newReceipt: bytes, s)
        } catch {
            answered(.invalidReceipt(error.description), candidate, newReceipt: nil, s)
        }
    }

    /// Apple: "Verify that the receipt's creation time, given in field 12, is no more than five minutes old."
    static let maxReceiptAgeMillis: Int64 = 5 * 60_000

    private func answered(_ answer: RiskSchedule.Answer, _ candidate: RefreshCandidate, newReceipt: [UInt8]?, _ s: Settings) {
        let key = candidate.record.keyID
        let wall = AttestContext.nowMillis()
        var decision = RiskSchedule.decide(answer, keyID: key, current: candidate.risk, nowMillis: wall, settings: s.schedule)
        metrics.refreshed(decision.result)
        if decision.result == .refreshed, let m = decision.risk?.metric { metrics.observed(metric: m) }
        if let pause = decision.pause {
            failures += 1
            let millis =
                switch pause {
                case .retryAfter(let ms): ms
                case .backOff: RiskSchedule.backOffMillis(failures: failures)
                }
            let until = EventLoop.monotonicMillis() + millis
            if until > pausedUntil {
                pausedUntil = until
                queued = []  // claimed keys come back when their lease ends
                log(decision.result, answer, key: key, pauseMillis: millis)
            }
            // The key is due again when the pause ends, not only when its lease does.
            var risk = candidate.risk
            risk.nextRefreshMillis = wall + millis
            decision.risk = risk
        } else {
            failures = 0
            if decision.result != .refreshed, decision.result != .notModified { log(decision.result, answer, key: key, pauseMillis: nil) }
        }
        guard let risk = decision.risk else { return finished() }
        let update = RiskUpdate(
            keyID: key, basedOnCreatedMillis: candidate.risk.receiptCreatedMillis, receipt: decision.storeReceipt ? newReceipt : nil,
            risk: risk)
        store.recordRefresh(update) { [self] result in
            queue.async { [self] in
                if case .failure(let e) = result {
                    GatewayEvents.log(
                        "warning", "risk refresh: the result could not be stored; the key is refreshed again",
                        [
                            ("key_id", key.description), ("error", "\(e)"),
                        ])
                }
                finished()
            }
        }
    }

    private func finished() {
        inFlight -= 1
        startWhatCan()
    }

    private func log(_ result: RiskSchedule.Result, _ answer: RiskSchedule.Answer, key: KeyID, pauseMillis: Int64?) {
        var fields: [(String, String)] = [("result", result.rawValue), ("key_id", key.description)]
        switch answer {
        case .status(let status, _): fields.append(("status", String(status)))
        case .invalidReceipt(let why), .unavailable(let why): fields.append(("detail", why))
        case .receipt: break
        }
        if let pauseMillis { fields.append(("paused_ms", String(pauseMillis))) }
        switch result {
        case .unauthorized:
            GatewayEvents.log(
                "error",
                "risk refresh: Apple refused the token (apple.team_id, apple.key_id, apple.private_key, the clock); refreshes paused",
                fields)
        case .rateLimited, .serverError, .unavailable:
            GatewayEvents.log("warning", "risk refresh: Apple's data service asks to wait, or cannot be reached; refreshes paused", fields)
        case .stale:
            GatewayEvents.log(
                "info", "risk refresh: Apple has no data for the key's receipt (older than 30 days); its metric is kept, stale", fields)
        default:
            GatewayEvents.log("warning", "risk refresh: the key's receipt was not refreshed", fields)
        }
    }

    private func resolve(_ endpoint: AppleServices.Endpoint) -> SocketAddress? {
        addresses.address(endpoint, nowMillis: EventLoop.monotonicMillis())
    }
}
