import Dispatch
import Foundation
import GatewayCrypto
import GatewayIO
import GatewayStore
import Synchronization

/// A Redis reply (RESP2), as `RESPReader` reads it.
public enum RedisValue: Sendable, Equatable {
    case string([UInt8])
    case integer(Int64)
    case array([RedisValue])
    case status(String)
    case error(String)
    case null

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
        case .string(let b): Self.parseDecimal(b)
        default: nil
        }
    }

    /// What `Int64(String(decoding: bytes, as: UTF8.self))` gives (an optional sign, then ASCII
    /// digits, nil on anything else or on overflow), read from the bytes without a String: a key
    /// record's counter and times are read on every request.
    static func parseDecimal(_ bytes: [UInt8]) -> Int64? {
        bytes.withUnsafeBytes { parseDecimal($0) }
    }

    /// `parseDecimal` of the bytes in place (a reply's length or integer line).
    static func parseDecimal(_ b: UnsafeRawBufferPointer) -> Int64? {
        guard !b.isEmpty else { return nil }
        var i = 0
        var negative = false
        if b[0] == UInt8(ascii: "-") || b[0] == UInt8(ascii: "+") {
            negative = b[0] == UInt8(ascii: "-")
            i = 1
            guard b.count > 1 else { return nil }
        }
        // Accumulated with the sign, so that Int64.min is read too.
        var value: Int64 = 0
        while i < b.count {
            let digit = b[i] &- 0x30
            guard digit < 10 else { return nil }
            let (shifted, o1) = value.multipliedReportingOverflow(by: 10)
            let (next, o2) =
                negative ? shifted.subtractingReportingOverflow(Int64(digit)) : shifted.addingReportingOverflow(Int64(digit))
            guard !o1, !o2 else { return nil }
            value = next
            i += 1
        }
        return value
    }
}

/// Why a connection is down, in the categories an operator acts on (readiness, logs).
public enum RedisFailureKind: String, Sendable, Equatable {
    /// Name resolution, TCP connect, a broken or silent connection.
    case unreachable
    /// The TLS handshake (e.g. the server's certificate does not verify) or a TLS record failed.
    case tls
    /// The server refused the credentials (`WRONGPASS`), or wants some (`NOAUTH`).
    case authentication
    /// The server refused a setup command (`SELECT`, `SCRIPT LOAD`: e.g. `NOPERM` for an ACL user).
    case refused
}

/// A broken or timed-out connection, or a refusal while connecting.
struct RedisIOError: Error {
    let kind: RedisFailureKind
    let text: String
    init(_ text: String, kind: RedisFailureKind = .unreachable) {
        self.kind = kind
        self.text = text
    }

    init(_ failure: BlockingStream.Failure) {
        self.init(failure.description, kind: failure.kind == .tls ? .tls : .unreachable)
    }
}

/// One command, kept as it goes on the wire: RESP's array of bulk strings (binary-safe), written
/// once when the command is made (`RESPCommandWriter`), copied whole into a connection's output.
struct RedisCommand: Sendable {
    let encoded: [UInt8]

    fileprivate init(encoded: [UInt8]) { self.encoded = encoded }

    init(_ args: [[UInt8]]) {
        var w = RESPCommandWriter(arguments: args.count)
        for arg in args { w.append(arg) }
        self = w.command
    }

    init(_ words: String...) { self.init(words.map { Array($0.utf8) }) }

    /// The arguments, read back from the encoding (an array of bulk strings: RESP, which the
    /// reply reader reads) for messages about a refused set-up command, and tests.
    var args: [[UInt8]] {
        var reader = RESPReader()
        guard case .reply(.array(let items), _) = encoded.withUnsafeBytes({ reader.read($0) }) else { return [] }
        return items.compactMap(\.bytes)
    }
}

/// Writes a command's RESP straight from its sources (`*count`, then `$length` and the bytes of
/// each argument): no array per argument, one buffer for the whole command. The count is said
/// first; `command` checks that many arguments were written.
struct RESPCommandWriter {
    private var out: [UInt8]
    private var remaining: Int

    init(arguments: Int, capacity: Int = 256) {
        out = []
        out.reserveCapacity(capacity)
        remaining = arguments
        out.append(UInt8(ascii: "*"))
        RESP.appendDecimal(arguments, to: &out)
        out.append(0x0d)
        out.append(0x0a)
    }

    mutating func append(_ bytes: UnsafeRawBufferPointer) {
        remaining -= 1
        out.append(UInt8(ascii: "$"))
        RESP.appendDecimal(bytes.count, to: &out)
        out.append(0x0d)
        out.append(0x0a)
        out.append(contentsOf: bytes)
        out.append(0x0d)
        out.append(0x0a)
    }

    mutating func append(_ bytes: [UInt8]) { bytes.withUnsafeBytes { append($0) } }

    /// The UTF-8 bytes of `text`.
    mutating func append(utf8 text: String) {
        var text = text
        text.withUTF8 { append(UnsafeRawBufferPointer($0)) }
    }

    /// `n` in decimal (what `String(n)` writes), without a String.
    mutating func append(decimal n: Int64) {
        RESP.withDecimal(n) { append($0) }
    }

    var command: RedisCommand {
        precondition(remaining == 0, "RESPCommandWriter: \(remaining) arguments said and not written")
        return RedisCommand(encoded: out)
    }
}

