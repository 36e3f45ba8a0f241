import GatewayCrypto
import GatewayIO

/// Holds an accepted TLS connection until its handshake is done, then hands it to the protocol
/// handler chosen by ALPN (`ready`). Closes it when the handshake fails, the client leaves, or the
/// handshake takes longer than `timeoutMillis` (on the loop's timer wheel). Loop-confined.
final class TLSHandshakeGate: ConnectionDelegate, ServerConnection {
    let downstream: Connection
    var onClose: (() -> Void)?
    private let ready: (Connection, TLSConnectionInfo) -> Void
    private let failed: (String) -> Void
    private var timer: TimerWheel.Handle?
    private var reported = false

    /// - Parameters:
    ///   - ready: makes the handler (which becomes the connection's delegate) and reports the handshake.
    ///   - failed: counts a failed handshake by reason (`TLSFailure.Kind` raw value, or `timeout`).
    init(
        connection: Connection, timeoutMillis: Int64, ready: @escaping (Connection, TLSConnectionInfo) -> Void,
        failed: @escaping (String) -> Void
    ) {
        downstream = connection
        self.ready = ready
        self.failed = failed
        connection.delegate = self
        timer = connection.loop.timers.schedule(afterMillis: max(1, timeoutMillis)) { [weak self] in self?.timedOut() }
    }

    private func timedOut() {
        timer = nil
        guard !downstream.isClosed, downstream.isHandshaking else { return }
        report("timeout")
        downstream.close()
    }

    private func report(_ reason: String) {
        guard !reported else { return }
        reported = true
        failed(reason)
    }

    private func cancelTimer() {
        if let t = timer { downstream.loop.timers.cancel(t) }
        timer = nil
    }

    func beginDrain() { downstream.close() }  // nothing is in flight before the handshake ends
    func closeNow() { downstream.close() }

    func connectionDidCompleteHandshake(_ connection: Connection, info: TLSConnectionInfo) {
        cancelTimer()
        reported = true
        ready(connection, info)
    }

    func connectionDidFailHandshake(_ connection: Connection, failure: TLSFailure) {
        cancelTimer()
        report(failure.kind.rawValue)
    }

    func connectionDidRead(_ connection: Connection) {}  // no plaintext before the handshake ends

    func connectionDidReadEOF(_ connection: Connection) {
        report(TLSFailure.Kind.closed.rawValue)
        connection.close()
    }

    func connectionDidClose(_ connection: Connection, error: Socket.Error?) {
        cancelTimer()
        if connection.isHandshaking { report(TLSFailure.Kind.closed.rawValue) }
        onClose?()
        onClose = nil
    }
}
