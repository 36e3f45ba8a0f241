import CGatewayOpenSSL

/// What a finished handshake agreed on.
public struct TLSConnectionInfo: Sendable, Equatable {
    public var version: TLSVersion
    /// OpenSSL's name of the cipher suite (`TLS_AES_128_GCM_SHA256`, `ECDHE-ECDSA-AES128-GCM-SHA256`…).
    public var cipher: String
    /// The ALPN protocol selected, nil when none was negotiated (treat as `http/1.1`).
    public var alpn: String?
    /// The SNI name the client sent (lowercased), nil without SNI. On the client: the name it sent.
    public var serverName: String?
    /// True when the session was resumed from a ticket (an abbreviated handshake).
    public var resumed: Bool
    /// Server only: the index of the configured certificate that answered.
    public var certificateIndex: Int?
}

/// Why a session failed. `kind` is a small fixed set (metric labels); `detail` is OpenSSL's text for logs.
public struct TLSFailure: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Kind: String, Sendable, Equatable, CaseIterable {
        /// Plain HTTP sent to a TLS port (first bytes `GET `, `POST `…).
        case plainHTTP = "plain_http"
        /// The peer speaks only versions we refuse (TLS 1.1 and older), or refused ours.
        case unsupportedVersion = "unsupported_version"
        case noSharedCipher = "no_shared_cipher"
        /// The client offered ALPN protocols of which we speak none (or the server chose none of ours).
        case noApplicationProtocol = "no_application_protocol"
        /// Client: the server's certificate did not verify (chain, name, dates). Server: the client's.
        case certificateVerification = "certificate_verification"
        /// The peer sent a fatal alert.
        case peerAlert = "peer_alert"
        /// Malformed or unexpected records or handshake messages (a garbage ClientHello, a bad MAC…).
        case protocolError = "protocol_error"
        /// Plaintext written after `shutdown()`.
        case closed = "closed"
    }

    public let kind: Kind
    public let detail: String

    public init(_ kind: Kind, _ detail: String) {
        self.kind = kind
        self.detail = detail
    }

    public var description: String { "\(kind.rawValue): \(detail)" }
}

public enum TLSHandshakeState: Sendable, Equatable {
    case inProgress
    case done(TLSConnectionInfo)
    /// Server: the first bytes were a plain HTTP request. Count it, optionally write
    /// `TLSSession.plainHTTPRejection` in clear, and close.
    case plainHTTPOnTLSPort
    /// The handshake failed; an alert for the peer may be waiting in `pendingCiphertextCount`.
    case failed(TLSFailure)
}

public enum TLSReadResult: Sendable, Equatable {
    /// This many plaintext bytes were written to the buffer.
    case bytes(Int)
    /// Nothing more to read until more ciphertext is fed (or the handshake is still running).
    case needMoreInput
    /// The peer sent close_notify: no more plaintext will come.
    case closed
    case failed(TLSFailure)
}

/// One TLS connection (server or client) over two memory buffers: ciphertext in through `feed`,
/// ciphertext out through `sendCiphertext`/`readCiphertext`, plaintext through `readPlaintext` and
/// `writePlaintext`. No sockets, no blocking, no threads: confined to the event loop that owns the
/// connection (not thread-safe). See docs/tls.md for the driving loop.
public final class TLSSession {
    public enum Role: Sendable { case server, client }

    public let role: Role
    let ssl: OpaquePointer
    private(set) var inbound: OpaquePointer
    private(set) var outbound: OpaquePointer
    /// Keeps the context (and the callbacks' `arg`) alive as long as the session.
    private let server: TLSServerContext?
    private let client: TLSClientContext?

    public private(set) var handshakeState: TLSHandshakeState = .inProgress
    /// A failure after the handshake (bad record, alert). Reads and writes return it from then on.
    public private(set) var failure: TLSFailure?
    public private(set) var receivedCloseNotify = false
    public private(set) var sentCloseNotify = false
    /// `writePlaintext` stops when this much ciphertext is waiting to be sent.
    public var ciphertextHighWater = TLSDefaults.ciphertextHighWater

    /// Server: the first bytes seen, until they show whether this is TLS or plain HTTP.
    private var sniffed: [UInt8] = []
    private var sniffing: Bool

