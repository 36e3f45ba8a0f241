import Dispatch
import GatewayHTTP
import GatewayIO

/// One downstream HTTP/2 connection (h2c prior knowledge now; TLS+ALPN later through
/// `DownstreamTransport`): drives an `HTTP2ServerSession` from the loop and runs every stream
/// through the same route → decision → upstream pipeline as HTTP/1.1, each in-flight stream on its
/// own HTTP/1.1 keep-alive upstream connection from the route's `UpstreamPool`. Loop-confined.
///
/// Rules kept (docs/http2.md): output is pulled from the session only while the transport's queue is
/// short (so unread ACK floods stay counted inside nghttp2); `takeEvents()` after every pull; request
/// body bytes are `consume`d only once the upstream took them (its queue at or below the high-water
/// mark), so a slow upstream holds the client to its flow-control window.
public final class HTTP2ServerConnection: ConnectionDelegate, ServerConnection {
    public let transport: any DownstreamTransport
    let router: any RequestRouter
    let limits: DownstreamLimits
    /// Parses upstream response heads (one per connection, like HTTP/1.1's, not one per read).
    let responseParser: HTTP1Parser
    let scheme: String
    let session: HTTP2ServerSession
    var loop: EventLoop { transport.loop }
    /// Called once when the connection is gone.
    public var onClose: (() -> Void)?
    /// A stream was reset (by the client, or by us for an upstream failure); the reason is from a fixed list.
    public var onStreamReset: ((String) -> Void)?
    /// A GOAWAY was sent or received; the reason is from a fixed list.
    public var onGoaway: ((String) -> Void)?

    private var streams: [Int32: HTTP2Stream] = [:]
    private var streamsLent = false

    /// The stream table is moved out of its property to be read or changed (a plain move, which the
    /// optimizer proves free of conflicts: no run-time exclusivity check per lookup). Must not nest.
    @inline(__always)
    private func withStreams<R>(_ body: (inout [Int32: HTTP2Stream]) -> R) -> R {
        precondition(!streamsLent, "HTTP2ServerConnection: nested use of the stream table")
        var table: [Int32: HTTP2Stream] = [:]
        swap(&table, &streams)
        streamsLent = true
        defer {
            streamsLent = false
            swap(&table, &streams)
        }
        return body(&table)
    }

    @inline(__always)
    private func stream(_ id: Int32) -> HTTP2Stream? { withStreams { $0[id] } }
    private var pumping = false
    /// The event array traded with the session on each `pump` step (see `takeEvents(into:)`).
    private var spareEvents: [HTTP2Event] = []
    private var closing = false
    private var closed = false
    private var draining = false
    /// The client sent GOAWAY or EOF: close once no stream is left.
    private var closeWhenIdle = false
    private var idleDeadline: Int64 = 0
    /// Until the first request's HEADERS: the header timeout from the accept (preface included);
    /// after it, the idle timeout whenever no stream is open.
    private var sawRequest = false
    private let firstRequestDeadline: Int64
    /// A connection error was reported: the GOAWAY is written, then the connection lingers.
    private var failed = false
    /// Lingering after a connection error: since when, and when the client last sent something.
    private var lingerStart: Int64?
    private var lastInputMillis: Int64 = 0
    private var timerDue: Int64 = .max
    /// The client's address as text (logs, X-Forwarded-For).
    lazy var peerHost: String = transport.peer?.host ?? "-"
    /// A stream's head laid out as bytes for the upstream writer (one stream at a time), and its
    /// field ranges' storage, reused.
    let upstreamHeadBytes = HeadBytes()
    var spareHeadFields: [HTTPFieldRange] = []

    func takeSpareHeadFields() -> [HTTPFieldRange] {
        var spare: [HTTPFieldRange] = []
        swap(&spare, &spareHeadFields)
        return spare
    }

    /// Output is pulled from the session while less than this is queued on the transport.
    static let outputLowWater = 32 * 1024
    /// After a connection error (GOAWAY written), input is read and discarded until the client closes
    /// or has been quiet this long: closing with unread input makes the kernel answer with RST, which
    /// can destroy the GOAWAY before the client reads it (a flooding client is usually still sending).
    static let lingerQuietMillis: Int64 = 200
    /// The linger's bound: the connection is closed this long after the error whatever the client does.
    static let lingerMaxMillis: Int64 = 2000

