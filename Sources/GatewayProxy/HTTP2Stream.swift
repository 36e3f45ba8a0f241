import GatewayHTTP
import GatewayIO

/// One HTTP/2 stream's request: the HTTP/2 codec of `RequestExchange` (the same phases, request
/// syntax, routing and body rules as `HTTP1ServerConnection`), with the session in place of the
/// downstream socket; the upstream half is its `UpstreamExchange`, whose host it is (and so the
/// delegate of its upstream connection). Request body bytes are given back to the client's
/// flow-control window (`consume`) only once the upstream took them. Loop-confined.
final class HTTP2Stream {
    let id: Int32
    let head: HTTPRequestHead
    unowned let conn: HTTP2ServerConnection
    private var session: HTTP2ServerSession { conn.session }
    /// The request's phases and state.
    private let exchange: RequestExchange
    private let upstreamExchange: UpstreamExchange
    private var requestID: RequestID { exchange.requestID }
    private var requestEnded = false
    /// Request body received before the upstream request started (bounded by the stream window:
    /// none of it is consumed yet).
    private var pending: [UInt8] = []
    /// Body bytes written to the upstream and not yet acknowledged to the client (`consume`).
    private var unconsumed = 0
    /// Body bytes written to the upstream so far.
    private var forwardedBodyBytes = 0
    /// With a declared content-length: its last byte, held back until END_STREAM (see `writeBody`).
    private var heldLastByte: UInt8?
    /// `content-length: 0` on a stream still open: the upstream request waits for END_STREAM.
    private var awaitingEmptyEnd = false
    private var waitingForHandler = false

    /// The stream's client address: the peer, or the client a trusted proxy named
    /// (`RequestExchange.forwardedClient`). The one value the access line, the router (rate limits,
    /// `/explain`) and the buffered request read.
    private var clientAddress: SocketAddress? { exchange.forwardedClient ?? conn.transport.peer }

    /// The stream's own deadlines, for what its exchange no longer times (docs/http2.md, "Deadlines"):
    /// response bytes waiting on the client's flow-control window must move within `send_timeout`
    /// (watched from `sendWatchSince`, the first check that saw `sendWatchSent` bytes sent); a request
    /// body still coming after the response is complete must move within `body_timeout`.
    private var sendWatchSent = 0
    private var sendWatchSince: Int64 = .max
    private var lastRequestMillis: Int64 = 0

    /// The stream was reset by us (RST_STREAM queued): nothing more is timed.
    private var resetSent = false

    private var responseHeadSent = false
    private var responseDone = false
    private var finished = false
    private var error: ProxyError?

    init(id: Int32, head: HTTPRequestHead, connection: HTTP2ServerConnection) {
        self.id = id
        self.head = head
        self.conn = connection
        exchange = RequestExchange(router: connection.router)
        exchange.begin(method: head.method, target: head.target, requestID: RequestID.fromClient(head) ?? connection.requestIDs.next())
        upstreamExchange = UpstreamExchange(loop: connection.loop, parser: connection.responseParser)
        upstreamExchange.begin(method: head.method, framing: head.framing)
    }

    // MARK: - Request

    func start() {
        if conn.peerTrusted { resolveClient() }
        // The request syntax HTTP/1.1's parser holds requests to (`RequestSyntax`), before routing.
        guard RequestSyntax.isCanonicalMethod(head.method) else { return fail(.request(.badMethod)) }
        guard let host = head.headers.fields.first?.value, RequestSyntax.isValidHost(host) else { return fail(.request(.badHost)) }
        // 1. check, 2. route, 3. admit
        if let e = exchange.check(method: head.method, target: head.target) { return fail(e) }
        switch exchange.admit(exchange.route(head, peer: clientAddress), framing: head.framing) {
        case .respond(let r):
            respond(r)
        case .refuse(let e):
            fail(e)
        case .forward(let f):
            sendContinueIfExpected()
            if case .contentLength(0) = head.framing, !requestEnded {
                // Complete as the upstream would read it; only END_STREAM says no DATA follows
                // (RFC 9113 §8.1.1). The END_STREAM of a HEADERS frame is the very next event.
                upstreamExchange.route(to: f)
                awaitingEmptyEnd = true
                upstreamExchange.arm(.body, conn.limits.bodyTimeoutMillis, self)
                return
            }
            upstreamExchange.start(f, body: nil, self)
        case .buffer:
            sendContinueIfExpected()
            upstreamExchange.arm(.body, conn.limits.bodyTimeoutMillis, self)
        }
    }

