import CGatewaySystem
import GatewayCrypto
import Glibc

/// A blocking client stream over TCP, optionally TLS (a `TLSSession` driven over the socket), for
/// threads that may wait: the Redis connections, each on its own thread. Never used on an event
/// loop. Every wait (connect, handshake, each read and each write) is bounded by `timeoutMillis`
/// with `poll`, so a silent peer fails the call instead of holding the thread. Not thread-safe:
/// one thread owns it.
public final class BlockingStream {
    public struct Failure: Error, Sendable, CustomStringConvertible {
        public enum Kind: Sendable, Equatable {
            /// Name resolution or the TCP connect failed.
            case connect
            /// The TLS handshake failed (certificate, versions, the peer's alert), or a TLS record later.
            case tls
            /// Nothing arrived (or could be sent) within the timeout.
            case timeout
            /// The peer closed the connection.
            case closed
            /// Any other socket error.
            case io
        }

        public let kind: Kind
        public let description: String

        public init(_ kind: Kind, _ description: String) {
            self.kind = kind
            self.description = description
        }
    }

    private var fd: Int32
    private let session: TLSSession?
    public let timeoutMillis: Int64
    /// The address connected to.
    public let peer: SocketAddress

    /// Whether the server has sent any plaintext yet (TLS): a TLS 1.3 server refuses a client
    /// certificate (or its absence) after the client's handshake is done, so that refusal shows up as
    /// a dropped connection at the first write or read.
    private var heardFromServer = false

    private init(fd: Int32, peer: SocketAddress, session: TLSSession?, timeoutMillis: Int64) {
        self.fd = fd
        self.peer = peer
        self.session = session
        self.timeoutMillis = timeoutMillis
    }

    deinit { close() }

    /// What the TLS handshake agreed on (nil without TLS).
    public var tlsInfo: TLSConnectionInfo? { session?.connectionInfo }

    /// Connects to `host` (a name is resolved; each address is tried in turn, IPv4 first), with TCP
    /// keep-alive and no Nagle delay; then, with `tls`, runs the handshake, verifying the server as
    /// `serverName` (default: `host`).
    public static func connect(
        host: String, port: UInt16, timeoutMillis: Int64, tls: TLSClientContext? = nil, serverName: String? = nil
    ) throws(Failure) -> BlockingStream {
        let timeout = max(1, timeoutMillis)
        let addresses = try resolve(host: host, port: port)
        var failures: [String] = []
        for address in addresses {
            guard let fd = try connectOne(address, timeoutMillis: timeout, failures: &failures) else { continue }
            _ = cgw_setsockopt_int(fd, SOL_SOCKET, SO_KEEPALIVE, 1)
            _ = cgw_setsockopt_int(fd, Int32(IPPROTO_TCP), TCP_KEEPIDLE, 15)
            _ = cgw_setsockopt_int(fd, Int32(IPPROTO_TCP), TCP_KEEPINTVL, 5)
            _ = cgw_setsockopt_int(fd, Int32(IPPROTO_TCP), TCP_KEEPCNT, 3)
            var session: TLSSession?
            if let tls {
                do {
                    session = try tls.makeSession(serverName: serverName ?? host)
                } catch {
                    Glibc.close(fd)
                    throw Failure(.tls, "TLS with \(address): \(error.message)")
                }
            }
            let stream = BlockingStream(fd: fd, peer: address, session: session, timeoutMillis: timeout)
            if session != nil { try stream.handshake() }
            return stream
        }
        throw Failure(.connect, failures.joined(separator: "; "))
    }

    /// Every TCP address of `host` (numeric, or resolved), IPv4 ones first.
    static func resolve(host: String, port: UInt16) throws(Failure) -> [SocketAddress] {
        if let numeric = try? SocketAddress(host: host == "localhost" ? "127.0.0.1" : host, port: port) { return [numeric] }
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_family = AF_UNSPEC
        var res: UnsafeMutablePointer<addrinfo>?
        let status = getaddrinfo(host, String(port), &hints, &res)
        guard status == 0, let first = res else {
            let why = status == 0 ? "no address" : String(cString: gai_strerror(status))
            throw Failure(.connect, "cannot resolve \(host): \(why)")
        }
        defer { freeaddrinfo(first) }
        var v4: [SocketAddress] = []
        var v6: [SocketAddress] = []
        var p: UnsafeMutablePointer<addrinfo>? = first
        while let cur = p {
            if let sa = cur.pointee.ai_addr, cur.pointee.ai_family == AF_INET || cur.pointee.ai_family == AF_INET6 {
                var ss = sockaddr_storage()
                withUnsafeMutableBytes(of: &ss) { dst in
                    dst.copyMemory(from: UnsafeRawBufferPointer(start: sa, count: Int(cur.pointee.ai_addrlen)))
                }
                let address = SocketAddress(storage: ss, length: cur.pointee.ai_addrlen)
                if cur.pointee.ai_family == AF_INET { v4.append(address) } else { v6.append(address) }
            }
            p = cur.pointee.ai_next
        }
        guard !(v4.isEmpty && v6.isEmpty) else { throw Failure(.connect, "cannot resolve \(host): no TCP address") }
        return v4 + v6
    }

