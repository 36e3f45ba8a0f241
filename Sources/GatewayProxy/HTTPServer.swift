import Dispatch
import GatewayCrypto
import GatewayIO
import Glibc
import Synchronization

/// An HTTP listener on every event loop (SO_REUSEPORT when there are several), each accepted
/// connection served by the handler `makeHandler` returns (by default an `HTTP1ServerConnection`)
/// with its loop's router. With a TLS context, connections first complete a TLS handshake (bounded
/// by the header timeout) and the handler is made with the ALPN protocol agreed. Tracks live
/// connections for gauges and graceful drain.
public final class HTTPServer: @unchecked Sendable {
    /// Makes the protocol handler of a connection once it is ready: at accept for plain TCP, after the
    /// handshake for TLS, with the ALPN protocol agreed (`"h2"`, `"http/1.1"`, nil when none). The
    /// handler becomes the connection's delegate; the server keeps it until it closes.
    public typealias HandlerFactory = (_ connection: Connection, _ alpn: String?, _ router: any RequestRouter) -> any ServedConnection

    public let loops: [EventLoop]
    public private(set) var address: SocketAddress
    private var listeners: [Listener?]
    /// By the connection's identity: the handler serving it (or its handshake gate).
    private var connections: [[ObjectIdentifier: any ServedConnection]]
    private let makeHandler: HandlerFactory
    /// The context new TLS handshakes use (nil: plain TCP); replaced on reload, while sessions
    /// already made keep theirs.
    private let tlsContext: Mutex<TLSServerContext?>
    private let handshakeTimeoutMillis: Int64
    /// A TLS handshake completed (for metrics: version, resumption).
    public var onTLSHandshake: ((EventLoop, TLSConnectionInfo) -> Void)?
    /// A TLS handshake failed; the reason is a `TLSFailure.Kind` raw value or `timeout`.
    public var onTLSFailure: ((EventLoop, String) -> Void)?
    private let maxConnectionsPerLoop: Int
    public var onAccept: ((EventLoop) -> Void)?
    public var onClose: ((EventLoop) -> Void)?
    /// A connection closed at accept: over the connection limit, or accept itself failed (EMFILE…).
    public var onRefuse: ((EventLoop) -> Void)?

    /// - Parameters:
    ///   - tls: the listener's TLS context (nil: plain TCP). `scheme` should then be `https`.
    ///   - makeHandler: nil: every connection is served by `HTTP1ServerConnection`.
    ///   - makeRouter: called once per loop, on that loop.
    public init(address: SocketAddress, loops: [EventLoop], limits: DownstreamLimits, maxConnections: Int = 10_000,
                scheme: String = "http", tls: TLSServerContext? = nil, makeHandler: HandlerFactory? = nil,
                makeRouter: @escaping @Sendable (EventLoop) -> any RequestRouter) throws(Socket.Error)
    {
        self.loops = loops
        self.address = address
        self.tlsContext = Mutex(tls)
        self.handshakeTimeoutMillis = limits.headerTimeoutMillis
        self.makeHandler = makeHandler ?? { connection, _, router in
            HTTP1ServerConnection(connection: connection, router: router, limits: limits, scheme: scheme)
        }
        self.listeners = Array(repeating: nil, count: loops.count)
        self.connections = Array(repeating: [:], count: loops.count)
        self.maxConnectionsPerLoop = max(1, maxConnections / max(1, loops.count))
        var bound = address
        var failure: Socket.Error?
        for (i, loop) in loops.enumerated() {
            loop.queue.sync {
                do {
                    let router = makeRouter(loop)
                    let l = try Listener(address: bound, loop: loop, reusePort: loops.count > 1) { [unowned self] fd, peer in
                        self.accepted(fd: fd, peer: peer, loopIndex: i, router: router)
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

    private func accepted(fd: Int32, peer: SocketAddress, loopIndex i: Int, router: any RequestRouter) {
        let loop = loops[i]
        guard connections[i].count < maxConnectionsPerLoop, listeners[i] != nil else {
            Socket.close(fd)
            onRefuse?(loop)
            return
        }
        let context = tlsContext.withLock { $0 }
        let conn: Connection
        do {
            conn = try Connection(fd: fd, loop: loop, peer: peer, tls: context?.makeSession())
        } catch {
            Socket.close(fd)
            return
        }
        let id = ObjectIdentifier(conn)
        let closed: () -> Void = { [unowned self] in
            connections[i][id] = nil
            onClose?(loop)
        }
        if context != nil {
            let gate = TLSHandshakeGate(
                connection: conn, timeoutMillis: handshakeTimeoutMillis,
                ready: { [unowned self] c, info in
                    onTLSHandshake?(loop, info)
                    let handler = makeHandler(c, info.alpn, router)
                    handler.onClose = closed
                    connections[i][id] = handler
                },
                failed: { [unowned self] reason in onTLSFailure?(loop, reason) })
            gate.onClose = closed
            connections[i][id] = gate
        } else {
            let handler = makeHandler(conn, nil, router)
            handler.onClose = closed
            connections[i][id] = handler
        }
        onAccept?(loop)
    }

    /// Live connections across loops (hops onto each loop).
    public var connectionCount: Int {
        loops.enumerated().reduce(0) { sum, e in sum + e.element.queue.sync { connections[e.offset].count } }
    }

    /// Closes the listening sockets (callable from any thread; waits for each loop).
    public func stopAccepting() {
        for (i, loop) in loops.enumerated() {
            loop.queue.sync {
                listeners[i]?.close()
                listeners[i] = nil
            }
        }
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
                    c.downstream.close()
                }
            }
        }
        return cut
    }
}