    /// Serves `transport`; the transport's owner calls the `transportDid…` methods. `acceptedAtMillis`
    /// (the loop's wheel clock; default now): the first request must arrive within the header
    /// timeout of it.
    public init(transport: any DownstreamTransport, router: any RequestRouter, limits: DownstreamLimits,
                settings: HTTP2Settings = HTTP2Settings(), scheme: String = "http", acceptedAtMillis: Int64? = nil)
        throws(HTTP2SessionError)
    {
        self.transport = transport
        self.router = router
        self.limits = limits
        responseParser = HTTP1Parser(limits: limits.parser)
        self.scheme = scheme
        self.session = try HTTP2ServerSession(settings: settings)
        firstRequestDeadline = (acceptedAtMillis ?? transport.loop.timers.nowMillis) + limits.headerTimeoutMillis
        armIdle()
    }

    // MARK: - Transport events

    public func transportDidRead() {
        guard !closed else { return }
        if lingerStart != nil { lastInputMillis = loop.timers.nowMillis }
        let used = transport.withInbound { buf in
            session.feed(buf)
            return buf.count
        }
        transport.consumeInbound(used)
        pump()  // handles the events the input caused, in the spare event array
    }

    public func transportDidReadEOF() {
        guard !closed else { return }
        if streams.isEmpty {
            transport.closeAfterWriting()
        } else {
            closeWhenIdle = true
        }
    }

    public func transportDidDrain() {
        guard !closed else { return }
        transport.resumeReading()
        pump()
    }

    public func transportDidClose() {
        guard !closed else { return }
        closed = true
        let open = withStreams { table -> [HTTP2Stream] in
            let all = Array(table.values)
            table.removeAll()
            return all
        }
        for s in open { s.connectionGone() }
        onClose?()
        onClose = nil
    }

    // MARK: - ConnectionDelegate (plain TCP transport)

    public func connectionDidRead(_ c: Connection) { transportDidRead() }
    public func connectionDidReadEOF(_ c: Connection) { transportDidReadEOF() }
    public func connectionDidDrain(_ c: Connection) { transportDidDrain() }
    public func connectionDidClose(_ c: Connection, error: Socket.Error?) { transportDidClose() }

    // MARK: - Drain, close

    /// Graceful stop: GOAWAY (two-step, RFC 9113 §6.8), in-flight streams finish, then the connection closes.
    public func beginDrain() { goaway(reason: "drain") }

    /// The same graceful GOAWAY as `beginDrain`, reported to `onGoaway` with `reason` (e.g. `reload`).
    /// Returns false when the connection is already closed, draining, or ended by a connection error.
    @discardableResult
    public func goaway(reason: String) -> Bool {
        guard !closed, !draining, !failed else { return false }
        draining = true
        session.beginDrain()
        onGoaway?(reason)
        pump()
        return true
    }

    public func closeNow() { transport.close() }

    // MARK: - Session output and events

    /// Pulls output while the transport's queue is short, handling the events each step causes;
    /// closes the transport once the session is finished.
    func pump() {
        guard !closed, !pumping else { return }
        pumping = true
        while !closed {
            // The batch array is this connection's spare, traded with the session's (no allocation
            // per batch); it is moved out of the property while in use.
            var events: [HTTP2Event] = []
            swap(&events, &spareEvents)
            session.takeEvents(into: &events)
            if !events.isEmpty {
                handle(events)
                events.removeAll(keepingCapacity: true)
                swap(&events, &spareEvents)
                continue
            }
            swap(&events, &spareEvents)
            guard session.wantsWrite, transport.outboundBytes < Self.outputLowWater, !transport.isClosed else { break }
            var n = 0
            transport.write { n = session.pullOutput(into: &$0, softLimit: 64 * 1024) }
            if n == 0 { break }
        }
        pumping = false
        guard !closed, !closing else { return }
        if transport.outboundBytes > limits.highWaterMark { transport.pauseReading() }
        if session.isFinished || (closeWhenIdle && streams.isEmpty) {
            closing = true
            if failed { startLinger() } else { transport.closeAfterWriting() }
        }
    }

