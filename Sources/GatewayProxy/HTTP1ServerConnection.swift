import Dispatch
import GatewayHTTP
import GatewayIO

/// One downstream HTTP/1.1 connection: the HTTP/1.1 codec of `RequestExchange`. It parses requests
/// one at a time (pipelined requests wait in the buffer and are answered in order), takes each
/// through the exchange's phases (check, route, admit, body, decide, respond, record), reads the
/// request body (to the upstream, or whole for a local handler) and writes the response; the
/// upstream half is its `UpstreamExchange`. Applies the header, body and idle timeouts, and
/// keep-alive. The first request's head must arrive within the header timeout of the accept (the
/// wait for its first byte included); between requests the keep-alive idle timeout applies.
/// Loop-confined.
public final class HTTP1ServerConnection: ConnectionDelegate {
    public let downstream: Connection
    let limits: DownstreamLimits
    private let parser: HTTP1Parser
    let scheme: String
    var loop: EventLoop { downstream.loop }
    /// The current request's phases and state (one object for the connection's life).
    let exchange: RequestExchange
    /// The upstream half of the current request (one object for the connection's life).
    let upstreamExchange: UpstreamExchange
    /// Where this connection's request ids come from (one generator per listener and loop).
    private let requestIDs: RequestIDGenerator
    /// Called once when the connection is gone (for connection gauges and drain bookkeeping).
    public var onClose: (() -> Void)?

    enum Phase {
        case awaitingHead
        /// Reading the request body: streamed to the upstream, or buffered for a local handler.
        case readingBody
        /// The router's handler or the pool has the request; downstream reads are paused.
        case waiting
        case awaitingResponse
        case streamingResponse
        /// Answered from the head (a refusal) while its body is still coming: the body is read and
        /// dropped (at most `limits.discard_body`, within the body timeout), then the next request.
        case discardingBody
        /// Answered and closing while the client may still be sending (a request refused from its
        /// head, a body over the limit): what arrives is read and dropped for a bounded time, so that
        /// the close does not become a TCP reset that could destroy the answer before it is read.
        case lingering
        case closed
    }

    var phase: Phase = .awaitingHead
    var draining = false

    // The current exchange. Its request head as ranges of `headBytes`, a copy of the head's bytes
    // (the array is reused from request to request, like the field ranges' in `spareFields`); the
    // strings of the whole head are built only for routes that need them (`fullHead`).
    var head = HTTPRequestHeadLines.empty
    /// Whether `head` is the current exchange's (false between requests and for a request whose
    /// head could not be parsed).
    var hasHead = false
    /// `head` as strings, once the router asked for them (a protected route reads them before the
    /// body, and its buffered request carries the same): made at most once per request.
    private var materializedHead: HTTPRequestHead?
    /// What the connection read of `head` besides the parser's findings (request id, access line).
    var headExtras = HeadExtras.none
    /// The current request's framing and HTTP minor version (kept apart from `head`: read on every
    /// body read and response).
    private var requestFraming = BodyFraming.none
    var requestMinor = 1
    let headBytes = HeadBytes()
    private var spareFields: [HTTPFieldRange] = []
    /// The last Host value found valid on this connection (the parser does not check it again).
    private var hostMemo = HTTP1Parser.HostMemo()
    var closeAfterResponse = false
    private var requestBody = BodyReader(.none)
    var bodyDone = true
    /// The request body's reader is moved out of its property while it delivers bytes; a read of the
    /// body re-entered meanwhile would find it missing, so it traps (as an exclusivity violation did).
    private var requestBodyLent = false
    var chunkedDownstream = false
    var responseHeadSent = false

