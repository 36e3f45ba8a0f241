import GatewayHTTP
import GatewayIO

/// The byte stream under a downstream protocol handler: a plain TCP `Connection` today, a TLS
/// session on top of one later (ALPN `h2`). The handler reads what is buffered, consumes what it
/// used, queues output and controls reading; the transport tells it about new bytes, EOF, a drained
/// write queue and the close by calling its `transportDid…` methods. Loop-confined.
public protocol DownstreamTransport: AnyObject {
    var loop: EventLoop { get }
    var peer: SocketAddress? { get }
    var isClosed: Bool { get }
    /// Bytes queued and not yet taken by the socket.
    var outboundBytes: Int { get }
    /// Calls `body` with the bytes read and not consumed yet.
    func withInbound<R>(_ body: (UnsafeRawBufferPointer) -> R) -> R
    func consumeInbound(_ count: Int)
    /// Lets the caller append straight into the output queue.
    func write(with body: (inout [UInt8]) -> Void)
    func pauseReading()
    func resumeReading()
    func closeAfterWriting()
    func close()
}

extension Connection: DownstreamTransport {
    public func withInbound<R>(_ body: (UnsafeRawBufferPointer) -> R) -> R { inbound.withReadableBytes(body) }
    public func consumeInbound(_ count: Int) { inbound.consume(count) }
}