    /// After a connection error: the session reads nothing more (input is discarded), the GOAWAY is
    /// flushed; the connection closes once the client closes (EOF), or is quiet with everything
    /// written, or `lingerMaxMillis` after the error.
    private func startLinger() {
        let now = loop.timers.nowMillis
        lingerStart = now
        lastInputMillis = now
        loop.timers.schedule(afterMillis: Self.lingerQuietMillis) { [weak self] in self?.lingerCheck() }
    }

    private func lingerCheck() {
        guard !closed, let start = lingerStart else { return }
        let now = loop.timers.nowMillis
        if now - start >= Self.lingerMaxMillis {
            transport.close()
        } else if now - lastInputMillis >= Self.lingerQuietMillis && transport.outboundBytes == 0 {
            transport.closeAfterWriting()
        } else {
            loop.timers.schedule(afterMillis: 50) { [weak self] in self?.lingerCheck() }
        }
    }

    private func handle(_ events: [HTTP2Event]) {
        for e in events {
            switch e {
            case .request(let id, let head):
                sawRequest = true
                let s = HTTP2Stream(id: id, head: head, connection: self)
                withStreams { $0[id] = s }
                s.start()
            case .requestData(let id, let bytes):
                if let s = stream(id) { s.requestData(bytes) } else { session.consume(streamID: id, count: bytes.count) }
            case .requestEnd(let id):
                stream(id)?.requestEnd()
            case .streamReset(let id, let code):
                onStreamReset?("client_" + Self.reasonName(code))
                stream(id)?.clientReset(code)
            case .streamClosed(let id, let code):
                if let s = withStreams({ $0.removeValue(forKey: id) }) { s.streamClosed(code) }
                if streams.isEmpty { armIdle() }
            case .responseWritable(let id):
                stream(id)?.resumeUpstream()
            case .goaway:
                onGoaway?("client_goaway")
                closeWhenIdle = true
            case .connectionError(let code, _):
                failed = true
                onGoaway?(Self.reasonName(code))
            }
        }
    }

    /// A metric label for an error code: the RFC 9113 names, lowercased; others (any 32-bit value a
    /// client may send) all map to `unknown`, so the label set stays bounded.
    static func reasonName(_ code: HTTP2ErrorCode) -> String {
        code.rawValue <= HTTP2ErrorCode.http11Required.rawValue ? code.description.lowercased() : "unknown"
    }

    /// A stream reset by us (its response cannot be completed).
    func resetStream(_ id: Int32, reason: String) {
        session.resetStream(streamID: id, code: .internalError)
        onStreamReset?(reason)
    }

    // MARK: - Timers (wheel clock, one entry at a time, checked lazily)

    private func armIdle() {
        idleDeadline = sawRequest ? loop.timers.nowMillis + limits.idleTimeoutMillis : firstRequestDeadline
        schedule(at: idleDeadline)
    }

    /// Makes sure a check runs at or before `due`.
    func schedule(at due: Int64) {
        guard due < timerDue else { return }
        timerDue = due
        let now = loop.timers.nowMillis
        loop.timers.schedule(afterMillis: max(1, due - now)) { [weak self] in self?.timerCheck(due: due) }
    }

    private func timerCheck(due: Int64) {
        if due == timerDue { timerDue = .max }
        guard !closed, !closing else { return }
        let now = loop.timers.nowMillis
        var next = Int64.max
        if streams.isEmpty {
            if now >= idleDeadline {
                session.terminate(code: .noError, detail: "idle")
                onGoaway?(sawRequest ? "idle_timeout" : "header_timeout")
                pump()
                return
            }
            next = idleDeadline
        }
        for s in withStreams({ Array($0.values) }) {
            if let d = s.deadline {
                if now >= d { s.timedOut() } else { next = min(next, d) }
            }
        }
        if next != .max { schedule(at: next) }
        pump()
    }
}