    // One deadline at a time (wheel clock), checked lazily: arming or moving it is two stores, and a
    // wheel entry is scheduled only when no pending one fires by the deadline (not per exchange).
    // The connection's own (idle, header, linger) and the exchange's (body, acquire, response) are
    // never armed at once.
    private enum TimerKind { case none, idle, header, linger, discard }
    private var timerKind: TimerKind = .none
    private var deadline: Int64 = 0
    /// The earliest due time of a scheduled wheel entry (.max: none known).
    var timerDue: Int64 = .max
    /// While lingering: the close happens by then whatever the client does.
    private var lingerEnd: Int64 = 0
    /// The peer's address as text, formatted once per connection (logs, X-Forwarded-For).
    lazy var peerHost: String = downstream.peer?.host ?? "-"
    /// Whether the peer is one of the listener's trusted proxies: each request's client is then read
    /// from its X-Forwarded-For (`ClientAddress`), and its forwarding fields are kept upstream.
    lazy var peerTrusted: Bool = downstream.peer.map { limits.trustedProxies.contains($0) } ?? false
    /// The current request's client address: the peer, or the client a trusted proxy named
    /// (`RequestExchange.forwardedClient`, kept while the next request names the same address). The
    /// one value the access line, the router (rate limits, `/explain`) and the buffered request read.
    var clientAddress: SocketAddress? { exchange.forwardedClient ?? downstream.peer }

    /// - Parameter acceptedAtMillis: when the connection was accepted (the loop's wheel clock), if
    ///   before now (a TLS handshake or protocol sniffing came first): the first head's time counts
    ///   from then.
    public init(
        connection: Connection, router: any RequestRouter, limits: DownstreamLimits, scheme: String = "http",
        acceptedAtMillis: Int64? = nil, requestIDs: RequestIDGenerator = RequestIDGenerator()
    ) {
        self.downstream = connection
        exchange = RequestExchange(router: router)
        self.requestIDs = requestIDs
        self.limits = limits
        let parser = HTTP1Parser(limits: limits.parser)
        self.parser = parser
        self.scheme = scheme
        upstreamExchange = UpstreamExchange(loop: connection.loop, parser: parser)
        connection.delegate = self
        let now = connection.loop.timers.nowMillis
        arm(.header, afterMillis: max(1, (acceptedAtMillis ?? now) + limits.headerTimeoutMillis - now))
    }

    // MARK: - Drain

    /// Graceful stop: idle connections close now, busy ones after their current response.
    public func beginDrain() {
        draining = true
        if phase == .awaitingHead && downstream.inbound.isEmpty { downstream.close() }
    }

    // MARK: - ConnectionDelegate (the downstream connection, and the exchange's upstream one)

    public func connectionDidRead(_ c: Connection) {
        if c === downstream {
            downstreamDidRead()
        } else {
            upstreamExchange.upstreamDidRead(self)
        }
    }

    public func connectionDidReadEOF(_ c: Connection) {
        if c === downstream {
            switch phase {
            case .awaitingHead where downstream.inbound.isEmpty:
                downstream.close()
            case .awaitingHead, .readingBody:
                // The client stopped mid-request.
                fail(.clientClosed)
            case .lingering, .discardingBody:
                downstream.close()
            default:
                // A half-closed client may still read its response; close after it.
                closeAfterResponse = true
            }
        } else {
            upstreamExchange.upstreamDidEnd(self)
        }
    }

    public func connectionDidDrain(_ c: Connection) {
        if c === downstream {
            if phase == .streamingResponse { upstreamExchange.resumeUpstream() }
        } else if phase == .readingBody && exchange.bodyTarget == .upstream {
            downstream.resumeReading()
        }
    }

    public func connectionDidClose(_ c: Connection, error: Socket.Error?) {
        if c === downstream {
            cancelTimer()
            if phase != .closed {
                // The exchange cannot finish: its upstream connection is not reusable.
                upstreamExchange.stop()
                if hasHead && phase != .awaitingHead { logExchange(error: error?.isSendTimeout == true ? .sendTimeout : .clientClosed) }
                upstreamExchange.end()
                phase = .closed
            }
            // Exactly once, however the connection ended (including after our own close).
            onClose?()
            onClose = nil
        } else {
            upstreamExchange.upstreamDidEnd(self)
        }
    }

    // MARK: - Request head

