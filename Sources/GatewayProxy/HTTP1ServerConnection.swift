import Dispatch
import GatewayHTTP
import GatewayIO

/// One downstream HTTP/1.1 connection: parses requests one at a time (pipelined requests wait in
/// the buffer and are answered in order), asks the router what to do, streams bodies to and from an
/// upstream with back-pressure both ways, and applies the header, body, response and idle timeouts.
/// The first request's head must arrive within the header timeout of the accept (the wait for its
/// first byte included); between requests the keep-alive idle timeout applies. Loop-confined.
public final class HTTP1ServerConnection: ConnectionDelegate {
    public let downstream: Connection
    private let router: any RequestRouter
    private let limits: DownstreamLimits
    private let parser: HTTP1Parser
    private let scheme: String
    private var loop: EventLoop { downstream.loop }
    /// Called once when the connection is gone (for connection gauges and drain bookkeeping).
    public var onClose: (() -> Void)?

    private enum Phase {
        case awaitingHead
        /// Reading the request body: streamed to the upstream, or buffered for a local handler.
        case readingBody
        /// The router's handler or the pool has the request; downstream reads are paused.
        case waiting
        case awaitingResponse
        case streamingResponse
        /// Answered and closing while the client may still be sending (a request refused from its
        /// head, a body over the limit): what arrives is read and dropped for a bounded time, so that
        /// the close does not become a TCP reset that could destroy the answer before it is read.
        case lingering
        case closed
    }

    private enum BodyTarget { case upstream, buffer }

    private var phase: Phase = .awaitingHead
    private var draining = false

    // The current exchange. Its request head as ranges of `headBytes`, a copy of the head's bytes
    // (the array is reused from request to request, like the field ranges' in `spareFields`); the
    // strings of the whole head are built only for routes that need them (`fullHead`).
    private var head = HTTPRequestHeadLines.empty
    /// Whether `head` is the current exchange's (false between requests and for a request whose
    /// head could not be parsed).
    private var hasHead = false
    /// The current request's framing and HTTP minor version (kept apart from `head`: read on every
    /// body read and response).
    private var requestFraming = BodyFraming.none
    private var requestMinor = 1
    private let headBytes = HeadBytes()
    private var spareFields: [HTTPFieldRange] = []
    /// The last Host value found valid on this connection (the parser does not check it again).
    private var hostMemo = HTTP1Parser.HostMemo()
    private var method = "-"
    private var target = "-"
    private var routeName = "-"
    private var started: UInt64 = 0
    private var requestBodyBytes = 0
    private var responseBytes = 0
    private var responseStatus = 0
    private var closeAfterResponse = false
    private var bodyTarget: BodyTarget = .upstream
    private var bodyLimit = 0
    private var requestBody = BodyReader(.none)
    private var bodyDone = true
    private var buffered: [UInt8] = []
    private var bufferedHandler: ((BufferedRequest, @escaping (BufferedOutcome) -> Void) -> Void)?
    private var path = "/"

    // The upstream side of the current exchange.
    private var forward: Forward?
    private var upstream: UpstreamConnection?
    private var upstreamStarted: UInt64 = 0
    private var upstreamSeconds: Double?
    private var retried = false
    /// The final response head's status and persistence, once it came.
    private var response: (status: Int, keepAlive: Bool)?
    private var responseBody = BodyReader(.none)
    /// The framing of `responseBody` (which is moved out while it reads).
    private var responseFraming = BodyFraming.none
    /// A body reader is moved out of its property while it delivers bytes; a read of the same body
    /// re-entered meanwhile would find it missing, so it traps (as an exclusivity violation did).
    private var requestBodyLent = false
    private var responseBodyLent = false
    private var chunkedDownstream = false
    private var responseHeadSent = false

