import CGatewaySystem
import GatewayCrypto
import Glibc

/// What a connection tells its owner, on the loop.
public protocol ConnectionDelegate: AnyObject {
    /// New bytes are readable in `connection.inbound`; consume what is used.
    func connectionDidRead(_ connection: Connection)
    /// The peer finished sending (EOF); buffered inbound bytes may remain.
    func connectionDidReadEOF(_ connection: Connection)
    /// Everything queued has been written (resume the producer: back-pressure).
    func connectionDidDrain(_ connection: Connection)
    /// An outbound connect completed.
    func connectionDidConnect(_ connection: Connection)
    /// The connection is closed; `error` when it broke rather than ended.
    func connectionDidClose(_ connection: Connection, error: Socket.Error?)
    /// TLS only: the handshake finished (before any plaintext is delivered). The delegate may be
    /// replaced here (e.g. by the protocol handler ALPN chose); the new one gets the plaintext.
    func connectionDidCompleteHandshake(_ connection: Connection, info: TLSConnectionInfo)
    /// TLS only: the handshake failed (or plain HTTP reached a TLS port); the connection closes next.
    func connectionDidFailHandshake(_ connection: Connection, failure: TLSFailure)
}

extension ConnectionDelegate {
    public func connectionDidReadEOF(_ connection: Connection) { connection.close() }
    public func connectionDidDrain(_ connection: Connection) {}
    public func connectionDidConnect(_ connection: Connection) {}
    public func connectionDidCompleteHandshake(_ connection: Connection, info: TLSConnectionInfo) {}
    public func connectionDidFailHandshake(_ connection: Connection, failure: TLSFailure) {}
}

/// A non-blocking TCP connection on one loop: edge-triggered reads into `inbound` (paused on request,
/// for back-pressure), a write queue flushed as the socket allows, and close exactly once.
/// Loop-confined: every method runs on `loop.queue`.
///
/// With a `TLSSession` (`init(…, tls:)`) the connection is a TLS transport and its users still see
/// plaintext: socket bytes are fed to the session and the decrypted bytes land in `inbound`; the
/// write queue holds plaintext, encrypted as the socket takes ciphertext (`outboundBytes` counts
/// both, so back-pressure is unchanged). The handshake is reported through
/// `connectionDidCompleteHandshake`/`connectionDidFailHandshake`; a client connection reports
/// `connectionDidConnect` only once its handshake is done. `close()` sends close_notify.
public final class Connection: FileEventHandler {
    public let fd: Int32
    public let loop: EventLoop
    public let peer: SocketAddress?
    public weak var delegate: (any ConnectionDelegate)?
    public var inbound = ByteBuffer()

    /// Bytes queued for the socket: `outbound[outboundStart...]`. One contiguous buffer, reused
    /// across exchanges, so that what one event produces (a head and its body) leaves in one send.
    private var outbound: [UInt8] = []
    private var outboundStart = 0
    /// Bytes not yet taken by the socket: queued (plaintext with TLS) plus ciphertext waiting in the session.
    public var outboundBytes: Int { queuedBytes + (tls?.pendingCiphertextCount ?? 0) }
    private var queuedBytes: Int { outbound.count - outboundStart }
    /// The TLS session between the socket and `inbound`/the write queue; nil for plain TCP.
    public let tls: TLSSession?
    /// True until the TLS handshake is done (always false without TLS).
    public private(set) var isHandshaking = false
    /// What the TLS handshake agreed on, once done.
    public private(set) var tlsInfo: TLSConnectionInfo?
    public private(set) var isClosed = false
    public private(set) var isConnecting = false
    private var readPaused = false
    /// Set when readable bytes may be left in the kernel (an edge not read until EAGAIN).
    private var readPending = false
    /// The peer hung up (or the socket failed): read until EOF or error, never stop at a short read.
    private var sawHangup = false
    private var closeAfterFlush = false
    /// Queued on the loop's flush list (writes made while the loop dispatches events).
    var flushQueued = false
    /// The last send did not take everything: wait for EPOLLOUT before trying again.
    private var writeBlocked = false
    public private(set) var peerClosed = false

    /// Bytes read per wake-up before yielding to other connections (fairness).
    public static let readBudget = 256 * 1024


