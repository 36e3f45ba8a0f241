import GatewayIO

/// For a listener serving both HTTP/1.1 and h2c: holds a new connection until its first bytes tell
/// the HTTP/2 connection preface (RFC 9113 §3.4) from anything else, then hands it over via
/// `decided` (which installs the real handler as the connection's delegate; the bytes read so far
/// stay in `inbound` for it). A client that sends nothing is closed after the header timeout (the
/// chosen handler's first-request deadline runs from the same accept).
final class ProtocolSniffer: ConnectionDelegate, ServerConnection {
    let connection: Connection
    private var decided: ((HTTP2Preface.Verdict) -> Void)?
    var onClose: (() -> Void)?

    init(connection: Connection, limits: DownstreamLimits, decided: @escaping (HTTP2Preface.Verdict) -> Void) {
        self.connection = connection
        self.decided = decided
        connection.delegate = self
        connection.loop.timers.schedule(afterMillis: limits.headerTimeoutMillis) { [weak self] in
            guard let self, self.decided != nil else { return }
            self.connection.close()
        }
    }

    func connectionDidRead(_ c: Connection) {
        let verdict = c.inbound.withReadableBytes { HTTP2Preface.classify($0) }
        guard verdict != .needMore, let decide = decided else { return }
        decided = nil
        // `onClose` stays: if the handler cannot be started, the connection closes while this is
        // still its delegate, and the slot is released here, as the TLS handshake gate does.
        decide(verdict)
    }

    func connectionDidReadEOF(_ c: Connection) { c.close() }

    func connectionDidClose(_ c: Connection, error: Socket.Error?) {
        decided = nil
        onClose?()
        onClose = nil
    }

    /// Nothing was decided yet: no request is in flight.
    func beginDrain() { connection.close() }
    func closeNow() { connection.close() }
}
