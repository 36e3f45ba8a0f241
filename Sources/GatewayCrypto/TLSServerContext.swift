import CGatewayOpenSSL

/// Everything a listener needs to accept TLS: one OpenSSL context per certificate (the first is the
/// default; the others are switched to by SNI), ALPN, and the shared ticket keys.
///
/// Immutable after init and safe to share across event loops (OpenSSL allows creating sessions
/// from one `SSL_CTX` on several threads). Build it once per configuration and again on reload,
/// passing the running context's `ticketKeys` so that clients keep resuming across reloads.
public final class TLSServerContext: @unchecked Sendable {
    /// One `SSL_CTX` per configured certificate, same order.
    let contexts: [OpaquePointer]
    /// Lowercased exact server name → certificate index (first listed wins).
    let exactNames: [String: Int]
    /// `.example.com` (the suffix of `*.example.com`) → certificate index.
    let wildcardSuffixes: [String: Int]
    /// ALPN protocols in server preference order, as bytes.
    let alpn: [[UInt8]]

    public let configuration: TLSServerConfiguration
    public let ticketKeys: TLSTicketKeys
    /// The leaf of each configured certificate, same order (for expiry checks and logs).
    public let leafCertificates: [X509Certificate]

    /// Loads every certificate and key and builds the contexts. Throws with a message naming the
    /// file for a missing or unparsable file, a key with loose permissions, or a mismatched key.
    public init(configuration: TLSServerConfiguration, ticketKeys: TLSTicketKeys = TLSTicketKeys()) throws(TLSContextError) {
        guard !configuration.certificates.isEmpty else {
            throw TLSContextError(.invalidConfiguration, "a TLS listener needs at least one certificate")
        }
        let (exact, wildcard) = try Self.nameTables(configuration.certificates)
        let alpn = try TLSContextSetup.alpnList(configuration.alpnProtocols)

        var built: [OpaquePointer] = []
        var leaves: [X509Certificate] = []
        // The client CA file, read once for every certificate's context.
        let clientCAs = try configuration.clientCertificateCAFile.map { path throws(TLSContextError) in
            (path, try TLSCredentials.readCertificates(path, what: "client CA file"))
        }
        defer { for c in clientCAs?.1 ?? [] { X509_free(c) } }
        do throws(TLSContextError) {
            for cert in configuration.certificates {
                let ctx = try TLSContextSetup.newContext(
                    server: true, minimum: configuration.minimumVersion, maximum: configuration.maximumVersion,
                    tls12Ciphers: configuration.tls12Ciphers)
                built.append(ctx)
                leaves.append(
                    try TLSCredentials.install(certificatePath: cert.certificatePath, keyPath: cert.privateKeyPath, on: ctx))
                if let (path, certs) = clientCAs {
                    try Self.requireClientCertificates(certs, from: path, on: ctx)
                }
            }
        } catch {
            for ctx in built { SSL_CTX_free(ctx) }
            throw error
        }

        contexts = built
        exactNames = exact
        wildcardSuffixes = wildcard
        self.alpn = alpn
        self.configuration = configuration
        self.ticketKeys = ticketKeys
        leafCertificates = leaves

        let me = Unmanaged.passUnretained(self).toOpaque()
        for ctx in contexts {
            _ = cgw_SSL_CTX_set_app_data(ctx, me)
            cgw_SSL_CTX_set_servername_callback(
                ctx, { ssl, _, arg in TLSServerContext.serverNameCallback(ssl: ssl, arg: arg) }, me)
            if !alpn.isEmpty {
                SSL_CTX_set_alpn_select_cb(
                    ctx,
                    { _, out, outLength, offered, offeredLength, arg in
                        TLSServerContext.alpnCallback(
                            out: out, outLength: outLength, offered: offered, offeredLength: offeredLength, arg: arg)
                    }, me)
            }
            guard
                SSL_CTX_set_tlsext_ticket_key_evp_cb(
                    ctx,
                    { ssl, name, iv, cipher, mac, enc in
                        TLSServerContext.ticketCallback(ssl: ssl, name: name, iv: iv, cipher: cipher, mac: mac, enc: enc)
                    }) == 1
            else { OpenSSLFatal.fail("SSL_CTX_set_tlsext_ticket_key_evp_cb") }
        }
    }

    deinit {
        for ctx in contexts { SSL_CTX_free(ctx) }
    }

    /// Rotates the ticket keys now (see `TLSTicketKeys.rotate()`). The server's timer calls `rotate()`
    /// on the listener's keys every `tls.ticket_rotation`; this is the same step for one context.
    @_spi(Testing) public func rotateTicketKeys() { ticketKeys.rotate() }

