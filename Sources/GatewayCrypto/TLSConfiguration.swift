import CGatewayOpenSSL

/// A TLS protocol version the gateway speaks: 1.2 and 1.3 only (older versions are refused).
public enum TLSVersion: String, Sendable, Hashable, Comparable, CaseIterable, CustomStringConvertible {
    case tls12 = "TLSv1.2"
    case tls13 = "TLSv1.3"

    var wire: Int32 { self == .tls12 ? Int32(TLS1_2_VERSION) : Int32(TLS1_3_VERSION) }

    init?(wire: Int32) {
        switch wire {
        case Int32(TLS1_2_VERSION): self = .tls12
        case Int32(TLS1_3_VERSION): self = .tls13
        default: return nil
        }
    }

    public static func < (a: TLSVersion, b: TLSVersion) -> Bool { a.wire < b.wire }
    public var description: String { rawValue }
}

/// The defaults both sides use, in one place (documented in docs/tls.md).
public enum TLSDefaults {
    /// TLS 1.2: ECDHE key exchange with AEAD ciphers only (AES-GCM, ChaCha20-Poly1305), ECDSA before RSA.
    public static let tls12Ciphers =
        "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:"
        + "ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305"
    /// TLS 1.3: all three suites of RFC 8446 that OpenSSL enables by default.
    public static let tls13CipherSuites = "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256"
    /// Key exchange groups, in preference order.
    public static let groups = "X25519:P-256:P-384"
    /// Session lifetime announced in tickets (seconds), whatever `tls.ticket_rotation` is: a ticket is
    /// usable until the earlier of this and its key's retirement (two rotation periods). Fixed rather
    /// than derived from the rotation, so that a short rotation does not make clients drop tickets
    /// early and a long one does not stretch resumption past 2 h.
    public static let sessionLifetimeSeconds = 7200
    /// `writePlaintext` stops encrypting when this much ciphertext waits to be sent.
    public static let ciphertextHighWater = 256 * 1024
}

/// Server-side TLS for one listener. Paths are absolute or relative to the working directory (the
/// configuration loader resolves them against the config file's directory).
public struct TLSServerConfiguration: Sendable, Equatable {
    public struct Certificate: Sendable, Equatable {
        /// PEM: the leaf first, then intermediates.
        public var certificatePath: String
        /// PEM, unencrypted, mode 0600 or stricter.
        public var privateKeyPath: String
        /// SNI names this certificate answers: exact names, or `*.example.com` (one label). Case-insensitive.
        public var serverNames: [String]

        public init(certificatePath: String, privateKeyPath: String, serverNames: [String] = []) {
            self.certificatePath = certificatePath
            self.privateKeyPath = privateKeyPath
            self.serverNames = serverNames
        }
    }

    /// Never empty; the first is the default (no SNI, or a name no certificate lists).
    public var certificates: [Certificate]
    /// ALPN protocols in server preference order. Empty: no ALPN. A client that offers ALPN but none
    /// of these is refused with `no_application_protocol` (RFC 7301 §3.2).
    public var alpnProtocols: [String]
    public var minimumVersion: TLSVersion
    public var maximumVersion: TLSVersion
    /// OpenSSL cipher list for TLS 1.2.
    public var tls12Ciphers: String
    /// PEM roots: when set, clients must present a certificate issued by one of them (mutual TLS).
    public var clientCertificateCAFile: String?

    public init(
        certificates: [Certificate],
        alpnProtocols: [String] = ["h2", "http/1.1"],
        minimumVersion: TLSVersion = .tls12,
        maximumVersion: TLSVersion = .tls13,
        tls12Ciphers: String = TLSDefaults.tls12Ciphers,
        clientCertificateCAFile: String? = nil
    ) {
        self.certificates = certificates
        self.alpnProtocols = alpnProtocols
        self.minimumVersion = minimumVersion
        self.maximumVersion = maximumVersion
        self.tls12Ciphers = tls12Ciphers
        self.clientCertificateCAFile = clientCertificateCAFile
    }
}

/// Client-side TLS towards an https upstream.
public struct TLSClientConfiguration: Sendable, Equatable {
    /// PEM roots to trust instead of the system's (`SSL_CTX_set_default_verify_paths`).
    public var caFile: String?
    /// Verify the chain and the name. Default true.
    public var verify: Bool
    /// Client certificate (PEM chain) and its key, for mutual TLS: both or neither.
    public var clientCertificatePath: String?
    public var clientKeyPath: String?
    /// ALPN offered. Default `http/1.1` only.
    public var alpnProtocols: [String]
    public var minimumVersion: TLSVersion
    public var maximumVersion: TLSVersion
    public var tls12Ciphers: String

    public init(
        caFile: String? = nil,
        verify: Bool = true,
        clientCertificatePath: String? = nil,
        clientKeyPath: String? = nil,
        alpnProtocols: [String] = ["http/1.1"],
        minimumVersion: TLSVersion = .tls12,
        maximumVersion: TLSVersion = .tls13,
        tls12Ciphers: String = TLSDefaults.tls12Ciphers
    ) {
        self.caFile = caFile
        self.verify = verify
        self.clientCertificatePath = clientCertificatePath
        self.clientKeyPath = clientKeyPath
        self.alpnProtocols = alpnProtocols
        self.minimumVersion = minimumVersion
        self.maximumVersion = maximumVersion
        self.tls12Ciphers = tls12Ciphers
    }
}

/// Why a TLS context cannot be built (at start or reload). The message names the file and the cause.
public struct TLSContextError: Error, Equatable, Sendable, CustomStringConvertible {
    public enum Kind: String, Sendable, Equatable {
        /// Missing, unreadable, not a regular file, or too large.
        case unreadableFile
        /// A private key readable or writable by group or others (mode & 0o077 != 0).
        case insecureKeyPermissions
        case invalidCertificate
        case invalidPrivateKey
        /// The private key is not the one of the certificate.
        case keyMismatch
        /// Bad server names, ALPN list, versions or cipher list.
        case invalidConfiguration
    }

    public let kind: Kind
    public let message: String

    public init(_ kind: Kind, _ message: String) {
        self.kind = kind
        self.message = message
    }

    public var description: String { message }
}
