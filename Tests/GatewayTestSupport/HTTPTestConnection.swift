import Foundation
import Glibc

/// One HTTP/1.1 response as a test client read it. Field names keep their case; lookups ignore it.
public struct HTTPTestResponse: Sendable {
    public var status: Int
    public var headers: [(name: String, value: String)]
    /// The body (decoded when chunked); empty when it was only counted.
    public var body: [UInt8]
    /// Body bytes received (decoded), also when they were not kept.
    public var bodyLength: Int
    /// The body came with `Transfer-Encoding: chunked`.
    public var wasChunked: Bool

    public var text: String { String(decoding: body, as: UTF8.self) }

    public func values(_ name: String) -> [String] {
        headers.filter { $0.name.caseInsensitiveCompare(name) == .orderedSame }.map(\.value)
    }

    public func header(_ name: String) -> String? { values(name).first }

    /// The body as `{"key": value}` JSON (the gateway's error answers).
    public var json: [String: Any]? { (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any] }
}

public struct HTTPTestError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// A blocking HTTP/1.1 client on one loopback connection (10 s receive timeout): send raw requests,
/// read responses one after another (keep-alive, pipelining), framed by Content-Length, chunked or
/// close, with HEAD/1xx/204/304 bodiless. Large bodies can be counted without being kept.
public final class HTTPTestConnection: @unchecked Sendable {
    public let socket: LoopbackClient
    private var buffer: [UInt8] = []
    private var start = 0
    private let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 256 * 1024, alignment: 16)

    public init(port: UInt16) throws { socket = try LoopbackClient(port: port) }

    deinit { scratch.deallocate() }

    public func send(_ s: String) { socket.send(s) }
    public func send(_ bytes: [UInt8]) { socket.send(bytes) }
    public func close() { socket.close() }

    /// True when the peer closed the connection (EOF within the receive timeout).
    public func isClosedByPeer() -> Bool {
        buffer.removeAll()
        start = 0
        return socket.isClosedByPeer()
    }

    private var available: Int { buffer.count - start }

    /// One recv into the buffer; false at EOF, timeout or error.
    private func fill() -> Bool {
        let n = recv(socket.fd, scratch.baseAddress, scratch.count, 0)
        guard n > 0 else { return false }
        if start > 0 && start == buffer.count {
            buffer.removeAll(keepingCapacity: true)
            start = 0
        } else if start > 1 << 20 {
            buffer.removeFirst(start)
            start = 0
        }
        buffer.append(contentsOf: UnsafeRawBufferPointer(rebasing: scratch[0..<n]))
        return true
    }

    private func take(_ n: Int) -> ArraySlice<UInt8> {
        let s = buffer[start..<(start + n)]
        start += n
        return s
    }

    /// Reads up to and including the next CRLF; the line without it.
    private func readLine(limit: Int = 64 * 1024) throws -> String {
        while true {
            if available >= 2 {
                var i = start
                while i + 1 < buffer.count {
                    if buffer[i] == 13 && buffer[i + 1] == 10 {
                        let line = String(decoding: buffer[start..<i], as: UTF8.self)
                        start = i + 2
                        return line
                    }
                    i += 1
                }
            }
            guard available < limit else { throw HTTPTestError("line longer than \(limit) bytes") }
            guard fill() else { throw HTTPTestError("connection closed or timed out before the end of a line") }
        }
    }

    /// Counts (and keeps, if asked) exactly `n` body bytes.
    private func readBody(_ n: Int, keep: Bool, into body: inout [UInt8]) throws {
        var left = n
        while left > 0 {
            if available == 0 {
                // Large bodies: count straight from the socket without buffering.
                let r = recv(socket.fd, scratch.baseAddress, min(scratch.count, left), 0)
                guard r > 0 else { throw HTTPTestError("connection closed or timed out with \(left) of \(n) body bytes missing") }
                if keep { body.append(contentsOf: UnsafeRawBufferPointer(rebasing: scratch[0..<r])) }
                left -= r
                continue
            }
            let k = min(left, available)
            let s = take(k)
            if keep { body.append(contentsOf: s) }
            left -= k
        }
    }

    /// Reads the next final response (1xx interim answers are skipped) to a request with `method`.
    public func readResponse(method: String = "GET", keepBody: Bool = true) throws -> HTTPTestResponse {
        while true {
            let statusLine = try readLine()
            let parts = statusLine.split(separator: " ", maxSplits: 2)
            guard parts.count >= 2, parts[0].hasPrefix("HTTP/1."), let status = Int(parts[1]) else {
                throw HTTPTestError("bad status line: \(statusLine.debugDescription)")
            }
            var headers: [(name: String, value: String)] = []
            while true {
                let line = try readLine()
                if line.isEmpty { break }
                guard let colon = line.firstIndex(of: ":") else { throw HTTPTestError("bad field line: \(line.debugDescription)") }
                headers.append((String(line[..<colon]), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)))
            }
            var r = HTTPTestResponse(status: status, headers: headers, body: [], bodyLength: 0, wasChunked: false)
            if status >= 100 && status < 200 && status != 101 { continue }
            if method == "HEAD" || status == 204 || status == 304 || status < 200 { return r }
            if r.values("Transfer-Encoding").joined(separator: ",").lowercased().contains("chunked") {
                r.wasChunked = true
                while true {
                    let sizeLine = try readLine()
                    let hex = sizeLine.split(separator: ";", maxSplits: 1).first.map { $0.trimmingCharacters(in: .whitespaces) } ?? ""
                    guard let size = Int(hex, radix: 16), size >= 0 else {
                        throw HTTPTestError("bad chunk size line \(sizeLine.debugDescription)")
                    }
                    if size == 0 {
                        while try !readLine().isEmpty {}  // trailers
                        break
                    }
                    try readBody(size, keep: keepBody, into: &r.body)
                    r.bodyLength += size
                    guard try readLine().isEmpty else { throw HTTPTestError("chunk data not followed by CRLF") }
                }
            } else if let cl = r.header("Content-Length") {
                guard let n = Int(cl), n >= 0 else { throw HTTPTestError("bad Content-Length \(cl)") }
                try readBody(n, keep: keepBody, into: &r.body)
                r.bodyLength = n
            } else {
                // Delimited by close.
                while true {
                    if available > 0 {
                        r.bodyLength += available
                        if keepBody { r.body += take(available) } else { start = buffer.count }
                    }
                    guard fill() else { break }
                }
            }
            return r
        }
    }

    /// Sends one request and reads its response.
    public func request(_ raw: String, method: String? = nil) throws -> HTTPTestResponse {
        send(raw)
        let m = method ?? String(raw.prefix { $0 != " " })
        return try readResponse(method: m)
    }
}