    /// The head of a request that could not be read (its header list too large): recorded as `-`.
    static func unreadHead(endStream: Bool) -> HTTPRequestHead {
        HTTPRequestHead(method: "-", target: "-", minorVersion: 1, headers: HTTPFields(), framing: endStream ? .none : .chunked)
    }

    /// A request refused before its head could be read (`unreadHead`): answered as HTTP/1.1 answers
    /// it (`headers_too_large`, 431, JSON with the request id), its body dropped.
    func refuse(_ e: ProxyError) {
        if head.framing == .none { requestEnded = true }
        fail(e)
    }

    /// The client a trusted peer's x-forwarded-for names (`ClientAddress`, over the head laid out as
    /// bytes in the connection's buffer, as the upstream writer reads it).
    private func resolveClient() {
        let bytes = conn.upstreamHeadBytes
        let lines = bytes.set(head, reusing: conn.takeSpareHeadFields())
        let trusted = conn.limits.trustedProxies
        exchange.forwardedClient = bytes.with { ClientAddress.resolve(lines, $0, trusted: trusted) }
        conn.spareHeadFields = lines.fields
        if let c = exchange.forwardedClient { exchange.forwardedClientHost = c.host }
    }

    /// `expect: 100-continue` (RFC 9110 §10.1.1): the body is wanted, as on HTTP/1.1 (the upstream
    /// request goes without `Expect`).
    private func sendContinueIfExpected() {
        guard head.framing != .none, head.expectsContinue else { return }  // no body (a GET): no field lookup
        try? session.submitInterimResponse(streamID: id, status: 100)
    }

    /// 4. body: DATA counted against the route's limit, kept (read whole), or written upstream.
    func requestData(_ bytes: [UInt8]) {
        if responseDone { lastRequestMillis = conn.loop.timers.nowMillis }
        let target = exchange.bodyTarget
        if target == .buffer && waitingForHandler {
            // Bytes after the handler started cannot be (the body ended): dropped.
            session.consume(streamID: id, count: bytes.count)
            return
        }
        let admitted = bytes.withUnsafeBytes { exchange.take($0) }
        switch target {
        case .discard:
            session.consume(streamID: id, count: bytes.count)
        case .buffer:
            session.consume(streamID: id, count: bytes.count)
            guard admitted else { return fail(.bodyTooLarge) }
            upstreamExchange.madeProgress()
        case .upstream:
            guard admitted else {
                pending.append(contentsOf: bytes)
                return fail(.bodyTooLarge)
            }
            upstreamExchange.madeProgress()
            if upstreamExchange.upstream != nil {
                writeBody(bytes)
            } else {
                pending.append(contentsOf: bytes)
            }
        }
    }

    func requestEnd() {
        requestEnded = true
        switch exchange.bodyTarget {
        case .discard:
            break
        case .buffer:
            // 5. decide
            guard exchange.awaitsBody else { return }
            waitingForHandler = true
            upstreamExchange.cancelTimer()
            let request = exchange.bufferedRequest(
                head: head, peer: conn.transport.peer, scheme: conn.scheme, limits: conn.limits,
                forwardingPeer: conn.peerTrusted ? ForwardingPeer(address: conn.peerHost, trusted: true) : nil)
            exchange.decide(request) { [weak self] outcome in self?.decided(outcome) }
        case .upstream:
            if awaitingEmptyEnd {
                awaitingEmptyEnd = false
                upstreamExchange.send(body: nil, self)
                return
            }
            guard upstreamExchange.upstream != nil else { return }  // the request starts with the body ended
            if let last = heldLastByte {
                heldLastByte = nil
                withUnsafeBytes(of: last) { upstreamExchange.writeBody($0) }
                unconsumed += 1
                acknowledgeWritten()
            }
            upstreamExchange.requestBodyDidEnd(self)
        }
    }

    private func decided(_ outcome: BufferedOutcome) {
        guard !finished, waitingForHandler else { return }
        waitingForHandler = false
        switch outcome {
        case .respond(let r):
            respond(r)
        case .forward(let f):
            // 6. forward: read whole for a local decision, it goes with its length.
            upstreamExchange.start(f, body: exchange.forwardDecided(f), self)
        }
        conn.pump()
    }

