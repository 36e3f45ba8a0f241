import GatewayCrypto
import GatewayHTTP
import GatewayIO

/// An upstream as the proxy uses it.
public struct UpstreamTarget: Sendable {
    public var name: String
    public var address: SocketAddress
    /// Connections per upstream and per event loop (the configured total divided among loops).
    public var maxConnections: Int
    public var connectTimeoutMillis: Int64
    public var responseTimeoutMillis: Int64
    public var idleTimeoutMillis: Int64
    /// Requests that may wait for a free connection before new ones get 503.
    public var maxWaiters: Int
    /// https upstreams: the client context (trust, client certificate) and the name sent as SNI and
    /// checked in the certificate. nil: plain TCP.
    public var tls: TLSClientContext?
    public var tlsServerName: String

    public init(
        name: String, address: SocketAddress, maxConnections: Int = 64, connectTimeoutMillis: Int64 = 2000,
        responseTimeoutMillis: Int64 = 30_000, idleTimeoutMillis: Int64 = 60_000, maxWaiters: Int = 1024,
        tls: TLSClientContext? = nil, tlsServerName: String? = nil
    ) {
        self.tls = tls
        self.tlsServerName = tlsServerName ?? address.host
        self.name = name
        self.address = address
        self.maxConnections = max(1, maxConnections)
        self.connectTimeoutMillis = connectTimeoutMillis
        self.responseTimeoutMillis = responseTimeoutMillis
        self.idleTimeoutMillis = idleTimeoutMillis
        self.maxWaiters = maxWaiters
    }
}

/// Why an acquire failed; the answer is its `proxyError` (ProxyError.swift).
public enum UpstreamFailure: Error, Equatable, Sendable {
    case connectFailed(String)
    case connectTimeout
    case poolExhausted
    case closed
    /// The TLS handshake with the upstream failed (certificate verification, protocol…); the detail is for logs.
    case tls(String)
}

/// What happened to a pool's server, told on the pool's loop (`UpstreamPool.onServerEvent`).
public enum UpstreamServerEvent: Sendable, Equatable {
    /// A request failed on the server (`reason`: `connect_failed`, `connect_timeout`, `tls`,
    /// `closed`), and what that did to its passive health.
    case failed(reason: String, PassiveHealth.Event?)
    /// A success after ejections.
    case recovered
}

/// A keep-alive pool of connections to one upstream server, on one loop (no locks: loops do not
/// share pools). Bounded: at most `maxConnections` open; further requests wait in FIFO order
/// (bounded). Usable alone, as a client of one named target; an upstream with several servers has
/// one per server (`UpstreamBalancer`), each with its shared `UpstreamServer`.
public final class UpstreamPool {
    public let target: UpstreamTarget
    public let loop: EventLoop
    /// The server's shared state (health, re-resolved address); nil for a pool used on its own.
    public let server: UpstreamServer?
    /// Where new connections go: `target.address`, or the server's latest resolution (`syncAddress`).
    public private(set) var address: SocketAddress
    /// Bumped when the address changes: connections opened before are not reused.
    private(set) var addressEpoch = 0
    private var serverAddressGeneration = 0
    /// Every open or connecting connection (the pool owns them; connections only point back weakly).
    private var members: [ObjectIdentifier: UpstreamConnection] = [:]
    private var idle: [UpstreamConnection] = []
    private var waiters: [(connectTimeoutMillis: Int64, done: (Result<UpstreamConnection, UpstreamFailure>) -> Void)] = []
    public private(set) var connectsStarted = 0
    /// Requests sent to the server from this loop (retries included), for the per-server metric.
    var requestsSent = 0
    /// Told of each failure and recovery of the server, on the loop.
    public var onServerEvent: ((UpstreamServerEvent) -> Void)?
    /// https: the latest session a connection of this pool can resume (a fresh ticket from each
    /// connection, since TLS 1.3 tickets are single-use).
    var resumable: TLSResumableSession?
    /// Told of each failed upstream handshake (the failure's detail names the cause), on the loop.
    public var onTLSFailure: ((TLSFailure) -> Void)?
    public var openCount: Int { members.count }
    public var idleCount: Int { idle.count }
    /// Requests holding, awaiting or waiting for a connection of this pool (least connections).
    public var activeRequests: Int { members.count - idle.count + waiters.count }
    /// Requests sent so far (read and reset by the metrics, once a second).
    public func takeRequestsSent() -> Int {
        let n = requestsSent
        requestsSent = 0
        return n
    }

