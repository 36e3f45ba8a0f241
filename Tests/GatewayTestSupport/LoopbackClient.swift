import Foundation
import Glibc

/// A blocking TCP client on 127.0.0.1 with a 10 s receive timeout, for socket-level tests.
/// One thread may send while another receives (the large-transfer tests do).
public final class LoopbackClient: @unchecked Sendable {
    public let fd: Int32
    private var closed = false

    /// `source`: the local address to connect from (any of 127/8 on Linux), so that one test can
    /// play several clients; nil: the system's choice (127.0.0.1).
    public init(port: UInt16, source: String? = nil) throws {
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var tv = timeval(tv_sec: 10, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        if let source {
            var local = sockaddr_in()
            local.sin_family = sa_family_t(AF_INET)
            local.sin_addr.s_addr = inet_addr(source)
            let bound = withUnsafePointer(to: &local) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            guard bound == 0 else {
                close()
                throw POSIXError(.EADDRNOTAVAIL)
            }
        }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = port.bigEndian
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        let r = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard r == 0 else {
            // Through `close()`: the deinit runs for this (fully initialized) object too, and a
            // second close of the number could hit a descriptor another test opened meanwhile.
            close()
            throw POSIXError(.ECONNREFUSED)
        }
    }

    deinit { close() }

    public func close() {
        guard !closed else { return }
        closed = true
        Glibc.close(fd)
    }

    public func send(_ s: String) { send(Array(s.utf8)) }

    public func send(_ bytes: [UInt8]) {
        var off = 0
        while off < bytes.count {
            let n = bytes[off...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard n > 0 else { return }
            off += n
        }
    }

    /// errno of the last failed recv (0: none; EAGAIN: the 10 s timeout).
    public private(set) var lastErrno: Int32 = 0

    /// One recv of up to `max` bytes; empty at EOF, timeout or error.
    public func receiveSome(max: Int = 65536) -> [UInt8] {
        var tmp = [UInt8](repeating: 0, count: max)
        let n = tmp.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        if n < 0 { lastErrno = errno }
        return n > 0 ? Array(tmp[0..<n]) : []
    }

    public func receive(exactly count: Int) -> [UInt8] {
        var out = [UInt8]()
        while out.count < count {
            let chunk = receiveSome(max: min(65536, count - out.count))
            if chunk.isEmpty { break }
            out += chunk
        }
        return out
    }

    /// True when the server closed the connection (EOF within the timeout; bytes before it are skipped).
    public func isClosedByPeer() -> Bool {
        var tmp = [UInt8](repeating: 0, count: 1024)
        while true {
            let n = tmp.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n == 0 { return true }
            if n < 0 { return false }
        }
    }

    public func shutdownWrite() { shutdown(fd, Int32(SHUT_WR)) }
}
