/// The protocols a listener may offer: `http1` (HTTP/1.1); HTTP/2 as `h2` on a TLS listener (chosen
/// by ALPN, RFC 9113 §3.2) or as `h2c` on a listener without TLS (cleartext, prior knowledge, RFC 9113
/// §3.3). Each HTTP/2 name on the other kind of listener is a configuration error.
public enum ListenerProtocol: String, Sendable, Hashable, CaseIterable {
    case http1
    case h2
    case h2c
}

/// A downstream listener: where clients connect, which protocols it speaks, and its TLS.
public struct ListenerConfig: Sendable, Equatable {
    /// Unique among listeners; used in logs and metric labels.
    public var name: String
    public var address: SocketAddressSpec
    /// Never empty. Default: `[http1]`.
    public var protocols: Set<ListenerProtocol>
    /// nil: plain TCP.
    public var tls: TLSConfig?
    /// The HTTP/2 SETTINGS this listener advertises (`http2:`; only with `h2` or `h2c` in `protocols`).
    public var http2: HTTP2ListenerConfig
    /// What happens to client header fields whose names contain `_` or another character than
    /// letters, digits and `-` (`underscores_in_headers`).
    public var underscoresInHeaders: UnderscoresInHeaders
    /// The peers whose X-Forwarded-For, -Proto and -Host are kept and name the client, and who alone
    /// may send a PROXY protocol header: the listener's own `trusted_proxies`, else the top-level
    /// one. Empty: no peer is trusted.
    public var trustedProxies: [IPNetwork]
    /// `proxy_protocol`: every connection starts with a PROXY protocol header (v1 or v2) from a peer
    /// in `trustedProxies` (never empty then); its source is the connection's client.
    public var proxyProtocol: Bool

    public init(
        name: String,
        address: SocketAddressSpec,
        protocols: Set<ListenerProtocol> = [.http1],
        tls: TLSConfig? = nil,
        http2: HTTP2ListenerConfig = HTTP2ListenerConfig(),
        underscoresInHeaders: UnderscoresInHeaders = .drop,
        trustedProxies: [IPNetwork] = [],
        proxyProtocol: Bool = false
    ) {
        self.name = name
        self.address = address
        self.protocols = protocols
        self.tls = tls
        self.http2 = http2
        self.underscoresInHeaders = underscoresInHeaders
        self.trustedProxies = trustedProxies
        self.proxyProtocol = proxyProtocol
    }

    /// Whether the listener serves HTTP/2: `h2` (TLS) or `h2c` (cleartext).
    public var servesHTTP2: Bool { protocols.contains(.h2) || protocols.contains(.h2c) }
}

/// `listeners[].underscores_in_headers`: CGI, WSGI and PHP backends read `X_Key` and `X-Key` as the
/// same variable (old Apache CGI also `X.Key`), so such a name can pose as a field the gateway sets.
public enum UnderscoresInHeaders: String, Sendable, Hashable, CaseIterable {
    /// Names with `_` or another character than letters, digits and `-` never reach an upstream
    /// (nginx's `underscores_in_headers off` with `ignore_invalid_headers on`).
    case drop
    /// They are forwarded, except those that fold into a field the gateway sets or interprets.
    case allow
}