/// One HTTP/2 stream's exchange: the same decisions and rewriting as `HTTP1ServerConnection`, with
/// the session in place of the downstream socket. The delegate of its upstream connection.
final class HTTP2Stream: ConnectionDelegate {
    let id: Int32
    let head: HTTPRequestHead
    unowned let conn: HTTP2ServerConnection
    private var session: HTTP2ServerSession { conn.session }

    private enum BodyTarget { case upstream, buffer, discard }
    private enum TimerKind { case body, response, acquire }

    private var path = "/"
    private var routeName = "-"
    private let started = EventLoop.monotonicNanos()
    private var requestBodyBytes = 0
    private var responseBytes = 0
    private var responseStatus = 0
    private var bodyTarget: BodyTarget = .discard
    private var bodyLimit = 0
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
    private var buffered: [UInt8] = []
    private var bufferedHandler: ((BufferedRequest, @escaping (BufferedOutcome) -> Void) -> Void)?
    private var waitingForHandler = false

    private var forward: Forward?
    private var upstream: UpstreamConnection?
    private var upstreamHeadSent = false
    private var upstreamStarted: UInt64 = 0
    private var upstreamSeconds: Double?
    private var retried = false
    private var response: (status: Int, keepAlive: Bool)?
    private var responseBody = BodyReader(.none)
    private var responseHeadSent = false
    private var responseDone = false
    private var earlyResponse = false
    private var finished = false
    private var error: String?

    private var timerKind: TimerKind?
    private(set) var deadline: Int64?
    private var progressTimeout: Int64 = 0

    init(id: Int32, head: HTTPRequestHead, connection: HTTP2ServerConnection) {
        self.id = id
        self.head = head
        self.conn = connection
    }

    // MARK: - Request

    func start() {
        // The request syntax HTTP/1.1's parser holds requests to (`RequestSyntax`), before routing.
        guard RequestSyntax.isCanonicalMethod(head.method) else {
            respond(LocalResponse.error(400, "bad_method"))
            return
        }
        guard let host = head.headers.fields.first?.value, RequestSyntax.isValidHost(host) else {
            respond(LocalResponse.error(400, "bad_host"))
            return
        }
        guard let normalized = PathNormalizer.normalize(head.target) else {
            respond(LocalResponse.error(400, "ambiguous_path"))
            return
        }
        if RequestSyntax.hasMethodOverride(method: head.method, target: head.target) {
            respond(LocalResponse.error(400, "method_override"))
            return
        }
        path = normalized
        switch conn.router.route(head, path: normalized, peer: conn.transport.peer) {
        case .respond(let name, let r):
            routeName = name
            respond(r)
        case .forward(let f):
            routeName = f.routeName
            guard checkDeclaredLength(f.maxBody) else { return }
            forward = f
            bodyTarget = .upstream
            bodyLimit = f.maxBody
            sendContinueIfExpected()
            if case .contentLength(0) = head.framing, !requestEnded {
                // Complete as the upstream would read it; only END_STREAM says no DATA follows
                // (RFC 9113 §8.1.1). The END_STREAM of a HEADERS frame is the very next event.
                awaitingEmptyEnd = true
                arm(.body, conn.limits.bodyTimeoutMillis)
                return
            }
            acquireUpstream(fresh: false)
        case .buffer(let maxBody, let name, let handler):
            routeName = name
            guard checkDeclaredLength(maxBody) else { return }
            bodyTarget = .buffer
            bodyLimit = maxBody
            bufferedHandler = handler
            sendContinueIfExpected()
            arm(.body, conn.limits.bodyTimeoutMillis)
        }
    }

    /// `expect: 100-continue` (RFC 9110 §10.1.1): the body is wanted, as on HTTP/1.1 (the upstream
    /// request goes without `Expect`).
    private func sendContinueIfExpected() {
        guard head.framing != .none, head.expectsContinue else { return }  // no body (a GET): no field lookup
        try? session.submitInterimResponse(streamID: id, status: 100)
    }

    private func checkDeclaredLength(_ limit: Int) -> Bool {
        if case .contentLength(let n) = head.framing, n > UInt64(limit) {
            respond(LocalResponse.error(413, "body_too_large"))
            return false
        }
        return true
    }

