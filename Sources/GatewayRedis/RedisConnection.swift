import Dispatch
import Foundation
import GatewayCrypto
import GatewayIO
import GatewayStore
import Synchronization

/// One blocking connection driven by its own thread: a `BlockingStream` (TCP, or TLS through
/// GatewayCrypto), commands written in RESP, replies parsed by `RESPReader`. Requests are
/// queued from any thread; the thread takes everything queued, writes it in one pipeline and reads
/// the replies in order, so requests that pile up while a round trip is in flight go out together.
///
/// After connecting it authenticates (`AUTH [user] password`, when the endpoint has a password),
/// selects the database and loads the scripts. While the connection is down, `submit` refuses at
/// once (the caller answers `unavailable`), and the thread reconnects with back-off (50 ms doubling
/// to 2 s). When idle for a second it sends a `PING`, so that a dead server is noticed (and
/// readiness drops) without traffic.
final class RedisConnection: @unchecked Sendable {
    private struct Queue {
        var pending: [RedisRequest] = []
        var closed = false
    }

    /// Why the connection is (or last was) down.
    struct Failure {
        var kind: RedisFailureKind
        var text: String
    }

    let endpoint: RedisEndpoint
    /// Scripts (source) loaded after every connect; a `NOSCRIPT` reply loads them again and retries.
    private let scripts: [String]
    private let queue = Mutex(Queue())
    private let wake = DispatchSemaphore(value: 0)
    private let exited = DispatchSemaphore(value: 0)
    private let up = Atomic<Bool>(false)
    private let lastError = Mutex(Failure(kind: .unreachable, text: "not connected yet"))
    private let onStateChange: @Sendable (Bool) -> Void
    /// Touched only by the connection's thread: the stream, the reply reader, the commands
    /// written but not yet sent, and the read buffer.
    private var stream: BlockingStream?
    private var reader = BufferedRESPReader()
    private var output: [UInt8] = []
    private let readBuffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 16 * 1024, alignment: 16)
    private var backoffMillis: Int64 = 0
    private let threadName: String
    static let maxBatch = 512
    /// Makes thread names unique (`close` recognises its own thread by name).
    private static let serial = Atomic<Int>(0)
    /// Requests queued beyond this are refused (`unavailable`) rather than queued behind a slow Redis.
    static let maxPending = 65_536
    /// The output buffer is replaced once drained when it grew beyond this (a burst of big scripts).
    static let outputKeepCapacity = 64 * 1024

    init(endpoint: RedisEndpoint, scripts: [String], name: String, onStateChange: @escaping @Sendable (Bool) -> Void) {
        self.endpoint = endpoint
        self.scripts = scripts
        self.onStateChange = onStateChange
        threadName = "\(name)#\(Self.serial.wrappingAdd(1, ordering: .relaxed).oldValue)"
        let thread = Thread { [self] in run() }
        thread.name = threadName
        thread.start()
    }

    deinit {
        readBuffer.deallocate()
    }

    var isUp: Bool { up.load(ordering: .acquiring) }
    var lastErrorText: String { lastError.withLock { $0.text } }
    var lastFailure: Failure { lastError.withLock { $0 } }

    /// Queues `request`; false (and nothing queued) when the connection is down, closed, or has
    /// `maxPending` requests waiting.
    func submit(_ request: RedisRequest) -> Bool {
        guard isUp else { return false }
        let queued = queue.withLock { q -> Bool in
            guard !q.closed, q.pending.count < Self.maxPending else { return false }
            q.pending.append(request)
            return true
        }
        if queued { wake.signal() }
        return queued
    }

    /// Fails whatever is queued, disconnects and ends the thread; with `wait`, returns once it has
    /// ended (never waits when called from the connection's own thread, e.g. from a completion).
    func close(wait: Bool = true) {
        let first = queue.withLock { q -> Bool in
            defer { q.closed = true }
            return !q.closed
        }
        guard first else { return }
        wake.signal()
        if wait && Thread.current.name != threadName { exited.wait() }
    }

    // MARK: - The connection's thread

    private func run() {
        while true {
            let (batch, closed) = queue.withLock { q -> ([RedisRequest], Bool) in
                if q.closed { return (q.pending, true) }
                let n = min(q.pending.count, Self.maxBatch)
                let taken = Array(q.pending.prefix(n))
                q.pending.removeFirst(n)
                return (taken, false)
            }
            if closed {
                disconnect("closed")
                fail(batch, "the Redis store is closed")
                exited.signal()
                return
            }
            if stream == nil {
                if !batch.isEmpty { fail(batch, "Redis at \(endpoint.description) is unreachable: \(lastErrorText)") }
                if backoffMillis > 0 { _ = wake.wait(timeout: .now() + .milliseconds(Int(backoffMillis))) }
                if queue.withLock({ $0.closed }) { continue }
                if !connect() { backoffMillis = min(2_000, max(50, backoffMillis * 2)) }
                continue
            }
            if batch.isEmpty {
                if wake.wait(timeout: .now() + 1) == .timedOut { ping() }
                continue
            }
            execute(batch)
        }
    }

    private func fail(_ requests: [RedisRequest], _ detail: String) {
        for r in requests { r.completion(.failure(StoreError(.unavailable, detail))) }
    }

    /// Connects (TCP, then TLS), authenticates, selects the database and loads the scripts. True
    /// when the connection is usable.
    private func connect() -> Bool {
        let security = endpoint.security
        do {
            stream = try BlockingStream.connect(
                host: endpoint.host, port: endpoint.port, timeoutMillis: endpoint.timeoutMillis, tls: security.tls,
                serverName: security.tlsServerName)
        } catch {
            let e = RedisIOError(error)
            lastError.withLock { $0 = Failure(kind: e.kind, text: e.text) }
            return false
        }
        if let auth = endpoint.authCommand {
            let who = security.username.map { "AUTH as user \"\($0)\"" } ?? "AUTH with the default user's password"
            switch roundTrip(auth) {
            case .failure(let why):
                disconnect(why)
                return false
            case .success(.error(let message)):
                disconnect(RedisIOError("\(who): \(message)", kind: .authentication))
                return false
            case .success:
                break
            }
        }
        for command in endpoint.setupCommands(scripts: scripts) {
            switch roundTrip(command) {
            case .failure(let why):
                disconnect(why)
                return false
            case .success(.error(let message)):
                if message.hasPrefix("NOAUTH") {
                    disconnect(RedisIOError("the server requires a password (\(message))", kind: .authentication))
                } else {
                    let words = command.args.prefix(2).map { String(decoding: $0, as: UTF8.self) }.joined(separator: " ")
                    disconnect(RedisIOError("\(words): \(message)", kind: message.hasPrefix("WRONGPASS") ? .authentication : .refused))
                }
                return false
            case .success:
                break
            }
        }
        backoffMillis = 0
        up.store(true, ordering: .releasing)
        onStateChange(true)
        return true
    }

    private func disconnect(_ why: RedisIOError) {
        lastError.withLock { $0 = Failure(kind: why.kind, text: why.text) }
        stream?.close()
        stream = nil
        output.removeAll(keepingCapacity: false)
        // No half-parsed reply carries over to the next connection.
        reader.reset()
        if up.exchange(false, ordering: .acquiringAndReleasing) { onStateChange(false) }
        if backoffMillis == 0 { backoffMillis = 50 }
    }

    private func disconnect(_ why: String) { disconnect(RedisIOError(why)) }

    /// Adds `command` to the output in RESP (`*argc`, then `$len` and the bytes of each argument);
    /// it is sent with the next read. False when not connected.
    private func append(_ command: RedisCommand) -> Bool {
        guard stream != nil else { return false }
        RESP.encode(command, into: &output)
        return true
    }

    /// Sends what `append` queued.
    private func flush() -> RedisIOError? {
        guard let stream else { return RedisIOError("not connected") }
        guard !output.isEmpty else { return nil }
        do {
            try stream.write(output)
        } catch {
            return RedisIOError(error)
        }
        output.removeAll(keepingCapacity: output.capacity <= Self.outputKeepCapacity)
        return nil
    }

    /// The next reply (sending what is queued first), or the connection's error (after which the
    /// connection is unusable).
    private func readReply() -> Result<RedisValue, RedisIOError> {
        guard let stream else { return .failure(RedisIOError("not connected")) }
        if let e = flush() { return .failure(e) }
        while true {
            switch reader.next() {
            case .failure(let e): return .failure(RedisIOError("protocol error: \(e.why)"))
            case .success(let value?): return .success(value)
            case .success(nil): break
            }
            let n: Int
            do {
                n = try stream.read(into: readBuffer)
            } catch {
                return .failure(RedisIOError(error))
            }
            reader.feed(UnsafeRawBufferPointer(rebasing: readBuffer[..<n]))
        }
    }

    private func roundTrip(_ command: RedisCommand) -> Result<RedisValue, RedisIOError> {
        guard append(command) else { return .failure(RedisIOError("not connected")) }
        return readReply()
    }

    private func ping() {
        if case .failure(let why) = roundTrip(RedisCommand("PING")) { disconnect(why) }
    }

    /// One pipeline: every command of every request written, then the replies read in order.
    private func execute(_ batch: [RedisRequest]) {
        for request in batch {
            for command in request.commands where !append(command) {
                disconnect("not connected")
                fail(batch, "Redis at \(endpoint.description): not connected")
                return
            }
        }
        var retry: [RedisRequest] = []
        for (i, request) in batch.enumerated() {
            var replies: [RedisValue] = []
            replies.reserveCapacity(request.commands.count)
            for _ in request.commands {
                switch readReply() {
                case .success(let value):
                    replies.append(value)
                case .failure(let why):
                    // The connection is broken or timed out: nothing after this point has an answer.
                    disconnect(why)
                    fail(Array(batch[i...]), "Redis at \(endpoint.description): \(why.text)")
                    return
                }
            }
            if replies.contains(where: \.isNoScript) { retry.append(request) } else { request.completion(.success(replies)) }
        }
        guard !retry.isEmpty else { return }
        // The server lost its script cache (restart, SCRIPT FLUSH, failover): load and run again.
        for script in scripts {
            if case .failure(let why) = roundTrip(RedisCommand("SCRIPT", "LOAD", script)) {
                disconnect(why)
                fail(retry, "Redis at \(endpoint.description): \(why.text)")
                return
            }
        }
        for (i, request) in retry.enumerated() {
            var replies: [RedisValue] = []
            for command in request.commands {
                switch roundTrip(command) {
                case .success(let value):
                    replies.append(value)
                case .failure(let why):
                    disconnect(why)
                    fail(Array(retry[i...]), "Redis at \(endpoint.description): \(why.text)")
                    return
                }
            }
            request.completion(.success(replies))
        }
    }
}