/// `listeners[].http2`: what an HTTP/2 connection on the listener advertises in its SETTINGS frame
/// (RFC 9113 §6.5.2), and the limits it enforces against floods (RFC 9113 §10.5). The defaults are
/// those of `GatewayHTTP.HTTP2Settings` (docs/http2.md); the ranges are checked when decoding.
public struct HTTP2ListenerConfig: Sendable, Equatable {
    /// SETTINGS_MAX_CONCURRENT_STREAMS, 1 ... 2^31-1.
    public var maxConcurrentStreams: Int
    /// SETTINGS_MAX_HEADER_LIST_SIZE in bytes, 1 KiB ... 2^31-1.
    public var maxHeaderListSize: Int
    /// SETTINGS_INITIAL_WINDOW_SIZE in bytes, 0 ... 2^31-1.
    public var initialWindowSize: Int
    /// The connection-level receive window in bytes, 65535 ... 2^31-1.
    public var connectionWindowSize: Int
    /// SETTINGS_MAX_FRAME_SIZE in bytes, 16384 ... 16777215.
    public var maxFrameSize: Int
    /// CONTINUATION frames accepted after one HEADERS frame (CVE-2024-27316), 1 ... 1000.
    public var maxContinuations: Int
    /// Streams the client may reset (or make us reset) within `resetWindow` (CVE-2023-44487,
    /// CVE-2025-8671), 1 ... 1000000.
    public var maxResets: Int
    /// The fixed window `maxResets` is counted in, 100ms ... 1h.
    public var resetWindow: Duration
    /// SETTINGS and PING acknowledgements the client may leave unread (PING/SETTINGS flood), 1 ... 100000.
    public var maxOutboundAck: Int
    /// Entries accepted in one SETTINGS frame, 6 ... 1000.
    public var maxSettingsEntries: Int

    public static let maxConcurrentStreamsRange = 1...0x7fff_ffff
    public static let maxHeaderListSizeRange = 1024...0x7fff_ffff
    public static let initialWindowSizeRange = 0...0x7fff_ffff
    public static let connectionWindowSizeRange = 65535...0x7fff_ffff
    public static let maxFrameSizeRange = 16384...16_777_215
    public static let maxContinuationsRange = 1...1000
    public static let maxResetsRange = 1...1_000_000
    public static let resetWindowRange: ClosedRange<Duration> = .milliseconds(100) ... .seconds(3600)
    public static let maxOutboundAckRange = 1...100_000
    public static let maxSettingsEntriesRange = 6...1000

    public init(
        maxConcurrentStreams: Int = 128,
        maxHeaderListSize: Int = 16 * 1024,
        initialWindowSize: Int = 64 * 1024,
        connectionWindowSize: Int = 1024 * 1024,
        maxFrameSize: Int = 16 * 1024,
        maxContinuations: Int = 8,
        maxResets: Int = 200,
        resetWindow: Duration = .seconds(10),
        maxOutboundAck: Int = 1000,
        maxSettingsEntries: Int = 32
    ) {
        self.maxConcurrentStreams = maxConcurrentStreams
        self.maxHeaderListSize = maxHeaderListSize
        self.initialWindowSize = initialWindowSize
        self.connectionWindowSize = connectionWindowSize
        self.maxFrameSize = maxFrameSize
        self.maxContinuations = maxContinuations
        self.maxResets = maxResets
        self.resetWindow = resetWindow
        self.maxOutboundAck = maxOutboundAck
        self.maxSettingsEntries = maxSettingsEntries
    }
}

/// Server-side TLS for a listener: one certificate, or several chosen by SNI.
///
/// YAML accepts `{certificate, private_key}` (one certificate, no server names) or
/// `{certificates: [{certificate, private_key, server_names}]}`. Both become `certificates`.
public struct TLSConfig: Sendable, Equatable {
    /// A certificate chain and its key, as PEM file paths resolved against the config file's directory.
    public struct Certificate: Sendable, Equatable {
        public var certificatePath: String
        public var privateKeyPath: String
        /// SNI names this certificate answers (`*.example.com` allowed, stored lowercased). Empty only
        /// for the first certificate, which is also the default when no name matches.
        public var serverNames: [String]

        public init(certificatePath: String, privateKeyPath: String, serverNames: [String] = []) {
            self.certificatePath = certificatePath
            self.privateKeyPath = privateKeyPath
            self.serverNames = serverNames
        }
    }

    /// Never empty; the first is the default certificate.
    public var certificates: [Certificate]
    /// How often the listener's session ticket keys rotate (`ticket_rotation`, 2s ... 24h). A ticket
    /// resumes while its key is the current or the previous one: for one to two periods.
    public var ticketRotation: Duration

    public static let ticketRotationRange: ClosedRange<Duration> = .seconds(2) ... .seconds(86400)

    public init(certificates: [Certificate], ticketRotation: Duration = .seconds(3600)) {
        self.certificates = certificates
        self.ticketRotation = ticketRotation
    }
}