    /// - Parameter server: the shared state of the server `target` is (an upstream with several
    ///   servers, or one whose health and address are tracked); its address replaces `target.address`.
    public init(target: UpstreamTarget, loop: EventLoop, server: UpstreamServer? = nil) {
        self.target = target
        self.loop = loop
        self.server = server
        address = server?.address ?? target.address
        serverAddressGeneration = server?.addressGeneration ?? 0
    }

    /// Takes the server's latest address if it changed (on the loop, off the request path): new
    /// connections go there, idle ones to the old address close, busy ones close when released.
    /// True when it changed.
    @discardableResult
    public func syncAddress() -> Bool {
        guard let s = server else { return false }
        let generation = s.addressGeneration
        guard generation != serverAddressGeneration else { return false }
        serverAddressGeneration = generation
        let a = s.address
        guard a != address else { return false }
        address = a
        addressEpoch += 1
        closeIdle()
        return true
    }

    /// A request to the server failed: its passive health is told, then `onServerEvent`.
    func noteFailure(_ failure: UpstreamFailure) {
        let reason: String
        switch failure {
        case .connectFailed: reason = "connect_failed"
        case .connectTimeout: reason = "connect_timeout"
        case .tls: reason = "tls"
        case .closed: reason = "closed"
        case .poolExhausted: return  // the pool's limit, not the server
        }
        let event = server?.recordFailure(now: loop.timers.nowMillis)
        onServerEvent?(.failed(reason: reason, event))
    }

    /// Hands out an idle connection (most recently used first), or connects, or queues.
    public func acquire(_ done: @escaping (Result<UpstreamConnection, UpstreamFailure>) -> Void) {
        acquire(connectTimeoutMillis: target.connectTimeoutMillis, done)
    }

    /// The same, with a connect timeout of the caller's (a route's `timeouts.connect`).
    public func acquire(connectTimeoutMillis: Int64, _ done: @escaping (Result<UpstreamConnection, UpstreamFailure>) -> Void) {
        while let c = withIdle({ $0.popLast() }) {
            if c.takeFromIdle() {
                done(.success(c))
                return
            }
            c.close()
        }
        if members.count < target.maxConnections {
            connect(connectTimeoutMillis, done)
            return
        }
        guard waiters.count < target.maxWaiters else {
            done(.failure(.poolExhausted))
            return
        }
        waiters.append((connectTimeoutMillis, done))
    }

    /// An idle connection that is still usable (most recently used first), or nil: the synchronous
    /// fast path of `acquire`, without a callback.
    func takeIdle() -> UpstreamConnection? {
        while let c = withIdle({ $0.popLast() }) {
            if c.takeFromIdle() { return c }
            c.close()
        }
        return nil
    }

    /// The idle list is moved out of its property to be changed, so that the property's accesses
    /// are plain moves (no run-time exclusivity check per request). Must not nest.
    @inline(__always)
    private func withIdle<R>(_ body: (inout [UpstreamConnection]) -> R) -> R {
        var list: [UpstreamConnection] = []
        swap(&list, &idle)
        defer { swap(&list, &idle) }
        return body(&list)
    }

    /// A fresh connection, bypassing idle ones (for the single retry of an idempotent request).
    public func acquireFresh(_ done: @escaping (Result<UpstreamConnection, UpstreamFailure>) -> Void) {
        acquireFresh(connectTimeoutMillis: target.connectTimeoutMillis, done)
    }

    public func acquireFresh(connectTimeoutMillis: Int64, _ done: @escaping (Result<UpstreamConnection, UpstreamFailure>) -> Void) {
        if members.count < target.maxConnections {
            connect(connectTimeoutMillis, done)
        } else {
            acquire(connectTimeoutMillis: connectTimeoutMillis, done)
        }
    }

    private func connect(_ timeoutMillis: Int64, _ done: @escaping (Result<UpstreamConnection, UpstreamFailure>) -> Void) {
        connectsStarted += 1
        if let u = UpstreamConnection.open(pool: self, connectTimeoutMillis: timeoutMillis, done) { members[ObjectIdentifier(u)] = u }
    }

    /// A retired pool (replaced by a reload) keeps no idle connections and closes released ones.
    private var retired = false
    public var isRetired: Bool { retired }

    public func retire() {
        retired = true
        closeIdle()
    }

    /// Returns a connection after an exchange; reusable ones serve a waiter or go idle, others close.
    func release(_ c: UpstreamConnection, reusable: Bool) {
        c.takeTicket()
        guard reusable, !retired, !c.isClosed, !c.connection.peerClosed, c.addressEpoch == addressEpoch else {
            c.close()
            return
        }
        if !waiters.isEmpty {
            let w = waiters.removeFirst()
            w.done(.success(c))
            return
        }
        c.enterIdle(timeoutMillis: target.idleTimeoutMillis)
        withIdle { $0.append(c) }
    }

