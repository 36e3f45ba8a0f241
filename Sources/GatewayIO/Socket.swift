import CGatewaySystem
import Glibc

/// Non-blocking TCP socket operations over a file descriptor. Only GatewayIO touches descriptors.
public enum Socket {
    public struct Error: Swift.Error, Equatable, Sendable, CustomStringConvertible {
        public let operation: String
        public let errno: Int32
        public init(operation: String, errno: Int32) {
            self.operation = operation
            self.errno = errno
        }
        public var description: String { "\(operation): \(String(cString: strerror(errno)))" }
        /// The peer took none of the queued bytes for the connection's send timeout.
        public static let sendTimeout = Error(operation: "send timeout", errno: ETIMEDOUT)
        public var isSendTimeout: Bool { self == Self.sendTimeout }
    }

    /// A listening socket with SO_REUSEADDR (and SO_REUSEPORT when asked, for one socket per loop).
    public static func listen(_ address: SocketAddress, reusePort: Bool, backlog: Int32 = 4096) throws(Error) -> Int32 {
        let fd = cgw_socket(address.family)
        guard fd >= 0 else { throw Error(operation: "socket", errno: cgw_errno()) }
        _ = cgw_setsockopt_int(fd, SOL_SOCKET, SO_REUSEADDR, 1)
        if reusePort { _ = cgw_setsockopt_int(fd, SOL_SOCKET, SO_REUSEPORT, 1) }
        var addr = address
        let r = withUnsafePointer(to: &addr.storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, addr.length) }
        }
        guard r == 0 else {
            let e = cgw_errno()
            close(fd)
            throw Error(operation: "bind \(address)", errno: e)
        }
        guard Glibc.listen(fd, backlog) == 0 else {
            let e = cgw_errno()
            close(fd)
            throw Error(operation: "listen \(address)", errno: e)
        }
        return fd
    }

    /// The address a socket is bound to (for port 0 listeners).
    public static func localAddress(_ fd: Int32) -> SocketAddress? {
        var ss = sockaddr_storage()
        var len = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let r = withUnsafeMutablePointer(to: &ss) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) }
        }
        return r == 0 ? SocketAddress(storage: ss, length: len) : nil
    }

    public enum AcceptResult { case accepted(Int32, SocketAddress), wouldBlock, failed(Error) }

    public static func accept(_ listener: Int32) -> AcceptResult {
        var ss = sockaddr_storage()
        var len = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let fd = withUnsafeMutablePointer(to: &ss) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { cgw_accept4(listener, $0, &len) }
        }
        if fd >= 0 {
            _ = cgw_setsockopt_int(fd, Int32(IPPROTO_TCP), TCP_NODELAY, 1)
            return .accepted(fd, SocketAddress(storage: ss, length: len))
        }
        let e = cgw_errno()
        if e == EAGAIN || e == EWOULDBLOCK || e == EINTR || e == ECONNABORTED { return .wouldBlock }
        return .failed(Error(operation: "accept", errno: e))
    }

    public enum ConnectResult { case connected(Int32), inProgress(Int32), failed(Error) }

    /// Starts a non-blocking connect; completion is signalled by writability, then `pendingError`.
    public static func connect(_ address: SocketAddress) -> ConnectResult {
        let fd = cgw_socket(address.family)
        guard fd >= 0 else { return .failed(Error(operation: "socket", errno: cgw_errno())) }
        _ = cgw_setsockopt_int(fd, Int32(IPPROTO_TCP), TCP_NODELAY, 1)
        var addr = address
        let r = withUnsafePointer(to: &addr.storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, addr.length) }
        }
        if r == 0 { return .connected(fd) }
        let e = cgw_errno()
        if e == EINPROGRESS { return .inProgress(fd) }
        close(fd)
        return .failed(Error(operation: "connect \(address)", errno: e))
    }

    /// SO_ERROR after a non-blocking connect (0 = connected).
    public static func pendingError(_ fd: Int32) -> Int32 { cgw_getsockopt_error(fd) }

    public enum IOResult: Equatable { case bytes(Int), wouldBlock, eof, failed(Int32) }

    public static func read(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer) -> IOResult {
        while true {
            let n = Glibc.read(fd, buffer.baseAddress, buffer.count)
            if n > 0 { return .bytes(n) }
            if n == 0 { return .eof }
            let e = cgw_errno()
            if e == EINTR { continue }
            if e == EAGAIN || e == EWOULDBLOCK { return .wouldBlock }
            return .failed(e)
        }
    }

    /// Reads what is queued without consuming it (`MSG_PEEK`): the bytes stay for the next read.
    public static func peek(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer) -> IOResult {
        while true {
            let n = cgw_recv_peek(fd, buffer.baseAddress, buffer.count)
            if n > 0 { return .bytes(n) }
            if n == 0 { return .eof }
            let e = cgw_errno()
            if e == EINTR { continue }
            if e == EAGAIN || e == EWOULDBLOCK { return .wouldBlock }
            return .failed(e)
        }
    }

    public static func write(_ fd: Int32, _ buffer: UnsafeRawBufferPointer) -> IOResult {
        while true {
            let n = cgw_send(fd, buffer.baseAddress, buffer.count)
            if n >= 0 { return .bytes(n) }
            let e = cgw_errno()
            if e == EINTR { continue }
            if e == EAGAIN || e == EWOULDBLOCK { return .wouldBlock }
            return .failed(e)
        }
    }

    /// Gathers several buffers into one send (head + body without copying).
    public static func writev(_ fd: Int32, _ iov: UnsafeBufferPointer<iovec>) -> IOResult {
        while true {
            let n = cgw_sendmsg_iov(fd, iov.baseAddress, Int32(iov.count))
            if n >= 0 { return .bytes(n) }
            let e = cgw_errno()
            if e == EINTR { continue }
            if e == EAGAIN || e == EWOULDBLOCK { return .wouldBlock }
            return .failed(e)
        }
    }

    @_spi(Testing) public static func shutdownWrite(_ fd: Int32) { _ = Glibc.shutdown(fd, Int32(SHUT_WR)) }

    public static func close(_ fd: Int32) { _ = Glibc.close(fd) }

    /// Makes the next `close` reset the connection (SO_LINGER 0: RST, unsent bytes dropped) instead
    /// of leaving the kernel to deliver what is queued: for a peer that stopped reading, whose queued
    /// bytes would otherwise hold kernel memory in an orphaned socket (nginx's `reset_timedout_connection`).
    public static func resetOnClose(_ fd: Int32) {
        var l = linger(l_onoff: 1, l_linger: 0)
        _ = setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, socklen_t(MemoryLayout<linger>.size))
    }

    /// Writes to a closed peer must surface as EPIPE errors, not kill the process.
    public static func ignoreSIGPIPE() { cgw_ignore_sigpipe() }
}