/// A request: one or more commands sent back to back on one connection (e.g. a registration script
/// and its `WAIT`), answered together.
struct RedisRequest: Sendable {
    var commands: [RedisCommand]
    var completion: @Sendable (Result<[RedisValue], StoreError>) -> Void
}

/// Who connects, and how: the same for every connection of a store (every node of a cluster).
/// Never printed with its password (`description` and reflection hide it).
public struct RedisSecurity: Sendable, Equatable, CustomStringConvertible, CustomReflectable {
    /// The ACL user for `AUTH user password`; nil: `AUTH password` (Redis' `default` user).
    public var username: String?
    /// Sent with `AUTH` right after connecting; nil: no `AUTH`.
    public var password: [UInt8]?
    /// TLS towards the server (`rediss://`); nil: plain TCP.
    public var tls: TLSClientContext?
    /// The name verified in the server's certificate (and sent as SNI); nil: each node's host.
    public var tlsServerName: String?

    public init(username: String? = nil, password: [UInt8]? = nil, tls: TLSClientContext? = nil, tlsServerName: String? = nil) {
        self.username = username
        self.password = password
        self.tls = tls
        self.tlsServerName = tlsServerName
    }

    public static func == (a: RedisSecurity, b: RedisSecurity) -> Bool {
        a.username == b.username && a.password == b.password && a.tls === b.tls && a.tlsServerName == b.tlsServerName
    }

    public var description: String {
        var parts: [String] = []
        if let username { parts.append("user \(username)") }
        if password != nil { parts.append("password ***") }
        if tls != nil { parts.append("tls" + (tlsServerName.map { " (\($0))" } ?? "")) }
        return parts.isEmpty ? "none" : parts.joined(separator: ", ")
    }

    public var customMirror: Mirror { Mirror(self, children: ["description": description], displayStyle: .struct) }
}

/// Where to connect and how long a command may take.
public struct RedisEndpoint: Sendable, Equatable {
    public var host: String
    public var port: UInt16
    public var database: Int
    /// Connect timeout and per-command (socket read/write) timeout.
    public var timeoutMillis: Int64
    /// Credentials and TLS. Default none.
    public var security: RedisSecurity

    public init(host: String, port: UInt16, database: Int = 0, timeoutMillis: Int64 = 1_000, security: RedisSecurity = RedisSecurity()) {
        self.host = host
        self.port = port
        self.database = database
        self.timeoutMillis = max(1, timeoutMillis)
        self.security = security
    }

    /// `AUTH [user] password`, when the endpoint has a password (sent to the server only: no
    /// message repeats it).
    var authCommand: RedisCommand? {
        guard let password = security.password else { return nil }
        var args = [Array("AUTH".utf8)]
        if let user = security.username { args.append(Array(user.utf8)) }
        args.append(password)
        return RedisCommand(args)
    }

    /// What a connection sends after `AUTH`: `SELECT` (database other than 0), then a `SCRIPT
    /// LOAD` per script.
    func setupCommands(scripts: [String]) -> [RedisCommand] {
        (database != 0 ? [RedisCommand("SELECT", String(database))] : []) + scripts.map { RedisCommand("SCRIPT", "LOAD", $0) }
    }

    /// `redis://host:port/db` (`rediss://` with TLS); never with credentials.
    public var description: String {
        "\(security.tls == nil ? "redis" : "rediss")://\(host.contains(":") ? "[\(host)]" : host):\(port)/\(database)"
    }
}

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

/// The Redis serialization protocol's request form: an array of bulk strings.
enum RESP {
    static func encode(_ command: RedisCommand, into out: inout [UInt8]) {
        out.append(contentsOf: command.encoded)
    }

    /// The decimal digits of `n` (≥ 0), without building a String (one- and two-digit numbers, most
    /// lengths of a command's arguments, without any division loop).
    static func appendDecimal(_ n: Int, to out: inout [UInt8]) {
        precondition(n >= 0, "RESP.appendDecimal: a negative number")
        if n < 10 {
            out.append(UInt8(truncatingIfNeeded: n) &+ 0x30)
            return
        }
        if n < 100 {
            out.append(UInt8(truncatingIfNeeded: n / 10) &+ 0x30)
            out.append(UInt8(truncatingIfNeeded: n % 10) &+ 0x30)
            return
        }
        withDecimal(Int64(n)) { out.append(contentsOf: $0) }
    }

    /// Lends `body` the decimal text of `n` (sign included, what `String(n)` writes), written
    /// backwards into a buffer on the stack: 20 bytes hold every Int64, `Int64.min` included.
    static func withDecimal<R>(_ n: Int64, _ body: (UnsafeRawBufferPointer) -> R) -> R {
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 20) { digits in
            var i = 20
            var rest = n.magnitude
            repeat {
                i -= 1
                digits[i] = UInt8(truncatingIfNeeded: rest % 10) &+ 0x30
                rest /= 10
            } while rest > 0
            if n < 0 {
                i -= 1
                digits[i] = UInt8(ascii: "-")
            }
            return body(UnsafeRawBufferPointer(UnsafeBufferPointer(rebasing: digits[i...])))
        }
    }
}

extension RedisValue {
    /// A `NOSCRIPT` error: the server's script cache lost a script (flushed, a restart, a
    /// failover); the connection loads the scripts again and runs the request again.
    var isNoScript: Bool {
        if case .error(let message) = self { return message.hasPrefix("NOSCRIPT") }
        return false
    }
}