    func requestData(_ bytes: [UInt8]) {
        requestBodyBytes += bytes.count
        switch bodyTarget {
        case .discard:
            session.consume(streamID: id, count: bytes.count)
        case .buffer:
            guard requestBodyBytes <= bodyLimit else {
                session.consume(streamID: id, count: bytes.count)
                fail(status: 413, code: "body_too_large")
                return
            }
            madeProgress()
            if waitingForHandler || forward != nil {
                // Bytes after the handler started cannot be: the body ended. Kept for the forward.
                session.consume(streamID: id, count: bytes.count)
                return
            }
            buffered.append(contentsOf: bytes)
            session.consume(streamID: id, count: bytes.count)
        case .upstream:
            guard requestBodyBytes <= bodyLimit else {
                pending.append(contentsOf: bytes)
                fail(status: 413, code: "body_too_large")
                return
            }
            madeProgress()
            if let u = upstream, upstreamHeadSent {
                writeBody(u, bytes)
            } else {
                pending.append(contentsOf: bytes)
            }
        }
    }

    func requestEnd() {
        requestEnded = true
        switch bodyTarget {
        case .discard:
            break
        case .buffer:
            guard let handler = bufferedHandler else { return }
            bufferedHandler = nil
            waitingForHandler = true
            cancelTimer()
            let request = BufferedRequest(head: head, path: path, body: buffered, peer: conn.transport.peer, scheme: conn.scheme,
                                          dropFoldableNames: conn.limits.dropFoldableNames)
            handler(request) { [weak self] outcome in self?.bufferedOutcome(outcome) }
        case .upstream:
            if awaitingEmptyEnd {
                awaitingEmptyEnd = false
                acquireUpstream(fresh: false)
                return
            }
            if let u = upstream, upstreamHeadSent {
                if let last = heldLastByte {
                    heldLastByte = nil
                    withUnsafeBytes(of: last) { u.connection.write($0) }
                    unconsumed += 1
                    acknowledgeWritten(u)
                }
                if case .chunked = head.framing { u.connection.write(HTTP1Serializer.lastChunk) }
                if response == nil { arm(.response, responseTimeout) }
            }
        }
    }


    private func bufferedOutcome(_ outcome: BufferedOutcome) {
        guard !finished, waitingForHandler else { return }
        waitingForHandler = false
        switch outcome {
        case .respond(let r):
            respond(r)
        case .forward(let f):
            forward = f
            routeName = f.routeName
            acquireUpstream(fresh: false)
        }
        conn.pump()
    }

    /// Writes request body bytes upstream. With a declared content-length, the body's last byte
    /// waits for END_STREAM (`requestEnd`): an upstream that has every declared byte holds a
    /// complete request, and only END_STREAM shows that the DATA add up to the length (RFC 9113
    /// §8.1.1). nghttp2 refuses DATA beyond the length before delivering it, and an END_STREAM short
    /// of it, with RST_STREAM PROTOCOL_ERROR: the stream then closes, its upstream request still
    /// incomplete, and the upstream connection is closed (the request aborted, never executed).
    private func writeBody(_ u: UpstreamConnection, _ bytes: [UInt8]) {
        guard !bytes.isEmpty else { return }
        if case .chunked = head.framing {
            u.connection.write { out in bytes.withUnsafeBytes { HTTP1Serializer.appendChunk($0, to: &out) } }
            forwardedBodyBytes += bytes.count
            unconsumed += bytes.count
        } else {
            var count = bytes.count
            if !requestEnded, case .contentLength(let n) = head.framing, forwardedBodyBytes + count >= n {
                count -= 1  // the last byte (nghttp2 delivers no DATA beyond n)
                heldLastByte = bytes[count]
            }
            u.connection.write(bytes[0..<count])
            forwardedBodyBytes += count
            unconsumed += count
        }
        acknowledgeWritten(u)
    }

