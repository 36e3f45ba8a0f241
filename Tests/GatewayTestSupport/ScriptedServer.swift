import Foundation
import Glibc

/// A request as a `ScriptedServer` read it: the head, and the body length (and bytes, if kept).
public struct ScriptedRequest: Sendable {
    public var method: String
    public var target: String
    public var headers: [(name: String, value: String)]
    public var bodyLength: Int
    public var body: [UInt8]

    public func header(_ name: String) -> String? {
        headers.first { $0.name.caseInsensitiveCompare(name) == .orderedSame }?.value
    }
}

/// One accepted connection of a `ScriptedServer`, read and written with blocking calls (30 s
/// receive timeout) on its own thread.
public final class ScriptedConnection: @unchecked Sendable {
    public let fd: Int32
    /// 0 for the server's first accepted connection, then 1, 2, …
    public let index: Int
    private var buffer: [UInt8] = []
    private let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 256 * 1024, alignment: 16)

    init(fd: Int32, index: Int) {
        self.fd = fd
        self.index = index
        var tv = timeval(tv_sec: 30, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
    }

    deinit { scratch.deallocate() }

    private func fill() -> Bool {
        let n = recv(fd, scratch.baseAddress, scratch.count, 0)
        guard n > 0 else { return false }
        buffer.append(contentsOf: UnsafeRawBufferPointer(rebasing: scratch[0..<n]))
        return true
    }

    /// The next line without its CR LF; nil at EOF (or past 256 KiB without one).
    public func readLine() -> String? {
        while true {
            if let i = buffer.indices.dropLast().first(where: { buffer[$0] == 13 && buffer[$0 + 1] == 10 }) {
                let line = String(decoding: buffer[0..<i], as: UTF8.self)
                buffer.removeFirst(i + 2)
                return line
            }
            guard buffer.count < 256 * 1024, fill() else { return nil }
        }
    }

    /// Exactly `n` bytes; nil if the peer went away first.
    public func readBytes(_ n: Int) -> [UInt8]? {
        var request = ScriptedRequest(method: "", target: "", headers: [], bodyLength: 0, body: [])
        return readBody(n, keep: true, into: &request) ? request.body : nil
    }

    /// Counts exactly `n` body bytes (kept if asked); false if the peer went away first.
    private func readBody(_ n: Int, keep: Bool, into request: inout ScriptedRequest) -> Bool {
        var left = n
        let k = min(left, buffer.count)
        if keep { request.body += buffer[0..<k] }
        buffer.removeFirst(k)
        left -= k
        while left > 0 {
            let r = recv(fd, scratch.baseAddress, min(scratch.count, left), 0)
            guard r > 0 else { return false }
            if keep { request.body.append(contentsOf: UnsafeRawBufferPointer(rebasing: scratch[0..<r])) }
            left -= r
        }
        request.bodyLength += n
        return true
    }

    /// Reads the next request head and its body (Content-Length or chunked); nil at EOF or on error.
    public func readRequest(keepBody: Bool = true) -> ScriptedRequest? {
        guard let line = readLine() else { return nil }
        let parts = line.split(separator: " ")
        guard parts.count == 3 else { return nil }
        var r = ScriptedRequest(method: String(parts[0]), target: String(parts[1]), headers: [], bodyLength: 0, body: [])
        while true {
            guard let f = readLine() else { return nil }
            if f.isEmpty { break }
            guard let c = f.firstIndex(of: ":") else { return nil }
            r.headers.append((String(f[..<c]), f[f.index(after: c)...].trimmingCharacters(in: .whitespaces)))
        }
        if r.header("Transfer-Encoding")?.lowercased().contains("chunked") == true {
            while true {
                guard let sizeLine = readLine(),
                    let size = Int(sizeLine.split(separator: ";").first.map(String.init) ?? "", radix: 16)
                else { return nil }
                if size == 0 {
                    while let t = readLine(), !t.isEmpty {}
                    break
                }
                guard readBody(size, keep: keepBody, into: &r), readLine() == "" else { return nil }
            }
        } else if let cl = r.header("Content-Length").flatMap({ Int($0) }) {
            guard readBody(cl, keep: keepBody, into: &r) else { return nil }
        }
        return r
    }

    /// Writes everything (blocking); false if the peer went away.
    @discardableResult
    public func write(_ bytes: [UInt8]) -> Bool {
        var off = 0
        while off < bytes.count {
            let n = bytes[off...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard n > 0 else { return false }
            off += n
        }
        return true
    }

    @discardableResult
    public func write(_ s: String) -> Bool { write(Array(s.utf8)) }

    /// A complete `200` (or `status`) response with a Content-Length body.
    @discardableResult
    public func respond(status: Int = 200, _ body: String, headers: String = "") -> Bool {
        write("HTTP/1.1 \(status) X\r\nContent-Length: \(body.utf8.count)\r\n\(headers)\r\n\(body)")
    }

    /// Closes the connection (both ways) now.
    public func close() { shutdown(fd, Int32(SHUT_RDWR)) }
}

/// A tiny blocking TCP server on 127.0.0.1 (port chosen by the system) for upstream behaviours that
/// nginx cannot script: never answering, closing a reused connection, counting a 1 GiB body. Each
/// connection runs `handler` on its own thread and is closed when the handler returns; `stop()`
/// closes the listener and every connection and waits for the threads.
public final class ScriptedServer: @unchecked Sendable {
    public let port: UInt16
    private let listenFD: Int32
    private let lock = NSLock()
    private var open: Set<Int32> = []
    private var acceptedCount = 0
    private var stopped = false
    private let group = DispatchGroup()

    public init(_ handler: @escaping @Sendable (ScriptedConnection) -> Void) throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw POSIXError(.EMFILE) }
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        let ok = withUnsafeMutablePointer(to: &addr) { p in
            p.withMemoryRebound(to: sockaddr.self, capacity: 1) { sp in
                bind(fd, sp, len) == 0 && listen(fd, 64) == 0 && getsockname(fd, sp, &len) == 0
            }
        }
        guard ok else {
            Glibc.close(fd)
            throw POSIXError(.EADDRINUSE)
        }
        listenFD = fd
        port = UInt16(bigEndian: addr.sin_port)
        group.enter()
        let t = Thread { [self] in
            defer { group.leave() }
            while true {
                let c = accept(fd, nil, nil)
                if c < 0 {
                    if errno == EINTR { continue }
                    return
                }
                let index: Int? = lock.withLock {
                    guard !stopped else { return nil }
                    open.insert(c)
                    acceptedCount += 1
                    return acceptedCount - 1
                }
                guard let index else {
                    Glibc.close(c)
                    return
                }
                group.enter()
                let worker = Thread { [self] in
                    defer { group.leave() }
                    handler(ScriptedConnection(fd: c, index: index))
                    lock.withLock { _ = open.remove(c) }
                    Glibc.close(c)
                }
                worker.start()
            }
        }
        t.start()
    }

    deinit { stop() }

    /// Connections accepted so far.
    public var accepted: Int { lock.withLock { acceptedCount } }

    public func stop() {
        let fds: [Int32]? = lock.withLock {
            guard !stopped else { return nil }
            stopped = true
            return Array(open)
        }
        guard let fds else { return }
        shutdown(listenFD, Int32(SHUT_RDWR))  // wakes the blocked accept
        for c in fds { shutdown(c, Int32(SHUT_RDWR)) }
        _ = group.wait(timeout: .now() + 15)
        Glibc.close(listenFD)
    }
}
