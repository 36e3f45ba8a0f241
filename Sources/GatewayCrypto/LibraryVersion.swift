import CGatewayOpenSSL

/// The OpenSSL the process runs with (the shared library loaded, not the headers built against).
public enum OpenSSLLibrary {
    /// `OpenSSL 3.0.17 1 Jul 2025`.
    public static var version: String { String(cString: OpenSSL_version(Int32(OPENSSL_VERSION))) }
}
