import CGatewaySystem
import GatewayCrypto
import Glibc

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
        do {
            try loop.registerListener(fd: fd, handler: self)
        } catch {
            Socket.close(fd)  // not leaked when the loop refuses it
            throw error
        }
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
