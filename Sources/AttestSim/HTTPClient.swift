import Foundation
import Glibc

/// Where the gateway listens: `http://HOST[:PORT]` (no path, no TLS: the simulator talks plain HTTP/1.1).
public struct HTTPEndpoint: Sendable, Equatable, CustomStringConvertible {
    public let host: String
    public let port: UInt16

    public init(host: String, port: UInt16) {
        self.host = host
        self.port = port
    }

    /// Parses `http://HOST[:PORT][/]`; HOST is a name, an IPv4 literal or a bracketed IPv6 literal.
    public init(url: String) throws(AttestSimError) {
        guard url.hasPrefix("http://") else {
            throw .usage("--gateway must start with http:// (got \"\(url)\"); the simulator speaks plain HTTP/1.1")
        }
        var rest = Substring(url.dropFirst("http://".count))
        if rest.hasSuffix("/") { rest = rest.dropLast() }
        guard !rest.contains("/"), !rest.contains("?"), !rest.contains("@") else {
            throw .usage("--gateway takes only http://HOST[:PORT], without path, query or user (got \"\(url)\")")
        }
        var host: Substring
        var portText: Substring?
        if rest.hasPrefix("[") {
            guard let close = rest.firstIndex(of: "]") else { throw .usage("--gateway: unclosed [ in \"\(url)\"") }
            host = rest[rest.index(after: rest.startIndex)..<close]
            let after = rest[rest.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":") else { throw .usage("--gateway: unexpected text after ] in \"\(url)\"") }
                portText = after.dropFirst()
            }
        } else if let colon = rest.lastIndex(of: ":") {
            host = rest[..<colon]
            portText = rest[rest.index(after: colon)...]
        } else {
            host = rest
        }
        guard !host.isEmpty else { throw .usage("--gateway: no host in \"\(url)\"") }
        var port: UInt16 = 80
        if let portText {
            guard let p = UInt16(portText), p > 0, portText.allSatisfy(\.isASCII) else {
                throw .usage("--gateway: the port must be 1…65535 (got \"\(portText)\")")
            }
            port = p
        }
        self.host = String(host)
        self.port = port
    }

    /// A `--source` value: a numeric IPv4 or IPv6 address, else a usage error.
    public static func checkSource(_ source: String?) throws(AttestSimError) {
        guard let source else { return }
        var v4 = in_addr()
        var v6 = in6_addr()
        guard inet_pton(AF_INET, source, &v4) == 1 || inet_pton(AF_INET6, source, &v6) == 1 else {
            throw .usage("--source \(source) is not an IPv4 or IPv6 address")
        }
    }

    /// The Host field value.
    public var hostHeader: String {
        let h = host.contains(":") ? "[\(host)]" : host
        return port == 80 ? h : "\(h):\(port)"
    }

    public var description: String { "http://\(hostHeader)" }
}

/// One HTTP/1.1 request as the client sends it.
public struct HTTPRequest: Sendable {
    public var method: String
    /// The request-target exactly as it goes in the request line (e.g. `/api/purchase?x=1`).
    public var target: String
    /// Fields besides Host and Content-Length, which the client adds.
    public var headers: [(String, String)]
    public var body: [UInt8]
    /// The Host field when it is not the endpoint's (a request signed for another host).
    public var host: String?

    public init(method: String, target: String, headers: [(String, String)] = [], body: [UInt8] = []) {
        self.method = method
        self.target = target
        self.headers = headers
        self.body = body
    }

    /// The bytes on the wire: request line, Host (`self.host`, else `host`), the fields,
    /// Content-Length (when there is a body or the method is POST, PUT or PATCH), an empty line, the body.
    public func serialized(host: String) -> [UInt8] {
        var head = "\(method) \(target) HTTP/1.1\r\nHost: \(self.host ?? host)\r\n"
        for (n, v) in headers { head += "\(n): \(v)\r\n" }
        if !body.isEmpty || ["POST", "PUT", "PATCH"].contains(method) { head += "Content-Length: \(body.count)\r\n" }
        head += "\r\n"
        return Array(head.utf8) + body
    }
}

/// One HTTP/1.1 response as received (the body de-chunked).
public struct HTTPResponse: Sendable {
    public let status: Int
    public let reason: String
    public let version: String
    public let headers: [(String, String)]
    public let body: [UInt8]

