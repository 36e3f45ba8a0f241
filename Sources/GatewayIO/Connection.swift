import CGatewaySystem
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
}

extension ConnectionDelegate {
    public func connectionDidReadEOF(_ connection: Connection) { connection.close() }
    public func connectionDidDrain(_ connection: Connection) {}
    public func connectionDidConnect(_ connection: Connection) {}
}

/// A non-blocking TCP connection on one loop: edge-triggered reads into `inbound` (paused on request,
/// for back-pressure), a write queue flushed as the socket allows, and close exactly once.
/// Loop-confined: every method runs on `loop.queue`.
public final class Connection: FileEventHandler {
    public let fd: Int32
    public let loop: EventLoop
    public let peer: SocketAddress?
    public weak var delegate: (any ConnectionDelegate)?
    public var inbound = ByteBuffer()

    private var outbound: [[UInt8]] = []
    private var outboundOffset = 0
    public private(set) var outboundBytes = 0
    public private(set) var isClosed = false
    public private(set) var isConnecting = false
    private var readPaused = false
    private var closeAfterFlush = false
    public private(set) var peerClosed = false

    /// Bytes read per wake-up before yielding to other connections (fairness).
    public static let readBudget = 256 * 1024

    /// One read scratch buffer per thread is enough: reads are copied into `inbound` at once.
    nonisolated(unsafe) private static var scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 * 1024, alignment: 16)

    /// Adopts an accepted or connected descriptor and registers it with `loop`.
    public init(fd: Int32, loop: EventLoop, peer: SocketAddress?, connecting: Bool = false) throws(Socket.Error) {
        self.fd = fd
        self.loop = loop
        self.peer = peer
        self.isConnecting = connecting
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
            delegate?.connectionDidConnect(self)
            guard !isClosed else { return }
        }
        if writable && outboundBytes > 0 { flush() }
        guard !isClosed else { return }
        if readable && !readPaused { readAvailable() }
    }

    /// Stops reading (the consumer cannot take more); bytes stay in the kernel, so TCP slows the peer.
    public func pauseReading() { readPaused = true }

    public func resumeReading() {
        guard readPaused else { return }
        readPaused = false
        // Edge-triggered: bytes that arrived (or stayed unread) while paused raise no new event.
        loop.enqueue { [self] in if !isClosed && !readPaused { readAvailable() } }
    }

    private func readAvailable() {
        var total = 0
        var gotData = false
        while !isClosed && !readPaused {
            switch Socket.read(fd, into: Self.scratch) {
            case .bytes(let n):
                inbound.append(UnsafeRawBufferPointer(rebasing: Self.scratch[0..<n]))
                total += n
                gotData = true
                if total >= Self.readBudget {
                    delegate?.connectionDidRead(self)
                    loop.enqueue { [self] in if !isClosed && !readPaused { readAvailable() } }
                    return
                }
            case .wouldBlock:
                if gotData { delegate?.connectionDidRead(self) }
                return
            case .eof:
                if gotData { delegate?.connectionDidRead(self) }
                guard !isClosed, !peerClosed else { return }
                peerClosed = true
                delegate?.connectionDidReadEOF(self)
                return
            case .failed(let e):
                if gotData { delegate?.connectionDidRead(self) }
                fail(Socket.Error(operation: "read", errno: e))
                return
            }
        }
        if gotData { delegate?.connectionDidRead(self) }
    }

    /// Queues bytes and writes what the socket takes now.
    public func write(_ bytes: [UInt8]) {
        guard !isClosed, !bytes.isEmpty else { return }
        outbound.append(bytes)
        outboundBytes += bytes.count
        if !isConnecting && outboundBytes == bytes.count { flush() }
    }

    public func write(_ bytes: ArraySlice<UInt8>) { write(Array(bytes)) }

    private func flush() {
        while !outbound.isEmpty {
            // Gather up to 16 queued buffers into one sendmsg.
            let count = min(outbound.count, 16)
            var iov = [iovec](repeating: iovec(), count: count)
            let result: Socket.IOResult = withExtendedLifetime(outbound) {
                for i in 0..<count {
                    outbound[i].withUnsafeBytes { raw in
                        let start = i == 0 ? outboundOffset : 0
                        iov[i] = iovec(iov_base: UnsafeMutableRawPointer(mutating: raw.baseAddress! + start), iov_len: raw.count - start)
                    }
                }
                return iov.withUnsafeBufferPointer { Socket.writev(fd, $0) }
            }
            switch result {
            case .bytes(var n):
                outboundBytes -= n
                while n > 0 {
                    let left = outbound[0].count - outboundOffset
                    if n >= left {
                        n -= left
                        outbound.removeFirst()
                        outboundOffset = 0
                    } else {
                        outboundOffset += n
                        n = 0
                    }
                }
            case .wouldBlock, .eof:
                return
            case .failed(let e):
                fail(Socket.Error(operation: "write", errno: e))
                return
            }
        }
        if closeAfterFlush {
            close()
            return
        }
        delegate?.connectionDidDrain(self)
    }

    /// Closes once everything queued is written.
    public func closeAfterWriting() {
        guard !isClosed else { return }
        if outboundBytes == 0 { close() } else { closeAfterFlush = true }
    }

    public func close() { finish(error: nil) }

    private func fail(_ error: Socket.Error) { finish(error: error) }

    private func finish(error: Socket.Error?) {
        guard !isClosed else { return }
        isClosed = true
        loop.deregister(fd: fd)
        Socket.close(fd)
        outbound.removeAll()
        outboundBytes = 0
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
