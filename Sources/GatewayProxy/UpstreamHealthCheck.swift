import GatewayHTTP
import GatewayIO

/// Active health checks of an upstream's servers, on one event loop, over the servers' own pools:
/// every `interval`, each server is sent `GET path` (Host: its `host:port`) on a kept-alive or new
/// connection of its pool; the check passes when a final response with the expected status (any
/// 2xx or 3xx by default) has come within `timeout`, and fails on any other status, a connection or
/// TLS failure, a connection closed before the answer or a timeout. The result goes to the server's
/// shared state (`UpstreamServer.recordCheck`), which all loops read. Nothing blocks: a check is an
/// exchange of its own on the loop. A round in which the pool has no free connection (every one
/// busy with requests) is skipped, not failed. Loop-confined; `stop()` ends it (a reload).
public final class UpstreamHealthChecker {
    public struct Spec: Sendable, Equatable {
        public var path: String
        public var intervalMillis: Int64
        public var timeoutMillis: Int64
        /// nil: 200 to 399.
        public var expectStatus: Int?

        public init(path: String, intervalMillis: Int64, timeoutMillis: Int64, expectStatus: Int? = nil) {
            self.path = path
            self.intervalMillis = intervalMillis
            self.timeoutMillis = timeoutMillis
            self.expectStatus = expectStatus
        }

        func passes(_ status: Int) -> Bool { expectStatus.map { $0 == status } ?? (200...399).contains(status) }
    }

    public let spec: Spec
    public let pools: [UpstreamPool]
    private let loop: EventLoop
    private var probes: [HealthProbe?]
    private var stopped = false
    /// Each finished check: the pool, whether it passed, and why not (`status 503`, `timeout`, …).
    public var onResult: ((UpstreamPool, Bool, String) -> Void)?

    public init(spec: Spec, pools: [UpstreamPool], loop: EventLoop) {
        self.spec = spec
        self.pools = pools
        self.loop = loop
        probes = Array(repeating: nil, count: pools.count)
    }

    /// The first round now, then one every `interval` per server.
    public func start() {
        for i in pools.indices { check(i) }
    }

    public func stop() {
        stopped = true
        for p in probes { p?.abandon() }
        probes = Array(repeating: nil, count: pools.count)
    }

    private func check(_ i: Int) {
        guard !stopped else { return }
        loop.timers.schedule(afterMillis: spec.intervalMillis) { [weak self] in self?.check(i) }
        guard probes[i] == nil else { return }  // the last one is still running (timeout < interval)
        let pool = pools[i]
        guard pool.idleCount > 0 || pool.openCount < pool.target.maxConnections else { return }
        let probe = HealthProbe(pool: pool, spec: spec, loop: loop) { [weak self] passed, detail in
            guard let self, !self.stopped else { return }
            self.probes[i] = nil
            self.onResult?(pool, passed, detail)
        }
        probes[i] = probe
        probe.start()
    }
}

/// One health check request on one pool.
final class HealthProbe: ConnectionDelegate {
    private let pool: UpstreamPool
    private let spec: UpstreamHealthChecker.Spec
    private let loop: EventLoop
    private let parser = HTTP1Parser(limits: .init())
    private var done: ((Bool, String) -> Void)?
    private var upstream: UpstreamConnection?
    private var timer: TimerWheel.Handle?
    private var body: BodyReader?
    private var keepAlive = false
    private var passed = false
    private var detail = ""
    /// Largest body read to reuse the connection; a longer one closes it.
    private static let maxBody = 64 * 1024
    private var bodyBytes = 0

    init(pool: UpstreamPool, spec: UpstreamHealthChecker.Spec, loop: EventLoop, done: @escaping (Bool, String) -> Void) {
        self.pool = pool
        self.spec = spec
        self.loop = loop
        self.done = done
    }

    func start() {
        timer = loop.timers.schedule(afterMillis: spec.timeoutMillis) { [weak self] in self?.finish(false, "timeout", reusable: false) }
        pool.acquire(connectTimeoutMillis: spec.timeoutMillis) { [weak self] result in
            guard let self, self.done != nil else {
                if case .success(let u) = result { u.pool.release(u, reusable: true) }
                return
            }
            switch result {
            case .failure(let f):
                self.finish(false, Self.describe(f), reusable: false)
            case .success(let u):
                self.upstream = u
                u.beginExchange(self)
                let host = self.pool.server?.label ?? self.pool.target.address.description
                u.connection.write(
                    Array("GET \(self.spec.path) HTTP/1.1\r\nHost: \(host)\r\nUser-Agent: attest-gateway-health-check\r\n\r\n".utf8))
            }
        }
    }

    /// The checker stopped: the check ends without a result.
    func abandon() {
        done = nil
        if let t = timer { loop.timers.cancel(t) }
        release(reusable: false)
    }

    private static func describe(_ f: UpstreamFailure) -> String {
        switch f {
        case .connectFailed(let e): "connect failed: \(e)"
        case .connectTimeout: "connect timeout"
        case .poolExhausted: "pool exhausted"
        case .closed: "closed"
        case .tls(let e): "tls: \(e)"
        }
    }

    private func finish(_ ok: Bool, _ why: String, reusable: Bool) {
        guard let cb = done else { return }
        done = nil
        if let t = timer { loop.timers.cancel(t) }
        release(reusable: reusable)
        cb(ok, why)
    }

    private func release(reusable: Bool) {
        guard let u = upstream else { return }
        upstream = nil
        u.endExchange()
        u.connection.resumeReading()
        u.pool.release(u, reusable: reusable)
    }

    func connectionDidRead(_ c: Connection) {
        guard let u = upstream else { return }
        if body == nil {
            let head: (HTTPResponseHeadLines, Int)?
            do {
                head = try u.finalResponseHead(parser: parser, requestMethod: "GET")
            } catch {
                return finish(false, "bad response", reusable: false)
            }
            guard let (r, end) = head else { return }
            u.connection.inbound.consume(end)
            u.recycle(r)
            passed = spec.passes(r.status)
            detail = passed ? "" : "status \(r.status)"
            keepAlive = r.keepAlive
            if case .untilClose = r.framing { keepAlive = false }
            body = BodyReader(r.framing)
        }
        guard var reader = body else { return }
        var consumed = 0
        var ended = false
        do {
            try u.connection.inbound.withReadableBytes { buf in
                (consumed, ended) = try reader.read(buf) { bodyBytes += $0.count }
            }
        } catch {
            return finish(false, "bad response", reusable: false)
        }
        u.connection.inbound.consume(consumed)
        body = reader
        if ended {
            finish(passed, detail, reusable: keepAlive && u.connection.inbound.isEmpty)
        } else if bodyBytes > Self.maxBody {
            // The verdict is known; the rest of a large body is not worth reading.
            finish(passed, detail, reusable: false)
        }
    }

    /// The end of the connection: the end of a close-delimited body, or a server that gave up. Once
    /// the status came, it decides.
    func connectionDidReadEOF(_ c: Connection) {
        finish(body != nil && passed, body == nil ? "closed before the answer" : detail, reusable: false)
    }

    func connectionDidClose(_ c: Connection, error: Socket.Error?) {
        finish(body != nil && passed, body == nil ? "closed before the answer" : detail, reusable: false)
    }
}
