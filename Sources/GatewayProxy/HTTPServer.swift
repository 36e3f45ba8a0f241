import Dispatch
import GatewayIO
import Glibc
import Synchronization

/// An HTTP/1.1 listener on every event loop (SO_REUSEPORT when there are several), each accepted
/// connection served by an `HTTP1ServerConnection` with its loop's router. Tracks live connections
/// for gauges and graceful drain.
public final class HTTPServer: @unchecked Sendable {
    public let loops: [EventLoop]
    public private(set) var address: SocketAddress
    private var listeners: [Listener?]
    private var connections: [[ObjectIdentifier: HTTP1ServerConnection]]
    /// `limits.max_connections` for the whole listener, whichever loop the kernel hands a
    /// connection to (SO_REUSEPORT hashes clients onto loops, so a per-loop share would refuse early).
    private let maxConnections: Int
    private let live = Atomic<Int>(0)
    public var onAccept: ((EventLoop) -> Void)?
    public var onClose: ((EventLoop) -> Void)?
    /// A connection closed at accept: over the connection limit, or accept itself failed (EMFILE…).
    public var onRefuse: ((EventLoop) -> Void)?

    /// - Parameter makeRouter: called once per loop, on that loop.
    public init(address: SocketAddress, loops: [EventLoop], limits: DownstreamLimits, maxConnections: Int = 10_000,
                scheme: String = "http", makeRouter: @escaping @Sendable (EventLoop) -> any RequestRouter) throws(Socket.Error)
    {
        self.loops = loops
        self.address = address
        self.listeners = Array(repeating: nil, count: loops.count)
        self.connections = Array(repeating: [:], count: loops.count)
        self.maxConnections = max(1, maxConnections)
        var bound = address
        var failure: Socket.Error?
        for (i, loop) in loops.enumerated() {
            loop.queue.sync {
                do {
                    let router = makeRouter(loop)
                    let l = try Listener(address: bound, loop: loop, reusePort: loops.count > 1) { [unowned self] fd, peer in
                        self.accepted(fd: fd, peer: peer, loopIndex: i, router: router, limits: limits, scheme: scheme)
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

    private func accepted(fd: Int32, peer: SocketAddress, loopIndex i: Int, router: any RequestRouter, limits: DownstreamLimits,
                          scheme: String)
    {
        let loop = loops[i]
        guard listeners[i] != nil, live.wrappingAdd(1, ordering: .relaxed).newValue <= maxConnections else {
            if listeners[i] != nil { live.wrappingSubtract(1, ordering: .relaxed) }
            Socket.close(fd)
            onRefuse?(loop)
            return
        }
        let conn: Connection
        do {
            conn = try Connection(fd: fd, loop: loop, peer: peer)
        } catch {
            live.wrappingSubtract(1, ordering: .relaxed)
            Socket.close(fd)
            return
        }
        let server = HTTP1ServerConnection(connection: conn, router: router, limits: limits, scheme: scheme)
        let id = ObjectIdentifier(server)
        connections[i][id] = server
        server.onClose = { [unowned self] in
            connections[i][id] = nil
            live.wrappingSubtract(1, ordering: .relaxed)
            onClose?(loop)
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