    private func downstreamDidRead() {
        switch phase {
        case .awaitingHead:
            parseHead()
        case .readingBody:
            pumpRequestBody()
        case .waiting, .awaitingResponse, .streamingResponse:
            // Pipelined bytes wait; stop reading if they pile up.
            if downstream.inbound.readableBytes > limits.parser.maxHeaderBytes { downstream.pauseReading() }
        case .discardingBody:
            discardBody()
        case .lingering:
            downstream.inbound.consume(downstream.inbound.readableBytes)
            if timerKind == .linger { deadline = min(loop.timers.nowMillis + Self.lingerQuietMillis, lingerEnd) }
        case .closed:
            break
        }
    }

    private func parseHead() {
        guard !downstream.isClosed else { return }
        var fields = replace(&spareFields, with: [])
        var h = HTTPRequestHeadLines.empty
        let result: Int?
        do {
            // A copy in and out (plain loads and stores: no run-time exclusivity check for an inout
            // access to the property).
            var memo = hostMemo
            defer { hostMemo = memo }
            result = try headBytes.parse(parser, downstream.inbound, &fields, &memo, into: &h)
        } catch let e as HTTPParseError {
            startExchange()
            fail(.request(e.kind))
            return
        } catch {
            return
        }
        guard let end = result else {
            replace(&spareFields, with: fields)
            if !downstream.inbound.isEmpty && timerKind == .idle { armHeaderTimer() }
            return
        }
        downstream.inbound.consume(end)
        let bytes = headBytes
        if h.absoluteForm { bytes.takeAuthority(&h) }
        let (m, t) = bytes.with { (h.methodString($0), h.targetString($0)) }
        startExchange(h, method: m, target: t)
        if peerTrusted { resolveClient(h) }
        // 1. check
        if let e = exchange.check(method: m, target: t) { return fail(e) }
        if draining { closeAfterResponse = true }
        if !h.keepAlive { closeAfterResponse = true }
        // 2. route: a plain route is decided without the head's strings, which are built only for
        // the routes that need them (and kept for the buffered request).
        let path = exchange.path
        let decision = bytes.with { buf in
            exchange.router.route(
                method: m, path: path, host: { h.hostString(buf) }, peer: clientAddress, requestID: exchange.requestID,
                head: {
                    let full = h.materialize(buf)
                    self.materializedHead = full
                    return full
                })
        }
        admit(decision, head: h)
    }

    /// The client a trusted peer's X-Forwarded-For names for this request (`ClientAddress`).
    private func resolveClient(_ h: HTTPRequestHeadLines) {
        let trusted = limits.trustedProxies
        guard let client = headBytes.with({ ClientAddress.resolve(h, $0, trusted: trusted) }) else {
            exchange.forwardedClient = nil
            return
        }
        if let previous = exchange.forwardedClient, previous.hasSameAddress(as: client) { return }
        exchange.forwardedClient = client
        exchange.forwardedClientHost = client.host
    }

    /// The current request's head as strings (for buffered routes, which hand it to a handler).
    private func fullHead() -> HTTPRequestHead {
        if let full = materializedHead { return full }
        let h = head
        return headBytes.with { h.materialize($0) }
    }

    /// Ends the current head: its field storage is kept for the next one.
    private func dropHead() {
        guard hasHead else { return }
        hasHead = false
        materializedHead = nil
        headBytes.trim()
        let fields = replace(&head.fields, with: [])
        replace(&spareFields, with: fields)
    }

    /// An exchange whose head could not be read (answered with an error).
    private func startExchange() {
        dropHead()
        exchange.forwardedClient = nil
        requestFraming = .none
        headExtras = .none
        exchange.begin(method: "-", target: "-", requestID: requestIDs.next())
        resetExchange()
    }