    /// Any member closed (by us, the upstream, a timer or a failed connect).
    func memberDidClose(_ c: UpstreamConnection) {
        members[ObjectIdentifier(c)] = nil
        withIdle { list in if let i = list.firstIndex(where: { $0 === c }) { list.remove(at: i) } }
        if !waiters.isEmpty && members.count < target.maxConnections {
            let w = waiters.removeFirst()
            connect(w.connectTimeoutMillis, w.done)
        }
    }

    func noteTLSFailure(_ f: TLSFailure) { onTLSFailure?(f) }

    /// Closes idle connections (reload, drain, stop).
    public func closeIdle() {
        let all = withIdle { list -> [UpstreamConnection] in
            let taken = list
            list.removeAll()
            return taken
        }
        for c in all { c.close() }
    }
}

/// One connection to an upstream. While idle it watches for the upstream closing; while in use its
/// events go to the current exchange.
public final class UpstreamConnection: ConnectionDelegate {
    public let connection: Connection
    unowned let pool: UpstreamPool
    weak var exchange: (any ConnectionDelegate)?
    /// When the connection went idle (wheel clock), nil while in use. The idle timeout is checked
    /// lazily: one wheel entry at a time, re-armed for the remainder, not one per release.
    private var idleSince: Int64?
    private var idleCheckPending = false
    private var connectTimer: TimerWheel.Handle?
    private var onConnect: ((Result<UpstreamConnection, UpstreamFailure>) -> Void)?
    private var tlsFailure: TLSFailure?
    private var ticketTaken = false
    /// The field storage of the last response head, reused by the next (`recycle`).
    private var spareFields: [HTTPFieldRange] = []
    /// Requests this connection has carried (0 = fresh: nothing can have been sent on it before).
    public private(set) var requestsServed = 0
    public var isClosed: Bool { connection.isClosed }
    /// The pool's `addressEpoch` when it connected.
    let addressEpoch: Int
    /// The pool's server (read on each response without going through the unowned pool).
    let server: UpstreamServer?

    private init(connection: Connection, pool: UpstreamPool) {
        self.connection = connection
        self.pool = pool
        addressEpoch = pool.addressEpoch
        server = pool.server
    }

    /// Starts connecting; the result comes through `done` (never synchronously).
    static func open(
        pool: UpstreamPool, connectTimeoutMillis: Int64, _ done: @escaping (Result<UpstreamConnection, UpstreamFailure>) -> Void
    )
        -> UpstreamConnection?
    {
        switch Socket.connect(pool.address) {
        case .failed(let e):
            pool.loop.enqueue { done(.failure(.connectFailed(e.description))) }
            return nil
        case .connected(let fd), .inProgress(let fd):
            var session: TLSSession?
            if let context = pool.target.tls {
                do {
                    session = try context.makeSession(serverName: pool.target.tlsServerName, resuming: pool.resumable)
                } catch {
                    Socket.close(fd)
                    pool.loop.enqueue { done(.failure(.tls(error.description))) }
                    return nil
                }
            }
            let conn: Connection
            do {
                conn = try Connection(fd: fd, loop: pool.loop, peer: pool.address, connecting: true, tls: session)
            } catch {
                Socket.close(fd)
                pool.loop.enqueue { done(.failure(.connectFailed(error.description))) }
                return nil
            }
            let u = UpstreamConnection(connection: conn, pool: pool)
            conn.delegate = u
            u.onConnect = done
            u.connectTimer = pool.loop.timers.schedule(afterMillis: connectTimeoutMillis) { [weak u] in
                guard let u, let cb = u.onConnect else { return }
                u.onConnect = nil
                u.connection.close()
                cb(.failure(.connectTimeout))
            }
            return u
        }
    }

    func beginExchange(_ owner: any ConnectionDelegate) {
        requestsServed += 1
        exchange = owner
    }

    func endExchange() { exchange = nil }

    func enterIdle(timeoutMillis: Int64) {
        exchange = nil
        idleSince = pool.loop.timers.nowMillis
        if !idleCheckPending { scheduleIdleCheck(afterMillis: timeoutMillis) }
    }

    private func scheduleIdleCheck(afterMillis ms: Int64) {
        idleCheckPending = true
        pool.loop.timers.schedule(afterMillis: ms) { [weak self] in self?.idleCheck() }
    }

