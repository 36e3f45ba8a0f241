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