    /// Writes request body bytes upstream. With a declared content-length, the body's last byte
    /// waits for END_STREAM (`requestEnd`): an upstream that has every declared byte holds a
    /// complete request, and only END_STREAM shows that the DATA add up to the length (RFC 9113
    /// §8.1.1). nghttp2 refuses DATA beyond the length before delivering it, and an END_STREAM short
    /// of it, with RST_STREAM PROTOCOL_ERROR: the stream then closes, its upstream request still
    /// incomplete, and the upstream connection is closed (the request aborted, never executed).
    private func writeBody(_ bytes: [UInt8]) {
        guard !bytes.isEmpty else { return }
        var count = bytes.count
        if !requestEnded, case .contentLength(let n) = head.framing, forwardedBodyBytes + count >= n {
            count -= 1  // the last byte (nghttp2 delivers no DATA beyond n)
            heldLastByte = bytes[count]
        }
        bytes.withUnsafeBytes { upstreamExchange.writeBody(UnsafeRawBufferPointer(rebasing: $0[0..<count])) }
        forwardedBodyBytes += count
        unconsumed += count
        acknowledgeWritten()
    }

    /// Reopens the client's window for what the upstream took (its queue is at or below the mark).
    private func acknowledgeWritten() {
        guard unconsumed > 0, upstreamExchange.upstream != nil, upstreamExchange.upstreamOutboundBytes <= conn.limits.highWaterMark else {
            return
        }
        session.consume(streamID: id, count: unconsumed)
        unconsumed = 0
    }

    /// Stops forwarding the request body: what was held is given back to the client's windows.
    private func discardRequestBody() {
        exchange.discardBody()  // a body read whole was given back to the windows as it came
        let held = pending.count + unconsumed + (heldLastByte == nil ? 0 : 1)
        heldLastByte = nil
        pending = []
        unconsumed = 0
        if held > 0 { session.consume(streamID: id, count: held) }
    }

    /// The response buffer fell below the high-water mark.
    func resumeUpstream() { upstreamExchange.resumeUpstream() }

    // MARK: - Answers and errors

    /// A local answer (JSON errors, local endpoints) for a stream with no response yet.
    private func respond(_ r: LocalResponse) {
        guard !responseHeadSent, !finished else { return }
        if !requestEnded {
            // The body is not wanted: what comes is dropped (its window given back, nothing kept).
            discardRequestBody()
            // More than one stream window still to come (or an unknown length): once the answer is
            // out, the client is told to stop sending (RST_STREAM NO_ERROR, RFC 9113 §8.1). A rest
            // that fits in the window is let through: some clients (curl 7.88) report an upload
            // error instead of the response when a reset cuts their upload.
            let rest: UInt64 = if case .contentLength(let n) = head.framing { n &- UInt64(exchange.requestBodyBytes) } else { .max }
            if rest > UInt64(session.settings.initialWindowSize) { session.stopRequestAfterResponse(streamID: id) }
        }
        upstreamExchange.cancelTimer()
        lastRequestMillis = conn.loop.timers.nowMillis
        watchAfterResponse()
        // 7. respond
        let fields = exchange.localFields(r)
        let noBody = head.method == "HEAD" || r.status == 204 || r.status == 304 || r.body.isEmpty
        responseHeadSent = true
        responseDone = true
        do {
            try session.submitResponse(streamID: id, status: r.status, headers: fields, endStream: noBody)
            if !noBody {
                try session.sendResponseBody(streamID: id, r.body, endStream: true)
                exchange.responseBytes += r.body.count
            }
        } catch {
            // The stream or the connection is already gone; its close is reported separately.
        }
    }

    /// The request failed. Before the response head an error with a status is answered; after it,
    /// or without a status, the stream is reset (RST_STREAM INTERNAL_ERROR: the client sees the
    /// response cut short). Either way `error` is the stream's in the access log and metrics.
    private func fail(_ e: ProxyError) {
        guard !finished else { return }
        upstreamExchange.stop()
        error = e
        if !responseHeadSent, e.status != nil {
            respond(e.response(requestId: requestID.text))
            return
        }
        discardRequestBody()
        responseDone = true
        resetSent = true
        conn.resetStream(id, reason: e.code)
    }

