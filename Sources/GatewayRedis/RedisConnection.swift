import CGatewayHiredis
import Dispatch
import Foundation
import GatewayStore
import Synchronization

/// A Redis reply, copied out of hiredis' reply object.
public enum RedisValue: Sendable, Equatable {
    case string([UInt8])
    case integer(Int64)
    case array([RedisValue])
    case status(String)
    case error(String)
    case null

    init(_ r: UnsafeMutablePointer<redisReply>) {
        let reply = r.pointee
        switch reply.type {
        case REDIS_REPLY_STRING:
            self = .string(reply.str == nil ? [] : Array(UnsafeRawBufferPointer(start: reply.str, count: Int(reply.len))))
        case REDIS_REPLY_INTEGER:
            self = .integer(Int64(reply.integer))
        case REDIS_REPLY_ARRAY:
            var items: [RedisValue] = []
            items.reserveCapacity(Int(reply.elements))
            for i in 0..<Int(reply.elements) {
                if let e = reply.element[i] { items.append(RedisValue(e)) } else { items.append(.null) }
            }
            self = .array(items)
        case REDIS_REPLY_STATUS:
            self = .status(Self.text(reply))
        case REDIS_REPLY_ERROR:
            self = .error(Self.text(reply))
        default:
            self = .null
        }
    }

    private static func text(_ reply: redisReply) -> String {
        guard let s = reply.str else { return "" }
        return String(decoding: UnsafeRawBufferPointer(start: s, count: Int(reply.len)), as: UTF8.self)
    }

    /// The bytes of a bulk string, or nil.
    var bytes: [UInt8]? {
        if case .string(let b) = self { return b }
        return nil
    }

    /// A bulk string or status as text, or nil.
    var text: String? {
        switch self {
        case .string(let b): String(decoding: b, as: UTF8.self)
        case .status(let s): s
        default: nil
        }
    }

    /// An integer reply, or a bulk string holding a decimal integer.
    var integer: Int64? {
        switch self {
        case .integer(let n): n
        case .string(let b): Int64(String(decoding: b, as: UTF8.self))
        default: nil
        }
    }
}

/// A broken or timed-out connection (hiredis' error text).
struct RedisIOError: Error {
    let text: String
    init(_ text: String) { self.text = text }
}

/// One command: its arguments as bytes (binary-safe).
struct RedisCommand: Sendable {
    var args: [[UInt8]]

    init(_ args: [[UInt8]]) { self.args = args }
    init(_ words: String...) { args = words.map { Array($0.utf8) } }
}

/// A request: one or more commands sent back to back on one connection (e.g. a registration script
/// and its `WAIT`), answered together.
struct RedisRequest: Sendable {
    var commands: [RedisCommand]
    var completion: @Sendable (Result<[RedisValue], StoreError>) -> Void
}

/// Where to connect and how long a command may take.
public struct RedisEndpoint: Sendable, Equatable {
    public var host: String
    public var port: UInt16
    public var database: Int
    /// Connect timeout and per-command (socket read/write) timeout.
    public var timeoutMillis: Int64

    public init(host: String, port: UInt16, database: Int = 0, timeoutMillis: Int64 = 1_000) {
        self.host = host
        self.port = port
        self.database = database
        self.timeoutMillis = max(1, timeoutMillis)
    }

    public var description: String { "redis://\(host.contains(":") ? "[\(host)]" : host):\(port)/\(database)" }
}

/// One blocking hiredis connection driven by its own thread. Requests are queued from any thread;
/// the thread takes everything queued, writes it in one pipeline and reads the replies in order,
/// so requests that pile up while a round trip is in flight go out together.
///
/// While the connection is down, `submit` refuses at once (the caller answers `unavailable`), and
/// the thread reconnects with back-off (50 ms doubling to 2 s). When idle for a second it sends a
/// `PING`, so that a dead server is noticed (and readiness drops) without traffic.
final class RedisConnection: @unchecked Sendable {
    private struct Queue {
        var pending: [RedisRequest] = []
        var closed = false
    }

    let endpoint: RedisEndpoint
    /// Scripts (source) loaded after every connect; a `NOSCRIPT` reply loads them again and retries.
    private let scripts: [String]
    private let queue = Mutex(Queue())
    private let wake = DispatchSemaphore(value: 0)
    private let exited = DispatchSemaphore(value: 0)
    private let up = Atomic<Bool>(false)
    private let lastError = Mutex<String>("not connected yet")
    private let onStateChange: @Sendable (Bool) -> Void
    /// Touched only by the connection's thread.
    private var context: UnsafeMutablePointer<redisContext>?
    private var backoffMillis: Int64 = 0
    private let threadName: String
    static let maxBatch = 512
    /// Makes thread names unique (`close` recognises its own thread by name).
    private static let serial = Atomic<Int>(0)
    /// Requests queued beyond this are refused (`unavailable`) rather than queued behind a slow Redis.
    static let maxPending = 65_536

    init(endpoint: RedisEndpoint, scripts: [String], name: String, onStateChange: @escaping @Sendable (Bool) -> Void) {
        self.endpoint = endpoint
        self.scripts = scripts
        self.onStateChange = onStateChange
        threadName = "\(name)#\(Self.serial.wrappingAdd(1, ordering: .relaxed).oldValue)"
        let thread = Thread { [self] in run() }
        thread.name = threadName
        thread.start()
    }

