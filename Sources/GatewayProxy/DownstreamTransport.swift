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

/// What `HTTPServer` tracks per accepted connection, whatever its protocol.
public protocol ServerConnection: AnyObject {
    /// Graceful stop: idle connections close, busy ones finish what is in flight.
    func beginDrain()
    /// Closes now (drain deadline passed).
    func closeNow()
}

extension HTTP1ServerConnection: ServerConnection {
    public func closeNow() { downstream.close() }
}

/// The protocols a listener serves.
public struct ServedProtocols: OptionSet, Sendable, Hashable {
    public let rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }
    /// HTTP/1.1 (and 1.0).
    public static let http1 = ServedProtocols(rawValue: 1)
    /// HTTP/2 over cleartext TCP with prior knowledge (RFC 9113 §3.3): the client starts with the preface.
    public static let h2c = ServedProtocols(rawValue: 2)
    /// HTTP/2 over TLS, chosen by ALPN `h2` (RFC 9113 §3.2).
    public static let h2 = ServedProtocols(rawValue: 4)
}

extension ProxyHeaderReader: ServerConnection {
    /// Nothing is in flight before the header: closed at once.
    public func beginDrain() { close() }
    public func closeNow() { close() }
}

/// The HTTP/2 connection preface a client sends first (RFC 9113 §3.4).
public enum HTTP2Preface {
    public static let bytes: [UInt8] = Array("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".utf8)

    public enum Verdict: Equatable { case http2, http1, needMore }

    /// Decides from the first bytes of a connection: the full preface → `.http2`; any byte that
    /// differs from it → `.http1`; a matching prefix shorter than the preface → `.needMore`.
    public static func classify(_ buf: UnsafeRawBufferPointer) -> Verdict {
        let n = min(buf.count, bytes.count)
        for i in 0..<n where buf[i] != bytes[i] { return .http1 }
        return n == bytes.count ? .http2 : .needMore
    }
}

extension Connection {
    /// Writes a message head through the loop's scratch buffer (`writeThroughScratch`), or, for a
    /// head larger than that buffer, through a temporary one (`HeadWriter.appendHead`).
    func writeHead(_ write: (inout HeadWriter) -> Void) {
        let done = writeThroughScratch { raw in
            var w = HeadWriter(raw)
            write(&w)
            return w.overflowed ? nil : w.count
        }
        if !done { self.write { HeadWriter.appendHead(to: &$0, write) } }
    }
}
