import Dispatch
import GatewayCrypto
import GatewayHTTP
import GatewayIO
import Glibc
import Synchronization

/// An HTTP listener on every event loop (SO_REUSEPORT when there are several), each accepted
/// connection served with its loop's router by an `HTTP1ServerConnection` or an
/// `HTTP2ServerConnection`. Plain TCP: h2c with prior knowledge, HTTP/1.1, or, when both are served,
/// whichever the first bytes call for (the HTTP/2 preface or not). TLS: the handshake first (bounded
/// by the header timeout), then ALPN `h2` → HTTP/2, anything else → HTTP/1.1. Tracks live
/// connections for gauges and graceful drain.
public final class HTTPServer: @unchecked Sendable {
    public let loops: [EventLoop]
    public private(set) var address: SocketAddress
    private var listeners: [Listener?]
    private var connections: [[Int: any ServerConnection]]
    private var nextConnectionID = 0
    /// `limits.max_connections` for the whole listener, whichever loop the kernel hands a
    /// connection to (SO_REUSEPORT hashes clients onto loops, so a per-loop share would refuse early).
    private let maxConnections: Int
    private let live = Atomic<Int>(0)
    public let protocols: ServedProtocols
    /// The SETTINGS new HTTP/2 connections advertise; replaced on reload (`replaceHTTP2Settings`),
    /// while open connections keep theirs.
    public var http2Settings: HTTP2Settings { http2SettingsBox.withLock { $0 } }
    private let http2SettingsBox: Mutex<HTTP2Settings>
    /// An HTTP/2 stream was reset (reason from a fixed list), on the connection's loop.
    public var onHTTP2StreamReset: ((String) -> Void)?
    /// An HTTP/2 GOAWAY was sent or received (reason from a fixed list), on the connection's loop.
    public var onHTTP2Goaway: ((String) -> Void)?
    /// The context new TLS handshakes use (nil: plain TCP); replaced on reload, while sessions
    /// already made keep theirs.
    private let tlsContext: Mutex<TLSServerContext?>
    private let handshakeTimeoutMillis: Int64
    /// A TLS handshake completed (for metrics: version, resumption).
    public var onTLSHandshake: ((EventLoop, TLSConnectionInfo) -> Void)?
    /// A TLS handshake failed; the reason is a `TLSFailure.Kind` raw value or `timeout`.
    public var onTLSFailure: ((EventLoop, String) -> Void)?
    public var onAccept: ((EventLoop) -> Void)?
    public var onClose: ((EventLoop) -> Void)?
    /// A connection closed at accept: over the connection limit, or accept itself failed (EMFILE…).
    public var onRefuse: ((EventLoop) -> Void)?
    /// Whether a client may connect at all (`admin.allow`): asked at accept, before anything is read;
    /// a refused connection is closed at once and never reaches the router. nil: everyone.
    private let admit: (@Sendable (SocketAddress) -> Bool)?

    /// - Parameters:
    ///   - tls: the listener's TLS context (nil: plain TCP). `scheme` should then be `https`; ALPN
    ///     decides the protocol (the context offers `h2` only when `protocols` has `.h2c`).
    ///   - admit: asked for every accepted connection's peer before anything else; false closes it.
    ///     Set here (not later) so that no connection is accepted before it applies.
    ///   - makeRouter: called once per loop, on that loop.
    public init(address: SocketAddress, loops: [EventLoop], limits: DownstreamLimits, maxConnections: Int = 10_000,
                scheme: String = "http", protocols: ServedProtocols = .http1, http2Settings: HTTP2Settings = HTTP2Settings(),
                tls: TLSServerContext? = nil, admit: (@Sendable (SocketAddress) -> Bool)? = nil,
                makeRouter: @escaping @Sendable (EventLoop) -> any RequestRouter) throws(Socket.Error)
    {
        self.admit = admit
        self.loops = loops
        self.address = address
        self.tlsContext = Mutex(tls)
        self.handshakeTimeoutMillis = limits.headerTimeoutMillis
        self.listeners = Array(repeating: nil, count: loops.count)
        self.connections = Array(repeating: [:], count: loops.count)
        self.maxConnections = max(1, maxConnections)
        self.protocols = protocols.isEmpty ? .http1 : protocols
        self.http2SettingsBox = Mutex(http2Settings)
        var bound = address
        var failure: Socket.Error?
        for (i, loop) in loops.enumerated() {
            loop.queue.sync {
                do {
                    let router = makeRouter(loop)
                    let ids = RequestIDGenerator()
                    let l = try Listener(address: bound, loop: loop, reusePort: loops.count > 1) { [unowned self] fd, peer in
                        self.accepted(fd: fd, peer: peer, loopIndex: i, router: router, ids: ids, limits: limits, scheme: scheme)
                    }
                    l.onAcceptError = { [unowned self] _ in self.onRefuse?(loop) }
                    listeners[i] = l
                    bound = l.address  // port 0: the other loops bind the port the first one got
                } catch let e as Socket.Error {
                    failure = e
                } catch {
                    failure = Socket.Error(operation: "listen", errno: EINVAL)
                }
            }
            if let failure {
                stopAccepting()
                throw failure
            }
        }
        self.address = bound
    }