    func clientReset(_ code: HTTP2ErrorCode) {
        error = error ?? .clientReset
    }

    /// The session closed the stream: the last event for it.
    func streamClosed(_ code: HTTP2ErrorCode) {
        guard !finished else { return }
        if !responseDone || code != .noError { error = error ?? .streamReset }
        finish()
    }

    /// The downstream connection closed with this stream open (`sendTimeout`: its socket took
    /// nothing for the send timeout).
    func connectionGone(sendTimeout: Bool) {
        guard !finished else { return }
        if sendTimeout { error = error ?? .sendTimeout }
        // Not done for the client while response bytes still waited in the session (its window).
        let undelivered = (session.responseSendState(streamID: id)?.waiting ?? 0) > 0
        if !responseDone || undelivered { error = error ?? .clientClosed }
        finish()
    }

    /// 8. record
    private func finish() {
        finished = true
        exchange.discardBody()
        upstreamExchange.stop()
        exchange.finish(
            error: error, upstream: upstreamExchange, peerHost: conn.peerHost, protocolName: "h2", httpVersion: "HTTP/2.0",
            fields: LoggedFields.of(head))
        upstreamExchange.end()
    }

    /// The connection's timer check: the exchange's deadline (body, acquire, response) and the
    /// stream's own (send, request after the response), fired when passed; returns the earliest
    /// one still ahead (.max: none).
    func checkTimer(now: Int64) -> Int64 {
        guard !finished else { return .max }
        var next = upstreamExchange.checkTimer(now: now, self)
        guard !finished, !resetSent else { return .max }
        let limits = conn.limits
        if let state = session.responseSendState(streamID: id), state.waiting > 0 {
            if state.sent != sendWatchSent || sendWatchSince == .max {
                sendWatchSent = state.sent
                sendWatchSince = now
            } else if now - sendWatchSince >= limits.sendTimeoutMillis {
                sendTimedOut()
                return .max
            }
            // Checked every quarter of the timeout while bytes wait: a stall is found within 1.25×.
            next = min(next, sendWatchSince + limits.sendTimeoutMillis, now + max(1, limits.sendTimeoutMillis / 4))
        } else {
            sendWatchSince = .max
            if responseDone && !requestEnded && upstreamExchange.timerKind == nil {
                let due = lastRequestMillis + limits.bodyTimeoutMillis
                if now >= due {
                    requestTimedOutAfterResponse()
                    return .max
                }
                next = min(next, due)
            }
        }
        return next
    }

    /// After the response is complete (or answered locally): a check is due while the stream still
    /// waits on the client (response bytes held by its window, or its request body still coming).
    private func watchAfterResponse() {
        let limits = conn.limits
        conn.schedule(at: conn.loop.timers.nowMillis + max(1, min(limits.sendTimeoutMillis / 4, limits.bodyTimeoutMillis)))
    }

    /// The client took none of the response for `send_timeout` (its windows stayed shut): the
    /// stream is reset (RST_STREAM CANCEL), which frees it and what it holds.
    private func sendTimedOut() {
        resetSent = true
        error = .sendTimeout
        discardRequestBody()
        responseDone = true
        conn.resetStream(id, reason: ProxyError.sendTimeout.code, code: .cancel)
    }

    /// The response is complete but the request body stopped for `body_timeout`: the client is told
    /// to stop sending (RST_STREAM NO_ERROR, RFC 9113 §8.1).
    private func requestTimedOutAfterResponse() {
        resetSent = true
        error = error ?? .bodyTimeout
        discardRequestBody()
        conn.resetStream(id, reason: ProxyError.bodyTimeout.code, code: .noError)
    }
}

// MARK: - The upstream exchange's host

extension HTTP2Stream: UpstreamExchangeHost {
    func writeUpstreamHead(_ forward: Forward, framing: BodyFraming, to out: inout HeadWriter) {
        let client = conn.transport.peer == nil ? "unknown" : conn.peerHost
        // The stream's head laid out as bytes in the connection's buffer, for the one upstream writer.
        let bytes = conn.upstreamHeadBytes
        let lines = bytes.set(head, reusing: conn.takeSpareHeadFields())
        bytes.with { buf in
            forward.writeUpstreamHead(
                lines, buf, client: client, proto: conn.scheme, trustedPeer: conn.peerTrusted, requestID: requestID, framing: framing,
                dropFoldableNames: conn.limits.dropFoldableNames, to: &out)
        }
        conn.spareHeadFields = lines.fields
    }