    /// Adopts an accepted or connected descriptor and registers it with `loop`.
    /// With `tls`, the connection runs that session's handshake first (a client session's ClientHello
    /// leaves once connected).
    public init(fd: Int32, loop: EventLoop, peer: SocketAddress?, connecting: Bool = false, tls: TLSSession? = nil)
        throws(Socket.Error)
    {
        self.fd = fd
        self.loop = loop
        self.peer = peer
        self.isConnecting = connecting
        self.tls = tls
        self.isHandshaking = tls != nil
        try loop.register(fd: fd, handler: self)
    }

    public func handleEvents(readable: Bool, writable: Bool, hangup: Bool) {
        guard !isClosed else { return }
        if isConnecting {
            guard writable || hangup else { return }
            let err = Socket.pendingError(fd)
            if err != 0 {
                fail(Socket.Error(operation: "connect", errno: err))
                return
            }
            isConnecting = false
            if tls != nil {
                flush()  // the ClientHello; `connectionDidConnect` follows the handshake
            } else {
                delegate?.connectionDidConnect(self)
            }
            guard !isClosed else { return }
        }
        if writable {
            writeBlocked = false
            if outboundBytes > 0 { flush() }
        }
        guard !isClosed else { return }
        if readable {
            readPending = true
            if loop.currentEventHangup { sawHangup = true }
            if !readPaused { readAvailable() }
        }
    }

    /// Stops reading (the consumer cannot take more); bytes stay in the kernel, so TCP slows the peer.
    public func pauseReading() { readPaused = true }

    public func resumeReading() {
        guard readPaused else { return }
        readPaused = false
        // Edge-triggered: bytes that arrived (or stayed unread) while paused raise no new event. When
        // the last read ended on EAGAIN and no edge came since, there is nothing to pick up.
        guard readPending else { return }
        loop.enqueue { [self] in if !isClosed && !readPaused { readAvailable() } }
    }

    private func readAvailable() {
        // The loop's scratch buffer: loops run on different threads at once, so one per loop, not per process.
        let scratch = loop.readScratch
        var total = 0
        var gotData = false
        while !isClosed && !readPaused {
            switch Socket.read(fd, into: scratch) {
            case .bytes(let n):
                total += n
                if let tls {
                    let before = inbound.readableBytes
                    let outcome = feedTLS(tls, UnsafeRawBufferPointer(rebasing: scratch[0..<n]))
                    if inbound.readableBytes > before { gotData = true }
                    switch outcome {
                    case .more:
                        break
                    case .stop:
                        return
                    case .peerClosed:
                        // close_notify: what it ended is delivered, then the end (like a TCP EOF).
                        readPending = false
                        if gotData { delegate?.connectionDidRead(self) }
                        guard !isClosed, !peerClosed else { return }
                        peerClosed = true
                        delegate?.connectionDidReadEOF(self)
                        return
                    }
                } else {
                    inbound.append(UnsafeRawBufferPointer(rebasing: scratch[0..<n]))
                    gotData = true
                }
                if n < scratch.count && !sawHangup {
                    // A short read: the socket is drained (a later arrival raises a new edge).
                    readPending = false
                    if gotData { delegate?.connectionDidRead(self) }
                    return
                }
                if total >= Self.readBudget {
                    if gotData { delegate?.connectionDidRead(self) }
                    loop.enqueue { [self] in if !isClosed && !readPaused { readAvailable() } }
                    return
                }
            case .wouldBlock:
                readPending = false
                if gotData { delegate?.connectionDidRead(self) }
                return
            case .eof:
                readPending = false
                if gotData { delegate?.connectionDidRead(self) }
                guard !isClosed, !peerClosed else { return }
                peerClosed = true
                delegate?.connectionDidReadEOF(self)
                return
            case .failed(let e):
                readPending = false
                if gotData { delegate?.connectionDidRead(self) }
                fail(Socket.Error(operation: "read", errno: e))
                return
            }
        }
        if gotData { delegate?.connectionDidRead(self) }
    }

    private enum TLSInput { case more, stop, peerClosed }

