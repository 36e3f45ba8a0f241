import CGatewayOpenSSL

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Client-side TLS towards one https upstream: trust (system roots or a CA file), name verification,
/// SNI, optional client certificate, ALPN `http/1.1`. Immutable and shareable across event loops.
public final class TLSClientContext: @unchecked Sendable {
    let ctx: OpaquePointer
    public let configuration: TLSClientConfiguration
    /// The client certificate's leaf, when one is configured.
    public let clientCertificate: X509Certificate?

    public init(configuration: TLSClientConfiguration) throws(TLSContextError) {
        guard (configuration.clientCertificatePath == nil) == (configuration.clientKeyPath == nil) else {
            throw TLSContextError(.invalidConfiguration, "a client certificate needs its key, and a client key its certificate")
        }
        let alpn = try TLSContextSetup.alpnList(configuration.alpnProtocols)
        let ctx = try TLSContextSetup.newContext(
            server: false, minimum: configuration.minimumVersion, maximum: configuration.maximumVersion,
            tls12Ciphers: configuration.tls12Ciphers)
        var leaf: X509Certificate? = nil
        do throws(TLSContextError) {
            if configuration.verify {
                SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nil)
                if let caFile = configuration.caFile {
                    _ = try TLSCredentials.trust(caFile: caFile, on: ctx)
                } else if SSL_CTX_set_default_verify_paths(ctx) != 1 {
                    throw TLSContextError(.unreadableFile, "the system CA certificates cannot be loaded: \(OpenSSLError.drain())")
                }
            } else {
                SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, nil)
            }
            if let certPath = configuration.clientCertificatePath, let keyPath = configuration.clientKeyPath {
                leaf = try TLSCredentials.install(certificatePath: certPath, keyPath: keyPath, on: ctx)
            }
            if !alpn.isEmpty {
                let wire = TLSContextSetup.alpnWire(alpn)
                // Returns 0 on success.
                guard wire.withUnsafeBufferPointer({ SSL_CTX_set_alpn_protos(ctx, $0.baseAddress, UInt32($0.count)) }) == 0 else {
                    OpenSSLFatal.fail("SSL_CTX_set_alpn_protos")
                }
            }
        } catch {
            SSL_CTX_free(ctx)
            throw error
        }
        self.ctx = ctx
        self.configuration = configuration
        self.clientCertificate = leaf
    }

    deinit { SSL_CTX_free(ctx) }

    /// A client session for one upstream connection to `serverName` (a DNS name or an IP address):
    /// SNI for names (RFC 6066 forbids IP literals in SNI), and the name or address checked in the
    /// certificate when verifying. `resuming` offers a session from an earlier connection. The
    /// ClientHello is ready in `pendingCiphertext` on return.
    public func makeSession(serverName: String, resuming: TLSResumableSession? = nil) throws(TLSContextError) -> TLSSession {
        guard let ssl = SSL_new(ctx) else { OpenSSLFatal.fail("SSL_new") }
        let isIP = Self.isIPAddress(serverName)
        if !isIP {
            guard TLSServerContext.isHostName(serverName.lowercased()) else {
                SSL_free(ssl)
                throw TLSContextError(.invalidConfiguration, "upstream server name \"\(serverName)\" is not a host name")
            }
            guard cgw_SSL_set_tlsext_host_name(ssl, serverName) == 1 else { OpenSSLFatal.fail("SSL_set_tlsext_host_name") }
        }
        if configuration.verify {
            let ok = isIP ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), serverName) : SSL_set1_host(ssl, serverName)
            guard ok == 1 else {
                SSL_free(ssl)
                throw TLSContextError(
                    .invalidConfiguration, "upstream name \"\(serverName)\" cannot be verified: \(OpenSSLError.drain())")
            }
        }
        if let resuming { _ = SSL_set_session(ssl, resuming.session) }
        return TLSSession(client: ssl, context: self)
    }

    static func isIPAddress(_ s: String) -> Bool {
        var v4 = in_addr()
        var v6 = in6_addr()
        return inet_pton(AF_INET, s, &v4) == 1 || inet_pton(AF_INET6, s, &v6) == 1
    }
}

/// A TLS session an upstream connection may resume (a ticket and its secrets), from
/// `TLSSession.resumableSession()`. Immutable; may be handed to a session on another loop.
public final class TLSResumableSession: @unchecked Sendable {
    let session: OpaquePointer

    init(owning session: OpaquePointer) { self.session = session }

    deinit { SSL_SESSION_free(session) }
}