    /// A new server session for one accepted connection.
    public func makeSession() -> TLSSession { TLSSession(server: self) }

    /// The certificate index answering `name` (lowercased, without a trailing dot): an exact name,
    /// else a wildcard on the first label, else 0 (the default).
    public func certificateIndex(forServerName name: String) -> Int {
        var n = name.lowercased()
        if n.hasSuffix(".") { n.removeLast() }
        if let i = exactNames[n] { return i }
        if let dot = n.firstIndex(of: "."), dot != n.startIndex, let i = wildcardSuffixes[String(n[dot...])] { return i }
        return 0
    }

    static func nameTables(_ certs: [TLSServerConfiguration.Certificate]) throws(TLSContextError) -> ([String: Int], [String: Int]) {
        var exact: [String: Int] = [:]
        var wildcard: [String: Int] = [:]
        for (i, cert) in certs.enumerated() {
            for raw in cert.serverNames {
                let name = raw.lowercased()
                if name.hasPrefix("*.") {
                    let suffix = String(name.dropFirst())
                    guard suffix.count > 1, !suffix.dropFirst().contains("*"), isHostName(String(suffix.dropFirst())) else {
                        throw TLSContextError(.invalidConfiguration, "server name \"\(raw)\" is not a valid wildcard (*.example.com)")
                    }
                    if wildcard[suffix] == nil { wildcard[suffix] = i }
                } else {
                    guard isHostName(name) else {
                        throw TLSContextError(.invalidConfiguration, "server name \"\(raw)\" is not a host name")
                    }
                    if exact[name] == nil { exact[name] = i }
                }
            }
        }
        return (exact, wildcard)
    }

    static func isHostName(_ s: String) -> Bool {
        guard !s.isEmpty, s.utf8.count <= 253 else { return false }
        return s.split(separator: ".", omittingEmptySubsequences: false).allSatisfy { label in
            !label.isEmpty && label.utf8.count <= 63
                && label.utf8.allSatisfy { c in
                    (c >= 0x61 && c <= 0x7a) || (c >= 0x30 && c <= 0x39) || c == 0x2d || c == 0x5f
                }
        }
    }

    private static func requireClientCertificates(_ certs: [OpaquePointer], from caFile: String, on ctx: OpaquePointer)
        throws(TLSContextError)
    {
        try TLSCredentials.trust(certs, from: "client CA file \(caFile)", on: ctx)
        guard let names = cgw_sk_X509_NAME_new_null() else { OpenSSLFatal.fail("sk_X509_NAME_new_null") }
        for c in certs {
            if let n = X509_NAME_dup(X509_get_subject_name(c)) { _ = cgw_sk_X509_NAME_push(names, n) }
        }
        SSL_CTX_set_client_CA_list(ctx, names)
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nil)
    }

    // MARK: OpenSSL callbacks (C function pointers: no captures, the context comes as `arg` or app data)

    static func context(of ssl: OpaquePointer?) -> TLSServerContext? {
        guard let ssl, let ctx = SSL_get_SSL_CTX(ssl), let raw = cgw_SSL_CTX_get_app_data(ctx) else { return nil }
        return Unmanaged<TLSServerContext>.fromOpaque(raw).takeUnretainedValue()
    }

    static func serverNameCallback(ssl: OpaquePointer?, arg: UnsafeMutableRawPointer?) -> Int32 {
        guard let ssl, let arg else { return SSL_TLSEXT_ERR_OK }
        let server = Unmanaged<TLSServerContext>.fromOpaque(arg).takeUnretainedValue()
        guard let name = SSL_get_servername(ssl, cgw_TLSEXT_NAMETYPE_host_name()) else { return SSL_TLSEXT_ERR_OK }
        let index = server.certificateIndex(forServerName: String(cString: name))
        if SSL_get_SSL_CTX(ssl) != server.contexts[index] {
            guard SSL_set_SSL_CTX(ssl, server.contexts[index]) != nil else { return SSL_TLSEXT_ERR_ALERT_FATAL }
        }
        return SSL_TLSEXT_ERR_OK
    }

    /// Server preference: the first of our protocols the client offers.
    static func alpnCallback(
        out: UnsafeMutablePointer<UnsafePointer<UInt8>?>?, outLength: UnsafeMutablePointer<UInt8>?,
        offered: UnsafePointer<UInt8>?, offeredLength: UInt32, arg: UnsafeMutableRawPointer?
    ) -> Int32 {
        guard let out, let outLength, let offered, let arg else { return SSL_TLSEXT_ERR_ALERT_FATAL }
        let server = Unmanaged<TLSServerContext>.fromOpaque(arg).takeUnretainedValue()
        let list = UnsafeBufferPointer(start: offered, count: Int(offeredLength))
        for proto in server.alpn {
            var i = 0
            while i < list.count {
                let length = Int(list[i])
                guard length > 0, i + 1 + length <= list.count else { return SSL_TLSEXT_ERR_ALERT_FATAL }
                if length == proto.count
                    && proto.withUnsafeBufferPointer({ p in
                        (0..<length).allSatisfy { p[$0] == list[i + 1 + $0] }
                    })
                {
                    out.pointee = offered + i + 1
                    outLength.pointee = UInt8(length)
                    return SSL_TLSEXT_ERR_OK
                }
                i += 1 + length
            }
        }
        return SSL_TLSEXT_ERR_ALERT_FATAL
    }

    static func ticketCallback(
        ssl: OpaquePointer?, name: UnsafeMutablePointer<UInt8>?, iv: UnsafeMutablePointer<UInt8>?, cipher: OpaquePointer?,
        mac: OpaquePointer?, enc: Int32
    ) -> Int32 {
        guard let server = context(of: ssl), let name, let iv, let cipher, let mac else { return -1 }
        return server.ticketKeys.callback(keyName: name, iv: iv, cipher: cipher, mac: mac, encrypt: enc == 1)
    }
}

