import GatewayHTTP
import GatewayIO

/// The downstream side an `UpstreamExchange` serves: the HTTP/1.1 connection (one exchange at a
/// time) or an HTTP/2 stream. While the exchange holds an upstream connection, the host is that
/// connection's delegate and passes its events on (`upstreamDidRead`, `upstreamDidEnd`); the exchange
/// calls back here, once per event. The exchange's methods are generic over the host, so these calls
/// are direct ones, not witness-table calls.
protocol UpstreamExchangeHost: ConnectionDelegate {
    /// Writes the upstream request head: `Forward.writeUpstreamHead` over the host's copy of the
    /// client's head, framed as `framing`.
    func writeUpstreamHead(_ forward: Forward, framing: BodyFraming, to out: inout HeadWriter)
    /// The head (and a body read whole) is on its way: the host sends the body that streams, then
    /// calls `requestBodyDidEnd`, or does so at once when there is none.
    func upstreamRequestDidStart()
    /// The response head came before the request body ended: stop forwarding the body.
    func requestAnsweredEarly()
    /// Writes the response head for the client (the upstream's bytes in `buf`; the route's response
    /// fields are the exchange's `forward`'s); false when the client can no longer take it.
    func sendResponseHead(_ head: HTTPResponseHeadLines, from buf: UnsafeRawBufferPointer) -> Bool
    /// Response body bytes for the client; false when it can no longer take them.
    func sendResponseBody(_ data: UnsafeRawBufferPointer) -> Bool
    /// Enough is queued for the client: the upstream is not read until `resumeUpstream`.
    var downstreamIsFull: Bool { get }
    /// The whole response went through; the upstream connection is released.
    func responseDidComplete()
    /// The exchange failed and its upstream connection is released: answer `error` when nothing was
    /// sent yet and it has a status, else cut the response.
    func exchangeDidFail(_ error: ProxyError)
    /// A timer check (`UpstreamExchange.checkTimer`) must run at or before `due` (wheel clock).
    func scheduleTimerCheck(at due: Int64)
}

/// The upstream half of a request, for HTTP/1.1 and HTTP/2 clients alike: acquiring a pooled
/// connection (the synchronous idle one first), writing the head and a body read whole, forwarding a
/// streamed body, reading the response head, pumping the response body with back-pressure, the body,
/// acquire and response timers, the one retry of an idempotent request on a connection the upstream
/// had closed, and every failure as a `ProxyError`. With several servers (`Forward.balancer`): the
/// server of each attempt, each server's passive health told of failures and successes, and a
/// failed request sent to another server when that is safe (`tryAnotherServer`). One per HTTP/1.1
/// connection (reused from request to request) and one per HTTP/2 stream. Loop-confined.
///
/// Hot path: the state is stored properties of a final class, read and written whole (references
/// swapped by `replace`, the body reader moved out while it delivers), so no access needs a run-time
/// exclusivity check; the common acquire takes an idle connection without a callback.
final class UpstreamExchange {
    private let loop: EventLoop
    private let parser: HTTP1Parser

    /// Where the request goes (nil between exchanges).
    private(set) var forward: Forward?
    private(set) var upstream: UpstreamConnection?
    /// The request as the upstream gets it: its method (the retry, HEAD responses), its framing as
    /// received, and a body read whole for a local decision (sent after the head, with its length).
    private var method = "-"
    private var requestFraming = BodyFraming.none
    private var wholeBody: [UInt8]?
    /// The client's body ended (or there is none).
    private var requestEnded = false
    private var retried = false
    /// Several servers: those this request was sent to (bit i: `balancer.pools[i]`), and how many
    /// times it went to another one after a failure.
    private var tried: UInt64 = 0
    private var serverRetries = 0
    /// The host was told the request started (`upstreamRequestDidStart`: once per exchange).
    private var hostStarted = false
    /// An acquire with a callback is pending; its generation tells a late answer from a current one.
    private var acquiring = false
    private var generation = 0
    private var upstreamStarted: UInt64 = 0
    /// From the request's first byte upstream to the response head (the upstream latency metric).
    private(set) var upstreamSeconds: Double?
    /// The final response head's status and persistence, once it came.
    private(set) var response: (status: Int, keepAlive: Bool)?
    /// The response came before the request body ended: the connection cannot be reused.
    private var earlyResponse = false
    private var responseBody = BodyReader(.none)
    /// The framing of `responseBody` (which is moved out while it reads).
    private(set) var responseFraming = BodyFraming.none
    /// The reader is moved out of its property while it delivers bytes; a read re-entered meanwhile
    /// would find it missing, so it traps (as an exclusivity violation would).
    private var responseBodyLent = false