    private func startExchange(_ h: HTTPRequestHeadLines, method: String, target: String) {
        dropHead()
        replace(&head, with: h)
        hasHead = true
        requestFraming = h.framing
        requestMinor = h.minorVersion
        let bytes = headBytes
        let extras = h.fields.isEmpty ? .none : bytes.with { HeadExtras.scan(h, $0) }
        headExtras = extras
        // The client's id when it sent one valid X-Request-Id (its string is made only then).
        let clientID = extras.requestID == nil ? nil : bytes.with { RequestID.fromClient(extras, $0) }
        exchange.begin(method: method, target: target, requestID: clientID ?? requestIDs.next())
        resetExchange()
    }

    private func resetExchange() {
        cancelTimer()
        responseHeadSent = false
        upstreamExchange.begin(method: exchange.method, framing: requestFraming)
        if requestFraming != .none {
            replace(&requestBody, with: BodyReader(requestFraming))
            bodyDone = false
        } else {
            replace(&requestBody, with: BodyReader(.none))
            bodyDone = true
        }
    }

    /// 3. admit: the decision's body policy, carried out on this connection.
    private func admit(_ decision: RouteDecision, head h: HTTPRequestHeadLines) {
        switch exchange.admit(decision, framing: h.framing) {
        case .respond(let resp):
            // The body (if any) is not wanted: dropped after the answer when small (the connection
            // is kept), else the connection closes after the answer.
            if !bodyDone && !mayDiscardBody(h) { closeAfterResponse = true }
            phase = .waiting
            writeLocal(resp)
        case .refuse(let e):
            fail(e)
        case .forward(let f):
            phase = .waiting
            downstream.pauseReading()
            upstreamExchange.start(f, body: nil, self)  // `100 Continue` once the upstream took the head
        case .buffer:
            sendContinueIfExpected(h)
            phase = .readingBody
            upstreamExchange.arm(.body, limits.bodyTimeoutMillis, self)
            pumpRequestBody()
        }
    }

    /// Whether the body of a request answered from its head may be read and dropped to keep the
    /// connection: declared within `limits.discard_body` (or already received whole), or chunked
    /// (bounded by the same limit as it comes). Not when the client waits for `100 Continue`
    /// before sending it (it is never sent for a refusal) and nothing of it came yet.
    private func mayDiscardBody(_ h: HTTPRequestHeadLines) -> Bool {
        let limit = limits.discardBodyBytes
        guard limit > 0 else { return false }
        let received = downstream.inbound.readableBytes
        switch h.framing {
        case .contentLength(let n):
            if UInt64(received) >= n { return true }
            return n <= UInt64(limit) && !(h.expectsContinue && received == 0)
        case .chunked:
            return !(h.expectsContinue && received == 0)
        case .none, .untilClose:
            return false
        }
    }

    private static let continueResponse = Array("HTTP/1.1 100 Continue\r\n\r\n".utf8)

    func sendContinueIfExpected(_ h: HTTPRequestHeadLines) {
        if h.expectsContinue && !bodyDone && downstream.inbound.isEmpty {
            downstream.write(Self.continueResponse)
        }
    }

    // MARK: - Request body

    func pumpRequestBody() {
        guard phase == .readingBody else { return }
        if bodyDone {
            requestBodyComplete()
            return
        }
        var consumed = 0
        var progressed = false
        // The reader is moved out while it delivers (delivering may re-enter this connection); it
        // goes back only if the exchange is still reading its body.
        precondition(!requestBodyLent, "request body read re-entered")
        requestBodyLent = true
        var reader = replace(&requestBody, with: BodyReader(.none))
        var failure: HTTPParseError?
        downstream.inbound.withReadableBytes { (buf: UnsafeRawBufferPointer) in
            do throws(HTTPParseError) {
                let (used, done) = try reader.read(buf) { data in
                    deliverBody(data)
                    progressed = true
                }
                consumed = used
                if done { bodyDone = true }
            } catch {
                failure = error
            }
        }
        requestBodyLent = false
        if let failure {
            fail(.request(failure.kind))
            return
        }
        if phase == .readingBody { replace(&requestBody, with: reader) }
        // Delivering body bytes may have ended the exchange and closed the connection (its buffer is gone).
        guard !downstream.isClosed else { return }
        downstream.inbound.consume(consumed)
        if progressed { upstreamExchange.madeProgress() }
        guard phase == .readingBody else { return }  // delivering may have aborted the exchange
        if bodyDone {
            requestBodyComplete()
        } else if exchange.bodyTarget == .upstream, upstreamExchange.upstreamOutboundBytes > limits.highWaterMark {
            downstream.pauseReading()  // resumed when the upstream drains
        }
    }