    /// A connected non-blocking socket, or nil (the reason appended to `failures`).
    private static func connectOne(_ address: SocketAddress, timeoutMillis: Int64, failures: inout [String]) throws(Failure) -> Int32? {
        switch Socket.connect(address) {
        case .failed(let e):
            failures.append("connect \(address): \(String(cString: strerror(e.errno)))")
            return nil
        case .connected(let fd):
            return fd
        case .inProgress(let fd):
            switch wait(fd, events: Int16(POLLOUT), timeoutMillis: timeoutMillis) {
            case .ready:
                let e = Socket.pendingError(fd)
                if e == 0 { return fd }
                Glibc.close(fd)
                failures.append("connect \(address): \(String(cString: strerror(e)))")
            case .timedOut:
                Glibc.close(fd)
                failures.append("connect \(address): no answer within \(timeoutMillis) ms")
            case .failed(let e):
                Glibc.close(fd)
                failures.append("connect \(address): \(String(cString: strerror(e)))")
            }
            return nil
        }
    }

    enum Wait { case ready, timedOut, failed(Int32) }

    /// Waits until `fd` is ready for `events` (POLLHUP and POLLERR count as ready: the next call reports them).
    static func wait(_ fd: Int32, events: Int16, timeoutMillis: Int64) -> Wait {
        var p = pollfd(fd: fd, events: events, revents: 0)
        let deadline = EventLoop.monotonicMillis() + timeoutMillis
        while true {
            let left = deadline - EventLoop.monotonicMillis()
            guard left > 0 else { return .timedOut }
            let r = poll(&p, 1, Int32(clamping: left))
            if r > 0 { return .ready }
            if r == 0 { return .timedOut }
            let e = cgw_errno()
            if e != EINTR { return .failed(e) }
        }
    }

    // MARK: - TLS

    private func handshake() throws(Failure) {
        guard let session else { return }
        while true {
            try flushCiphertext()
            switch session.handshakeState {
            case .done:
                return
            case .failed(let f):
                throw Failure(.tls, "TLS handshake with \(peer): \(f)")
            case .plainHTTPOnTLSPort:
                throw Failure(.tls, "TLS handshake with \(peer): unexpected plain text")
            case .inProgress:
                do {
                    try readCiphertext()
                } catch {
                    if error.kind == .closed {
                        throw Failure(
                            .tls, "TLS handshake with \(peer): the server closed the connection (it may require a client certificate)")
                    }
                    throw Failure(error.kind == .timeout ? .timeout : .tls, "TLS handshake with \(peer): \(error.description)")
                }
            }
        }
    }

