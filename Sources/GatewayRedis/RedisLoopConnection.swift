import Dispatch
import GatewayCrypto
import GatewayIO
import GatewayStore
import Glibc

/// One Redis connection owned by an event loop, for the store calls made on that loop: a
/// non-blocking `Connection` registered on the loop's epoll, commands written in RESP into its
/// output (so everything asked during one batch of the loop's events leaves in one send: a
/// pipeline), replies parsed by `RESPReader` straight from the connection's input as they arrive
/// and each request completed on the loop, inline, in the order sent. No thread hop on either
/// side: a request made by the assertion gate costs the loopback round trip and nothing else (the
/// threaded `RedisConnection` costs two cross-thread wake-ups on top).
///
/// Loop-confined (not `Sendable`): created, used and closed on its loop only. It serves only while
/// it is up (connected, authenticated, database selected, scripts loaded); otherwise `submit`
/// answers false and the store sends the request through its threaded pool, which fails fast when
/// Redis is down (so the outcomes of every error path are the pool's). While up:
///
/// - a broken connection (reset, EOF, a protocol error) fails every request in flight with
///   `StoreError(.unavailable, …)` and reconnects with back-off (50 ms doubling to 2 s; on the loop's
///   timer wheel, so at least one 100 ms tick);
/// - a request without an answer for the endpoint's timeout (no reply at all while requests are in
///   flight, checked every tick) breaks the connection the same way; so does a connect or set-up
///   that takes longer;
/// - `NOSCRIPT` (the script cache flushed, a restart, a failover) loads the scripts again and runs
///   the request once more, as the threaded connection does.
///
/// Plain TCP, or TLS (`rediss://`) with the same session settings as the threaded connections. On
/// Redis Cluster the store keeps the threaded connections (`RedisAttestStore.serve(on:)`).
final class RedisLoopConnection: ConnectionDelegate {
    private enum State { case idle, resolving, connecting, settingUp, up, closed }

    private enum Kind {
        /// AUTH, SELECT and SCRIPT LOAD after a connect: any error reply breaks the connection.
        case setup
        /// SCRIPT LOAD after a `NOSCRIPT`: an error reply breaks the connection.
        case reload
        /// A store request; `retried` once it was sent again after a `NOSCRIPT`.
        case request(RedisRequest, retried: Bool)
    }

    private struct Entry {
        var kind: Kind
        var commands: [RedisCommand]
        var replies: [RedisValue] = []
        /// The order in which entries were written (a reload covers the entries written after it).
        var sequence: UInt64
    }

    let loop: EventLoop
    let endpoint: RedisEndpoint
    private let scripts: [String]
    private var state = State.idle
    private var connection: Connection?
    private var reader = RESPReader()
    /// Entries written and not yet answered, oldest first from `head`.
    private var inflight: [Entry] = []
    private var head = 0
    private var sequence: UInt64 = 0
    /// The sequence of the last script reload written (0: none since the connect's set-up).
    private var reloadSequence: UInt64 = 0
    private var backoffMillis: Int64 = 0
    /// When the last reply arrived, or the first of the requests now in flight was written, or the
    /// connect started (monotonic ms): the timeout counts from here.
    private var lastProgressMillis: Int64 = 0
    private var watchdog: TimerWheel.Handle?
    /// Why the connection is (or last was) down, for tests and logs.
    private(set) var lastError = "not connected yet"
    /// Requests served on the loop (answered by Redis; tests and docs).
    private(set) var served = 0
    /// Connects made (tests: a reconnect after a restart).
    private(set) var connects = 0
    /// Requests in flight beyond this go to the threaded pool instead.
    static let maxInflight = 65_536

    init(loop: EventLoop, endpoint: RedisEndpoint, scripts: [String]) {
        self.loop = loop
        self.endpoint = endpoint
        self.scripts = scripts
    }

    var isUp: Bool { state == .up }
    var inflightCount: Int { inflight.count - head }

    /// Starts connecting (on the loop).
    func start() {
        guard state == .idle else { return }
        connect()
    }

    /// Writes `request` (sent at the end of the loop's current batch of events) and answers true,
    /// or answers false when not up or too busy: the caller sends it another way.
    func submit(_ request: RedisRequest) -> Bool {
        guard state == .up, let connection, inflightCount < Self.maxInflight else { return false }
        write(Entry(kind: .request(request, retried: false), commands: request.commands, sequence: 0), on: connection)
        return true
    }