    /// What the gateway may write in clear to a plain-HTTP client before closing: the proxy's
    /// `https_required` answer (`ProxyError.httpsRequired`; a test holds the two equal).
    public static let plainHTTPRejection: [UInt8] = Array(
        ("HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nContent-Length: 27\r\nConnection: close\r\n\r\n"
            + "{\"error\":\"https_required\"}\n").utf8)

    init(server: TLSServerContext) {
        guard let ssl = SSL_new(server.contexts[0]) else { OpenSSLFatal.fail("SSL_new") }
        self.role = .server
        self.ssl = ssl
        self.server = server
        self.client = nil
        self.sniffing = true
        (inbound, outbound) = Self.attachBuffers(ssl)
        SSL_set_accept_state(ssl)
    }

    init(client ssl: OpaquePointer, context: TLSClientContext) {
        self.role = .client
        self.ssl = ssl
        self.server = nil
        self.client = context
        self.sniffing = false
        (inbound, outbound) = Self.attachBuffers(ssl)
        SSL_set_connect_state(ssl)
        driveHandshake()  // writes the ClientHello
    }

    deinit {
        // OpenSSL marks the session of a connection freed without close_notify as not resumable (a
        // possible truncation attack on the data). The gateway decides about truncation itself (HTTP
        // framing); a connection that closes without failing keeps its session (and ticket) usable.
        if case .done = handshakeState, failure == nil { SSL_set_shutdown(ssl, SSL_SENT_SHUTDOWN | SSL_RECEIVED_SHUTDOWN) }
        SSL_free(ssl)  // frees both BIOs
    }

    private static func attachBuffers(_ ssl: OpaquePointer) -> (OpaquePointer, OpaquePointer) {
        let rbio = newBuffer()
        let wbio = newBuffer()
        SSL_set_bio(ssl, rbio, wbio)
        return (rbio, wbio)
    }

    // MARK: Input

    /// Hands ciphertext read from the socket to the session (all of it is kept) and advances the
    /// handshake. Then: read plaintext, and send `pendingCiphertext` (handshake replies, alerts).
    public func feed(_ ciphertext: UnsafeRawBufferPointer) {
        guard !ciphertext.isEmpty, let base = ciphertext.baseAddress else { return }
        switch handshakeState {
        case .failed, .plainHTTPOnTLSPort: return
        case .inProgress, .done: break
        }
        var offset = 0
        while offset < ciphertext.count {
            let n = BIO_write(inbound, base + offset, Int32(min(ciphertext.count - offset, Int(Int32.max))))
            guard n > 0 else { OpenSSLFatal.fail("BIO_write to a memory BIO") }
            offset += Int(n)
        }
        if sniffing {
            sniffed.append(contentsOf: ciphertext.prefix(8 - sniffed.count))
            switch Self.sniff(sniffed) {
            case .undecided: return
            case .plainHTTP:
                sniffing = false
                handshakeState = .plainHTTPOnTLSPort
                return
            case .other:
                sniffing = false
            }
        }
        if case .inProgress = handshakeState { driveHandshake() }
    }

    public func feed(_ ciphertext: [UInt8]) { ciphertext.withUnsafeBytes { feed($0) } }

    enum Sniff { case undecided, plainHTTP, other }

    /// A TLS record starts with 0x16 (handshake). An HTTP request starts with a method token of
    /// upper-case letters and a space (`GET `, `POST `, `PRI ` for HTTP/2's preface…).
    static func sniff(_ bytes: [UInt8]) -> Sniff {
        guard let first = bytes.first else { return .undecided }
        if first == 0x16 { return .other }
        for (i, b) in bytes.enumerated() {
            if b == 0x20 { return i >= 3 ? .plainHTTP : .other }
            guard b >= 0x41 && b <= 0x5a else { return .other }
        }
        return bytes.count < 8 ? .undecided : .other
    }

    // MARK: Plaintext