    /// 4. body: each byte counted against the route's limit; kept, or written upstream.
    private func deliverBody(_ data: Slice<UnsafeRawBufferPointer>) {
        guard phase == .readingBody else { return }
        let bytes = UnsafeRawBufferPointer(rebasing: data)
        guard exchange.take(bytes) else { return fail(.bodyTooLarge) }
        if exchange.bodyTarget == .upstream { upstreamExchange.writeBody(bytes) }
    }

    private func requestBodyComplete() {
        cancelTimer()
        switch exchange.bodyTarget {
        case .buffer:
            // 5. decide
            phase = .waiting
            downstream.pauseReading()
            guard hasHead, exchange.awaitsBody else { return }
            let request = exchange.bufferedRequest(
                head: fullHead(), peer: downstream.peer, scheme: scheme, limits: limits,
                forwardingPeer: peerTrusted ? ForwardingPeer(address: peerHost, trusted: true) : nil)
            exchange.decide(request) { [weak self] outcome in self?.decided(outcome) }
        case .upstream:
            phase = .awaitingResponse
            upstreamExchange.requestBodyDidEnd(self)
        case .discard:
            break
        }
    }

    private func decided(_ outcome: BufferedOutcome) {
        guard phase == .waiting, !downstream.isClosed else { return }
        switch outcome {
        case .respond(let r):
            writeLocal(r)
        case .forward(let f):
            // 6. forward: the body was read already (bounded) for a local decision: it goes whole,
            // with its length.
            upstreamExchange.start(f, body: exchange.forwardDecided(f), self)
        }
    }

    // MARK: - Ending exchanges

    func finishExchange(error: ProxyError?) {
        logExchange(error: error)
        upstreamExchange.end()
        dropHead()
        exchange.discardBody()
        cancelTimer()
        if closeAfterResponse || draining {
            if !bodyDone || !downstream.inbound.isEmpty {
                startLinger()
                return
            }
            phase = .closed
            downstream.pauseReading()
            downstream.closeAfterWriting()
            return
        }
        if !bodyDone {
            startDiscard()
            return
        }
        awaitNextRequest()
    }

    /// Keep-alive: the next request's head is read (what was pipelined first).
    private func awaitNextRequest() {
        phase = .awaitingHead
        closeAfterResponse = false
        armIdleTimer()
        downstream.resumeReading()
        if !downstream.inbound.isEmpty { loop.enqueue { [weak self] in self?.parseHeadIfIdle() } }
    }

    private func parseHeadIfIdle() { if phase == .awaitingHead { parseHead() } }

    /// Bytes of the current body dropped so far (framing included), while discarding it.
    private var discardedBytes = 0

    /// After an answer from the head that keeps the connection (`mayDiscardBody`): the body is read
    /// and dropped, then the next request is served. The body timeout applies between its bytes.
    private func startDiscard() {
        phase = .discardingBody
        discardedBytes = 0
        arm(.discard, afterMillis: limits.bodyTimeoutMillis)
        downstream.resumeReading()
        discardBody()
    }

    private func discardBody() {
        guard phase == .discardingBody, !downstream.isClosed else { return }
        var reader = replace(&requestBody, with: BodyReader(.none))
        var outcome: (consumed: Int, done: Bool)? = nil
        downstream.inbound.withReadableBytes { buf in
            outcome = try? reader.read(buf) { _ in }
        }
        replace(&requestBody, with: reader)
        guard let (used, done) = outcome else {
            // Bad chunked framing: the next request cannot be found; closed (the answer is out).
            closeAfterResponse = true
            startLinger()
            return
        }
        downstream.inbound.consume(used)
        discardedBytes += used
        if done {
            bodyDone = true
            awaitNextRequest()
        } else if discardedBytes > limits.discardBodyBytes {
            // Larger than announced (chunked): the connection is not worth keeping.
            closeAfterResponse = true
            startLinger()
        } else if used > 0 {
            arm(.discard, afterMillis: limits.bodyTimeoutMillis)
        }
    }