    /// One deadline at a time (wheel clock), checked lazily by the host's timer: progress moves it.
    enum TimerKind { case body, response, acquire }
    private(set) var timerKind: TimerKind?
    private(set) var deadline: Int64 = .max
    private var progressTimeout: Int64 = 0

    init(loop: EventLoop, parser: HTTP1Parser) {
        self.loop = loop
        self.parser = parser
    }

    // MARK: - The request

    /// A new exchange: `method` and `framing` as the client sent them. Nothing of the last one stays.
    func begin(method: String, framing: BodyFraming) {
        precondition(upstream == nil, "UpstreamExchange: begun while holding an upstream connection")
        replace(&self.method, with: method)
        requestFraming = framing
        requestEnded = framing == .none
        replace(&forward, with: nil)
        replace(&wholeBody, with: nil)
        retried = false
        tried = 0
        serverRetries = 0
        hostStarted = false
        acquiring = false
        upstreamSeconds = nil
        response = nil
        earlyResponse = false
        responseFraming = .none
        replace(&responseBody, with: BodyReader(.none))
        cancelTimer()
    }

    /// The exchange stops (the client is gone, or it failed): its upstream connection, if any, is
    /// closed (not reusable), its timer and a pending acquire dropped. What it knows (`forward`,
    /// `upstreamSeconds`) stays for the access log.
    func stop() {
        release(reusable: false)
        cancelTimer()
        acquiring = false
    }

    /// The exchange is over and logged: what it holds is let go.
    func end() {
        stop()
        replace(&forward, with: nil)
        replace(&wholeBody, with: nil)
    }

    /// Where the request goes, decided before it can be sent (HTTP/2: a zero-length body waits for
    /// END_STREAM).
    func route(to forward: Forward) { replace(&self.forward, with: forward) }

    /// Sends the request to `forward`'s upstream: `body` is one read whole (its length goes in the
    /// head), nil for a body that streams (`writeBody`, `requestBodyDidEnd`).
    func start<H: UpstreamExchangeHost>(_ forward: Forward, body: [UInt8]?, _ host: H) {
        route(to: forward)
        send(body: body, host)
    }

    /// Sends the request to the upstream routed to (`route(to:)`).
    func send<H: UpstreamExchangeHost>(body: [UInt8]?, _ host: H) {
        if body != nil { requestEnded = true }
        replace(&wholeBody, with: body)
        guard let f = forward else { return }
        if let b = f.balancer {
            // Several servers: the balancer's choice (the first attempt always has one).
            guard let i = b.pick(excluding: tried, now: loop.timers.nowMillis) else { return fail(.upstreamUnavailable, host) }
            tried |= 1 << UInt64(i)
            acquire(b.pools[i], fresh: false, host)
        } else {
            acquire(f.pool, fresh: false, host)
        }
    }

    private func acquire<H: UpstreamExchangeHost>(_ pool: UpstreamPool, fresh: Bool, _ host: H) {
        if !fresh, let u = pool.takeIdle() {
            // The common case: a kept-alive connection is free; no callback, no timer.
            startRequest(u, pool, host)
            return
        }
        guard let f = forward else { return }
        // The pool's own connect timer answers first; this guards a queue that never moves.
        arm(.acquire, f.connectTimeoutMillis + 1000, host)
        generation &+= 1
        let current = generation
        acquiring = true
        let done: (Result<UpstreamConnection, UpstreamFailure>) -> Void = { [weak self, weak host] result in
            guard let self, let host, self.acquiring, self.generation == current else {
                if case .success(let u) = result { u.pool.release(u, reusable: true) }
                return
            }
            self.acquiring = false
            switch result {
            case .failure(let failure): self.acquireFailed(failure, pool, host)
            case .success(let u): self.startRequest(u, pool, host)
            }
        }
        if fresh {
            pool.acquireFresh(connectTimeoutMillis: f.connectTimeoutMillis, done)
        } else {
            pool.acquire(connectTimeoutMillis: f.connectTimeoutMillis, done)
        }
    }

    /// No connection: the server is told (a connect error or timeout, a failed TLS handshake count
    /// against it; a full pool does not), and as nothing of the request was sent, it may go to
    /// another server whatever its method.
    private func acquireFailed<H: UpstreamExchangeHost>(_ failure: UpstreamFailure, _ pool: UpstreamPool, _ host: H) {
        pool.noteFailure(failure)
        if tryAnotherServer(host) { return }
        fail(failure.proxyError, host)
    }

    /// Sends the request to a server it has not tried, if the upstream has several, `retries` allows
    /// one more, and one is left. The caller has checked that sending it again is safe.
    private func tryAnotherServer<H: UpstreamExchangeHost>(_ host: H) -> Bool {
        guard let b = forward?.balancer, serverRetries < b.retries,
            let i = b.pick(excluding: tried, now: loop.timers.nowMillis)
        else { return false }
        tried |= 1 << UInt64(i)
        serverRetries += 1
        b.noteRetry()
        retried = false  // the new server's kept-alive connection may be stale too
        acquire(b.pools[i], fresh: false, host)
        return true
    }