    /// Feeds ciphertext to the session: advances the handshake (reporting its end), moves all the
    /// plaintext now available into `inbound` (the session keeps no decrypted bytes behind, so a paused
    /// reader has nothing to pick up later but the kernel's), and sends what the session queued.
    private func feedTLS(_ tls: TLSSession, _ bytes: UnsafeRawBufferPointer) -> TLSInput {
        tls.feed(bytes)
        if isHandshaking {
            switch tls.handshakeState {
            case .inProgress:
                flush()  // handshake messages
                return isClosed ? .stop : .more
            case .plainHTTPOnTLSPort:
                isHandshaking = false
                delegate?.connectionDidFailHandshake(self, failure: TLSFailure(.plainHTTP, "plain HTTP request on a TLS port"))
                guard !isClosed else { return .stop }
                // In clear, best effort (it is small), then closed.
                _ = TLSSession.plainHTTPRejection.withUnsafeBytes { Socket.write(fd, $0) }
                Glibc.shutdown(fd, Int32(SHUT_WR))
                finish(error: nil)
                return .stop
            case .failed(let f):
                isHandshaking = false
                sendCiphertextOnce(tls)  // the alert, best effort
                delegate?.connectionDidFailHandshake(self, failure: f)
                finish(error: nil)
                return .stop
            case .done(let info):
                isHandshaking = false
                tlsInfo = info
                delegate?.connectionDidCompleteHandshake(self, info: info)
                guard !isClosed else { return .stop }
                if tls.role == .client {
                    delegate?.connectionDidConnect(self)
                    guard !isClosed else { return .stop }
                }
            }
        }
        // Decrypted into the loop's read scratch: its ciphertext is in the session since `feed`, and
        // nothing else uses it before the next socket read (no 16 KiB buffer allocated per read).
        let scratch = loop.readScratch
        var result: TLSReadResult
        while true {
            result = tls.readPlaintext(into: scratch)
            guard case .bytes(let n) = result else { break }
            inbound.append(UnsafeRawBufferPointer(rebasing: scratch[0..<n]))
        }
        if tls.pendingCiphertextCount > 0 || queuedBytes > 0 { scheduleFlush() }  // tickets, key updates, queued writes
        switch result {
        case .failed(let f) where !tls.receivedCloseNotify:
            sendCiphertextOnce(tls)
            fail(Socket.Error(operation: "tls (\(f.kind.rawValue))", errno: EPROTO))
            return .stop
        case .closed, .failed:
            return .peerClosed
        default:
            return isClosed ? .stop : .more
        }
    }

    /// One non-blocking attempt to send the session's pending ciphertext (alerts, close_notify).
    private func sendCiphertextOnce(_ tls: TLSSession) {
        _ = tls.sendCiphertext { raw in
            if case .bytes(let n) = Socket.write(fd, raw) { return n }
            return 0
        }
    }

    /// Queues bytes. While the loop dispatches events the send waits for the end of the batch, so that
    /// several writes of one event leave in one system call; otherwise it is attempted at once.
    public func write(_ bytes: [UInt8]) {
        guard !isClosed, !bytes.isEmpty else { return }
        outbound.append(contentsOf: bytes)
        scheduleFlush()
    }

    public func write(_ bytes: ArraySlice<UInt8>) {
        guard !isClosed, !bytes.isEmpty else { return }
        outbound.append(contentsOf: bytes)
        scheduleFlush()
    }

    /// Queues a copy of `bytes` (e.g. a slice of another connection's `inbound`).
    public func write(_ bytes: UnsafeRawBufferPointer) {
        guard !isClosed, !bytes.isEmpty else { return }
        outbound.append(contentsOf: bytes)
        scheduleFlush()
    }

