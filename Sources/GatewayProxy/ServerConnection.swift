import GatewayHTTP
import GatewayIO

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

extension ProxyHeaderReader: ServerConnection {
    /// Nothing is in flight before the header: closed at once.
    public func beginDrain() { close() }
    public func closeNow() { close() }
}