    /// Fails what is in flight, disconnects and stays down (the store is closed).
    func close() {
        guard state != .closed else { return }
        teardown("the Redis store is closed")
        state = .closed
        if let watchdog { loop.timers.cancel(watchdog) }
        watchdog = nil
    }

    // MARK: - Connecting

    private func connect() {
        state = .resolving
        lastProgressMillis = EventLoop.monotonicMillis()
        armWatchdog()
        if let numeric = try? SocketAddress(host: endpoint.host == "localhost" ? "127.0.0.1" : endpoint.host, port: endpoint.port) {
            connect(to: numeric)
            return
        }
        // A name: resolved off the loop (getaddrinfo blocks), connected on it.
        let box = LoopOwned(self)
        let loop = self.loop
        let (host, port) = (endpoint.host, endpoint.port)
        DispatchQueue.global().async {
            let resolved = Result { () throws(SocketAddress.ParseError) -> SocketAddress in
                try SocketAddress.resolve(host: host, port: port)
            }
            loop.execute {
                let me = box.value
                guard me.state == .resolving else { return }
                switch resolved {
                case .success(let address): me.connect(to: address)
                case .failure(let e): me.teardown("cannot resolve \(host): \(e)")
                }
            }
        }
    }

    private func connect(to address: SocketAddress) {
        connects += 1
        let fd: Int32
        switch Socket.connect(address) {
        case .failed(let e):
            return teardown(e.description)
        case .connected(let c), .inProgress(let c):
            // Connected at once or not, the socket's first writable edge finishes the connect.
            fd = c
        }
        var on: Int32 = 1
        _ = setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, socklen_t(MemoryLayout<Int32>.size))
        // rediss://: the same TLS session as the threaded connections' (verified against the CA, the
        // name is `tlsServerName` or the host), run by the loop's `Connection`.
        var session: TLSSession?
        if let tls = endpoint.security.tls {
            do {
                session = try tls.makeSession(serverName: endpoint.security.tlsServerName ?? endpoint.host)
            } catch {
                Socket.close(fd)
                return teardown("TLS with \(address): \(error.message)")
            }
        }
        let c: Connection
        do {
            c = try Connection(fd: fd, loop: loop, peer: address, connecting: true, tls: session)
        } catch {
            Socket.close(fd)
            return teardown(error.description)
        }
        c.delegate = self
        connection = c
        state = .connecting
    }

    /// TLS: the handshake failed (a certificate that does not verify, a refused client certificate).
    func connectionDidFailHandshake(_ c: Connection, failure: TLSFailure) {
        guard c === connection else { return }
        teardown("TLS handshake with \(endpoint.host):\(endpoint.port): \(failure)")
    }

    /// Plain TCP: connected; TLS: connected and the handshake done.
    func connectionDidConnect(_ c: Connection) {
        guard c === connection, state == .connecting else { return }
        state = .settingUp
        let setup = (endpoint.authCommand.map { [$0] } ?? []) + endpoint.setupCommands(scripts: scripts)
        guard !setup.isEmpty else { return becameUp() }
        lastProgressMillis = EventLoop.monotonicMillis()
        write(Entry(kind: .setup, commands: setup, sequence: 0), on: c)
    }

    private func becameUp() {
        state = .up
        backoffMillis = 0
        reloadSequence = 0
        lastError = ""
    }

    // MARK: - Writing and reading

    private func write(_ entry: Entry, on c: Connection) {
        guard c === connection else {
            // Torn down by an earlier write of the same turn (a NOSCRIPT retry after its reload).
            if case .request(let request, _) = entry.kind {
                request.completion(.failure(unavailable(lastError)))
            }
            return
        }
        var entry = entry
        sequence += 1
        entry.sequence = sequence
        if inflightCount == 0 {
            lastProgressMillis = EventLoop.monotonicMillis()
            armWatchdog()
            loop.awaitedReplies += 1
        }
        // In flight before it is written: outside a batch of events the write is sent at once, and
        // a send that fails (Redis just died) tears the connection down inside `c.write`, which
        // must then fail this entry with the others.
        inflight.append(entry)
        c.write { out in for command in entry.commands { RESP.encode(command, into: &out) } }
    }

    func connectionDidRead(_ c: Connection) {
        guard c === connection else { return }
        lastProgressMillis = EventLoop.monotonicMillis()
        // One reply at a time: its completion may write, close or reconnect before the next.
        while connection === c {
            let step = c.inbound.withReadableBytes { bytes in reader.read(bytes) }
            let value: RedisValue
            switch step {
            case .incomplete(let used):
                c.inbound.consume(used)
                return
            case .malformed(let why):
                return teardown("protocol error: \(why)")
            case .reply(let reply, let used):
                c.inbound.consume(used)
                value = reply
            }
            guard head < inflight.count else { return teardown("a reply to nothing asked") }
            inflight[head].replies.append(value)
            guard inflight[head].replies.count == inflight[head].commands.count else { continue }
            let entry = inflight[head]
            inflight[head].kind = .reload  // drops the completion's reference
            head += 1
            if head == inflight.count {
                inflight.removeAll(keepingCapacity: inflight.capacity <= 1024)
                head = 0
                loop.awaitedReplies -= 1
            } else if head >= 1024 && head * 2 >= inflight.count {
                inflight.removeFirst(head)
                head = 0
            }
            answered(entry, on: c)
        }
    }

    private func answered(_ entry: Entry, on c: Connection) {
        switch entry.kind {
        case .setup:
            for (command, reply) in zip(entry.commands, entry.replies) {
                guard case .error(let message) = reply else { continue }
                let words = command.args.first.map { String(decoding: $0, as: UTF8.self) } ?? ""
                // The password is never repeated: only the command's first word.
                return teardown(
                    "\(words == "AUTH" ? "AUTH" : command.args.prefix(2).map { String(decoding: $0, as: UTF8.self) }.joined(separator: " ")): \(message)"
                )
            }
            becameUp()
        case .reload:
            for reply in entry.replies {
                if case .error(let message) = reply { return teardown("SCRIPT LOAD: \(message)") }
            }
        case .request(let request, let retried):
            if !retried, entry.replies.contains(where: \.isNoScript) {
                // The server lost its scripts: load them (once for every request written before the
                // reload) and run this request again after them.
                if reloadSequence < entry.sequence {
                    write(Entry(kind: .reload, commands: scripts.map { RedisCommand("SCRIPT", "LOAD", $0) }, sequence: 0), on: c)
                    reloadSequence = sequence
                }
                write(Entry(kind: .request(request, retried: true), commands: request.commands, sequence: 0), on: c)
                return
            }
            served += 1
            request.completion(.success(entry.replies))
        }
    }

    func connectionDidReadEOF(_ c: Connection) {
        guard c === connection else { return c.close() }
        teardown("the server closed the connection")
    }

    func connectionDidClose(_ c: Connection, error: Socket.Error?) {
        guard c === connection else { return }
        teardown(error?.description ?? "the connection closed")
    }

    // MARK: - Failing

    /// Closes the connection, fails every request in flight with `unavailable`, and (unless closed)
    /// reconnects after the back-off.
    private func teardown(_ why: String) {
        guard state != .closed else { return }
        lastError = why
        let failed = Array(inflight[head...])
        if !failed.isEmpty { loop.awaitedReplies -= 1 }
        inflight.removeAll()
        head = 0
        if let c = connection {
            connection = nil
            c.delegate = nil
            c.close()
        }
        // No half-parsed reply carries over to the next connection.
        reader.reset()
        state = .idle
        backoffMillis = min(2_000, max(50, backoffMillis * 2))
        let failure = unavailable(why)
        for entry in failed {
            if case .request(let request, _) = entry.kind { request.completion(.failure(failure)) }
        }
        guard state == .idle else { return }  // a completion closed it, or a reconnect already began
        loop.timers.schedule(afterMillis: backoffMillis) { [self] in
            if state == .idle { connect() }
        }
    }

    /// What a request fails with while the connection is down.
    private func unavailable(_ why: String) -> StoreError {
        StoreError(.unavailable, "Redis at \(endpoint.description): \(why)")
    }

    /// Checks every tick while something waits for Redis (a connect, a set-up, requests in flight).
    private func armWatchdog() {
        guard watchdog == nil else { return }
        watchdog = loop.timers.schedule(afterMillis: 100) { [self] in
            watchdog = nil
            let waiting: Bool
            switch state {
            case .resolving, .connecting, .settingUp: waiting = true
            case .up: waiting = inflightCount > 0
            case .idle, .closed: waiting = false
            }
            guard waiting else { return }
            if EventLoop.monotonicMillis() - lastProgressMillis >= endpoint.timeoutMillis {
                return teardown("no reply from \(endpoint.host):\(endpoint.port) within \(endpoint.timeoutMillis) ms")
            }
            armWatchdog()
        }
    }
}

/// A loop-confined value carried to its own loop (through a `Sendable` closure) and used only there.
struct LoopOwned<T>: @unchecked Sendable {
    let value: T
    init(_ value: T) { self.value = value }
}