    public init(status: Int, reason: String, version: String = "HTTP/1.1", headers: [(String, String)], body: [UInt8]) {
        self.status = status
        self.reason = reason
        self.version = version
        self.headers = headers
        self.body = body
    }

    /// The first field of that name (case-insensitive).
    public func header(_ name: String) -> String? {
        headers.first { $0.0.caseInsensitiveCompare(name) == .orderedSame }?.1
    }

    public var bodyText: String { String(decoding: body, as: UTF8.self) }

    /// The body parsed as a JSON object, when it is one.
    public var jsonObject: [String: Any]? {
        (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any]
    }
}

/// Why an exchange failed before a complete response arrived.
public enum HTTPClientError: Error, Equatable, Sendable, CustomStringConvertible {
    /// Name resolution or connect failed (refused, unreachable, timed out).
    case connect(String)
    /// No (complete) response within the timeout.
    case timeout(String)
    /// The peer closed the connection before the response was complete.
    case closed(String)
    /// send/recv failed.
    case io(String)
    /// The bytes received are not an HTTP/1.1 response the client accepts.
    case badResponse(String)

    public var description: String {
        switch self {
        case .connect(let s): "connect: \(s)"
        case .timeout(let s): "timeout: \(s)"
        case .closed(let s): "connection closed: \(s)"
        case .io(let s): "I/O: \(s)"
        case .badResponse(let s): "bad response: \(s)"
        }
    }

    /// A short stable code for reports.
    public var code: String {
        switch self {
        case .connect: "connect_failed"
        case .timeout: "timeout"
        case .closed: "connection_closed"
        case .io: "io_error"
        case .badResponse: "bad_response"
        }
    }
}

/// A small blocking HTTP/1.1 client over one POSIX socket at a time: keep-alive, Content-Length,
/// chunked and close-delimited response bodies, 1xx responses skipped, a timeout per exchange.
/// A request that fails on a reused connection before any response byte arrived (the server closed
/// an idle keep-alive connection) is sent once more on a fresh connection.
///
/// Not thread-safe: one client per thread.
public final class HTTPClient {
    public let endpoint: HTTPEndpoint
    /// Seconds for connect and for each whole exchange.
    public let timeout: Double
    /// The numeric local address to connect from (`--source`: one host playing several clients,
    /// e.g. 127.0.0.2 on Linux, where all of 127/8 is loopback); nil: the system's choice.
    public let source: String?
    /// Largest response head and body accepted.
    public static let maxHeadBytes = 64 * 1024
    public static let maxBodyBytes = 64 * 1024 * 1024

    private var fd: Int32 = -1
    private var buffer: [UInt8] = []
    private var exchangesOnConnection = 0
    /// Connections opened so far (a measure of keep-alive reuse).
    public private(set) var connectionsOpened = 0
    /// Requests sent a second time because a reused connection closed before answering.
    public private(set) var retries = 0

    /// Where `recv` lands before the bytes are appended to `buffer`: allocated once per client.
    private var scratch = [UInt8](repeating: 0, count: 65536)

    public init(endpoint: HTTPEndpoint, timeout: Double = 10, source: String? = nil) {
        self.endpoint = endpoint
        self.timeout = timeout
        self.source = source
    }

    deinit { close() }

    public func close() {
        if fd >= 0 { Glibc.close(fd) }
        fd = -1
        buffer.removeAll()
        exchangesOnConnection = 0
    }

    public var isConnected: Bool { fd >= 0 }

    /// Sends `request` (Host and Content-Length added) and reads its response.
    public func send(_ request: HTTPRequest) throws(HTTPClientError) -> HTTPResponse {
        try send(raw: request.serialized(host: endpoint.hostHeader), method: request.method)
    }

    /// Sends bytes exactly as given (one complete request) and reads one response; `method` says
    /// whether the response can have a body (HEAD).
    public func send(raw bytes: [UInt8], method: String) throws(HTTPClientError) -> HTTPResponse {
        let reused = fd >= 0 && exchangesOnConnection > 0
        if fd < 0 { try connect() }
        do {
            return try exchange(bytes, method: method)
        } catch {
            close()
            // Only a reused connection that failed before any response byte is retried: the server
            // closed it while idle, so it never saw the request.
            guard reused, case .closed(let why) = error, why == Self.closedBeforeResponse else { throw error }
            retries += 1
            try connect()
            do {
                return try exchange(bytes, method: method)
            } catch {
                close()
                throw error
            }
        }
    }