    /// Reopens the client's window for what the upstream took (its queue is at or below the mark).
    private func acknowledgeWritten(_ u: UpstreamConnection) {
        guard unconsumed > 0, u.connection.outboundBytes <= conn.limits.highWaterMark else { return }
        session.consume(streamID: id, count: unconsumed)
        unconsumed = 0
    }

    /// Stops forwarding the request body: what was held is given back to the client's windows.
    private func discardRequestBody() {
        bodyTarget = .discard
        let held = pending.count + unconsumed + buffered.count + (heldLastByte == nil ? 0 : 1)
        heldLastByte = nil
        pending = []
        unconsumed = 0
        if held > 0 { session.consume(streamID: id, count: held) }
    }

    // MARK: - Upstream

    private var responseTimeout: Int64 { forward?.pool.target.responseTimeoutMillis ?? 30_000 }

    private func acquireUpstream(fresh: Bool) {
        guard let f = forward else { return }
        if !fresh, let u = f.pool.takeIdle() {
            startUpstreamRequest(u)
            return
        }
        arm(.acquire, f.pool.target.connectTimeoutMillis + 1000)
        let acquire = fresh ? f.pool.acquireFresh : f.pool.acquire
        acquire { [weak self] result in
            guard let self, !self.finished, self.upstream == nil else {
                if case .success(let u) = result { u.pool.release(u, reusable: true) }
                return
            }
            switch result {
            case .failure(let failure):
                let (status, code) = failure.answer
                self.fail(status: status, code: code)
            case .success(let u):
                self.startUpstreamRequest(u)
            }
            self.conn.pump()
        }
    }

    private func startUpstreamRequest(_ u: UpstreamConnection) {
        guard let f = forward else { return }
        upstream = u
        u.beginExchange(self)
        upstreamStarted = EventLoop.monotonicNanos()
        let wasBuffered = bodyTarget == .buffer
        let framing = wasBuffered ? BodyFraming.whole(head.framing, count: buffered.count) : head.framing
        let client = conn.transport.peer == nil ? "unknown" : conn.peerHost
        let proto = conn.scheme
        let dropFoldable = conn.limits.dropFoldableNames
        // The head laid out as bytes in the connection's buffer, for the one upstream head writer.
        let bytes = conn.upstreamHeadBytes
        let lines = bytes.set(head, reusing: conn.takeSpareHeadFields())
        bytes.with { buf in
            u.connection.writeHead {
                f.writeUpstreamHead(lines, buf, client: client, proto: proto, framing: framing, dropFoldableNames: dropFoldable, to: &$0)
            }
        }
        conn.spareHeadFields = lines.fields
        upstreamHeadSent = true
        if wasBuffered {
            if !buffered.isEmpty { u.connection.write(buffered) }
            buffered = []
            bodyTarget = .discard
        } else {
            let early = pending
            pending = []
            writeBody(u, early)
            if requestEnded, case .chunked = head.framing { u.connection.write(HTTP1Serializer.lastChunk) }
        }
        if requestEnded {
            arm(.response, responseTimeout)
        } else {
            arm(.body, conn.limits.bodyTimeoutMillis)
        }
    }

    private func upstreamDidRead() {
        guard let u = upstream else { return }
        madeProgress()
        if response == nil {
            parseResponseHead(u)
        } else {
            pumpResponseBody(u)
        }
    }