    /// Decrypts into `buffer`. Call until it returns something other than `.bytes`; TLS 1.3 tickets and
    /// key updates are processed here too, so send `pendingCiphertext` afterwards.
    public func readPlaintext(into buffer: UnsafeMutableRawBufferPointer) -> TLSReadResult {
        switch handshakeState {
        case .failed(let f): return .failed(f)
        case .plainHTTPOnTLSPort: return .failed(TLSFailure(.plainHTTP, "plain HTTP request on a TLS port"))
        case .inProgress:
            if sniffing { return .needMoreInput }
            driveHandshake()
            switch handshakeState {
            case .done: break
            case .failed(let f): return .failed(f)
            default: return .needMoreInput
            }
        case .done: break
        }
        if let failure { return .failed(failure) }
        if receivedCloseNotify { return .closed }
        guard buffer.count > 0 else { return .needMoreInput }
        // No ciphertext waiting and nothing buffered in the session: SSL_read could only answer
        // WANT_READ, so it is not called (every drained read would otherwise end with one failing call).
        if BIO_ctrl_pending(inbound) == 0 && SSL_has_pending(ssl) == 0 {
            releaseIdleBuffers()
            return .needMoreInput
        }
        ERR_clear_error()
        var n = 0
        let r = SSL_read_ex(ssl, buffer.baseAddress, buffer.count, &n)
        if r == 1 { return .bytes(n) }
        let e = SSL_get_error(ssl, r)
        switch e {
        case SSL_ERROR_WANT_READ, SSL_ERROR_WANT_WRITE:
            releaseIdleBuffers()
            return .needMoreInput
        case SSL_ERROR_ZERO_RETURN:
            receivedCloseNotify = true
            return .closed
        default:
            let f = classify(e)
            failure = f
            return .failed(f)
        }
    }

