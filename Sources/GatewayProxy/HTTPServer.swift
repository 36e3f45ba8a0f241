import Dispatch
import GatewayCrypto
import GatewayHTTP
import GatewayIO
import Glibc
import Synchronization

/// An HTTP listener on every event loop (SO_REUSEPORT when there are several), each accepted
/// connection served with its loop's router by an `HTTP1ServerConnection` or an
/// `HTTP2ServerConnection`. With `limits.proxyProtocol`, the PROXY protocol header comes first
/// (`ProxyHeaderReader`; only from a trusted peer), and its source is the connection's peer from
/// then on. Plain TCP: h2c with prior knowledge, HTTP/1.1, or, when both are served, whichever the
/// first bytes call for (the HTTP/2 preface or not). TLS: the handshake first, then ALPN `h2` →
/// HTTP/2 (when `protocols` has `.h2`), anything else → HTTP/1.1. Everything before the first
/// request (PROXY header, handshake, preface) is bounded by the header timeout from the accept.
/// Tracks live connections for gauges and graceful drain. What new connections are served with
/// (`Profile`: protocols, TLS, limits, SETTINGS) can be replaced on reload without touching the socket.
public final class HTTPServer: @unchecked Sendable {
    /// How the listener serves the connections it accepts from now on; open connections keep the
    /// profile they were accepted with. Read once per accepted connection.
    public struct Profile: Sendable {
        public var limits: DownstreamLimits
        /// `limits.max_connections` for the whole listener.
        public var maxConnections: Int
        /// `http` or `https` (the scheme requests are forwarded as).
        public var scheme: String
        /// Never empty (`.http1` when given none).
        public var protocols: ServedProtocols
        /// The SETTINGS new HTTP/2 connections advertise.
        public var http2Settings: HTTP2Settings
        /// The context new TLS handshakes use; nil: plain TCP. With TLS, ALPN decides the protocol
        /// (the context offers `h2` only when `protocols` has `.h2`).
        public var tls: TLSServerContext?

        public init(
            limits: DownstreamLimits, maxConnections: Int = 10_000, scheme: String = "http", protocols: ServedProtocols = .http1,
            http2Settings: HTTP2Settings = HTTP2Settings(), tls: TLSServerContext? = nil
        ) {
            self.limits = limits
            self.maxConnections = max(1, maxConnections)
            self.scheme = scheme
            self.protocols = protocols.isEmpty ? .http1 : protocols
            self.http2Settings = http2Settings
            self.tls = tls
        }
    }

    public let loops: [EventLoop]
    public private(set) var address: SocketAddress
    /// Each loop's listening socket and connections, `perLoop[i]` touched only on `loops[i]`. The
    /// array never changes after init: the loops share no mutable property.
    private let perLoop: [PerLoop]
    /// The whole listener's count, checked against `Profile.maxConnections` whichever loop the kernel
    /// hands a connection to (SO_REUSEPORT hashes clients onto loops, so a per-loop share would refuse early).
    private let live = Atomic<Int>(0)
    /// What connections accepted from now on are served with; replaced on reload (`adopt`).
    private let profileBox: Mutex<Profile>
    public var profile: Profile { profileBox.withLock { $0 } }
    public var protocols: ServedProtocols { profile.protocols }
    /// The SETTINGS new HTTP/2 connections advertise; replaced on reload (`replaceHTTP2Settings`),
    /// while open connections keep theirs.
    public var http2Settings: HTTP2Settings { profile.http2Settings }
    /// An HTTP/2 stream was reset (reason from a fixed list), on the connection's loop.
    public var onHTTP2StreamReset: ((String) -> Void)?
    /// An HTTP/2 GOAWAY was sent or received (reason from a fixed list), on the connection's loop.
    public var onHTTP2Goaway: ((String) -> Void)?
    /// A TLS handshake completed (for metrics: version, resumption).
    public var onTLSHandshake: ((EventLoop, TLSConnectionInfo) -> Void)?
    /// A TLS handshake failed; the reason is a `TLSFailure.Kind` raw value or `timeout`.
    public var onTLSFailure: ((EventLoop, String) -> Void)?
    public var onAccept: ((EventLoop) -> Void)?
    public var onClose: ((EventLoop) -> Void)?
    /// A connection closed at accept: over the connection limit, or accept itself failed (EMFILE…).
    public var onRefuse: ((EventLoop) -> Void)?
    /// A connection on a `proxy_protocol` listener closed before its PROXY header was read: the
    /// reason (`untrusted_peer`, or a `ProxyHeaderReader` failure: `not_proxy_protocol`, `malformed`,
    /// `too_large`, `timeout`, `closed`) and the socket's peer.
    public var onProxyProtocolFailure: ((EventLoop, String, SocketAddress) -> Void)?
    /// Whether a client may connect at all (`admin.allow`): asked at accept, before anything is read;
    /// a refused connection is closed at once and never reaches the router. nil: everyone.
    private let admit: (@Sendable (SocketAddress) -> Bool)?

