import AndroidAttest
import Dispatch
import Foundation
import GatewayCrypto
import GatewayIO
import GatewayProxy
import GatewayStore

/// Keeps `AndroidStatusList` current (docs/android.md, "Revocation"), off the request path: every
/// `checkMillis` it looks whether the list held is older than `android.refresh`; then, with a store
/// the fleet shares (`SharedDocumentStore`: Redis), it first reads the fleet's copy, and only the
/// gateway that takes the fetch lease asks the origin; alone (memory store) it asks itself. The
/// request is a `GET` with `If-None-Match` (an unchanged list costs a `304`); a new list is parsed
/// (at most `AttestationStatusList.maxSize`) before it replaces the old one, and written back for
/// the fleet. A failure (no answer, not 200/304, a list that does not parse) keeps the old list and
/// waits a growing back-off (5 s doubling, at most `refresh`; `Retry-After` when given).
///
/// Its state is confined to one serial queue; the HTTP call runs on an event loop.
final class StatusListRefresher: @unchecked Sendable {
    struct Settings: Sendable, Equatable {
        var url: UpstreamURLParts
        var refreshMillis: Int64
        var connectTimeoutMillis: Int64
        var responseTimeoutMillis: Int64
        /// The runtime's (`android.ca_file`, checked when the configuration was compiled).
        var tls: TLSClientContext

        static func == (a: Settings, b: Settings) -> Bool {
            a.url == b.url && a.refreshMillis == b.refreshMillis && a.connectTimeoutMillis == b.connectTimeoutMillis
                && a.responseTimeoutMillis == b.responseTimeoutMillis && a.tls === b.tls
        }
    }

    /// The parts of `android.status_url` the refresher uses (GatewayConfig's type stays at the edge).
    struct UpstreamURLParts: Sendable, Equatable {
        var host: String
        var port: UInt16
        var path: String
        var authority: String { port == 443 ? host : (host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)") }
    }

    static let documentName = "android-status-list"
    static let maxFailureBackoffMillis: Int64 = 3_600_000

    let list: AndroidStatusList
    private let loop: EventLoop
    private let shared: (any SharedDocumentStore)?
    private let metrics: AndroidStatusMetrics
    private let queue = DispatchQueue(label: "gateway.android-status", qos: .utility)
    private let checkMillis: Int
    private var settings: Settings?
    /// The client of the list's server: touched on `loop` only.
    private var loopClient: (address: SocketAddress, tls: ObjectIdentifier, client: UpstreamClient)?
    private var timer: (any DispatchSourceTimer)?
    private var busy = false
    private var stopped = false
    private var failures = 0
    /// Monotonic ms before which no fetch is tried (back-off, Retry-After).
    private var waitUntil: Int64 = 0

    init(
        loop: EventLoop, shared: (any SharedDocumentStore)?, metrics: AndroidStatusMetrics, list: AndroidStatusList,
        checkMillis: Int = 1_000
    ) {
        self.loop = loop
        self.shared = shared
        self.metrics = metrics
        self.list = list
        self.checkMillis = checkMillis
    }

    /// Starts, changes or (nil) pauses the refresh.
    func adopt(_ new: Settings?) {
        queue.sync {
            if new != settings {
                settings = new
                retireClient()
                failures = 0
                waitUntil = 0
            }
            if new != nil, timer == nil, !stopped {
                let t = DispatchSource.makeTimerSource(queue: queue)
                t.schedule(deadline: .now(), repeating: .milliseconds(checkMillis), leeway: .milliseconds(100))
                t.setEventHandler { [weak self] in self?.tick() }
                t.resume()
                timer = t
            }
        }
    }

    func stop() {
        queue.sync {
            stopped = true
            timer?.cancel()
            timer = nil
            retireClient()
        }
    }

    private func retireClient() {
        loop.queue.async { [self] in
            loopClient?.client.pool.retire()
            loopClient = nil
        }
    }

    private static func wallMillis() -> Int64 { Int64(Date().timeIntervalSince1970 * 1000) }

    private func tick() {
        let held = list.current
        metrics.age(seconds: held.map { Double(max(0, Self.wallMillis() - $0.fetchedMillis)) / 1000 } ?? -1)
        guard let s = settings, !busy, !stopped else { return }
        let now = Self.wallMillis()
        if let held, now - held.fetchedMillis < s.refreshMillis { return }
        guard EventLoop.monotonicMillis() >= waitUntil else { return }
        busy = true
        guard let shared else { return fetch(s, held: held) }
        // The fleet's copy first: another gateway may have fetched it.
        shared.sharedDocument(Self.documentName) { [self] result in
            queue.async { [self] in
                if case .success(let doc?) = result, held.map({ doc.fetchedMillis > $0.fetchedMillis }) ?? true,
                    Self.wallMillis() - doc.fetchedMillis < s.refreshMillis
                {
                    // The same list confirmed by another gateway: only its time moves (no parse).
                    if let held, held.etag == doc.etag, !doc.etag.isEmpty {
                        list.confirm(fetchedMillis: doc.fetchedMillis)
                        metrics.result("shared")
                        busy = false
                        return
                    }
                    if adoptBody(doc.body, etag: doc.etag, fetchedMillis: doc.fetchedMillis, result: "shared") {
                        busy = false
                        return
                    }
                }
                // Stale everywhere: one gateway of the fleet fetches. The lease outlives its call but
                // not the refresh period: a gateway that died holding it delays the next fetch that long at most.
                let lease = min(s.refreshMillis, s.connectTimeoutMillis + s.responseTimeoutMillis + 5_000)
                shared.takeLease(Self.documentName, ttlMillis: lease) { [self] taken in
                    queue.async { [self] in
                        if case .success(false) = taken {
                            busy = false
                            return
                        }
                        // Taken, or the store cannot say: fetch (the origin serves many fetches well).
                        fetch(s, held: list.current)
                    }
                }
            }
        }
    }

