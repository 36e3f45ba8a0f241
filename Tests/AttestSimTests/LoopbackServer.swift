import Foundation
import Glibc

/// A request as the in-test server parsed it.
struct ServerRequest: Sendable {
    let method: String
    let target: String
    let headers: [String: String]
    let body: [UInt8]
    /// The bytes received for this request (head and body).
    let raw: [UInt8]
    /// Index of the connection it came on (0 for the first accepted).
    let connection: Int
    /// Index of the request on its connection.
    let indexOnConnection: Int

    func header(_ name: String) -> String? { headers[name.lowercased()] }
}

/// What the server does with a request.
enum ServerReply: Sendable {
    /// Write these bytes; close afterwards when `close`.
    case bytes([UInt8], close: Bool)
    /// Close without answering.
    case closeNow
    /// Never answer (the client times out); the connection is closed when the server stops.
    case silent
}

/// A tiny blocking HTTP/1.1 server on 127.0.0.1:0 for the client's unit tests: one thread per
/// connection, requests framed by Content-Length only. `stop()` (or deinit) shuts every socket down;
/// the threads then close their descriptors and end.
final class LoopbackServer: @unchecked Sendable {
    let port: UInt16
    private let listenFD: Int32
    private let handler: @Sendable (ServerRequest) -> ServerReply
    private let lock = NSLock()
    private var connectionFDs: [Int32] = []
    private var stopped = false
    private var accepted = 0

    init(handler: @escaping @Sendable (ServerRequest) -> ServerReply) throws {
        self.handler = handler
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = 0
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { p -> Bool in
                bind(fd, p, len) == 0 && listen(fd, 16) == 0 && getsockname(fd, p, &len) == 0
            }
        }
        guard bound else {
            close(fd)
            throw POSIXError(.EADDRNOTAVAIL)
        }
        listenFD = fd
        port = UInt16(bigEndian: addr.sin_port)
        let t = Thread { [self] in acceptLoop() }
        t.start()
    }

    deinit { stop() }

    /// Connections accepted so far.
    var connectionCount: Int { lock.withLock { accepted } }
    /// The peer address of each accepted connection, in order.
    var peers: [String] { lock.withLock { peerHosts } }
    private var peerHosts: [String] = []

    /// Shuts every socket down; each thread then closes its own descriptor (closing one here while
    /// its thread still uses the number would let that thread touch whatever socket reuses it).
    func stop() {
        let fds: [Int32] = lock.withLock {
            guard !stopped else { return [] }
            stopped = true
            return connectionFDs + [listenFD]
        }
        for fd in fds { shutdown(fd, Int32(SHUT_RDWR)) }
    }

    private func acceptLoop() {
        while true {
            var peer = sockaddr_in()
            var peerLength = socklen_t(MemoryLayout<sockaddr_in>.size)
            let c = withUnsafeMutablePointer(to: &peer) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { accept(listenFD, $0, &peerLength) }
            }
            guard c >= 0 else {
                if errno == EINTR { continue }
                close(listenFD)
                return
            }
            let host = String(cString: inet_ntoa(peer.sin_addr))
            let index: Int? = lock.withLock {
                if stopped { return nil }
                peerHosts.append(host)
                connectionFDs.append(c)
                accepted += 1
                return accepted - 1
            }
            guard let index else {
                close(c)
                close(listenFD)
                return
            }
            let t = Thread { [self] in serve(c, connection: index) }
            t.start()
        }
    }

    private func serve(_ fd: Int32, connection: Int) {
        var buffer: [UInt8] = []
        var n = 0
        defer { closeConnection(fd) }
        while true {
            guard let request = readRequest(fd, &buffer, connection: connection, index: n) else { return }
            n += 1
            switch handler(request) {
            case .bytes(let bytes, let close):
                var off = 0
                while off < bytes.count {
                    let w = bytes[off...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                    if w <= 0 { return }
                    off += w
                }
                if close { return }
            case .closeNow:
                return
            case .silent:
                var b = [UInt8](repeating: 0, count: 1024)
                while (b.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }) > 0 {}
                return
            }
        }
    }

    private func closeConnection(_ fd: Int32) {
        lock.withLock { connectionFDs.removeAll { $0 == fd } }
        close(fd)
    }

    private func readRequest(_ fd: Int32, _ buffer: inout [UInt8], connection: Int, index: Int) -> ServerRequest? {
        func more() -> Bool {
            var b = [UInt8](repeating: 0, count: 65536)
            let r = b.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            guard r > 0 else { return false }
            buffer += b[0..<r]
            return true
        }
        var headEnd: Int?
        while headEnd == nil {
            if buffer.count >= 4 {
                for i in 0...(buffer.count - 4) where buffer[i] == 13 && buffer[i + 1] == 10 && buffer[i + 2] == 13 && buffer[i + 3] == 10 {
                    headEnd = i
                    break
                }
            }
            if headEnd == nil, !more() { return nil }
        }
        let head = String(decoding: buffer[0..<headEnd!], as: UTF8.self)
        var lines = head.components(separatedBy: "\r\n")
        let requestLine = lines.removeFirst().split(separator: " ")
        guard requestLine.count == 3 else { return nil }
        var headers: [String: String] = [:]
        for l in lines {
            guard let c = l.firstIndex(of: ":") else { continue }
            headers[l[..<c].lowercased()] = l[l.index(after: c)...].trimmingCharacters(in: .whitespaces)
        }
        let length = Int(headers["content-length"] ?? "0") ?? 0
        let total = headEnd! + 4 + length
        while buffer.count < total { if !more() { return nil } }
        let raw = Array(buffer[0..<total])
        buffer.removeFirst(total)
        return ServerRequest(
            method: String(requestLine[0]), target: String(requestLine[1]), headers: headers,
            body: Array(raw[(headEnd! + 4)...]), raw: raw, connection: connection, indexOnConnection: index)
    }
}

/// A response with a Content-Length body.
func httpResponse(_ status: Int, _ reason: String = "OK", headers: [(String, String)] = [], body: String = "") -> [UInt8] {
    var s = "HTTP/1.1 \(status) \(reason)\r\n"
    for (n, v) in headers { s += "\(n): \(v)\r\n" }
    s += "Content-Length: \(body.utf8.count)\r\n\r\n\(body)"
    return Array(s.utf8)
}