    /// Sends what is queued and then `bytes` at once, in one gathered `sendmsg`, and copies only what
    /// the socket did not take: for body bytes borrowed from another connection's buffer, which then
    /// usually need no copy at all. Falls back to `write` while connecting, closing after the queue,
    /// or waiting for the socket to take more.
    public func writeThrough(_ bytes: UnsafeRawBufferPointer) {
        guard !isClosed, !bytes.isEmpty else { return }
        if isConnecting || closeAfterFlush || writeBlocked || tls != nil {
            write(bytes)
            return
        }
        let pending = queuedBytes
        let result: Socket.IOResult = outbound.withUnsafeBytes { raw in
            var iov = (
                iovec(iov_base: UnsafeMutableRawPointer(mutating: raw.baseAddress.map { $0 + outboundStart }), iov_len: pending),
                iovec(iov_base: UnsafeMutableRawPointer(mutating: bytes.baseAddress), iov_len: bytes.count)
            )
            return withUnsafeBytes(of: &iov) { p in
                let all = p.bindMemory(to: iovec.self)
                return pending > 0 ? Socket.writev(fd, all) : Socket.writev(fd, UnsafeBufferPointer(rebasing: all[1...]))
            }
        }
        switch result {
        case .bytes(let n) where n >= pending:
            let taken = n - pending
            outbound.removeAll(keepingCapacity: outbound.capacity <= 256 * 1024)
            outboundStart = 0
            if taken < bytes.count {
                outbound.append(contentsOf: UnsafeRawBufferPointer(rebasing: bytes[taken...]))
                writeBlocked = true  // a short write: the socket buffer is full until EPOLLOUT
            } else if pending > 0 {
                delegate?.connectionDidDrain(self)
            }
        case .bytes(let n):
            outboundStart += n
            outbound.append(contentsOf: bytes)
            writeBlocked = true
        case .wouldBlock, .eof:
            outbound.append(contentsOf: bytes)
            writeBlocked = true
        case .failed:
            // Not failed here: the caller may be reading another connection's buffer, which closing
            // this exchange would clear. The queued send meets the same error on the loop, shortly.
            outbound.append(contentsOf: bytes)
            loop.enqueue { [self] in if !isClosed { flush() } }
        }
    }

    /// Lets a serializer append straight into the output buffer (no intermediate array).
    public func write(with body: (inout [UInt8]) -> Void) {
        guard !isClosed else { return }
        let before = outbound.count
        body(&outbound)
        if outbound.count > before { scheduleFlush() }
    }

    private func scheduleFlush() {
        if isConnecting || flushQueued { return }
        if loop.isDispatching {
            flushQueued = true
            loop.queueFlush(self)
        } else {
            flush()
        }
    }

    /// Called by the loop at the end of a batch of events.
    func flushQueuedWrites() {
        flushQueued = false
        if !isClosed && !isConnecting && outboundBytes > 0 { flush() }
    }

    private func flush() {
        if let tls {
            flushTLS(tls)
            return
        }
        while queuedBytes > 0 {
            let result: Socket.IOResult = outbound.withUnsafeBytes { raw in
                Socket.write(fd, UnsafeRawBufferPointer(rebasing: raw[outboundStart...]))
            }
            switch result {
            case .bytes(let n):
                outboundStart += n
            case .wouldBlock, .eof:
                writeBlocked = true
                compactOutbound()
                return
            case .failed(let e):
                fail(Socket.Error(operation: "write", errno: e))
                return
            }
        }
        outbound.removeAll(keepingCapacity: outbound.capacity <= 256 * 1024)
        outboundStart = 0
        if closeAfterFlush {
            close()
            return
        }
        delegate?.connectionDidDrain(self)
    }

    /// Encrypts the queued plaintext (up to the session's high-water mark at a time) and sends the
    /// ciphertext until the socket would block; plaintext waits while the handshake runs.
    private func flushTLS(_ tls: TLSSession) {
        while true {
            if !isHandshaking && queuedBytes > 0 {
                let taken: Result<Int, TLSFailure> = outbound.withUnsafeBytes { raw in
                    Result { () throws(TLSFailure) -> Int in
                        try tls.writePlaintext(UnsafeRawBufferPointer(rebasing: raw[outboundStart...]))
                    }
                }
                switch taken {
                case .success(let n):
                    outboundStart += n
                    if n == 0 && tls.pendingCiphertextCount == 0 {
                        fail(Socket.Error(operation: "tls write", errno: EPROTO))
                        return
                    }
                case .failure(let f):
                    fail(Socket.Error(operation: "tls write (\(f.kind.rawValue))", errno: EPROTO))
                    return
                }
            }
            var failedErrno: Int32 = 0
            _ = tls.sendCiphertext { raw in
                switch Socket.write(fd, raw) {
                case .bytes(let n): return n
                case .wouldBlock, .eof: return 0
                case .failed(let e):
                    failedErrno = e
                    return 0
                }
            }
            if failedErrno != 0 {
                fail(Socket.Error(operation: "write", errno: failedErrno))
                return
            }
            if tls.pendingCiphertextCount > 0 {
                writeBlocked = true
                compactOutbound()
                return
            }
            if isHandshaking || queuedBytes == 0 { break }
        }
        guard !isHandshaking else { return }
        outbound.removeAll(keepingCapacity: outbound.capacity <= 256 * 1024)
        outboundStart = 0
        if closeAfterFlush {
            close()
            return
        }
        delegate?.connectionDidDrain(self)
    }