    /// Reads what the socket has (waiting up to the timeout) into the TLS session.
    private func readCiphertext() throws(Failure) {
        let result: Result<Void, Failure> = withUnsafeTemporaryAllocation(byteCount: 16 * 1024, alignment: 16) { buffer in
            do throws(Failure) {
                let n = try readSocket(into: buffer)
                session!.feed(UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
                return .success(())
            } catch {
                return .failure(error)
            }
        }
        try result.get()
    }

    /// Writes every byte of ciphertext the session has waiting.
    private func flushCiphertext() throws(Failure) {
        guard let session else { return }
        while session.pendingCiphertextCount > 0 {
            var failure: Failure?
            session.sendCiphertext { bytes in
                do throws(Failure) {
                    return try writeSomeSocket(bytes)
                } catch {
                    failure = error
                    return 0
                }
            }
            if let failure { throw failure }
        }
    }

    // MARK: - Socket

    /// At least one byte, waiting up to the timeout.
    private func readSocket(into buffer: UnsafeMutableRawBufferPointer) throws(Failure) -> Int {
        guard fd >= 0 else { throw Failure(.closed, "the connection is closed") }
        while true {
            switch Socket.read(fd, into: buffer) {
            case .bytes(let n): return n
            case .eof: throw Failure(.closed, "the server closed the connection")
            case .failed(let e): throw Failure(.io, "read from \(peer): \(String(cString: strerror(e)))")
            case .wouldBlock:
                switch Self.wait(fd, events: Int16(POLLIN), timeoutMillis: timeoutMillis) {
                case .ready: continue
                case .timedOut: throw Failure(.timeout, "no reply from \(peer) within \(timeoutMillis) ms")
                case .failed(let e): throw Failure(.io, "poll: \(String(cString: strerror(e)))")
                }
            }
        }
    }

    /// Some of `bytes` (at least one), waiting up to the timeout for room.
    private func writeSomeSocket(_ bytes: UnsafeRawBufferPointer) throws(Failure) -> Int {
        guard fd >= 0 else { throw Failure(.closed, "the connection is closed") }
        while true {
            switch Socket.write(fd, bytes) {
            case .bytes(let n): return n
            case .eof: throw Failure(.closed, "the server closed the connection")
            case .failed(let e):
                if e == EPIPE || e == ECONNRESET {
                    throw Failure(.closed, "the server closed the connection (\(String(cString: strerror(e))))")
                }
                throw Failure(.io, "write to \(peer): \(String(cString: strerror(e)))")
            case .wouldBlock:
                switch Self.wait(fd, events: Int16(POLLOUT), timeoutMillis: timeoutMillis) {
                case .ready: continue
                case .timedOut: throw Failure(.timeout, "\(peer) took nothing for \(timeoutMillis) ms")
                case .failed(let e): throw Failure(.io, "poll: \(String(cString: strerror(e)))")
                }
            }
        }
    }

    // MARK: - Plaintext

    /// Sends all of `bytes` (encrypted with TLS).
    public func write(_ bytes: UnsafeRawBufferPointer) throws(Failure) {
        var offset = 0
        guard let session else {
            while offset < bytes.count { offset += try writeSomeSocket(UnsafeRawBufferPointer(rebasing: bytes[offset...])) }
            return
        }
        while offset < bytes.count {
            let taken: Int
            do {
                taken = try session.writePlaintext(UnsafeRawBufferPointer(rebasing: bytes[offset...]))
            } catch {
                throw Failure(.tls, "TLS with \(peer): \(error)")
            }
            offset += taken
            do { try flushCiphertext() } catch { throw refusedSession(error) }
        }
    }

    /// A TLS connection lost before the server's first reply is the server refusing the session
    /// (TLS 1.3: e.g. a client certificate it requires and did not get), not a network failure.
    private func refusedSession(_ failure: Failure) -> Failure {
        guard session != nil, !heardFromServer, failure.kind == .closed || failure.kind == .io else { return failure }
        return Failure(
            .tls,
            "TLS with \(peer): the server dropped the session before its first reply (\(failure.description)); "
                + "a server that requires a client certificate does so when none or an untrusted one was sent")
    }

    public func write(_ bytes: [UInt8]) throws(Failure) {
        let result: Result<Void, Failure> = bytes.withUnsafeBytes { raw in
            do throws(Failure) { return .success(try write(raw)) } catch { return .failure(error) }
        }
        try result.get()
    }

    /// Reads at least one byte into `buffer` (decrypted with TLS), waiting up to the timeout.
    public func read(into buffer: UnsafeMutableRawBufferPointer) throws(Failure) -> Int {
        guard let session else { return try readSocket(into: buffer) }
        while true {
            let r = session.readPlaintext(into: buffer)
            // TLS 1.3 tickets and key updates may have queued records of our own.
            do { try flushCiphertext() } catch { throw refusedSession(error) }
            switch r {
            case .bytes(let n):
                heardFromServer = true
                return n
            case .closed: throw refusedSession(Failure(.closed, "the server closed the TLS session"))
            case .failed(let f): throw Failure(.tls, "TLS with \(peer): \(f)")
            case .needMoreInput:
                do { try readCiphertext() } catch { throw refusedSession(error) }
            }
        }
    }

    /// Closes the socket (with a best-effort close_notify under TLS). Idempotent.
    public func close() {
        guard fd >= 0 else { return }
        if let session, session.shutdown() {
            session.sendCiphertext { bytes in
                if case .bytes(let n) = Socket.write(fd, bytes) { return n }
                return 0
            }
        }
        Glibc.close(fd)
        fd = -1
    }
}
