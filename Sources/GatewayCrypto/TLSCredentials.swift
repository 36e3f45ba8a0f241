import CGatewayOpenSSL

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Reading PEM certificates and keys from disk with clear refusals: missing or unreadable files,
/// keys readable by group or others, unparsable PEM, a key that does not match its certificate.
enum TLSCredentials {
    static let maxFileSize = 1 << 20

    /// The bytes of a regular file; a private key must have mode 0600 or stricter (checked on the open
    /// descriptor, so the file checked is the file read).
    static func readFile(_ path: String, what: String, isPrivateKey: Bool) throws(TLSContextError) -> [UInt8] {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw TLSContextError(.unreadableFile, "\(what) \(path): \(errnoText())") }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0 else { throw TLSContextError(.unreadableFile, "\(what) \(path): \(errnoText())") }
        guard (st.st_mode & S_IFMT) == S_IFREG else {
            throw TLSContextError(.unreadableFile, "\(what) \(path) is not a regular file")
        }
        let permissions = UInt32(st.st_mode) & 0o777
        if isPrivateKey && permissions & 0o077 != 0 {
            throw TLSContextError(
                .insecureKeyPermissions,
                "private key \(path) has mode 0\(String(permissions, radix: 8)): it must not be accessible to group "
                    + "or others (chmod 600 \(path))")
        }
        guard Int(st.st_size) <= maxFileSize else {
            throw TLSContextError(.unreadableFile, "\(what) \(path) is larger than \(maxFileSize) bytes")
        }
        var out: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 16 * 1024)
        while true {
            let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n < 0 {
                if errno == EINTR { continue }
                throw TLSContextError(.unreadableFile, "\(what) \(path): \(errnoText())")
            }
            if n == 0 { break }
            out.append(contentsOf: chunk[0..<n])
            guard out.count <= maxFileSize else {
                throw TLSContextError(.unreadableFile, "\(what) \(path) is larger than \(maxFileSize) bytes")
            }
        }
        return out
    }

    /// Every certificate of a PEM file, leaf first; owned X509 pointers the caller frees.
    static func readCertificates(_ path: String, what: String = "certificate") throws(TLSContextError) -> [OpaquePointer] {
        let bytes = try readFile(path, what: what, isPrivateKey: false)
        var certs: [OpaquePointer] = []
        bytes.withUnsafeBytes { raw in
            guard let bio = BIO_new_mem_buf(raw.baseAddress, Int32(raw.count)) else { OpenSSLFatal.fail("BIO_new_mem_buf") }
            defer { BIO_free(bio) }
            while let x = PEM_read_bio_X509(bio, nil, nil, nil) { certs.append(x) }
        }
        let detail = OpenSSLError.drain()  // "no start line" at the end of the text is expected
        guard !certs.isEmpty else {
            throw TLSContextError(.invalidCertificate, "\(what) \(path) holds no PEM certificate (\(detail))")
        }
        return certs
    }

    /// An unencrypted PEM private key (PKCS#8, SEC 1 or PKCS#1); an owned EVP_PKEY.
    static func readPrivateKey(_ path: String) throws(TLSContextError) -> OpaquePointer {
        let bytes = try readFile(path, what: "private key", isPrivateKey: true)
        let key: OpaquePointer? = bytes.withUnsafeBytes { raw in
            guard let bio = BIO_new_mem_buf(raw.baseAddress, Int32(raw.count)) else { OpenSSLFatal.fail("BIO_new_mem_buf") }
            defer { BIO_free(bio) }
            // A password callback that refuses: never prompt on a terminal for an encrypted key.
            return PEM_read_bio_PrivateKey(bio, nil, { _, _, _, _ in -1 }, nil)
        }
        guard let key else {
            let detail = OpenSSLError.drain()
            throw TLSContextError(.invalidPrivateKey, "private key \(path) is not an unencrypted PEM private key (\(detail))")
        }
        OpenSSLError.clear()
        return key
    }

    /// Installs a certificate chain and its key on a context, refusing a key that does not match.
    /// Returns the leaf.
    static func install(certificatePath: String, keyPath: String, on ctx: OpaquePointer) throws(TLSContextError) -> X509Certificate {
        let certs = try readCertificates(certificatePath)
        defer { for c in certs { X509_free(c) } }
        let key = try readPrivateKey(keyPath)
        defer { EVP_PKEY_free(key) }
        guard SSL_CTX_use_certificate(ctx, certs[0]) == 1 else {
            throw TLSContextError(
                .invalidCertificate, "certificate \(certificatePath) cannot be used: \(OpenSSLError.drain())")
        }
        for extra in certs.dropFirst() {
            X509_up_ref(extra)
            guard cgw_SSL_CTX_add0_chain_cert(ctx, extra) == 1 else {
                X509_free(extra)
                throw TLSContextError(
                    .invalidCertificate, "certificate chain \(certificatePath) cannot be used: \(OpenSSLError.drain())")
            }
        }
        guard SSL_CTX_use_PrivateKey(ctx, key) == 1, SSL_CTX_check_private_key(ctx) == 1 else {
            throw TLSContextError(
                .keyMismatch,
                "private key \(keyPath) does not match the certificate \(certificatePath) (\(OpenSSLError.drain()))")
        }
        return leaf(certs[0])
    }

    /// Trusts the certificates of a PEM file (in the context's X509 store). Returns how many.
    static func trust(caFile path: String, on ctx: OpaquePointer) throws(TLSContextError) -> Int {
        let certs = try readCertificates(path, what: "CA file")
        defer { for c in certs { X509_free(c) } }
        try trust(certs, from: "CA file \(path)", on: ctx)
        return certs.count
    }

    /// Adds already-read certificates to a context's verification store.
    static func trust(_ certs: [OpaquePointer], from what: String, on ctx: OpaquePointer) throws(TLSContextError) {
        guard let store = SSL_CTX_get_cert_store(ctx) else { OpenSSLFatal.fail("SSL_CTX_get_cert_store") }
        for c in certs {
            guard X509_STORE_add_cert(store, c) == 1 else {
                throw TLSContextError(.invalidCertificate, "\(what): \(OpenSSLError.drain())")
            }
        }
    }

    static func leaf(_ x: OpaquePointer) -> X509Certificate {
        guard let der = X509Certificate.derBytes(of: x) else { OpenSSLFatal.fail("i2d_X509") }
        do {
            return try X509Certificate(der: der)
        } catch {
            OpenSSLFatal.fail("a certificate OpenSSL parsed does not parse again: \(error.reason)")
        }
    }

    static func errnoText() -> String { String(cString: strerror(errno)) }
}