    /// The context for new TLS handshakes (nil: plain TCP).
    public var tls: TLSServerContext? { tlsContext.withLock { $0 } }

    /// Swaps the TLS context (certificate reload): new handshakes use `context`; open connections keep
    /// their sessions. Callable from any thread.
    public func replaceTLSContext(_ context: TLSServerContext) {
        tlsContext.withLock { $0 = context }
    }

    /// Swaps the HTTP/2 SETTINGS (reload): connections accepted from now on advertise `settings`;
    /// open ones keep what they advertised. Callable from any thread.
    public func replaceHTTP2Settings(_ settings: HTTP2Settings) {
        http2SettingsBox.withLock { $0 = settings }
    }

    private func accepted(fd: Int32, peer: SocketAddress, loopIndex i: Int, router: any RequestRouter, ids: RequestIDGenerator,
                          limits: DownstreamLimits, scheme: String)
    {
        let loop = loops[i]
        if let admit, !admit(peer) {
            Socket.close(fd)
            return
        }
        guard listeners[i] != nil, live.wrappingAdd(1, ordering: .relaxed).newValue <= maxConnections else {
            if listeners[i] != nil { live.wrappingSubtract(1, ordering: .relaxed) }
            Socket.close(fd)
            onRefuse?(loop)
            return
        }
        let context = tlsContext.withLock { $0 }
        let conn: Connection
        do {
            conn = try Connection(fd: fd, loop: loop, peer: peer, tls: context?.makeSession())
        } catch {
            live.wrappingSubtract(1, ordering: .relaxed)
            Socket.close(fd)
            return
        }
        let id = nextConnectionID
        nextConnectionID += 1
        // The first request's head (or HTTP/2 request) is due within the header timeout of now,
        // whatever comes first (TLS handshake, protocol sniffing).
        let acceptedAt = loop.timers.nowMillis
        let closed: () -> Void = { [unowned self] in
            connections[i][id] = nil
            live.wrappingSubtract(1, ordering: .relaxed)
            onClose?(loop)
        }
        if context != nil {
            let gate = TLSHandshakeGate(
                connection: conn, timeoutMillis: handshakeTimeoutMillis,
                ready: { [unowned self] c, info in
                    onTLSHandshake?(loop, info)
                    // The handler becomes the delegate; the plaintext that came with the handshake follows.
                    _ = serve(c, http2: info.alpn == "h2" && protocols.contains(.h2c), slot: (i, id), router: router, ids: ids,
                              limits: limits, scheme: scheme, acceptedAt: acceptedAt, closed: closed)
                },
                failed: { [unowned self] reason in onTLSFailure?(loop, reason) })
            gate.onClose = closed
            connections[i][id] = gate
            onAccept?(loop)
            return
        }
        switch (protocols.contains(.http1), protocols.contains(.h2c)) {
        case (true, true):
            let sniffer = ProtocolSniffer(connection: conn, limits: limits) { [unowned self] verdict in
                var http2 = false
                if case .http2 = verdict { http2 = true }
                _ = serve(conn, http2: http2, slot: (i, id), router: router, ids: ids, limits: limits, scheme: scheme,
                          acceptedAt: acceptedAt, closed: closed)
            }
            sniffer.onClose = closed
            connections[i][id] = sniffer
        case (false, true):
            // No handler owns the connection yet: a failed session start is accounted here.
            guard serve(conn, http2: true, slot: (i, id), router: router, ids: ids, limits: limits, scheme: scheme,
                        acceptedAt: acceptedAt, closed: closed)
            else {
                live.wrappingSubtract(1, ordering: .relaxed)
                return
            }
        default:
            _ = serve(conn, http2: false, slot: (i, id), router: router, ids: ids, limits: limits, scheme: scheme,
                      acceptedAt: acceptedAt, closed: closed)
        }
        onAccept?(loop)
    }