    /// Reads all available plaintext, handing it to `body` in chunks of up to 16 KiB; returns how it
    /// stopped (`.needMoreInput`, `.closed` or `.failed`).
    public func readPlaintext(_ body: (UnsafeRawBufferPointer) -> Void) -> TLSReadResult {
        withUnsafeTemporaryAllocation(byteCount: 16 * 1024, alignment: 16) { buffer in
            while true {
                let r = readPlaintext(into: buffer)
                guard case .bytes(let n) = r else { return r }
                body(UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
            }
        }
    }

    /// Encrypts as much of `plaintext` as fits under `ciphertextHighWater`; returns how many bytes were
    /// taken (0 while the handshake runs: keep them and try again once it is done). Then send
    /// `pendingCiphertext`.
    public func writePlaintext(_ plaintext: UnsafeRawBufferPointer) throws(TLSFailure) -> Int {
        switch handshakeState {
        case .failed(let f): throw f
        case .plainHTTPOnTLSPort: throw TLSFailure(.plainHTTP, "plain HTTP request on a TLS port")
        case .inProgress: return 0
        case .done: break
        }
        if let failure { throw failure }
        if sentCloseNotify { throw TLSFailure(.closed, "write after close_notify") }
        guard let base = plaintext.baseAddress else { return 0 }
        var written = 0
        while written < plaintext.count && pendingCiphertextCount < ciphertextHighWater {
            let chunk = min(plaintext.count - written, 64 * 1024)
            var n = 0
            ERR_clear_error()
            let r = SSL_write_ex(ssl, base + written, chunk, &n)
            if r == 1 {
                written += n
                continue
            }
            let e = SSL_get_error(ssl, r)
            if e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE { break }
            let f = classify(e)
            failure = f
            throw f
        }
        return written
    }

    public func writePlaintext(_ plaintext: [UInt8]) throws(TLSFailure) -> Int {
        let result: Result<Int, TLSFailure> = plaintext.withUnsafeBytes { p in
            do throws(TLSFailure) { return .success(try writePlaintext(p)) } catch { return .failure(error) }
        }
        return try result.get()
    }

    // MARK: Output

    /// Ciphertext waiting to be written to the socket.
    public var pendingCiphertextCount: Int { Int(BIO_ctrl_pending(outbound)) }

    /// Offers the waiting ciphertext to `send` (e.g. a non-blocking `write`), which returns how many
    /// bytes it took (0 when the socket would block); repeats while it takes everything. Returns the
    /// total taken; the rest stays pending.
    @discardableResult
    public func sendCiphertext(_ send: (UnsafeRawBufferPointer) -> Int) -> Int {
        var total = 0
        while true {
            var p: UnsafeMutablePointer<CChar>? = nil
            let length = Int(cgw_BIO_get_mem_data(outbound, &p))
            guard length > 0, let p else {
                releaseIdleBuffers()
                return total
            }
            let taken = min(max(send(UnsafeRawBufferPointer(start: p, count: length)), 0), length)
            guard taken > 0 else { return total }
            discardCiphertext(taken)
            total += taken
            if taken < length { return total }
        }
    }

    /// Moves up to `buffer.count` bytes of waiting ciphertext into `buffer`; returns how many.
    public func readCiphertext(into buffer: UnsafeMutableRawBufferPointer) -> Int {
        guard buffer.count > 0 else { return 0 }
        var n = 0
        guard BIO_read_ex(outbound, buffer.baseAddress, buffer.count, &n) == 1 else { return 0 }
        if pendingCiphertextCount == 0 { releaseIdleBuffers() }
        return n
    }

    /// All waiting ciphertext (convenience for tests and simple callers).
    @_spi(Testing) public func takeCiphertext() -> [UInt8] {
        let count = pendingCiphertextCount
        guard count > 0 else { return [] }
        var out = [UInt8](repeating: 0, count: count)
        let n = out.withUnsafeMutableBytes { readCiphertext(into: $0) }
        return Array(out.prefix(n))
    }

    /// Bytes allocated by the two buffers (they grow with the largest burst).
    public var bufferCapacity: Int { cgw_BIO_mem_capacity(inbound) + cgw_BIO_mem_capacity(outbound) }

    /// Buffers above this size are replaced by empty ones once drained, so that an idle keep-alive
    /// connection does not keep the memory of its largest transfer.
    static let idleBufferLimit = 64 * 1024

    private func releaseIdleBuffers() {
        if BIO_ctrl_pending(outbound) == 0 && cgw_BIO_mem_capacity(outbound) > Self.idleBufferLimit {
            outbound = Self.newBuffer()
            SSL_set0_wbio(ssl, outbound)  // frees the old one
        }
        if BIO_ctrl_pending(inbound) == 0 && cgw_BIO_mem_capacity(inbound) > Self.idleBufferLimit {
            inbound = Self.newBuffer()
            SSL_set0_rbio(ssl, inbound)
        }
    }

    private static func newBuffer() -> OpaquePointer {
        guard let bio = BIO_new(BIO_s_mem()) else { OpenSSLFatal.fail("BIO_new") }
        // An empty buffer means "retry later" (WANT_READ), never end of file.
        cgw_BIO_set_mem_eof_return(bio, -1)
        return bio
    }

    private func discardCiphertext(_ count: Int) {
        withUnsafeTemporaryAllocation(byteCount: 4096, alignment: 16) { scratch in
            var left = count
            while left > 0 {
                var n = 0
                guard BIO_read_ex(outbound, scratch.baseAddress, min(left, scratch.count), &n) == 1, n > 0 else {
                    OpenSSLFatal.fail("BIO_read from a memory BIO")
                }
                left -= n
            }
        }
    }

    // MARK: Closing

    /// Queues close_notify (send `pendingCiphertext`, then close or half-close the socket). Returns false
    /// when there is nothing to close cleanly (handshake not done, failed, or already shut down).
    /// Reading still works afterwards, until the peer's own close_notify (`.closed`).
    @discardableResult
    public func shutdown() -> Bool {
        guard case .done = handshakeState, failure == nil, !sentCloseNotify else { return false }
        ERR_clear_error()
        let r = SSL_shutdown(ssl)
        guard r >= 0 else {
            OpenSSLError.clear()
            return false
        }
        sentCloseNotify = true
        return true
    }

    // MARK: Negotiated parameters

    public var connectionInfo: TLSConnectionInfo? {
        if case .done(let info) = handshakeState { return info }
        return nil
    }

    /// The peer's leaf certificate (the server's, on a client session; a client certificate, on a server
    /// session that asked for one).
    public var peerCertificate: X509Certificate? {
        guard let x = SSL_get1_peer_certificate(ssl) else { return nil }
        defer { X509_free(x) }
        return TLSCredentials.leaf(x)
    }

    /// Client: the session to offer on a later connection to the same upstream, once the server sent a
    /// ticket (with TLS 1.3, after the handshake: read plaintext first). nil when not resumable.
    public func resumableSession() -> TLSResumableSession? {
        guard role == .client, let s = SSL_get1_session(ssl) else { return nil }
        guard SSL_SESSION_is_resumable(s) == 1 else {
            SSL_SESSION_free(s)
            return nil
        }
        return TLSResumableSession(owning: s)
    }

    // MARK: Internals

    private func driveHandshake() {
        ERR_clear_error()
        let r = SSL_do_handshake(ssl)
        if r == 1 {
            handshakeState = .done(makeInfo())
            return
        }
        let e = SSL_get_error(ssl, r)
        if e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE { return }
        handshakeState = .failed(classify(e))
    }

    private func makeInfo() -> TLSConnectionInfo {
        var alpnPointer: UnsafePointer<UInt8>? = nil
        var alpnLength: UInt32 = 0
        SSL_get0_alpn_selected(ssl, &alpnPointer, &alpnLength)
        let alpn = alpnPointer.flatMap { p in
            alpnLength > 0 ? String(decoding: UnsafeBufferPointer(start: p, count: Int(alpnLength)), as: UTF8.self) : nil
        }
        let name = SSL_get_servername(ssl, cgw_TLSEXT_NAMETYPE_host_name()).map { String(cString: $0).lowercased() }
        let cipher = SSL_get_current_cipher(ssl).flatMap { SSL_CIPHER_get_name($0) }.map { String(cString: $0) } ?? ""
        guard let version = TLSVersion(wire: SSL_version(ssl)) else {
            OpenSSLFatal.fail("a handshake finished with a version outside TLS 1.2–1.3 (\(SSL_version(ssl)))")
        }
        var index: Int? = nil
        if let server, let current = SSL_get_SSL_CTX(ssl) {
            index = server.contexts.firstIndex { $0 == current }
        }
        return TLSConnectionInfo(
            version: version, cipher: cipher, alpn: alpn, serverName: name, resumed: SSL_session_reused(ssl) == 1,
            certificateIndex: index)
    }

    /// Maps an OpenSSL failure to a kind, and drains the thread's error queue into the detail.
    private func classify(_ error: Int32) -> TLSFailure {
        if error == SSL_ERROR_ZERO_RETURN {
            return TLSFailure(.protocolError, "the peer closed during the handshake")
        }
        let code = ERR_peek_error()
        let reason = cgw_ERR_GET_REASON(code)
        var detail = OpenSSLError.drain()
        if error == SSL_ERROR_SYSCALL && code == 0 { detail = "unexpected end of the TLS stream" }
        let verify = SSL_get_verify_result(ssl)
        if reason == SSL_R_CERTIFICATE_VERIFY_FAILED || (role == .client && verify != X509_V_OK && code != 0) {
            let why = X509_verify_cert_error_string(verify).map { String(cString: $0) } ?? "unknown"
            return TLSFailure(.certificateVerification, "\(why) (\(detail))")
        }
        let kind: TLSFailure.Kind
        switch reason {
        case SSL_R_UNSUPPORTED_PROTOCOL, SSL_R_TLSV1_ALERT_PROTOCOL_VERSION, SSL_R_VERSION_TOO_LOW, SSL_R_VERSION_TOO_HIGH:
            kind = .unsupportedVersion
        case SSL_R_NO_SHARED_CIPHER:
            kind = .noSharedCipher
        case SSL_R_NO_APPLICATION_PROTOCOL, SSL_R_TLSV1_ALERT_NO_APPLICATION_PROTOCOL:
            kind = .noApplicationProtocol
        case SSL_R_HTTP_REQUEST, SSL_R_HTTPS_PROXY_REQUEST:
            kind = .plainHTTP
        case SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE, SSL_R_TLSV1_ALERT_UNKNOWN_CA, SSL_R_SSLV3_ALERT_BAD_CERTIFICATE,
            SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED:
            kind = .certificateVerification
        case let r where r >= cgw_SSL_AD_REASON_OFFSET():
            kind = .peerAlert
        default:
            kind = .protocolError
        }
        return TLSFailure(kind, detail)
    }
}