    /// - Parameters:
    ///   - tls: the listener's TLS context (nil: plain TCP). `scheme` should then be `https`; ALPN
    ///     decides the protocol (the context should offer `h2` only when `protocols` has `.h2`).
    ///   - admit: asked for every accepted connection's peer before anything else; false closes it.
    ///     Set here (not later) so that no connection is accepted before it applies.
    ///   - makeRouter: called once per loop, on that loop.
    public convenience init(
        address: SocketAddress, loops: [EventLoop], limits: DownstreamLimits, maxConnections: Int = 10_000,
        scheme: String = "http", protocols: ServedProtocols = .http1, http2Settings: HTTP2Settings = HTTP2Settings(),
        tls: TLSServerContext? = nil, admit: (@Sendable (SocketAddress) -> Bool)? = nil,
        makeRouter: @escaping @Sendable (EventLoop) -> any RequestRouter
    ) throws(Socket.Error) {
        try self.init(
            address: address, loops: loops,
            profile: Profile(
                limits: limits, maxConnections: maxConnections, scheme: scheme, protocols: protocols,
                http2Settings: http2Settings, tls: tls),
            admit: admit, makeRouter: makeRouter)
    }

    /// Opens the listening socket(s) (one per loop) at `address` and starts accepting.
    /// - Parameter prepare: called before the first socket opens, to set the callbacks (`onAccept`…)
    ///   before any connection can arrive.
    public init(
        address: SocketAddress, loops: [EventLoop], profile: Profile, admit: (@Sendable (SocketAddress) -> Bool)? = nil,
        prepare: ((HTTPServer) -> Void)? = nil,
        makeRouter: @escaping @Sendable (EventLoop) -> any RequestRouter
    ) throws(Socket.Error) {
        self.admit = admit
        self.loops = loops
        self.address = address
        self.profileBox = Mutex(profile)
        self.perLoop = loops.map { _ in PerLoop() }
        prepare?(self)
        var bound = address
        var failure: Socket.Error?
        for (i, loop) in loops.enumerated() {
            loop.queue.sync {
                do {
                    let router = makeRouter(loop)
                    let ids = RequestIDGenerator()
                    let l = try Listener(address: bound, loop: loop, reusePort: loops.count > 1) { [unowned self] fd, peer in
                        self.accepted(fd: fd, peer: peer, loopIndex: i, router: router, ids: ids)
                    }
                    l.onAcceptError = { [unowned self] _ in self.onRefuse?(loop) }
                    perLoop[i].listener = l
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
    public var tls: TLSServerContext? { profile.tls }

    /// Swaps the TLS context (certificate reload): new handshakes use `context`; open connections keep
    /// their sessions. Callable from any thread.
    public func replaceTLSContext(_ context: TLSServerContext) {
        profileBox.withLock { $0.tls = context }
    }

    /// Swaps the HTTP/2 SETTINGS (reload): connections accepted from now on advertise `settings`;
    /// open ones keep what they advertised. Callable from any thread.
    public func replaceHTTP2Settings(_ settings: HTTP2Settings) {
        profileBox.withLock { $0.http2Settings = settings }
    }

    /// Swaps the whole profile (reload of a listener whose address is unchanged: protocols, TLS on or
    /// off, limits): connections accepted from now on are served with `profile`, on the same socket
    /// (nothing is refused meanwhile); open ones keep theirs. Callable from any thread.
    public func adopt(_ profile: Profile) {
        profileBox.withLock { $0 = profile }
    }

    private func accepted(fd: Int32, peer: SocketAddress, loopIndex i: Int, router: any RequestRouter, ids: RequestIDGenerator) {
        let loop = loops[i]
        let own = perLoop[i]
        if let admit, !admit(peer) {
            Socket.close(fd)
            return
        }
        let profile = profileBox.withLock { $0 }
        guard own.listener != nil, live.wrappingAdd(1, ordering: .relaxed).newValue <= profile.maxConnections else {
            if own.listener != nil { live.wrappingSubtract(1, ordering: .relaxed) }
            Socket.close(fd)
            onRefuse?(loop)
            return
        }
        let limits = profile.limits
        let id = own.nextConnectionID
        own.nextConnectionID += 1
        // The first request's head (or HTTP/2 request) is due within the header timeout of now,
        // whatever comes first (PROXY header, TLS handshake, protocol sniffing).
        let acceptedAt = loop.timers.nowMillis
        let closed: () -> Void = { [unowned self] in
            perLoop[i].connections[id] = nil
            live.wrappingSubtract(1, ordering: .relaxed)
            onClose?(loop)
        }
        let slot = Slot(loop: i, id: id, acceptedAt: acceptedAt, closed: closed)
        guard limits.proxyProtocol else {
            if start(fd: fd, peer: peer, slot: slot, router: router, ids: ids, profile: profile) {
                onAccept?(loop)
            } else {
                live.wrappingSubtract(1, ordering: .relaxed)
            }
            return
        }
        // PROXY protocol: only a trusted balancer may name another client; anyone else is closed
        // before a byte is read.
        guard limits.trustedProxies.contains(peer) else {
            live.wrappingSubtract(1, ordering: .relaxed)
            Socket.close(fd)
            onProxyProtocolFailure?(loop, "untrusted_peer", peer)
            return
        }
        let reader: ProxyHeaderReader
        do {
            reader = try ProxyHeaderReader(fd: fd, loop: loop, timeoutMillis: limits.headerTimeoutMillis) { [unowned self] outcome in
                switch outcome {
                case .header(let header):
                    // The header's source is the client from now on (LOCAL, UNKNOWN: the balancer itself).
                    if !start(fd: fd, peer: header.source ?? peer, slot: slot, router: router, ids: ids, profile: profile) {
                        closed()
                    }
                case .failed(let reason):
                    if reason != ProxyHeaderReader.drained { onProxyProtocolFailure?(loop, reason, peer) }
                    closed()
                }
            }
        } catch {
            live.wrappingSubtract(1, ordering: .relaxed)
            Socket.close(fd)
            return
        }
        own.connections[id] = reader
        onAccept?(loop)
    }

    /// What one loop owns of the listener: its listening socket, its open connections (by id) and
    /// the next id. Confined to that loop like everything a loop owns. (One array of dictionaries
    /// and one id counter for all loops were written by several loops at once: ThreadSanitizer,
    /// docs/development.md "Sanitizers".)
    private final class PerLoop {
        var listener: Listener?
        var connections: [Int: any ServerConnection] = [:]
        var nextConnectionID = 0
    }

    /// A connection's place in its loop's `connections`, when it was accepted, and what releases it.
    private struct Slot {
        let loop: Int
        let id: Int
        let acceptedAt: Int64
        let closed: () -> Void
    }

    /// Adopts `fd` (accepted, its PROXY header read if any) as a connection from `peer` and hands it
    /// to the TLS handshake, the protocol sniffer or its protocol handler, which takes `slot`. False
    /// when it could not be made (the descriptor is closed, the slot not taken).
    private func start(fd: Int32, peer: SocketAddress, slot: Slot, router: any RequestRouter, ids: RequestIDGenerator, profile: Profile)
        -> Bool
    {
        let (i, id, acceptedAt, closed) = (slot.loop, slot.id, slot.acceptedAt, slot.closed)
        let loop = loops[i]
        let context = profile.tls
        let limits = profile.limits, scheme = profile.scheme, protocols = profile.protocols
        let conn: Connection
        do {
            conn = try Connection(fd: fd, loop: loop, peer: peer, tls: context?.makeSession())
        } catch {
            Socket.close(fd)
            return false
        }
        conn.sendTimeoutMillis = limits.sendTimeoutMillis
        if context != nil {
            let gate = TLSHandshakeGate(
                connection: conn, timeoutMillis: max(1, acceptedAt + limits.headerTimeoutMillis - loop.timers.nowMillis),
                ready: { [unowned self] c, info in
                    onTLSHandshake?(loop, info)
                    let http2 = info.alpn == "h2" && protocols.contains(.h2)
                    // An HTTP/2-only listener serves no HTTP/1.1, also to a client that chose no ALPN
                    // protocol (one offering only http/1.1 fails the handshake on the context's list).
                    guard http2 || protocols.contains(.http1) else {
                        c.close()
                        return
                    }
                    // The handler becomes the delegate; the plaintext that came with the handshake follows.
                    _ = serve(
                        c, http2: http2, slot: (i, id), router: router, ids: ids, limits: limits, http2Settings: profile.http2Settings,
                        scheme: scheme, acceptedAt: acceptedAt, closed: closed)
                },
                failed: { [unowned self] reason in onTLSFailure?(loop, reason) })
            gate.onClose = closed
            perLoop[i].connections[id] = gate
            return true
        }
        switch (protocols.contains(.http1), protocols.contains(.h2c)) {
        case (true, true):
            var sniffing = limits  // what is left of the header timeout after a PROXY header
            sniffing.headerTimeoutMillis = max(1, acceptedAt + limits.headerTimeoutMillis - loop.timers.nowMillis)
            let sniffer = ProtocolSniffer(connection: conn, limits: sniffing) { [unowned self] verdict in
                var http2 = false
                if case .http2 = verdict { http2 = true }
                _ = serve(
                    conn, http2: http2, slot: (i, id), router: router, ids: ids, limits: limits, http2Settings: profile.http2Settings,
                    scheme: scheme, acceptedAt: acceptedAt, closed: closed)
            }
            sniffer.onClose = closed
            perLoop[i].connections[id] = sniffer
        case (false, true):
            // No handler owns the connection yet: a failed session start is accounted by the caller.
            guard
                serve(
                    conn, http2: true, slot: (i, id), router: router, ids: ids, limits: limits, http2Settings: profile.http2Settings,
                    scheme: scheme, acceptedAt: acceptedAt, closed: closed)
            else { return false }
        default:
            _ = serve(
                conn, http2: false, slot: (i, id), router: router, ids: ids, limits: limits, http2Settings: profile.http2Settings,
                scheme: scheme, acceptedAt: acceptedAt, closed: closed)
        }
        return true
    }

    /// Hands `conn` to its protocol handler, which becomes its delegate and takes over its bookkeeping
    /// slot, then lets it process what already arrived. False (the connection closed) when the HTTP/2
    /// session could not be made.
    private func serve(
        _ conn: Connection, http2: Bool, slot: (loop: Int, id: Int), router: any RequestRouter, ids: RequestIDGenerator,
        limits: DownstreamLimits, http2Settings: HTTP2Settings, scheme: String, acceptedAt: Int64, closed: @escaping () -> Void
    ) -> Bool {
        if http2 {
            guard
                let h2 = startHTTP2(
                    conn, router: router, ids: ids, limits: limits, settings: http2Settings, scheme: scheme, acceptedAt: acceptedAt)
            else { return false }
            perLoop[slot.loop].connections[slot.id] = h2
            h2.onClose = closed
            h2.transportDidRead()
        } else {
            guard !conn.isClosed else { return false }
            let h1 = HTTP1ServerConnection(
                connection: conn, router: router, limits: limits, scheme: scheme, acceptedAtMillis: acceptedAt,
                requestIDs: ids)
            perLoop[slot.loop].connections[slot.id] = h1
            h1.onClose = closed
            if !conn.inbound.isEmpty { h1.connectionDidRead(conn) }
        }
        return true
    }

    /// nil (and the connection closed) when the HTTP/2 session cannot be created. The caller registers
    /// it, then lets it read (which also queues the server's SETTINGS).
    private func startHTTP2(
        _ conn: Connection, router: any RequestRouter, ids: RequestIDGenerator, limits: DownstreamLimits, settings: HTTP2Settings,
        scheme: String, acceptedAt: Int64
    ) -> HTTP2ServerConnection? {
        do {
            let h2 = try HTTP2ServerConnection(
                transport: conn, router: router, limits: limits, settings: settings, scheme: scheme, acceptedAtMillis: acceptedAt,
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
                perLoop[i].listener?.close()
                perLoop[i].listener = nil
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
                for case let h2 as HTTP2ServerConnection in perLoop[i].connections.values {
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
        beginDrain()
        return finishDrain(until: EventLoop.monotonicMillis() + deadlineMillis)
    }

    /// The first half of `drain`, which returns at once: stop accepting (the socket is closed when
    /// this returns), close idle connections, tell busy ones to close after their current response
    /// (HTTP/2: GOAWAY). Callable from any thread; calling it again does no harm.
    public func beginDrain() {
        stopAccepting()
        for (i, loop) in loops.enumerated() {
            loop.queue.sync { for c in perLoop[i].connections.values { c.beginDrain() } }
        }
    }

    /// The second half of `drain`: waits (blocking the caller) until no connection is left or the
    /// monotonic clock reaches `until` (`EventLoop.monotonicMillis()`), then closes the rest.
    /// Returns the number of connections that had to be cut.
    @discardableResult
    public func finishDrain(until: Int64) -> Int {
        while connectionCount > 0 && EventLoop.monotonicMillis() < until { usleep(20_000) }
        var cut = 0
        for (i, loop) in loops.enumerated() {
            loop.queue.sync {
                for c in perLoop[i].connections.values {
                    cut += 1
                    c.closeNow()
                }
            }
        }
        return cut
    }
}