/// Context settings both sides share.
enum TLSContextSetup {
    static let sessionIDContext: [UInt8] = Array("attest-gateway".utf8)

    static func newContext(server: Bool, minimum: TLSVersion, maximum: TLSVersion, tls12Ciphers: String) throws(TLSContextError)
        -> OpaquePointer
    {
        guard minimum <= maximum else {
            throw TLSContextError(.invalidConfiguration, "minimum TLS version \(minimum) is above the maximum \(maximum)")
        }
        guard let ctx = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method()) else { OpenSSLFatal.fail("SSL_CTX_new") }
        guard cgw_SSL_CTX_set_min_proto_version(ctx, minimum.wire) == 1,
            cgw_SSL_CTX_set_max_proto_version(ctx, maximum.wire) == 1
        else { OpenSSLFatal.fail("SSL_CTX_set_min/max_proto_version") }
        _ = SSL_CTX_set_options(ctx, server ? cgw_server_options() : cgw_client_options())
        guard SSL_CTX_set_cipher_list(ctx, tls12Ciphers) == 1 else {
            let detail = OpenSSLError.drain()
            SSL_CTX_free(ctx)
            throw TLSContextError(.invalidConfiguration, "TLS 1.2 cipher list \"\(tls12Ciphers)\" selects no cipher (\(detail))")
        }
        guard SSL_CTX_set_ciphersuites(ctx, TLSDefaults.tls13CipherSuites) == 1,
            cgw_SSL_CTX_set1_groups_list(ctx, TLSDefaults.groups) == 1
        else { OpenSSLFatal.fail("SSL_CTX_set_ciphersuites/set1_groups_list") }
        cgw_SSL_CTX_set_mode_partial_write(ctx)
        if server {
            // Stateless tickets only: no server-side session cache to grow or share between loops.
            cgw_SSL_CTX_set_session_cache_mode(ctx, cgw_SSL_SESS_CACHE_OFF())
            _ = SSL_CTX_set_timeout(ctx, Int(TLSDefaults.sessionLifetimeSeconds))
            let ok = sessionIDContext.withUnsafeBufferPointer {
                SSL_CTX_set_session_id_context(ctx, $0.baseAddress, UInt32($0.count))
            }
            guard ok == 1 else { OpenSSLFatal.fail("SSL_CTX_set_session_id_context") }
        }
        return ctx
    }

    /// ALPN names as bytes, each 1…255 bytes of printable ASCII.
    static func alpnList(_ protocols: [String]) throws(TLSContextError) -> [[UInt8]] {
        try protocols.map { (p: String) throws(TLSContextError) -> [UInt8] in
            let bytes = Array(p.utf8)
            guard !bytes.isEmpty, bytes.count <= 255, bytes.allSatisfy({ $0 > 0x20 && $0 < 0x7f }) else {
                throw TLSContextError(.invalidConfiguration, "ALPN protocol \"\(p)\" is not 1 to 255 printable ASCII bytes")
            }
            return bytes
        }
    }

    /// The ALPN wire format: each name prefixed by its length.
    static func alpnWire(_ protocols: [[UInt8]]) -> [UInt8] { protocols.flatMap { [UInt8($0.count)] + $0 } }
}