/// `Transfer-Encoding: chunked` framing of `chunks` (a last chunk and no trailers).
public func chunkedBody(_ chunks: [[UInt8]]) -> [UInt8] {
    var out: [UInt8] = []
    for c in chunks where !c.isEmpty {
        out += Array(String(c.count, radix: 16).utf8) + [13, 10] + c + [13, 10]
    }
    return out + Array("0\r\n\r\n".utf8)
}

/// Resident memory of a process from `/proc/<pid>/status`, in bytes: current (VmRSS) and peak (VmHWM).
public func processMemory(pid: Int32) -> (rss: Int, peak: Int)? {
    guard let text = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return nil }
    func field(_ name: String) -> Int? {
        guard let line = text.split(separator: "\n").first(where: { $0.hasPrefix(name + ":") }) else { return nil }
        let kb = line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first.flatMap { Int($0) }
        return kb.map { $0 * 1024 }
    }
    guard let rss = field("VmRSS"), let peak = field("VmHWM") else { return nil }
    return (rss, peak)
}

/// A loopback port that was free a moment ago (bound to port 0, then released).
public func freeLoopbackPort() throws -> UInt16 {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw POSIXError(.EMFILE) }
    defer { Glibc.close(fd) }
    var addr = sockaddr_in()
    addr.sin_family = sa_family_t(AF_INET)
    addr.sin_port = 0
    addr.sin_addr.s_addr = inet_addr("127.0.0.1")
    var len = socklen_t(MemoryLayout<sockaddr_in>.size)
    let ok = withUnsafeMutablePointer(to: &addr) { p in
        p.withMemoryRebound(to: sockaddr.self, capacity: 1) { sp in
            bind(fd, sp, len) == 0 && getsockname(fd, sp, &len) == 0
        }
    }
    guard ok else { throw POSIXError(.EADDRINUSE) }
    return UInt16(bigEndian: addr.sin_port)
}
