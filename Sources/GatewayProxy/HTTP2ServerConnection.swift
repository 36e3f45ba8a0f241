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
    /// The client sent GOAWAY: close once no stream is left.
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
    /// The peer's address as text (logs, X-Forwarded-For).
    lazy var peerHost: String = transport.peer?.host ?? "-"
    /// Whether the peer is one of the listener's trusted proxies: each stream's client is then read
    /// from its X-Forwarded-For (`ClientAddress`), and its forwarding fields are kept upstream.
    lazy var peerTrusted: Bool = transport.peer.map { limits.trustedProxies.contains($0) } ?? false
    /// Where the streams' request ids come from (one generator per listener and loop).
    let requestIDs: RequestIDGenerator
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
    /// A drain's first GOAWAY goes with a PING; the final GOAWAY waits for its acknowledgement at
    /// most this long. A client that never answers (gone without a FIN, or not reading) cannot hold
    /// the drain to `drain_timeout`; one whose stream crossed the final GOAWAY learns from its last
    /// stream id that the stream was not processed, and may retry it (RFC 9113 §6.8).
    static let drainAckMillis: Int64 = 2000

    /// Serves `transport`; the transport's owner calls the `transportDid…` methods. `acceptedAtMillis`
    /// (the loop's wheel clock; default now): the first request must arrive within the header
    /// timeout of it.
    public init(
        transport: any DownstreamTransport, router: any RequestRouter, limits: DownstreamLimits,
        settings: HTTP2Settings = HTTP2Settings(), scheme: String = "http", acceptedAtMillis: Int64? = nil,
        requestIDs: RequestIDGenerator = RequestIDGenerator()
    )
        throws(HTTP2SessionError)
    {
        self.transport = transport
        self.requestIDs = requestIDs
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

    /// The client closed its side: closed now, as nginx, h2o and Go's server do. An HTTP/2 client
    /// that sent its FIN can send no WINDOW_UPDATE, PING ack or request byte any more, so a stream
    /// still open could wait forever on a window the client will never open (the socket would stay
    /// in CLOSE-WAIT, holding a connection slot, with no timer to end it). Open streams end as
    /// `client_closed`; their upstream requests are aborted like any client's that went away.
    public func transportDidReadEOF() {
        guard !closed else { return }
        if streams.isEmpty {
            transport.closeAfterWriting()
        } else {
            transport.close()
        }
    }

    public func transportDidDrain() {
        guard !closed else { return }
        transport.resumeReading()
        pump()
    }

    /// `error`: why the transport failed (nil: closed by either side).
    public func transportDidClose(error: Socket.Error? = nil) {
        guard !closed else { return }
        closed = true
        let open = withStreams { table -> [HTTP2Stream] in
            let all = Array(table.values)
            table.removeAll()
            return all
        }
        let sendTimeout = error?.isSendTimeout ?? false
        for s in open { s.connectionGone(sendTimeout: sendTimeout) }
        onClose?()
        onClose = nil
    }

    // MARK: - ConnectionDelegate (plain TCP transport)

    public func connectionDidRead(_ c: Connection) { transportDidRead() }
    public func connectionDidReadEOF(_ c: Connection) { transportDidReadEOF() }
    public func connectionDidDrain(_ c: Connection) { transportDidDrain() }
    public func connectionDidClose(_ c: Connection, error: Socket.Error?) { transportDidClose(error: error) }

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
        loop.timers.schedule(afterMillis: Self.drainAckMillis) { [weak self] in
            guard let self, !self.closed else { return }
            self.session.finishDrain()
            self.pump()
        }
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
            case .requestHeadTooLarge(let id, let endStream):
                sawRequest = true
                let s = HTTP2Stream(id: id, head: HTTP2Stream.unreadHead(endStream: endStream), connection: self)
                withStreams { $0[id] = s }
                s.refuse(.request(.headersTooLarge))
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
    func resetStream(_ id: Int32, reason: String, code: HTTP2ErrorCode = .internalError) {
        session.resetStream(streamID: id, code: code)
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
        for s in withStreams({ Array($0.values) }) { next = min(next, s.checkTimer(now: now)) }
        if next != .max { schedule(at: next) }
        pump()
    }
}