    func upstreamRequestDidStart() {
        guard exchange.bodyTarget == .upstream else { return }  // a body read whole went with the head
        let early = pending
        pending = []
        writeBody(early)
        if requestEnded {
            upstreamExchange.requestBodyDidEnd(self)
        } else {
            upstreamExchange.arm(.body, conn.limits.bodyTimeoutMillis, self)
        }
        conn.pump()  // window updates for the body written (after an acquire that waited)
    }

    func requestAnsweredEarly() {
        // Answered before the request body ended: stop forwarding it.
        discardRequestBody()
    }

    func sendResponseHead(_ r: HTTPResponseHeadLines, from buf: UnsafeRawBufferPointer) -> Bool {
        let dropContentLength: Bool
        switch r.framing {
        case .chunked, .untilClose: dropContentLength = true
        case .contentLength, .none: dropContentLength = false
        }
        let endStream: Bool
        if case .none = r.framing { endStream = true } else { endStream = false }
        exchange.responseStatus = r.status
        responseHeadSent = true
        upstreamExchange.forward?.accountTap?.read(r, buf)
        do {
            if let forward = upstreamExchange.forward, forward.rewritesResponse {
                // Fields set (or read and removed) by the route: through strings, as `HTTPFields.set` defines them.
                let full = r.materialize(buf)
                forward.responseHook?.observe?(full)
                let fields = DownstreamResponseHead.fields(
                    full, routeFields: forward.responseHeaders, dropContentLength: dropContentLength,
                    remove: forward.responseHook?.remove ?? [],
                    requestID: requestID.text, passServer: forward.passServerHeader)
                try session.submitResponse(streamID: id, status: r.status, headers: fields, endStream: endStream)
            } else {
                // The usual case: the header list is built from the upstream's bytes, no string per field.
                let routeFields = upstreamExchange.forward?.responseHeaders ?? HTTPFields()
                let passServer = upstreamExchange.forward?.passServerHeader ?? false
                try requestID.withBytes { i in
                    try session.submitResponse(streamID: id, status: r.status, endStream: endStream) {
                        DownstreamResponseHead.appendHTTP2(
                            r, from: buf, dropContentLength: dropContentLength, requestID: i, routeFields: routeFields,
                            passServer: passServer, to: &$0)
                    }
                }
            }
            return true
        } catch {
            return false
        }
    }

    func sendResponseBody(_ data: UnsafeRawBufferPointer) -> Bool {
        guard !data.isEmpty else { return true }
        exchange.responseBytes += data.count
        do {
            try session.sendResponseBody(streamID: id, data, endStream: false)
            return true
        } catch {
            return false
        }
    }

    var downstreamIsFull: Bool { session.shouldPauseUpstream(streamID: id) }  // resumed on .responseWritable

    func responseDidComplete() {
        if responseDone { return }
        responseDone = true
        lastRequestMillis = conn.loop.timers.nowMillis
        watchAfterResponse()
        // A response without a body ended the stream with its HEADERS frame.
        if case .none = upstreamExchange.responseFraming { return }
        try? session.sendResponseBody(streamID: id, [], endStream: true)
    }

    func exchangeDidFail(_ e: ProxyError) {
        if e == .clientGone {
            // The session cannot take the response any more (stream or connection closed under us).
            error = error ?? e
            responseDone = true
        } else {
            fail(e)
        }
        conn.pump()
    }

    func scheduleTimerCheck(at due: Int64) { conn.schedule(at: due) }

    // MARK: ConnectionDelegate (the upstream connection)

    func connectionDidRead(_ c: Connection) {
        upstreamExchange.upstreamDidRead(self)
        conn.pump()
    }

    func connectionDidReadEOF(_ c: Connection) {
        upstreamExchange.upstreamDidEnd(self)
        conn.pump()
    }

    func connectionDidDrain(_ c: Connection) {
        acknowledgeWritten()
        conn.pump()
    }

    func connectionDidClose(_ c: Connection, error: Socket.Error?) {
        upstreamExchange.upstreamDidEnd(self)
        conn.pump()
    }
}