    /// Drops the written prefix when it is most of the buffer (O(1) amortised).
    private func compactOutbound() {
        if outboundStart > 0 && outboundStart >= outbound.count / 2 {
            outbound.removeFirst(outboundStart)
            outboundStart = 0
        }
    }

    /// Closes once everything queued is written.
    public func closeAfterWriting() {
        guard !isClosed else { return }
        if outboundBytes == 0 { close() } else { closeAfterFlush = true }
    }

    /// Closes now. Bytes still queued get one non-blocking attempt first (writes of the current event
    /// wait for the end of its batch, and a close right after them must not lose them).
    public func close() {
        guard !isClosed else { return }
        if let tls, !isConnecting {
            // What is queued, then close_notify: one non-blocking attempt.
            if !isHandshaking && tls.failure == nil {
                if queuedBytes > 0 {
                    _ = outbound.withUnsafeBytes { raw in try? tls.writePlaintext(UnsafeRawBufferPointer(rebasing: raw[outboundStart...])) }
                }
                _ = tls.shutdown()
            }
            sendCiphertextOnce(tls)
            finish(error: nil)
            return
        }
        if queuedBytes > 0 && !isConnecting {
            _ = outbound.withUnsafeBytes { raw in Socket.write(fd, UnsafeRawBufferPointer(rebasing: raw[outboundStart...])) }
        }
        finish(error: nil)
    }

    private func fail(_ error: Socket.Error) { finish(error: error) }

    private func finish(error: Socket.Error?) {
        guard !isClosed else { return }
        isClosed = true
        loop.deregister(fd: fd)
        Socket.close(fd)
        outbound.removeAll()
        outboundStart = 0
        inbound.clear()
        delegate?.connectionDidClose(self, error: error)
        delegate = nil
    }
}

/// Accepts connections on one listening socket for one loop (SO_REUSEPORT: one per loop).
public final class Listener: FileEventHandler {
    public let fd: Int32
    public let loop: EventLoop
    public let address: SocketAddress
    private let onAccept: (Int32, SocketAddress) -> Void
    private var paused = false
    /// Told of each failed accept (for a metric); descriptor exhaustion also pauses accepting.
    public var onAcceptError: ((Socket.Error) -> Void)?

    public init(address: SocketAddress, loop: EventLoop, reusePort: Bool, onAccept: @escaping (Int32, SocketAddress) -> Void)
        throws(Socket.Error)
    {
        fd = try Socket.listen(address, reusePort: reusePort)
        self.address = Socket.localAddress(fd) ?? address
        self.loop = loop
        self.onAccept = onAccept
        try loop.registerListener(fd: fd, handler: self)
    }

    public func handleEvents(readable: Bool, writable: Bool, hangup: Bool) {
        guard !paused else { return }
        for _ in 0..<128 {
            switch Socket.accept(fd) {
            case .accepted(let cfd, let peer):
                onAccept(cfd, peer)
            case .wouldBlock:
                return
            case .failed(let e):
                onAcceptError?(e)
                if e.errno == EMFILE || e.errno == ENFILE || e.errno == ENOBUFS || e.errno == ENOMEM {
                    // Out of descriptors: pause accepting briefly instead of spinning or dying.
                    paused = true
                    loop.timers.schedule(afterMillis: 100) { [weak self] in
                        self?.paused = false
                        self?.handleEvents(readable: true, writable: false, hangup: false)
                    }
                }
                return
            }
        }
    }

    /// Stops accepting (drain): the socket is closed; queued connections are refused by the kernel.
    public func close() {
        loop.deregister(fd: fd)
        Socket.close(fd)
    }
}