    private func parseResponseHead(_ u: UpstreamConnection) {
        let final: (HTTPResponseHeadLines, Int)?
        do {
            final = try u.finalResponseHead(parser: conn.responseParser, requestMethod: head.method)
        } catch {
            fail(status: 502, code: "upstream_bad_response")
            return
        }
        guard let (r, end) = final else { return }
        response = (r.status, r.keepAlive)
        upstreamSeconds = Double(EventLoop.monotonicNanos() - upstreamStarted) / 1e9
        if !requestEnded {
            // Answered before the request body ended: stop forwarding it; the upstream is not reusable.
            earlyResponse = true
            discardRequestBody()
        }
        responseBody = BodyReader(r.framing)
        let dropContentLength: Bool
        switch r.framing {
        case .chunked, .untilClose: dropContentLength = true
        case .contentLength, .none: dropContentLength = false
        }
        let endStream: Bool
        if case .none = r.framing { endStream = true } else { endStream = false }
        responseStatus = r.status
        responseHeadSent = true
        let submitted: Result<Void, HTTP2SessionError>
        if let extra = forward?.responseHeaders, extra.count > 0 {
            // Fields set by the route: through strings, as `HTTPFields.set` defines them.
            let full = u.connection.inbound.withReadableBytes { r.materialize($0) }
            let fields = DownstreamResponseHead.fields(full, routeFields: extra, dropContentLength: dropContentLength)
            submitted = Result { () throws(HTTP2SessionError) in
                try session.submitResponse(streamID: id, status: r.status, headers: fields, endStream: endStream)
            }
        } else {
            // The usual case: the header list is built from the upstream's bytes, no string per field.
            submitted = u.connection.inbound.withReadableBytes { buf in
                Result { () throws(HTTP2SessionError) in
                    try session.submitResponse(streamID: id, status: r.status, endStream: endStream) {
                        DownstreamResponseHead.appendHTTP2(r, from: buf, dropContentLength: dropContentLength, to: &$0)
                    }
                }
            }
        }
        u.connection.inbound.consume(end)
        u.recycle(r)
        if case .failure = submitted {
            abandon(code: "client_gone")
            return
        }
        if endStream {
            responseComplete(upstreamReusable: upstreamReusable(u))
        } else {
            arm(.response, responseTimeout)
            pumpResponseBody(u)
        }
    }

    private func upstreamReusable(_ u: UpstreamConnection) -> Bool {
        guard let r = response, r.keepAlive, !earlyResponse else { return false }
        if case .untilClose = responseBody.framing { return false }
        return u.connection.inbound.isEmpty
    }

    private func pumpResponseBody(_ u: UpstreamConnection) {
        guard !responseDone else { return }
        var consumed = 0
        var done = false
        var sendFailed = false
        func send(_ data: Slice<UnsafeRawBufferPointer>) {
            guard !sendFailed, !data.isEmpty else { return }
            responseBytes += data.count
            do {
                try session.sendResponseBody(streamID: id, UnsafeRawBufferPointer(rebasing: data), endStream: false)
            } catch {
                sendFailed = true
            }
        }
        do {
            try u.connection.inbound.withReadableBytes { (buf: UnsafeRawBufferPointer) throws in
                (consumed, done) = try responseBody.read(buf) { send($0) }
            }
        } catch {
            fail(status: nil, code: "upstream_bad_response")
            return
        }
        if sendFailed {
            abandon(code: "client_gone")
            return
        }
        u.connection.inbound.consume(consumed)
        if done {
            responseComplete(upstreamReusable: upstreamReusable(u))
        } else if session.shouldPauseUpstream(streamID: id) {
            u.connection.pauseReading()  // resumed on .responseWritable
        }
    }

    /// The response buffer fell below the high-water mark.
    func resumeUpstream() {
        upstream?.connection.resumeReading()
    }

    private func responseComplete(upstreamReusable: Bool) {
        if !responseDone && responseHeadSent, case .none = responseBody.framing {
            // The HEADERS frame ended the stream.
        } else if !responseDone {
            try? session.sendResponseBody(streamID: id, [], endStream: true)
        }
        responseDone = true
        cancelTimer()
        releaseUpstream(reusable: upstreamReusable)
    }

    private func upstreamDidEnd() {
        guard let u = upstream else { return }
        if response != nil, case .untilClose = responseBody.framing, !responseDone {
            pumpResponseBody(u)
            if !responseDone && !finished { responseComplete(upstreamReusable: false) }
            return
        }
        releaseUpstream(reusable: false)
        if response == nil {
            if !retried, u.mayRetry(head) {
                retried = true
                upstreamHeadSent = false
                acquireUpstream(fresh: true)
                return
            }
            fail(status: 502, code: "upstream_closed")
        } else if !responseDone {
            fail(status: nil, code: "upstream_closed")
        }
    }