    /// The same bounds as HTTP/2's linger after a GOAWAY: closed once the client has been quiet this
    /// long with the answer written, or once the client closes…
    static let lingerQuietMillis: Int64 = HTTP2ServerConnection.lingerQuietMillis
    /// …and at the latest this long after the answer, whatever the client sends.
    static let lingerMaxMillis: Int64 = HTTP2ServerConnection.lingerMaxMillis

    /// After an answer that leaves request bytes unread: read and drop input until the client is
    /// quiet (or closes) and the answer is written, within `lingerMaxMillis`; then close.
    private func startLinger() {
        phase = .lingering
        lingerEnd = loop.timers.nowMillis + Self.lingerMaxMillis
        arm(.linger, afterMillis: Self.lingerQuietMillis)
        downstream.resumeReading()
        // What was read already is dropped once the caller is done with the buffer (this may run
        // while a body read has it lent).
        loop.enqueue { [weak self] in
            guard let self, self.phase == .lingering, !self.downstream.isClosed else { return }
            self.downstream.inbound.consume(self.downstream.inbound.readableBytes)
        }
    }

    private func lingerCheck() {
        let now = loop.timers.nowMillis
        if now < lingerEnd && downstream.outboundBytes > 0 {
            arm(.linger, afterMillis: min(Self.lingerQuietMillis, lingerEnd - now))
        } else {
            downstream.close()
        }
    }

    // MARK: - Timers

    /// Cancels the connection's timer and the exchange's.
    func cancelTimer() {
        timerKind = .none
        upstreamExchange.cancelTimer()
    }

    /// Sets the connection's one deadline; schedules a wheel entry only if none is due by then.
    private func arm(_ kind: TimerKind, afterMillis ms: Int64) {
        let now = loop.timers.nowMillis
        timerKind = kind
        deadline = now + ms
        if deadline < timerDue { scheduleTimerCheck(at: deadline, now: now) }
    }

    func scheduleTimerCheck(at due: Int64, now: Int64) {
        timerDue = due
        loop.timers.schedule(afterMillis: max(1, due - now)) { [weak self] in self?.timerCheck(due: due) }
    }

    private func timerCheck(due: Int64) {
        if due == timerDue { timerDue = .max }
        guard phase != .closed else { return }
        let now = loop.timers.nowMillis
        guard timerKind != .none else {
            let next = upstreamExchange.checkTimer(now: now, self)
            if next < timerDue && phase != .closed { scheduleTimerCheck(at: next, now: now) }
            return
        }
        guard now >= deadline else {
            if deadline < timerDue { scheduleTimerCheck(at: deadline, now: now) }
            return
        }
        let kind = timerKind
        timerKind = .none
        switch kind {
        case .none:
            break
        case .idle, .header:
            // The first head's deadline runs from the accept: a client that sent nothing is closed
            // without an answer, like an idle keep-alive connection.
            guard phase == .awaitingHead else { return }
            if downstream.inbound.isEmpty { downstream.close() } else { headerTimedOut() }
        case .linger:
            lingerCheck()
        case .discard:
            // The body stopped coming: nothing more is read on this connection.
            if phase == .discardingBody { downstream.close() }
        }
    }

    private func armIdleTimer() { arm(.idle, afterMillis: limits.idleTimeoutMillis) }

    private func armHeaderTimer() { arm(.header, afterMillis: limits.headerTimeoutMillis) }

    private func headerTimedOut() {
        guard phase == .awaitingHead else { return }
        startExchange()
        fail(.headerTimeout)
    }
}