    static let closedBeforeResponse = "before any response byte"

    private func exchange(_ bytes: [UInt8], method: String) throws(HTTPClientError) -> HTTPResponse {
        let deadline = Self.now() + timeout
        try sendAll(bytes)
        while true {
            let head = try readHead(deadline: deadline)
            let (status, reason, version, headers) = try Self.parseHead(head)
            if (100..<200).contains(status) {
                if status == 101 { throw .badResponse("101 Switching Protocols was not asked for") }
                continue
            }
            let noBody = method == "HEAD" || status == 204 || status == 304
            var keepAlive = Self.keepsAlive(version: version, headers: headers)
            var body: [UInt8] = []
            if !noBody {
                let te = headers.filter { $0.0.lowercased() == "transfer-encoding" }.map { $0.1.lowercased() }
                let cl = headers.filter { $0.0.lowercased() == "content-length" }.map(\.1)
                if !te.isEmpty {
                    guard
                        te.joined(separator: ",").split(separator: ",").last?.trimmingCharacters(in: .whitespaces)
                            == "chunked"
                    else {
                        throw .badResponse("Transfer-Encoding without chunked last: \(te.joined(separator: ","))")
                    }
                    body = try readChunked(deadline: deadline)
                } else if let first = cl.first {
                    guard cl.allSatisfy({ $0 == first }), let n = Int(first.trimmingCharacters(in: .whitespaces)), n >= 0,
                        first.trimmingCharacters(in: .whitespaces).allSatisfy({ $0.isASCII && $0.isNumber })
                    else {
                        throw .badResponse("bad Content-Length: \(cl.joined(separator: ", "))")
                    }
                    guard n <= Self.maxBodyBytes else { throw .badResponse("body of \(n) bytes is over the limit") }
                    body = try readExactly(n, deadline: deadline)
                } else {
                    body = try readToEnd(deadline: deadline)
                    keepAlive = false
                }
            }
            exchangesOnConnection += 1
            if !keepAlive { close() }
            return HTTPResponse(status: status, reason: reason, version: version, headers: headers, body: body)
        }
    }

    // MARK: Parsing

    static func parseHead(_ head: [UInt8]) throws(HTTPClientError) -> (Int, String, String, [(String, String)]) {
        let text = String(decoding: head, as: UTF8.self)
        var lines = text.components(separatedBy: "\r\n")
        guard !lines.isEmpty else { throw .badResponse("empty head") }
        let statusLine = lines.removeFirst()
        let parts = statusLine.split(separator: " ", maxSplits: 2, omittingEmptySubsequences: false)
        guard parts.count >= 2, parts[0] == "HTTP/1.1" || parts[0] == "HTTP/1.0", parts[1].count == 3,
            let status = Int(parts[1]), status >= 100
        else {
            throw .badResponse("bad status line: \(statusLine.prefix(80))")
        }
        var headers: [(String, String)] = []
        for line in lines where !line.isEmpty {
            guard let colon = line.firstIndex(of: ":"), colon != line.startIndex,
                !line[..<colon].contains(where: { $0 == " " || $0 == "\t" })
            else {
                throw .badResponse("bad header line: \(line.prefix(80))")
            }
            let name = String(line[..<colon])
            let value = line[line.index(after: colon)...].trimmingCharacters(in: CharacterSet(charactersIn: " \t"))
            headers.append((name, value))
        }
        return (status, parts.count > 2 ? String(parts[2]) : "", String(parts[0]), headers)
    }