    private func releaseUpstream(reusable: Bool) {
        guard let u = upstream else { return }
        upstream = nil
        u.endExchange()
        u.connection.resumeReading()
        u.pool.release(u, reusable: reusable)
    }

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
            let rest: UInt64 = if case .contentLength(let n) = head.framing { n &- UInt64(requestBodyBytes) } else { .max }
            if rest > UInt64(session.settings.initialWindowSize) { session.stopRequestAfterResponse(streamID: id) }
        }
        cancelTimer()
        var fields = r.headers
        fields.set("Content-Length", String(r.body.count))
        let noBody = head.method == "HEAD" || r.status == 204 || r.status == 304 || r.body.isEmpty
        responseStatus = r.status
        responseHeadSent = true
        responseDone = true
        do {
            try session.submitResponse(streamID: id, status: r.status, headers: fields, endStream: noBody)
            if !noBody {
                try session.sendResponseBody(streamID: id, r.body, endStream: true)
                responseBytes += r.body.count
            }
        } catch {
            // The stream or the connection is already gone; its close is reported separately.
        }
    }

    /// Something broke. Before the response head: answer `status` (if any). After it, or without a
    /// status: RST_STREAM INTERNAL_ERROR (the client sees the response cut short).
    private func fail(status: Int?, code: String) {
        guard !finished else { return }
        releaseUpstream(reusable: false)
        error = code
        if !responseHeadSent, let status {
            respond(LocalResponse.error(status, code))
            return
        }
        discardRequestBody()
        cancelTimer()
        responseDone = true
        conn.resetStream(id, reason: code)
    }

    /// The session cannot take the response any more (stream or connection closed under us).
    private func abandon(code: String) {
        error = error ?? code
        responseDone = true
        cancelTimer()
        releaseUpstream(reusable: false)
    }

    func clientReset(_ code: HTTP2ErrorCode) {
        error = error ?? "client_reset"
    }

    /// The session closed the stream: the last event for it.
    func streamClosed(_ code: HTTP2ErrorCode) {
        guard !finished else { return }
        if !responseDone || code != .noError { error = error ?? "stream_reset" }
        finish()
    }

    /// The downstream connection closed with this stream open.
    func connectionGone() {
        guard !finished else { return }
        if !responseDone { error = error ?? "client_closed" }
        finish()
    }

    private func finish() {
        finished = true
        cancelTimer()
        bufferedHandler = nil
        releaseUpstream(reusable: false)
        let now = EventLoop.monotonicNanos()
        conn.router.exchangeDidFinish(ExchangeRecord(
            route: routeName, method: head.method, target: head.target, status: responseStatus,
            requestBytes: requestBodyBytes, responseBytes: responseBytes, durationSeconds: Double(now - started) / 1e9,
            upstream: forward?.pool.target.name, upstreamSeconds: upstreamSeconds, peer: conn.peerHost,
            error: error, protocolName: "h2"))
    }

    // MARK: - Timers

    private func arm(_ kind: TimerKind, _ ms: Int64) {
        timerKind = kind
        progressTimeout = ms
        let d = conn.loop.timers.nowMillis + ms
        deadline = d
        conn.schedule(at: d)
    }

    private func cancelTimer() {
        timerKind = nil
        deadline = nil
    }

    private func madeProgress() {
        if timerKind == .body || timerKind == .response { deadline = conn.loop.timers.nowMillis + progressTimeout }
    }

    func timedOut() {
        guard let kind = timerKind, !finished else { return }
        cancelTimer()
        switch kind {
        case .body: fail(status: 408, code: "body_timeout")
        case .response: fail(status: 504, code: "upstream_timeout")
        case .acquire: fail(status: 503, code: "upstream_busy")
        }
    }

    // MARK: - ConnectionDelegate (the upstream connection)

    func connectionDidRead(_ c: Connection) {
        upstreamDidRead()
        conn.pump()
    }

    func connectionDidReadEOF(_ c: Connection) {
        upstreamDidEnd()
        conn.pump()
    }

    func connectionDidDrain(_ c: Connection) {
        if let u = upstream { acknowledgeWritten(u) }
        conn.pump()
    }

    func connectionDidClose(_ c: Connection, error: Socket.Error?) {
        upstreamDidEnd()
        conn.pump()
    }
}