    // One deadline at a time (wheel clock), checked lazily: arming or moving it is two stores, and a
    // wheel entry is scheduled only when no pending one fires by the deadline (not per exchange).
    private enum TimerKind { case none, idle, header, body, response, acquire, linger }
    private var timerKind: TimerKind = .none
    private var deadline: Int64 = 0
    /// For the progress timers (body, response): progress moves the deadline this far ahead.
    private var progressTimeout: Int64 = 0
    /// The earliest due time of a scheduled wheel entry (.max: none known).
    private var timerDue: Int64 = .max
    /// While lingering: the close happens by then whatever the client does.
    private var lingerEnd: Int64 = 0
    /// The client's address as text, formatted once per connection (logs, X-Forwarded-For).
    private lazy var peerHost: String = downstream.peer?.host ?? "-"

    /// - Parameter acceptedAtMillis: when the connection was accepted (the loop's wheel clock), if
    ///   before now (a TLS handshake or protocol sniffing came first): the first head's time counts
    ///   from then.
    public init(connection: Connection, router: any RequestRouter, limits: DownstreamLimits, scheme: String = "http",
                acceptedAtMillis: Int64? = nil)
    {
        self.downstream = connection
        self.router = router
        self.limits = limits
        self.parser = HTTP1Parser(limits: limits.parser)
        self.scheme = scheme
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

    // MARK: - ConnectionDelegate

    public func connectionDidRead(_ c: Connection) {
        if c === downstream {
            downstreamDidRead()
        } else {
            upstreamDidRead()
        }
    }

    public func connectionDidReadEOF(_ c: Connection) {
        if c === downstream {
            switch phase {
            case .awaitingHead where downstream.inbound.isEmpty:
                downstream.close()
            case .awaitingHead, .readingBody:
                // The client stopped mid-request.
                abortExchange(status: nil, code: "client_closed")
            case .lingering:
                downstream.close()
            default:
                // A half-closed client may still read its response; close after it.
                closeAfterResponse = true
            }
        } else {
            upstreamDidEnd(error: nil)
        }
    }

    public func connectionDidDrain(_ c: Connection) {
        if c === downstream {
            if phase == .streamingResponse { upstream?.connection.resumeReading() }
        } else if phase == .readingBody && bodyTarget == .upstream {
            downstream.resumeReading()
        }
    }

    public func connectionDidClose(_ c: Connection, error: Socket.Error?) {
        if c === downstream {
            cancelTimer()
            if phase != .closed {
                if let u = upstream {
                    // The exchange cannot finish: the upstream connection is not reusable.
                    u.endExchange()
                    u.pool.release(u, reusable: false)
                    replace(&upstream, with: nil)
                }
                if hasHead && phase != .awaitingHead { logExchange(error: "client_closed") }
                phase = .closed
            }
            // Exactly once, however the connection ended (including after our own close).
            onClose?()
            onClose = nil
        } else {
            upstreamDidEnd(error: error)
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
            result = try Self.parseHead(parser, downstream.inbound, &fields, &memo, headBytes, into: &h)
        } catch let e as HTTPParseError {
            startExchange()
            respondAndClose(LocalResponse.error(e.status, e.kind.rawValue))
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
        if h.absoluteForm { Self.takeAuthority(&h, bytes) }
        let (m, t) = bytes.with { (h.methodString($0), h.targetString($0)) }
        replace(&method, with: m)
        replace(&target, with: t)
        startExchange(h)
        guard let normalized = PathNormalizer.normalize(t) else {
            respondAndClose(LocalResponse.error(400, "ambiguous_path"))
            return
        }
        if RequestSyntax.hasMethodOverride(method: m, target: t) {
            respondAndClose(LocalResponse.error(400, "method_override"))
            return
        }
        replace(&path, with: normalized)
        if draining { closeAfterResponse = true }
        if !h.keepAlive { closeAfterResponse = true }
        let decision = bytes.with { buf in
            router.route(method: m, path: normalized, host: { h.hostString(buf) }, peer: downstream.peer, head: { h.materialize(buf) })
        }
        dispatch(decision, head: h)
    }

    /// A head from `inbound` into `head`, as ranges into `bytes`, a copy of its bytes (the field
    /// array reused); returns the head's length, nil while it is incomplete. (Only an `Int` crosses
    /// the generic `withReadableBytes`: a struct result would be copied through value witnesses.)
    private static func parseHead(_ parser: HTTP1Parser, _ inbound: ByteBuffer, _ fields: inout [HTTPFieldRange],
                                  _ hostMemo: inout HTTP1Parser.HostMemo, _ bytes: HeadBytes,
                                  into head: inout HTTPRequestHeadLines) throws -> Int?
    {
        try inbound.withReadableBytes { buf in
            guard let (lines, end) = try parser.parseRequestHeadLines(buf, reusing: &fields, hostMemo: &hostMemo) else { return nil }
            bytes.set(UnsafeRawBufferPointer(rebasing: buf[0..<end]))
            head = lines
            return end
        }
    }

    /// An absolute-form target (RFC 9112 §3.2.2, `POST http://shop/api/x HTTP/1.1`): its authority
    /// replaces Host for routing and upstream (the Host field's value becomes the authority's bytes;
    /// an HTTP/1.0 request without Host gets one), and the target goes on in origin-form (`/api/x`;
    /// `/` when the path is empty).
    static func takeAuthority(_ h: inout HTTPRequestHeadLines, _ bytes: HeadBytes) {
        let head = h
        guard let authority = bytes.with({ head.authority($0) }) else { return }
        let rest = authority.upperBound..<h.target.upperBound
        let slash = !rest.isEmpty && bytes.with { $0[rest.lowerBound] } == UInt8(ascii: "/")
        h.target = slash ? rest : bytes.append(prefix: UInt8(ascii: "/"), copying: rest)
        if let host = h.host, let i = h.fields.firstIndex(where: { $0.value == host }) {
            h.fields[i].value = authority
        } else {
            let name = bytes.append(prefix: nil, copying: nil, literal: "Host")
            h.fields.append(HTTPFieldRange(name: name, value: authority))
        }
        h.host = authority
        h.absoluteForm = false
    }

    /// The current request's head as strings (for buffered routes, which hand it to a handler).
    private func fullHead() -> HTTPRequestHead {
        let h = head
        return headBytes.with { h.materialize($0) }
    }

    /// Ends the current head: its field storage is kept for the next one.
    private func dropHead() {
        guard hasHead else { return }
        hasHead = false
        headBytes.trim()
        let fields = replace(&head.fields, with: [])
        replace(&spareFields, with: fields)
    }

    /// An exchange whose head could not be read (answered with an error).
    private func startExchange() {
        dropHead()
        replace(&method, with: "-")
        replace(&target, with: "-")
        requestFraming = .none
        resetExchange()
    }

    private func startExchange(_ h: HTTPRequestHeadLines) {
        dropHead()
        replace(&head, with: h)
        hasHead = true
        requestFraming = h.framing
        requestMinor = h.minorVersion
        resetExchange()
    }

    private func resetExchange() {
        cancelTimer()
        started = EventLoop.monotonicNanos()
        replace(&routeName, with: "-")
        requestBodyBytes = 0
        responseBytes = 0
        responseStatus = 0
        upstreamSeconds = nil
        retried = false
        response = nil
        responseHeadSent = false
        replace(&buffered, with: [])
        replace(&responseBody, with: BodyReader(.none))
        responseFraming = .none
        if requestFraming != .none {
            replace(&requestBody, with: BodyReader(requestFraming))
            bodyDone = false
        } else {
            replace(&requestBody, with: BodyReader(.none))
            bodyDone = true
        }
    }

    private func dispatch(_ decision: RouteDecision, head h: HTTPRequestHeadLines) {
        switch decision {
        case .respond(let name, let resp):
            replace(&routeName, with: name)
            // The body (if any) is not read: the connection cannot be reused after this answer.
            if !bodyDone { closeAfterResponse = true }
            phase = .waiting
            writeLocal(resp)
        case .forward(let f):
            replace(&routeName, with: f.routeName)
            guard checkDeclaredLength(h, limit: f.maxBody) else { return }
            replace(&forward, with: f)
            bodyTarget = .upstream
            bodyLimit = f.maxBody
            acquireUpstream(fresh: false)
        case .buffer(let maxBody, let name, let handler):
            replace(&routeName, with: name)
            guard checkDeclaredLength(h, limit: maxBody) else { return }
            bodyTarget = .buffer
            bodyLimit = maxBody
            replace(&bufferedHandler, with: handler)
            sendContinueIfExpected(h)
            phase = .readingBody
            armBodyTimer()
            pumpRequestBody()
        }
    }

    /// A Content-Length above the route's limit is refused before any of the body is read.
    private func checkDeclaredLength(_ h: HTTPRequestHeadLines, limit: Int) -> Bool {
        if case .contentLength(let n) = h.framing, n > UInt64(limit) {
            respondAndClose(LocalResponse.error(413, "body_too_large"))
            return false
        }
        return true
    }

    private static let continueResponse = Array("HTTP/1.1 100 Continue\r\n\r\n".utf8)

    private func sendContinueIfExpected(_ h: HTTPRequestHeadLines) {
        if h.expectsContinue && !bodyDone && downstream.inbound.isEmpty {
            downstream.write(Self.continueResponse)
        }
    }

    // MARK: - Request body

    private func pumpRequestBody() {
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
        let failure: (any Error)?
        do {
            try downstream.inbound.withReadableBytes { (buf: UnsafeRawBufferPointer) throws in
                let (used, done) = try reader.read(buf) { data in
                    deliverBody(data)
                    progressed = true
                }
                consumed = used
                if done { bodyDone = true }
            }
            failure = nil
        } catch {
            failure = error
        }
        requestBodyLent = false
        if let failure {
            let e = failure as? HTTPParseError
            abortExchange(status: e?.status ?? 400, code: e?.kind.rawValue ?? "bad_request")
            return
        }
        if phase == .readingBody { replace(&requestBody, with: reader) }
        // Delivering body bytes may have ended the exchange and closed the connection (its buffer is gone).
        guard !downstream.isClosed else { return }
        downstream.inbound.consume(consumed)
        if progressed { madeProgress() }
        guard phase == .readingBody else { return }  // delivering may have aborted the exchange
        if bodyDone {
            requestBodyComplete()
        } else if bodyTarget == .upstream, let u = upstream, u.connection.outboundBytes > limits.highWaterMark {
            downstream.pauseReading()  // resumed when the upstream drains
        }
    }

    private func deliverBody(_ data: Slice<UnsafeRawBufferPointer>) {
        guard phase == .readingBody else { return }
        requestBodyBytes += data.count
        if requestBodyBytes > bodyLimit {
            abortExchange(status: 413, code: "body_too_large")
            return
        }
        switch bodyTarget {
        case .buffer:
            var b = replace(&buffered, with: [])
            b.append(contentsOf: data)
            replace(&buffered, with: b)
        case .upstream:
            guard let u = upstream else { return }
            let raw = UnsafeRawBufferPointer(rebasing: data)
            if case .chunked = requestFraming {
                u.connection.write { HTTP1Serializer.appendChunk(raw, to: &$0) }
            } else {
                u.connection.write(raw)
            }
        }
    }

    private func requestBodyComplete() {
        cancelTimer()
        switch bodyTarget {
        case .buffer:
            phase = .waiting
            downstream.pauseReading()
            guard hasHead, let handler = bufferedHandler else { return }
            replace(&bufferedHandler, with: nil)
            let request = BufferedRequest(head: fullHead(), path: path, body: buffered, peer: downstream.peer, scheme: scheme,
                                          dropFoldableNames: limits.dropFoldableNames)
            handler(request) { [weak self] outcome in self?.bufferedOutcome(outcome) }
        case .upstream:
            if case .chunked = requestFraming { upstream?.connection.write(HTTP1Serializer.lastChunk) }
            phase = .awaitingResponse
            armResponseTimer()
        }
    }

    private func bufferedOutcome(_ outcome: BufferedOutcome) {
        guard phase == .waiting, !downstream.isClosed else { return }
        switch outcome {
        case .respond(let r):
            writeLocal(r)
        case .forward(let f):
            // bodyTarget stays .buffer: startUpstreamRequest sends the buffered body after the head.
            replace(&forward, with: f)
            replace(&routeName, with: f.routeName)
            acquireUpstream(fresh: false)
        }
    }

    // MARK: - Upstream

    private func acquireUpstream(fresh: Bool) {
        guard let f = forward else { return }
        phase = .waiting
        downstream.pauseReading()
        if !fresh, let u = f.pool.takeIdle() {
            // The common case: a kept-alive connection is free; no callback, no timer.
            startUpstreamRequest(u)
            return
        }
        // The pool's own connect timer answers first; this guards a queue that never moves.
        arm(.acquire, afterMillis: f.pool.target.connectTimeoutMillis + 1000)
        let acquire = fresh ? f.pool.acquireFresh : f.pool.acquire
        acquire { [weak self] result in
            guard let self else {
                if case .success(let u) = result { u.pool.release(u, reusable: true) }
                return
            }
            guard self.phase == .waiting, self.hasHead, !self.downstream.isClosed else {
                if case .success(let u) = result { u.pool.release(u, reusable: true) }
                return
            }
            switch result {
            case .failure(let failure):
                let (status, code) = failure.answer
                self.abortExchange(status: status, code: code)
            case .success(let u):
                self.startUpstreamRequest(u)
            }
        }
    }

    private func startUpstreamRequest(_ u: UpstreamConnection) {
        guard hasHead, let f = forward else { return }
        cancelTimer()
        replace(&upstream, with: u)
        u.beginExchange(self)
        upstreamStarted = EventLoop.monotonicNanos()
        let wasBuffered = bodyTarget == .buffer
        let framing = wasBuffered ? BodyFraming.whole(requestFraming, count: buffered.count) : requestFraming
        let client = downstream.peer == nil ? "unknown" : peerHost
        let h = head
        headBytes.with { buf in
            u.connection.writeHead {
                f.writeUpstreamHead(h, buf, client: client, proto: scheme, framing: framing,
                                    dropFoldableNames: limits.dropFoldableNames, to: &$0)
            }
        }
        if wasBuffered {
            // The body was read already (bounded) for a local decision: it goes whole, with its length.
            if !buffered.isEmpty { u.connection.write(buffered) }
            replace(&buffered, with: [])
            phase = .awaitingResponse
            armResponseTimer()
            return
        }
        if bodyDone {
            phase = .awaitingResponse
            armResponseTimer()
        } else {
            sendContinueIfExpected(h)
            phase = .readingBody
            armBodyTimer()
            downstream.resumeReading()
            pumpRequestBody()
        }
    }

    private func upstreamDidRead() {
        guard let u = upstream else { return }
        madeProgress()
        if response == nil {
            // The upstream may answer before the request body is complete (e.g. an early error).
            guard phase == .awaitingResponse || phase == .readingBody else { return }
            parseResponseHead(u)
        } else if phase == .streamingResponse {
            pumpResponseBody(u)
        }
    }

    private func parseResponseHead(_ u: UpstreamConnection) {
        guard hasHead else { return }
        let final: (HTTPResponseHeadLines, Int)?
        do {
            final = try u.finalResponseHead(parser: parser, requestMethod: method)
        } catch {
            abortExchange(status: 502, code: "upstream_bad_response")
            return
        }
        guard let (r, end) = final else { return }
        response = (r.status, r.keepAlive)
        upstreamSeconds = Double(EventLoop.monotonicNanos() - upstreamStarted) / 1e9
        if phase == .readingBody {
            // Answered early: stop sending the body; the connection cannot be reused, nor the downstream one.
            closeAfterResponse = true
            bodyDone = true
        }
        // The head's ranges point into the upstream's inbound bytes: use them before consuming.
        u.connection.inbound.withReadableBytes { sendResponseHead(r, $0) }
        u.connection.inbound.consume(end)
        u.recycle(r)
        phase = .streamingResponse
        armResponseTimer()
        pumpResponseBody(u)
    }

    /// Writes the downstream response head: hop-by-hop fields removed, Via added, the route's
    /// response fields set, framing and persistence as this side needs them. Without route fields
    /// the upstream's field lines are copied as bytes; with them, through `HTTPFields`.
    private func sendResponseHead(_ r: HTTPResponseHeadLines, _ buf: UnsafeRawBufferPointer) {
        guard hasHead else { return }
        replace(&responseBody, with: BodyReader(r.framing))
        responseFraming = r.framing
        chunkedDownstream = false
        var dropContentLength = false
        switch r.framing {
        case .none:
            break
        case .contentLength:
            break
        case .chunked, .untilClose:
            dropContentLength = true
            if requestMinor == 1 {
                chunkedDownstream = true
            } else {
                closeAfterResponse = true
            }
        }
        let connection: String? = closeAfterResponse || draining ? "close" : requestMinor == 0 ? "keep-alive" : nil
        responseStatus = r.status
        responseHeadSent = true
        if let extra = forward?.responseHeaders, extra.count > 0 {
            let full = r.materialize(buf)
            var fields = DownstreamResponseHead.fields(full, routeFields: extra, dropContentLength: dropContentLength)
            if chunkedDownstream { fields.append("Transfer-Encoding", "chunked") }
            if let connection { fields.set("Connection", connection) }
            downstream.write { HTTP1Serializer.appendResponseHead(status: full.status, reason: full.reason, headers: fields, to: &$0) }
        } else {
            let chunked = chunkedDownstream
            downstream.writeHead {
                DownstreamResponseHead.writeHTTP1(r, from: buf, dropContentLength: dropContentLength, chunked: chunked,
                                                  connection: connection, to: &$0)
            }
        }
    }

    private func pumpResponseBody(_ u: UpstreamConnection) {
        var consumed = 0
        var done = false
        // Moved out while it delivers, like the request body's reader.
        precondition(!responseBodyLent, "response body read re-entered")
        responseBodyLent = true
        var reader = replace(&responseBody, with: BodyReader(.none))
        let failed: Bool
        do {
            try u.connection.inbound.withReadableBytes { (buf: UnsafeRawBufferPointer) throws in
                (consumed, done) = try reader.read(buf) { sendResponseData($0) }
            }
            failed = false
        } catch {
            failed = true
        }
        responseBodyLent = false
        if failed {
            abortExchange(status: nil, code: "upstream_bad_response")
            return
        }
        // Sending may have broken the client side and, with it, this exchange and its upstream.
        guard !u.connection.isClosed, upstream === u else { return }
        replace(&responseBody, with: reader)
        u.connection.inbound.consume(consumed)
        if done {
            responseComplete(upstreamReusable: !closeAfterResponseUpstream && u.connection.inbound.isEmpty)
        } else if downstream.outboundBytes > limits.highWaterMark {
            u.connection.pauseReading()  // resumed when the client drains
        }
    }

    private var closeAfterResponseUpstream: Bool {
        guard let r = response else { return true }
        if case .untilClose = responseFraming { return true }
        return !r.keepAlive || !bodyDone
    }

    private func sendResponseData(_ data: Slice<UnsafeRawBufferPointer>) {
        responseBytes += data.count
        let raw = UnsafeRawBufferPointer(rebasing: data)
        if chunkedDownstream {
            downstream.write { HTTP1Serializer.appendChunk(raw, to: &$0) }
        } else {
            // Head (queued) and body leave in one send, the body without a copy when the socket takes it.
            downstream.writeThrough(raw)
        }
    }

    private func responseComplete(upstreamReusable: Bool) {
        if chunkedDownstream { downstream.write(HTTP1Serializer.lastChunk) }
        if let u = upstream {
            u.endExchange()
            u.pool.release(u, reusable: upstreamReusable)
            replace(&upstream, with: nil)
        }
        finishExchange()
    }

    /// The upstream connection ended (EOF, error or close) during an exchange.
    private func upstreamDidEnd(error: Socket.Error?) {
        guard let u = upstream else { return }
        if response != nil, case .untilClose = responseFraming, phase == .streamingResponse {
            // Close-delimited body: the end of the connection is the end of the body.
            pumpResponseBody(u)
            responseComplete(upstreamReusable: false)
            return
        }
        replace(&upstream, with: nil)
        u.endExchange()
        u.pool.release(u, reusable: false)
        if response == nil {
            // Nothing came back. An idempotent request without a body, sent on a reused connection that
            // the upstream had already given up on, is retried once on a fresh one.
            if hasHead, !retried, u.mayRetry(method: method, framing: requestFraming) {
                retried = true
                acquireUpstream(fresh: true)
                return
            }
            abortExchange(status: 502, code: "upstream_closed")
        } else {
            abortExchange(status: nil, code: "upstream_closed")
        }
    }

    // MARK: - Ending exchanges

    private func writeLocal(_ r: LocalResponse) {
        guard hasHead else {
            respondAndClose(r)
            return
        }
        var fields = r.headers
        let isHead = method == "HEAD"
        fields.set("Content-Length", String(r.body.count))
        if closeAfterResponse || draining { fields.set("Connection", "close") }
        responseStatus = r.status
        responseHeadSent = true
        downstream.write { HTTP1Serializer.appendResponseHead(status: r.status, headers: fields, to: &$0) }
        if !isHead && r.status != 204 && r.status != 304 {
            downstream.write(r.body)
            responseBytes += r.body.count
        }
        finishExchange()
    }

    /// Answers (when nothing was sent yet) and closes: for parse errors, limits and broken exchanges.
    private func respondAndClose(_ r: LocalResponse) {
        closeAfterResponse = true
        var fields = r.headers
        fields.set("Content-Length", String(r.body.count))
        fields.set("Connection", "close")
        responseStatus = r.status
        responseHeadSent = true
        downstream.write { HTTP1Serializer.appendResponseHead(status: r.status, headers: fields, to: &$0) }
        downstream.write(r.body)
        responseBytes += r.body.count
        finishExchange()
    }

    /// Something broke mid-exchange. Before the response head: answer `status` (if any) and close.
    /// After it: the client's response is cut short, so the connection is closed without more.
    private func abortExchange(status: Int?, code: String) {
        guard phase != .closed else { return }
        if let u = upstream {
            u.endExchange()
            u.pool.release(u, reusable: false)
            replace(&upstream, with: nil)
        }
        if !responseHeadSent, let status {
            respondAndClose(LocalResponse.error(status, code))
            return
        }
        logExchange(error: code)
        cancelTimer()
        phase = .closed
        downstream.close()
    }

    private func finishExchange() {
        logExchange(error: nil)
        dropHead()
        replace(&method, with: "-")
        replace(&target, with: "-")
        replace(&forward, with: nil)
        replace(&bufferedHandler, with: nil)
        replace(&buffered, with: [])
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
        phase = .awaitingHead
        closeAfterResponse = false
        armIdleTimer()
        downstream.resumeReading()
        if !downstream.inbound.isEmpty { loop.enqueue { [weak self] in self?.parseHeadIfIdle() } }
    }

    private func parseHeadIfIdle() { if phase == .awaitingHead { parseHead() } }

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

    private func logExchange(error: String?) {
        let now = EventLoop.monotonicNanos()
        router.exchangeDidFinish(ExchangeRecord(
            route: routeName, method: method, target: target, status: responseStatus,
            requestBytes: requestBodyBytes, responseBytes: responseBytes, durationSeconds: Double(now - started) / 1e9,
            upstream: forward?.pool.target.name, upstreamSeconds: upstreamSeconds, peer: peerHost,
            error: error, protocolName: "http1"))
    }

    // MARK: - Timers

    private func cancelTimer() { timerKind = .none }

    /// Sets the one deadline; schedules a wheel entry only if none is due by then.
    private func arm(_ kind: TimerKind, afterMillis ms: Int64) {
        let now = loop.timers.nowMillis
        timerKind = kind
        deadline = now + ms
        if deadline < timerDue { scheduleTimerCheck(at: deadline, now: now) }
    }

    private func scheduleTimerCheck(at due: Int64, now: Int64) {
        timerDue = due
        loop.timers.schedule(afterMillis: max(1, due - now)) { [weak self] in self?.timerCheck(due: due) }
    }

    private func timerCheck(due: Int64) {
        if due == timerDue { timerDue = .max }
        guard timerKind != .none, phase != .closed else { return }
        let now = loop.timers.nowMillis
        guard now >= deadline else {
            if deadline < timerDue { scheduleTimerCheck(at: deadline, now: now) }
            return
        }
        let kind = timerKind
        timerKind = .none
        switch kind {
        case .none:
            break
        case .idle:
            guard phase == .awaitingHead else { return }
            if downstream.inbound.isEmpty { downstream.close() } else { headerTimedOut() }
        case .header:
            // The first head's deadline runs from the accept: a client that sent nothing is closed
            // without an answer, like an idle keep-alive connection.
            guard phase == .awaitingHead else { return }
            if downstream.inbound.isEmpty { downstream.close() } else { headerTimedOut() }
        case .body:
            abortExchange(status: 408, code: "body_timeout")
        case .response:
            abortExchange(status: 504, code: "upstream_timeout")
        case .acquire:
            abortExchange(status: 503, code: "upstream_busy")
        case .linger:
            lingerCheck()
        }
    }

    /// Bytes moved: a progress timer (body, response) starts its whole timeout again.
    private func madeProgress() {
        if timerKind == .body || timerKind == .response { deadline = loop.timers.nowMillis + progressTimeout }
    }

    private func armIdleTimer() { arm(.idle, afterMillis: limits.idleTimeoutMillis) }

    private func armHeaderTimer() { arm(.header, afterMillis: limits.headerTimeoutMillis) }

    private func headerTimedOut() {
        guard phase == .awaitingHead else { return }
        startExchange()
        respondAndClose(LocalResponse.error(408, "header_timeout"))
    }

    /// Fires when nothing moved for the whole timeout; progress moves the deadline.
    private func armBodyTimer() {
        progressTimeout = limits.bodyTimeoutMillis
        arm(.body, afterMillis: progressTimeout)
    }

    private func armResponseTimer() {
        progressTimeout = forward?.pool.target.responseTimeoutMillis ?? 30_000
        arm(.response, afterMillis: progressTimeout)
    }
}

/// Stores `value` in `property` and hands the old value back to be destroyed after the access: the
/// property's access is then a plain move (no release, which could run arbitrary code, inside it),
/// which lets the optimizer drop its run-time exclusivity check. For the per-exchange references
/// that are set and cleared on every request.
@inline(__always) @discardableResult
private func replace<T>(_ property: inout T, with value: T) -> T {
    var value = value
    swap(&property, &value)
    return value  // the old value, destroyed by the caller once the access has ended
}