    private func idleCheck() {
        idleCheckPending = false
        guard let since = idleSince, !connection.isClosed else { return }
        let left = since + pool.target.idleTimeoutMillis - pool.loop.timers.nowMillis
        if left <= 0 { connection.close() } else { scheduleIdleCheck(afterMillis: left) }
    }

    /// False when the connection died while idle.
    func takeFromIdle() -> Bool {
        idleSince = nil
        return !connection.isClosed && !connection.peerClosed && connection.inbound.isEmpty
    }

    public func close() {
        idleSince = nil
        connection.close()
    }

    /// https: keeps this connection's session for the pool's next connection, once (TLS 1.2 tickets
    /// come with the handshake, TLS 1.3 ones after it: taken after the first exchange).
    func takeTicket() {
        guard !ticketTaken, let tls = connection.tls, !connection.isHandshaking else { return }
        if let s = tls.resumableSession() {
            pool.resumable = s
            ticketTaken = true
        }
    }

    public func connectionDidFailHandshake(_ c: Connection, failure: TLSFailure) {
        tlsFailure = failure
        pool.noteTLSFailure(failure)
    }

    // MARK: ConnectionDelegate (forwarded to the exchange, or handled while idle)

    public func connectionDidConnect(_ c: Connection) {
        if let t = connectTimer { pool.loop.timers.cancel(t) }
        connectTimer = nil
        if let cb = onConnect {
            onConnect = nil
            cb(.success(self))
        }
    }

    public func connectionDidRead(_ c: Connection) {
        if let e = exchange {
            e.connectionDidRead(c)
        } else {
            // Bytes from an idle upstream are a protocol error: drop the connection.
            c.close()
        }
    }

    public func connectionDidReadEOF(_ c: Connection) {
        if let e = exchange { e.connectionDidReadEOF(c) } else { c.close() }
    }

    public func connectionDidDrain(_ c: Connection) { exchange?.connectionDidDrain(c) }

    public func connectionDidClose(_ c: Connection, error: Socket.Error?) {
        if let t = connectTimer { pool.loop.timers.cancel(t) }
        connectTimer = nil
        idleSince = nil
        pool.memberDidClose(self)
        if let cb = onConnect {
            onConnect = nil
            if let f = tlsFailure {
                cb(.failure(.tls(f.description)))
            } else {
                cb(.failure(.connectFailed(error?.description ?? "closed while connecting")))
            }
            return
        }
        exchange?.connectionDidClose(c, error: error)
    }
}

/// Interim answers are the gateway's business, not the client's: a switch of protocols is refused.
struct UpstreamProtocolSwitch: Error {}

extension UpstreamConnection {
    /// Methods a request may be sent twice with (RFC 9110 §9.2.2).
    private static let idempotentMethods: Set<String> = ["GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"]

    static func isIdempotent(_ method: String) -> Bool { idempotentMethods.contains(method) }

    /// A response head came: the server's passive health is told (lock-free unless it had failed).
    @inline(__always)
    func noteSuccess() {
        if let s = server, s.recordSuccess() != nil { pool.onServerEvent?(.recovered) }
    }

    /// Whether a request that got nothing back on this connection may be retried on a fresh one:
    /// idempotent, without a body, and sent on a reused connection (the upstream may have closed it
    /// just before the request arrived).
    func mayRetry(_ head: HTTPRequestHead) -> Bool { mayRetry(method: head.method, framing: head.framing) }

    func mayRetry(method: String, framing: BodyFraming) -> Bool {
        requestsServed > 1 && framing == .none && Self.idempotentMethods.contains(method)
    }

    /// A response head's field storage, kept for the next head this connection reads.
    func recycle(_ head: HTTPResponseHeadLines) {
        var fields = head.fields
        swap(&fields, &spareFields)
    }

    /// The final response head waiting in this connection's input and its length, or nil while it is
    /// incomplete. Interim answers (100 Continue, 103 …) before it are consumed and dropped. Throws for
    /// a malformed head, and for 101 (the gateway does not tunnel upgraded connections).
    func finalResponseHead(parser: HTTP1Parser, requestMethod: String) throws -> (HTTPResponseHeadLines, Int)? {
        while true {
            var fields: [HTTPFieldRange] = []
            swap(&fields, &spareFields)
            guard
                let (r, end) = try connection.inbound.withReadableBytes({
                    try parser.parseResponseHeadLines($0, requestMethod: requestMethod, reusing: &fields)
                })
            else {
                swap(&fields, &spareFields)
                return nil
            }
            guard (100..<200).contains(r.status) else { return (r, end) }
            connection.inbound.consume(end)
            recycle(r)
            if r.status == 101 { throw UpstreamProtocolSwitch() }
        }
    }
}