    private func startRequest<H: UpstreamExchangeHost>(_ u: UpstreamConnection, _ pool: UpstreamPool, _ host: H) {
        guard let f = forward else { return }
        cancelTimer()
        replace(&upstream, with: u)
        u.beginExchange(host)
        pool.requestsSent &+= 1
        upstreamStarted = EventLoop.monotonicNanos()
        let whole = replace(&wholeBody, with: nil)
        let framing = whole.map { BodyFraming.whole(requestFraming, count: $0.count) } ?? requestFraming
        u.connection.writeHead { host.writeUpstreamHead(f, framing: framing, to: &$0) }
        if let whole {
            // Read whole (bounded) for a local decision: it goes with its length, then the response.
            if !whole.isEmpty { u.connection.write(whole) }
            replace(&wholeBody, with: whole)  // kept: a retry sends it again
            arm(.response, responseTimeout, host)
        }
        if !hostStarted {
            hostStarted = true
            host.upstreamRequestDidStart()
        } else if whole == nil {
            // A retry: only requests whose body was sent whole or had none are sent again, and
            // their body has ended.
            arm(.response, responseTimeout, host)
        }
    }

    /// Streamed request body bytes, framed as the client framed them (chunked stays chunked).
    func writeBody(_ bytes: UnsafeRawBufferPointer) {
        guard let u = upstream else { return }
        if case .chunked = requestFraming {
            u.connection.write { HTTP1Serializer.appendChunk(bytes, to: &$0) }
        } else {
            u.connection.write(bytes)
        }
    }

    /// The client's body ended: its last chunk goes, and the response is awaited.
    func requestBodyDidEnd<H: UpstreamExchangeHost>(_ host: H) {
        requestEnded = true
        if case .chunked = requestFraming { upstream?.connection.write(HTTP1Serializer.lastChunk) }
        if upstream != nil && response == nil { arm(.response, responseTimeout, host) }
    }

    /// Request bytes the upstream has not taken yet (back-pressure on the client).
    var upstreamOutboundBytes: Int { upstream?.connection.outboundBytes ?? 0 }

    private var responseTimeout: Int64 { forward?.responseTimeoutMillis ?? 30_000 }

    // MARK: - The response

    /// The upstream connection has bytes (the host is its delegate).
    func upstreamDidRead<H: UpstreamExchangeHost>(_ host: H) {
        guard let u = upstream else { return }
        madeProgress()
        if response == nil {
            readResponseHead(u, host)
        } else {
            pumpResponseBody(u, host)
        }
    }

    private func readResponseHead<H: UpstreamExchangeHost>(_ u: UpstreamConnection, _ host: H) {
        let final: (HTTPResponseHeadLines, Int)?
        do {
            final = try u.finalResponseHead(parser: parser, requestMethod: method)
        } catch {
            fail(.upstreamBadResponse, host)
            return
        }
        guard let (r, end) = final else { return }
        u.noteSuccess()
        response = (r.status, r.keepAlive)
        upstreamSeconds = Double(EventLoop.monotonicNanos() - upstreamStarted) / 1e9
        if !requestEnded {
            earlyResponse = true
            host.requestAnsweredEarly()
        }
        responseFraming = r.framing
        replace(&responseBody, with: BodyReader(r.framing))
        // The head's ranges point into the upstream's inbound bytes: used before they are consumed.
        let sent = u.connection.inbound.withReadableBytes { host.sendResponseHead(r, from: $0) }
        u.connection.inbound.consume(end)
        u.recycle(r)
        guard sent else {
            fail(.clientGone, host)
            return
        }
        arm(.response, responseTimeout, host)
        pumpResponseBody(u, host)
    }

    private func pumpResponseBody<H: UpstreamExchangeHost>(_ u: UpstreamConnection, _ host: H) {
        var consumed = 0
        var done = false
        var clientGone = false
        precondition(!responseBodyLent, "response body read re-entered")
        responseBodyLent = true
        var reader = replace(&responseBody, with: BodyReader(.none))
        let failed: Bool
        do {
            try u.connection.inbound.withReadableBytes { (buf: UnsafeRawBufferPointer) throws in
                (consumed, done) = try reader.read(buf) { data in
                    if !clientGone && !host.sendResponseBody(UnsafeRawBufferPointer(rebasing: data)) { clientGone = true }
                }
            }
            failed = false
        } catch {
            failed = true
        }
        responseBodyLent = false
        if failed {
            fail(.upstreamBadResponse, host)
            return
        }
        if clientGone {
            fail(.clientGone, host)
            return
        }
        // Sending may have broken the client side and, with it, this exchange and its upstream.
        guard upstream === u, !u.connection.isClosed else { return }
        replace(&responseBody, with: reader)
        u.connection.inbound.consume(consumed)
        if done {
            complete(reusable: reusable(u), host)
        } else if host.downstreamIsFull {
            u.connection.pauseReading()  // resumed when the client drains (`resumeUpstream`)
        }
    }