    var isUp: Bool { up.load(ordering: .acquiring) }
    var lastErrorText: String { lastError.withLock { $0 } }

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
            if context == nil {
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

    private var timeout: timeval {
        timeval(tv_sec: Int(endpoint.timeoutMillis / 1000), tv_usec: Int((endpoint.timeoutMillis % 1000) * 1000))
    }

    /// Connects, selects the database and loads the scripts. True when the connection is usable.
    private func connect() -> Bool {
        guard let c = redisConnectWithTimeout(endpoint.host, Int32(endpoint.port), timeout) else {
            lastError.withLock { $0 = "cannot allocate a Redis context" }
            return false
        }
        if c.pointee.err != 0 {
            let why = Self.errorText(c)
            redisFree(c)
            lastError.withLock { $0 = why }
            return false
        }
        _ = redisSetTimeout(c, timeout)
        _ = redisEnableKeepAlive(c)
        context = c
        var setup: [RedisCommand] = []
        if endpoint.database != 0 { setup.append(RedisCommand("SELECT", String(endpoint.database))) }
        setup += scripts.map { RedisCommand("SCRIPT", "LOAD", $0) }
        for command in setup {
            switch roundTrip(command) {
            case .failure(let why):
                disconnect(why.text)
                return false
            case .success(.error(let message)):
                disconnect("\(command.args.prefix(2).map { String(decoding: $0, as: UTF8.self) }.joined(separator: " ")): \(message)")
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

    private func disconnect(_ why: String) {
        lastError.withLock { $0 = why }
        if let c = context {
            redisFree(c)
            context = nil
        }
        if up.exchange(false, ordering: .acquiringAndReleasing) { onStateChange(false) }
        if backoffMillis == 0 { backoffMillis = 50 }
    }

    private static func errorText(_ c: UnsafeMutablePointer<redisContext>) -> String {
        let text = withUnsafeBytes(of: c.pointee.errstr) { raw in
            String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
        }
        return text.isEmpty ? "I/O error \(c.pointee.err)" : text
    }

    private func append(_ command: RedisCommand) -> Bool {
        guard let c = context else { return false }
        let argc = command.args.count
        var lengths = command.args.map { $0.count }
        let buffers = command.args.map { bytes -> UnsafeMutablePointer<CChar> in
            let p = UnsafeMutablePointer<CChar>.allocate(capacity: max(1, bytes.count))
            bytes.withUnsafeBytes { raw in
                if let base = raw.baseAddress { UnsafeMutableRawPointer(p).copyMemory(from: base, byteCount: bytes.count) }
            }
            return p
        }
        defer { for b in buffers { b.deallocate() } }
        var argv: [UnsafePointer<CChar>?] = buffers.map { UnsafePointer($0) }
        let status = argv.withUnsafeMutableBufferPointer { av in
            lengths.withUnsafeMutableBufferPointer { lens in
                redisAppendCommandArgv(c, Int32(argc), av.baseAddress, lens.baseAddress)
            }
        }
        return status == REDIS_OK
    }

    /// The next reply, or the connection's error (after which the connection is unusable).
    private func readReply() -> Result<RedisValue, RedisIOError> {
        guard let c = context else { return .failure(RedisIOError("not connected")) }
        var raw: UnsafeMutableRawPointer?
        guard redisGetReply(c, &raw) == REDIS_OK, let raw else { return .failure(RedisIOError(Self.errorText(c))) }
        let reply = raw.assumingMemoryBound(to: redisReply.self)
        defer { freeReplyObject(raw) }
        return .success(RedisValue(reply))
    }

    private func roundTrip(_ command: RedisCommand) -> Result<RedisValue, RedisIOError> {
        guard append(command) else { return .failure(RedisIOError(context.map(Self.errorText) ?? "not connected")) }
        return readReply()
    }

    private func ping() {
        if case .failure(let why) = roundTrip(RedisCommand("PING")) { disconnect(why.text) }
    }

    /// One pipeline: every command of every request written, then the replies read in order.
    private func execute(_ batch: [RedisRequest]) {
        for request in batch {
            for command in request.commands where !append(command) {
                let why = context.map(Self.errorText) ?? "not connected"
                disconnect(why)
                fail(batch, "Redis at \(endpoint.description): \(why)")
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
                    disconnect(why.text)
                    fail(Array(batch[i...]), "Redis at \(endpoint.description): \(why.text)")
                    return
                }
            }
            if replies.contains(where: Self.isNoScript) { retry.append(request) } else { request.completion(.success(replies)) }
        }
        guard !retry.isEmpty else { return }
        // The server lost its script cache (restart, SCRIPT FLUSH, failover): load and run again.
        for script in scripts {
            if case .failure(let why) = roundTrip(RedisCommand("SCRIPT", "LOAD", script)) {
                disconnect(why.text)
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
                    disconnect(why.text)
                    fail(Array(retry[i...]), "Redis at \(endpoint.description): \(why.text)")
                    return
                }
            }
            request.completion(.success(replies))
        }
    }

    private static func isNoScript(_ value: RedisValue) -> Bool {
        if case .error(let message) = value { return message.hasPrefix("NOSCRIPT") }
        return false
    }
}