    private func fetch(_ s: Settings, held: AndroidStatusList.Current?) {
        let address: SocketAddress
        do {
            address = try SocketAddress.resolve(host: s.url.host, port: s.url.port)
        } catch {
            return failed(s, "\(s.url.host) does not resolve: \(error)", retryAfter: nil)
        }
        let request = UpstreamRequest(
            method: "GET", target: s.url.path.isEmpty ? "/" : s.url.path, authority: s.url.authority,
            fields: [("Accept", "application/json")] + (held.map { [("If-None-Match", $0.etag)] } ?? []))
        loop.queue.async { [self] in
            client(s, address: address).send(request) { [self] result in
                queue.async { [self] in answered(s, result, held: held) }
            }
        }
    }

    /// On `loop`: the client for this address and TLS context, made on first use.
    private func client(_ s: Settings, address: SocketAddress) -> UpstreamClient {
        let tls = ObjectIdentifier(s.tls)
        if let c = loopClient, c.address == address, c.tls == tls { return c.client }
        loopClient?.client.pool.retire()
        let target = UpstreamTarget(
            name: "android-status:" + s.url.host, address: address, maxConnections: 1, connectTimeoutMillis: s.connectTimeoutMillis,
            responseTimeoutMillis: s.responseTimeoutMillis, idleTimeoutMillis: 30_000, maxWaiters: 4, tls: s.tls,
            tlsServerName: s.url.host)
        let made = UpstreamClient(pool: UpstreamPool(target: target, loop: loop), maxResponseBytes: AttestationStatusList.maxSize)
        loopClient = (address, tls, made)
        return made
    }

    private func answered(_ s: Settings, _ result: Result<UpstreamResponse, UpstreamClientError>, held: AndroidStatusList.Current?) {
        guard s == settings else {
            busy = false
            return
        }
        let response: UpstreamResponse
        switch result {
        case .failure(let e): return failed(s, "no answer: \(e)", retryAfter: nil)
        case .success(let r): response = r
        }
        let now = Self.wallMillis()
        switch response.status {
        case 304 where held != nil:
            list.confirm(fetchedMillis: now)
            metrics.result("not_modified")
            succeeded()
            shared?.touchSharedDocument(Self.documentName, fetchedMillis: now, ttlMillis: 2 * s.refreshMillis) { _ in }
        case 200:
            let etag = response.headers["ETag"] ?? ""
            guard adoptBody(response.body, etag: etag, fetchedMillis: now, result: "fetched") else {
                return failed(s, "the list does not parse", retryAfter: nil)
            }
            succeeded()
            shared?.putSharedDocument(
                Self.documentName, SharedDocument(etag: etag, fetchedMillis: now, body: response.body), ttlMillis: 2 * s.refreshMillis
            ) { _ in }
        default:
            let retryAfter = response.headers["Retry-After"].flatMap { Int64($0.trimmingCharacters(in: .whitespaces)) }
            failed(s, "status \(response.status)", retryAfter: retryAfter)
        }
    }

    /// Parses and adopts a list; false (nothing changed) when it does not parse.
    private func adoptBody(_ body: [UInt8], etag: String, fetchedMillis: Int64, result: String) -> Bool {
        let parsed: AttestationStatusList
        do {
            parsed = try AttestationStatusList.parse(json: body)
        } catch {
            GatewayEvents.log("warning", "Android attestation status list refused", [("detail", error.description), ("source", result)])
            return false
        }
        let first = list.current == nil
        list.adopt(AndroidStatusList.Current(list: parsed, etag: etag, fetchedMillis: fetchedMillis))
        metrics.result(result)
        metrics.entries(parsed.entries.count)
        metrics.age(seconds: Double(max(0, Self.wallMillis() - fetchedMillis)) / 1000)
        if first || result == "fetched" {
            GatewayEvents.log("info", "Android attestation status list", [("entries", String(parsed.entries.count)), ("source", result)])
        }
        return true
    }

    private func succeeded() {
        failures = 0
        waitUntil = 0
        busy = false
    }

    private func failed(_ s: Settings, _ why: String, retryAfter: Int64?) {
        failures += 1
        metrics.result("failed")
        let backoff = min(min(s.refreshMillis, Self.maxFailureBackoffMillis), 5_000 << min(failures - 1, 20))
        let wait = retryAfter.map { min(max($0, 1) * 1000, Self.maxFailureBackoffMillis) } ?? backoff
        waitUntil = EventLoop.monotonicMillis() + wait
        GatewayEvents.log(
            "warning", "Android attestation status list not fetched",
            [
                ("url", "https://\(s.url.authority)\(s.url.path)"), ("detail", why), ("failures", String(failures)),
                ("retry_in_ms", String(wait)), ("held", list.current == nil ? "none" : "the previous list"),
            ])
        busy = false
    }
}