    static func keepsAlive(version: String, headers: [(String, String)]) -> Bool {
        let tokens = headers.filter { $0.0.lowercased() == "connection" }
            .flatMap { $0.1.lowercased().split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) } }
        if tokens.contains("close") { return false }
        return version == "HTTP/1.1" || tokens.contains("keep-alive")
    }

    // MARK: Reading

    private func readHead(deadline: Double) throws(HTTPClientError) -> [UInt8] {
        var scanFrom = 0
        while true {
            if let end = Self.find([13, 10, 13, 10], in: buffer, from: scanFrom) {
                let head = Array(buffer[0..<end])
                buffer.removeFirst(end + 4)
                return head
            }
            scanFrom = max(0, buffer.count - 3)
            guard buffer.count <= Self.maxHeadBytes else { throw .badResponse("response head over \(Self.maxHeadBytes) bytes") }
            let hadBytes = !buffer.isEmpty
            guard try fill(deadline: deadline) else {
                throw .closed(hadBytes ? "in the response head" : Self.closedBeforeResponse)
            }
        }
    }

    private func readLine(deadline: Double) throws(HTTPClientError) -> [UInt8] {
        var scanFrom = 0
        while true {
            if let end = Self.find([13, 10], in: buffer, from: scanFrom) {
                let line = Array(buffer[0..<end])
                buffer.removeFirst(end + 2)
                return line
            }
            scanFrom = max(0, buffer.count - 1)
            guard buffer.count <= Self.maxHeadBytes else { throw .badResponse("line over \(Self.maxHeadBytes) bytes") }
            guard try fill(deadline: deadline) else { throw .closed("in a chunked body") }
        }
    }

    private func readExactly(_ n: Int, deadline: Double) throws(HTTPClientError) -> [UInt8] {
        while buffer.count < n {
            guard try fill(deadline: deadline) else { throw .closed("after \(buffer.count) of \(n) body bytes") }
        }
        let out = Array(buffer[0..<n])
        buffer.removeFirst(n)
        return out
    }

    private func readToEnd(deadline: Double) throws(HTTPClientError) -> [UInt8] {
        while try fill(deadline: deadline) {
            guard buffer.count <= Self.maxBodyBytes else { throw .badResponse("body over the limit") }
        }
        defer { buffer.removeAll() }
        return buffer
    }

    private func readChunked(deadline: Double) throws(HTTPClientError) -> [UInt8] {
        var body: [UInt8] = []
        while true {
            let line = String(decoding: try readLine(deadline: deadline), as: UTF8.self)
            let sizeText =
                line.split(separator: ";", maxSplits: 1, omittingEmptySubsequences: false).first
                .map { $0.trimmingCharacters(in: CharacterSet(charactersIn: " \t")) } ?? ""
            guard !sizeText.isEmpty, sizeText.count <= 15, sizeText.allSatisfy(\.isHexDigit), let size = Int(sizeText, radix: 16)
            else {
                throw .badResponse("bad chunk size line: \(line.prefix(40))")
            }
            if size == 0 {
                // Trailer fields, up to the empty line.
                while !(try readLine(deadline: deadline)).isEmpty {}
                return body
            }
            guard body.count + size <= Self.maxBodyBytes else { throw .badResponse("chunked body over the limit") }
            body += try readExactly(size, deadline: deadline)
            guard try readLine(deadline: deadline).isEmpty else { throw .badResponse("chunk data longer than its size") }
        }
    }

    /// Reads more bytes into the buffer; false at EOF.
    private func fill(deadline: Double) throws(HTTPClientError) -> Bool {
        while true {
            let remaining = deadline - Self.now()
            guard remaining > 0 else { throw .timeout("no complete response within \(timeout) s") }
            var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let r = poll(&p, 1, Int32(min(remaining * 1000, 60_000).rounded(.up)))
            if r < 0 {
                if errno == EINTR { continue }
                throw .io("poll: \(Self.errorText())")
            }
            if r == 0 { continue }
            let n = scratch.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n > 0 {
                buffer += scratch[0..<n]
                return true
            }
            if n == 0 { return false }
            if errno == EINTR || errno == EAGAIN { continue }
            if errno == ECONNRESET { return false }
            throw .io("recv: \(Self.errorText())")
        }
    }

    private func sendAll(_ bytes: [UInt8]) throws(HTTPClientError) {
        var off = 0
        while off < bytes.count {
            let n = bytes[off...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if n > 0 {
                off += n
                continue
            }
            if n < 0 && errno == EINTR { continue }
            if n < 0 && (errno == EPIPE || errno == ECONNRESET) { throw .closed(Self.closedBeforeResponse) }
            throw .io("send: \(Self.errorText())")
        }
    }

    // MARK: Connecting

    private func connect() throws(HTTPClientError) {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var list: UnsafeMutablePointer<addrinfo>?
        let rc = getaddrinfo(endpoint.host, String(endpoint.port), &hints, &list)
        guard rc == 0, let list else { throw .connect("cannot resolve \(endpoint.host): \(String(cString: gai_strerror(rc)))") }
        defer { freeaddrinfo(list) }
        var lastError = "no address"
        var ai: UnsafeMutablePointer<addrinfo>? = list
        while let a = ai {
            ai = a.pointee.ai_next
            let s = socket(a.pointee.ai_family, Int32(SOCK_STREAM.rawValue), 0)
            guard s >= 0 else {
                lastError = "socket: \(Self.errorText())"
                continue
            }
            if let source, let why = Self.bind(s, family: a.pointee.ai_family, to: source) {
                lastError = why
                Glibc.close(s)
                continue
            }
            if let why = Self.connect(s, a.pointee.ai_addr, a.pointee.ai_addrlen, timeout: timeout) {
                lastError = why
                Glibc.close(s)
                continue
            }
            var one: Int32 = 1
            setsockopt(s, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
            fd = s
            buffer.removeAll()
            exchangesOnConnection = 0
            connectionsOpened += 1
            return
        }
        throw .connect("\(endpoint): \(lastError)")
    }

    /// Binds `s` to the numeric address `source` (port chosen by the system); nil on success.
    static func bind(_ s: Int32, family: Int32, to source: String) -> String? {
        var storage = sockaddr_storage()
        var length: socklen_t
        if family == AF_INET6 {
            var a = sockaddr_in6()
            a.sin6_family = sa_family_t(AF_INET6)
            guard inet_pton(AF_INET6, source, &a.sin6_addr) == 1 else { return "--source \(source) is not an IPv6 address" }
            withUnsafeBytes(of: &a) { src in withUnsafeMutableBytes(of: &storage) { $0.copyMemory(from: src) } }
            length = socklen_t(MemoryLayout<sockaddr_in6>.size)
        } else {
            var a = sockaddr_in()
            a.sin_family = sa_family_t(AF_INET)
            guard inet_pton(AF_INET, source, &a.sin_addr) == 1 else { return "--source \(source) is not an IPv4 address" }
            withUnsafeBytes(of: &a) { src in withUnsafeMutableBytes(of: &storage) { $0.copyMemory(from: src) } }
            length = socklen_t(MemoryLayout<sockaddr_in>.size)
        }
        let r = withUnsafePointer(to: &storage) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.bind(s, $0, length) } }
        return r == 0 ? nil : "bind to \(source): \(errorText())"
    }

    /// Non-blocking connect bounded by `timeout`, then back to blocking; nil on success.
    private static func connect(_ s: Int32, _ addr: UnsafeMutablePointer<sockaddr>?, _ len: socklen_t, timeout: Double) -> String? {
        let flags = fcntl(s, F_GETFL)
        _ = fcntl(s, F_SETFL, flags | O_NONBLOCK)
        if Glibc.connect(s, addr, len) != 0 {
            guard errno == EINPROGRESS else { return errorText() }
            var p = pollfd(fd: s, events: Int16(POLLOUT), revents: 0)
            var r: Int32
            repeat { r = poll(&p, 1, Int32(timeout * 1000)) } while r < 0 && errno == EINTR
            if r == 0 { return "connect timed out after \(timeout) s" }
            if r < 0 { return "poll: \(errorText())" }
            var err: Int32 = 0
            var l = socklen_t(MemoryLayout<Int32>.size)
            getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &l)
            if err != 0 { return String(cString: strerror(err)) }
        }
        _ = fcntl(s, F_SETFL, flags & ~O_NONBLOCK)
        return nil
    }

    // MARK: Helpers

    static func find(_ needle: [UInt8], in hay: [UInt8], from: Int) -> Int? {
        guard hay.count >= needle.count else { return nil }
        var i = max(0, from)
        while i + needle.count <= hay.count {
            if hay[i] == needle[0] {
                var match = true
                for j in 1..<needle.count where hay[i + j] != needle[j] {
                    match = false
                    break
                }
                if match { return i }
            }
            i += 1
        }
        return nil
    }

    static func now() -> Double {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
    }

    static func errorText() -> String { String(cString: strerror(errno)) }
}
