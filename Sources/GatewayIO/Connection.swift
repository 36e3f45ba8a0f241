import CGatewaySystem
import GatewayCrypto
import Glibc

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
    /// What the connection tells of its events. Stored properties of the hot path are internal and
    /// touched only by plain loads and stores, so that the optimizer removes their dynamic
    /// exclusivity checks; other modules use the computed accessors.
    weak var _delegate: (any ConnectionDelegate)?
    public var delegate: (any ConnectionDelegate)? {
        get { _delegate }
        set { _delegate = newValue }
    }
    /// Bytes read and not yet consumed by the delegate.
    public let inbound = ByteBuffer()

    /// Bytes queued for the socket: `outbound[outboundStart...]`. One contiguous buffer, reused
    /// across exchanges, so that what one event produces (a head and its body) leaves in one send.
    private var outbound: [UInt8] = []
    private var outboundStart = 0
    /// True while `withOutbound` has the buffer out: a nested use would see an empty buffer (and its
    /// writes would be lost), so it traps instead.
    private var outboundLent = false

    /// Runs `body` on the output buffer, moved out of the property into a local for the duration:
    /// every access to the stored property is then a plain move, which the optimizer proves free of
    /// conflicts, instead of an access spanning calls, which it must check at run time.
    @inline(__always)
    private func withOutbound<R>(_ body: (inout [UInt8]) throws(Never) -> R) -> R {
        precondition(!outboundLent, "Connection: the output buffer is already in use (re-entrant write)")
        var buf: [UInt8] = []
        swap(&buf, &outbound)
        outboundLent = true
        let result = body(&buf)
        outboundLent = false
        swap(&buf, &outbound)
        return result
    }
    /// Bytes not yet taken by the socket: queued (plaintext with TLS) plus ciphertext waiting in the session.
    public var outboundBytes: Int { queuedBytes + (tls?.pendingCiphertextCount ?? 0) }
    private var queuedBytes: Int { outbound.count - outboundStart }
    /// The TLS session between the socket and `inbound`/the write queue; nil for plain TCP.
    public let tls: TLSSession?
    /// True until the TLS handshake is done (always false without TLS).
    private var _isHandshaking = false
    public var isHandshaking: Bool { _isHandshaking }
    /// What the TLS handshake agreed on, once done.
    private var _tlsInfo: TLSConnectionInfo?
    public var tlsInfo: TLSConnectionInfo? { _tlsInfo }
    private var _isClosed = false
    public var isClosed: Bool { _isClosed }
    private var _isConnecting = false
    public var isConnecting: Bool { _isConnecting }
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
    /// The send timeout (`limits.send_timeout` on downstream connections; 0: none): when the socket
    /// has taken none of the queued bytes for this long, the connection fails with `ETIMEDOUT`
    /// (`Socket.Error.sendTimeout`), whatever its user is doing (streaming, closing after the
    /// queue, lingering). A peer that stops reading cannot keep a connection open by it.
    public var sendTimeoutMillis: Int64 = 0
    /// While the socket is full (`writeBlocked`): the wheel time of the last send that took bytes,
    /// and whether a check is scheduled. Set only when a send blocks, so a socket that keeps up costs
    /// nothing here.
    private var lastSendProgressMillis: Int64 = 0
    private var stallCheckScheduled = false
    private var _peerClosed = false
    public var peerClosed: Bool { _peerClosed }

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
        self._isConnecting = connecting
        self.tls = tls
        self._isHandshaking = tls != nil
        try loop.register(fd: fd, handler: self)
    }

    public func handleEvents(readable: Bool, writable: Bool, hangup: Bool) {
        guard !_isClosed else { return }
        if _isConnecting {
            guard writable || hangup else { return }
            let err = Socket.pendingError(fd)
            if err != 0 {
                fail(Socket.Error(operation: "connect", errno: err))
                return
            }
            _isConnecting = false
            if tls != nil {
                flush()  // the ClientHello; `connectionDidConnect` follows the handshake
            } else {
                _delegate?.connectionDidConnect(self)
            }
            guard !_isClosed else { return }
        }
        if writable {
            writeBlocked = false
            if outboundBytes > 0 { flush() }
        }
        guard !_isClosed else { return }
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
        loop.enqueue { [self] in if !_isClosed && !readPaused { readAvailable() } }
    }

    private func readAvailable() {
        // The loop's scratch buffer: loops run on different threads at once, so one per loop, not per process.
        let scratch = loop.readScratch
        var total = 0
        var gotData = false
        while !_isClosed && !readPaused {
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
                        if gotData { _delegate?.connectionDidRead(self) }
                        guard !_isClosed, !_peerClosed else { return }
                        _peerClosed = true
                        _delegate?.connectionDidReadEOF(self)
                        return
                    }
                } else {
                    inbound.append(UnsafeRawBufferPointer(rebasing: scratch[0..<n]))
                    gotData = true
                }
                if n < scratch.count && !sawHangup {
                    // A short read: the socket is drained (a later arrival raises a new edge).
                    readPending = false
                    if gotData { _delegate?.connectionDidRead(self) }
                    return
                }
                if total >= Self.readBudget {
                    if gotData { _delegate?.connectionDidRead(self) }
                    loop.enqueue { [self] in if !_isClosed && !readPaused { readAvailable() } }
                    return
                }
            case .wouldBlock:
                readPending = false
                if gotData { _delegate?.connectionDidRead(self) }
                return
            case .eof:
                readPending = false
                if gotData { _delegate?.connectionDidRead(self) }
                guard !_isClosed, !_peerClosed else { return }
                _peerClosed = true
                _delegate?.connectionDidReadEOF(self)
                return
            case .failed(let e):
                readPending = false
                if gotData { _delegate?.connectionDidRead(self) }
                fail(Socket.Error(operation: "read", errno: e))
                return
            }
        }
        if gotData { _delegate?.connectionDidRead(self) }
    }

    private enum TLSInput { case more, stop, peerClosed }

    /// Feeds ciphertext to the session: advances the handshake (reporting its end), moves all the
    /// plaintext now available into `inbound` (the session keeps no decrypted bytes behind, so a paused
    /// reader has nothing to pick up later but the kernel's), and sends what the session queued.
    private func feedTLS(_ tls: TLSSession, _ bytes: UnsafeRawBufferPointer) -> TLSInput {
        tls.feed(bytes)
        if _isHandshaking {
            switch tls.handshakeState {
            case .inProgress:
                flush()  // handshake messages
                return _isClosed ? .stop : .more
            case .plainHTTPOnTLSPort:
                _isHandshaking = false
                _delegate?.connectionDidFailHandshake(self, failure: TLSFailure(.plainHTTP, "plain HTTP request on a TLS port"))
                guard !_isClosed else { return .stop }
                // In clear, best effort (it is small), then closed.
                _ = TLSSession.plainHTTPRejection.withUnsafeBytes { Socket.write(fd, $0) }
                Glibc.shutdown(fd, Int32(SHUT_WR))
                finish(error: nil)
                return .stop
            case .failed(let f):
                _isHandshaking = false
                sendCiphertextOnce(tls)  // the alert, best effort
                _delegate?.connectionDidFailHandshake(self, failure: f)
                finish(error: nil)
                return .stop
            case .done(let info):
                _isHandshaking = false
                _tlsInfo = info
                _delegate?.connectionDidCompleteHandshake(self, info: info)
                guard !_isClosed else { return .stop }
                if tls.role == .client {
                    _delegate?.connectionDidConnect(self)
                    guard !_isClosed else { return .stop }
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
            return _isClosed ? .stop : .more
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
        guard !_isClosed, !bytes.isEmpty else { return }
        withOutbound { $0.append(contentsOf: bytes) }
        scheduleFlush()
    }

    public func write(_ bytes: ArraySlice<UInt8>) {
        guard !_isClosed, !bytes.isEmpty else { return }
        withOutbound { $0.append(contentsOf: bytes) }
        scheduleFlush()
    }

    /// Queues a copy of `bytes` (e.g. a slice of another connection's `inbound`).
    public func write(_ bytes: UnsafeRawBufferPointer) {
        guard !_isClosed, !bytes.isEmpty else { return }
        withOutbound { $0.append(contentsOf: bytes) }
        scheduleFlush()
    }

    /// Sends what is queued and then `bytes` at once, in one gathered `sendmsg`, and copies only what
    /// the socket did not take: for body bytes borrowed from another connection's buffer, which then
    /// usually need no copy at all. Falls back to `write` while connecting, closing after the queue,
    /// or waiting for the socket to take more.
    public func writeThrough(_ bytes: UnsafeRawBufferPointer) {
        guard !_isClosed, !bytes.isEmpty else { return }
        if _isConnecting || closeAfterFlush || writeBlocked || tls != nil {
            write(bytes)
            return
        }
        let pending = queuedBytes
        let start = outboundStart
        let result: Socket.IOResult = withOutbound {
            $0.withUnsafeBytes { raw in
                var iov = (
                    iovec(iov_base: UnsafeMutableRawPointer(mutating: raw.baseAddress.map { $0 + start }), iov_len: pending),
                    iovec(iov_base: UnsafeMutableRawPointer(mutating: bytes.baseAddress), iov_len: bytes.count)
                )
                return withUnsafeBytes(of: &iov) { p in
                    let all = p.bindMemory(to: iovec.self)
                    return pending > 0 ? Socket.writev(fd, all) : Socket.writev(fd, UnsafeBufferPointer(rebasing: all[1...]))
                }
            }
        }
        switch result {
        case .bytes(let n) where n >= pending:
            let taken = n - pending
            withOutbound { $0.removeAll(keepingCapacity: $0.capacity <= 256 * 1024) }
            outboundStart = 0
            if taken < bytes.count {
                withOutbound { $0.append(contentsOf: UnsafeRawBufferPointer(rebasing: bytes[taken...])) }
                sendBlocked(progress: true)  // a short write: the socket buffer is full until EPOLLOUT
            } else if pending > 0 {
                _delegate?.connectionDidDrain(self)
            }
        case .bytes(let n):
            outboundStart += n
            withOutbound { $0.append(contentsOf: bytes) }
            sendBlocked(progress: n > 0)
        case .wouldBlock, .eof:
            withOutbound { $0.append(contentsOf: bytes) }
            sendBlocked(progress: false)
        case .failed:
            // Not failed here: the caller may be reading another connection's buffer, which closing
            // this exchange would clear. The queued send meets the same error on the loop, shortly.
            withOutbound { $0.append(contentsOf: bytes) }
            loop.enqueue { [self] in if !_isClosed { flush() } }
        }
    }

    /// Lets a serializer append straight into the output buffer (no intermediate array).
    public func write(with body: (inout [UInt8]) -> Void) {
        guard !_isClosed else { return }
        let grew = withOutbound { buf in
            let before = buf.count
            body(&buf)
            return buf.count > before
        }
        if grew { scheduleFlush() }
    }

    /// Lets `body` write into the loop's scratch buffer (64 KiB) and queues the `count` bytes it
    /// reports; `body` returns nil when what it had to write did not fit, and then nothing is queued
    /// and the result is false (the caller writes another way). For message heads: one copy into the
    /// output instead of an array append per piece.
    public func writeThroughScratch(_ body: (UnsafeMutableRawBufferPointer) -> Int?) -> Bool {
        precondition(!loop.headScratchBusy, "Connection: the loop's head scratch buffer is already in use")
        loop.headScratchBusy = true
        let scratch = loop.headScratch
        let written = body(scratch)
        loop.headScratchBusy = false
        guard let written else { return false }
        guard !_isClosed, written > 0 else { return true }
        withOutbound { $0.append(contentsOf: UnsafeRawBufferPointer(rebasing: scratch[0..<written])) }
        scheduleFlush()
        return true
    }

    private func scheduleFlush() {
        if _isConnecting || flushQueued { return }
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
        if !_isClosed && !_isConnecting && outboundBytes > 0 { flush() }
    }

    private func flush() {
        if let tls {
            flushTLS(tls)
            return
        }
        let before = outboundStart
        while queuedBytes > 0 {
            let start = outboundStart
            let result: Socket.IOResult = withOutbound {
                $0.withUnsafeBytes { raw in
                    Socket.write(fd, UnsafeRawBufferPointer(rebasing: raw[start...]))
                }
            }
            switch result {
            case .bytes(let n):
                outboundStart += n
            case .wouldBlock, .eof:
                sendBlocked(progress: outboundStart != before)
                compactOutbound()
                return
            case .failed(let e):
                fail(Socket.Error(operation: "write", errno: e))
                return
            }
        }
        withOutbound { $0.removeAll(keepingCapacity: $0.capacity <= 256 * 1024) }
        outboundStart = 0
        if closeAfterFlush {
            close()
            return
        }
        _delegate?.connectionDidDrain(self)
    }

    /// Encrypts the queued plaintext (up to the session's high-water mark at a time) and sends the
    /// ciphertext until the socket would block; plaintext waits while the handshake runs.
    private func flushTLS(_ tls: TLSSession) {
        while true {
            if !_isHandshaking && queuedBytes > 0 {
                let start = outboundStart
                let taken: Result<Int, TLSFailure> = withOutbound {
                    $0.withUnsafeBytes { raw in
                        Result { () throws(TLSFailure) -> Int in
                            try tls.writePlaintext(UnsafeRawBufferPointer(rebasing: raw[start...]))
                        }
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
            let sent = tls.sendCiphertext { raw in
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
                sendBlocked(progress: sent > 0)
                compactOutbound()
                return
            }
            if _isHandshaking || queuedBytes == 0 { break }
        }
        guard !_isHandshaking else { return }
        withOutbound { $0.removeAll(keepingCapacity: $0.capacity <= 256 * 1024) }
        outboundStart = 0
        if closeAfterFlush {
            close()
            return
        }
        _delegate?.connectionDidDrain(self)
    }

    /// The socket did not take everything: wait for EPOLLOUT, and bound the wait by the send timeout.
    /// `progress`: this send took some bytes (the stall counts from now).
    private func sendBlocked(progress: Bool) {
        let wasBlocked = writeBlocked
        writeBlocked = true
        guard sendTimeoutMillis > 0 else { return }
        if progress || !wasBlocked { lastSendProgressMillis = loop.timers.nowMillis }
        guard !stallCheckScheduled else { return }
        stallCheckScheduled = true
        loop.timers.schedule(afterMillis: sendTimeoutMillis) { [weak self] in self?.checkSendStall() }
    }

    /// Fails the connection if the socket took nothing for the send timeout; otherwise checks again
    /// at the end of the current period (the socket took bytes since) or stops (nothing waits).
    private func checkSendStall() {
        stallCheckScheduled = false
        guard !_isClosed, writeBlocked, outboundBytes > 0, sendTimeoutMillis > 0 else { return }
        let due = lastSendProgressMillis + sendTimeoutMillis
        let now = loop.timers.nowMillis
        if now >= due {
            // Reset, not closed: the kernel would otherwise keep trying to deliver what is queued
            // (megabytes, in an orphaned socket) to a peer that does not read.
            Socket.resetOnClose(fd)
            fail(Socket.Error.sendTimeout)
            return
        }
        stallCheckScheduled = true
        loop.timers.schedule(afterMillis: due - now) { [weak self] in self?.checkSendStall() }
    }

    /// Drops the written prefix when it is most of the buffer (O(1) amortised).
    private func compactOutbound() {
        if outboundStart > 0 && outboundStart >= (queuedBytes + outboundStart) / 2 {
            let start = outboundStart
            withOutbound { $0.removeFirst(start) }
            outboundStart = 0
        }
    }

    /// Closes once everything queued is written.
    public func closeAfterWriting() {
        guard !_isClosed else { return }
        if outboundBytes == 0 { close() } else { closeAfterFlush = true }
    }

    /// Closes now. Bytes still queued get one non-blocking attempt first (writes of the current event
    /// wait for the end of its batch, and a close right after them must not lose them).
    public func close() {
        guard !_isClosed else { return }
        if let tls, !_isConnecting {
            // What is queued, then close_notify: one non-blocking attempt.
            if !_isHandshaking && tls.failure == nil {
                if queuedBytes > 0 {
                    let start = outboundStart
                    _ = withOutbound {
                        $0.withUnsafeBytes { raw in try? tls.writePlaintext(UnsafeRawBufferPointer(rebasing: raw[start...])) }
                    }
                }
                _ = tls.shutdown()
            }
            sendCiphertextOnce(tls)
            finish(error: nil)
            return
        }
        if queuedBytes > 0 && !_isConnecting {
            let start = outboundStart
            _ = withOutbound { $0.withUnsafeBytes { raw in Socket.write(fd, UnsafeRawBufferPointer(rebasing: raw[start...])) } }
        }
        finish(error: nil)
    }

    private func fail(_ error: Socket.Error) { finish(error: error) }

    private func finish(error: Socket.Error?) {
        guard !_isClosed else { return }
        _isClosed = true
        loop.deregister(fd: fd)
        Socket.close(fd)
        withOutbound { $0.removeAll() }
        outboundStart = 0
        inbound.clear()
        _delegate?.connectionDidClose(self, error: error)
        _delegate = nil
    }
}