    /// The client can take more of the response.
    func resumeUpstream() { upstream?.connection.resumeReading() }

    /// Whether the connection can carry another request: a persistent response, read to its end
    /// with nothing after it, to a request that was sent whole.
    private func reusable(_ u: UpstreamConnection) -> Bool {
        guard let r = response, r.keepAlive, !earlyResponse else { return false }
        if case .untilClose = responseFraming { return false }
        return u.connection.inbound.isEmpty
    }

    private func complete<H: UpstreamExchangeHost>(reusable: Bool, _ host: H) {
        cancelTimer()
        release(reusable: reusable)
        host.responseDidComplete()
    }

    /// The upstream connection ended (EOF, error or close) during the exchange.
    func upstreamDidEnd<H: UpstreamExchangeHost>(_ host: H) {
        guard let u = upstream else { return }
        if response != nil, case .untilClose = responseFraming {
            // Close-delimited body: the end of the connection is the end of the body.
            pumpResponseBody(u, host)
            if upstream === u { complete(reusable: false, host) }
            return
        }
        let pool = u.pool
        release(reusable: false)
        if response == nil {
            // Nothing came back: an idempotent request without a body, sent on a reused connection that
            // the upstream had already given up on, is sent once more on a fresh one.
            if !retried, u.mayRetry(method: method, framing: requestFraming) {
                retried = true
                acquire(pool, fresh: true, host)
                return
            }
            // A fresh connection closed before any response: the server failed the request (a reused
            // one may only have timed out idle). It goes to another server only when sending it twice
            // is safe: an idempotent method (RFC 9110 §9.2.2), and a body that was sent whole or empty.
            if u.requestsServed == 1 { pool.noteFailure(.closed) }
            if UpstreamConnection.isIdempotent(method) && requestIsReplayable && tryAnotherServer(host) { return }
        }
        fail(.upstreamClosed, host)
    }

    /// The request can be sent again as it was: no body, or one read whole (kept for that).
    private var requestIsReplayable: Bool {
        switch requestFraming {
        case .none, .contentLength(0): true
        default: wholeBody != nil
        }
    }

    private func release(reusable: Bool) {
        guard let u = replace(&upstream, with: nil) else { return }
        u.endExchange()
        u.connection.resumeReading()
        u.pool.release(u, reusable: reusable)
    }

    /// The exchange failed here: the upstream connection goes (not reusable), then the host answers
    /// or cuts.
    func fail<H: UpstreamExchangeHost>(_ error: ProxyError, _ host: H) {
        stop()
        host.exchangeDidFail(error)
    }

    // MARK: - Timers

    /// Sets the exchange's deadline: `.body` and `.response` move with progress, `.acquire` does not.
    func arm<H: UpstreamExchangeHost>(_ kind: TimerKind, _ ms: Int64, _ host: H) {
        timerKind = kind
        progressTimeout = ms
        deadline = loop.timers.nowMillis + ms
        host.scheduleTimerCheck(at: deadline)
    }

    func cancelTimer() {
        timerKind = nil
        deadline = .max
    }

    /// Bytes moved (either way): a progress timer starts its whole timeout again.
    func madeProgress() {
        if timerKind == .body || timerKind == .response { deadline = loop.timers.nowMillis + progressTimeout }
    }

    /// The host's timer check: fails the exchange when its deadline passed (408 `body_timeout`,
    /// 504 `upstream_timeout`, 503 `upstream_busy`); returns the deadline still ahead (.max: none).
    func checkTimer<H: UpstreamExchangeHost>(now: Int64, _ host: H) -> Int64 {
        guard let kind = timerKind else { return .max }
        guard now >= deadline else { return deadline }
        cancelTimer()
        switch kind {
        case .body: fail(.bodyTimeout, host)
        case .response: fail(.upstreamTimeout, host)
        case .acquire: fail(.upstreamBusy, host)
        }
        return deadline
    }
}

/// Stores `value` in `property` and hands the old value back to be destroyed after the access: the
/// property's access is then a plain move (no release, which could run arbitrary code, inside it),
/// which lets the optimizer drop its run-time exclusivity check. For the per-exchange references
/// that are set and cleared on every request.
@inline(__always) @discardableResult
func replace<T>(_ property: inout T, with value: T) -> T {
    var value = value
    swap(&property, &value)
    return value  // the old value, destroyed by the caller once the access has ended
}