    /// Hands `conn` to its protocol handler, which becomes its delegate and takes over its bookkeeping
    /// slot, then lets it process what already arrived. False (the connection closed) when the HTTP/2
    /// session could not be made.
    private func serve(
        _ conn: Connection, http2: Bool, slot: (loop: Int, id: Int), router: any RequestRouter, ids: RequestIDGenerator,
        limits: DownstreamLimits, scheme: String, acceptedAt: Int64, closed: @escaping () -> Void
    ) -> Bool {
        if http2 {
            guard let h2 = startHTTP2(conn, router: router, ids: ids, limits: limits, scheme: scheme, acceptedAt: acceptedAt)
            else { return false }
            connections[slot.loop][slot.id] = h2
            h2.onClose = closed
            h2.transportDidRead()
        } else {
            guard !conn.isClosed else { return false }
            let h1 = HTTP1ServerConnection(connection: conn, router: router, limits: limits, scheme: scheme, acceptedAtMillis: acceptedAt,
                                           requestIDs: ids)
            connections[slot.loop][slot.id] = h1
            h1.onClose = closed
            if !conn.inbound.isEmpty { h1.connectionDidRead(conn) }
        }
        return true
    }

    /// nil (and the connection closed) when the HTTP/2 session cannot be created. The caller registers
    /// it, then lets it read (which also queues the server's SETTINGS).
    private func startHTTP2(_ conn: Connection, router: any RequestRouter, ids: RequestIDGenerator, limits: DownstreamLimits,
                            scheme: String, acceptedAt: Int64) -> HTTP2ServerConnection?
    {
        do {
            let h2 = try HTTP2ServerConnection(
                transport: conn, router: router, limits: limits, settings: http2Settings, scheme: scheme, acceptedAtMillis: acceptedAt,
                requestIDs: ids)
            h2.onStreamReset = onHTTP2StreamReset
            h2.onGoaway = onHTTP2Goaway
            conn.delegate = h2
            return h2
        } catch {
            conn.close()
            return nil
        }
    }

    /// Live connections across loops (the counter accept and close keep; no hop onto the loops).
    public var connectionCount: Int { live.load(ordering: .relaxed) }

    /// Closes the listening sockets (callable from any thread; waits for each loop).
    public func stopAccepting() {
        for (i, loop) in loops.enumerated() {
            loop.queue.sync {
                listeners[i]?.close()
                listeners[i] = nil
            }
        }
    }

    /// Sends every open HTTP/2 connection the graceful two-step GOAWAY (`beginDrain`), counted in
    /// `onHTTP2Goaway` with `reason`: in-flight streams finish, then each connection closes and its
    /// client reconnects. The listener keeps accepting; HTTP/1.1 connections (and TLS handshakes or
    /// sniffers not yet decided) are left alone. Hops onto each loop; callable from any thread.
    /// Returns how many connections were told.
    @discardableResult
    public func goawayHTTP2(reason: String) -> Int {
        var told = 0
        for (i, loop) in loops.enumerated() {
            told += loop.queue.sync {
                var n = 0
                for case let h2 as HTTP2ServerConnection in connections[i].values {
                    if h2.goaway(reason: reason) { n += 1 }
                }
                return n
            }
        }
        return told
    }

    /// Graceful drain: stop accepting, close idle connections, let busy ones finish their current
    /// response; waits until none is left or `deadlineMillis` passes, then closes the rest.
    /// Returns the number of connections that had to be cut.
    @discardableResult
    public func drain(deadlineMillis: Int64) -> Int {
        stopAccepting()
        for (i, loop) in loops.enumerated() {
            loop.queue.sync { for c in connections[i].values { c.beginDrain() } }
        }
        let until = EventLoop.monotonicMillis() + deadlineMillis
        while connectionCount > 0 && EventLoop.monotonicMillis() < until { usleep(20_000) }
        var cut = 0
        for (i, loop) in loops.enumerated() {
            loop.queue.sync {
                for c in connections[i].values {
                    cut += 1
                    c.closeNow()
                }
            }
        }
        return cut
    }
}
