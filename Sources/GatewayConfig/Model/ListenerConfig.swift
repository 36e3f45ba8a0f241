/// The protocols a listener may offer: `http1` (HTTP/1.1) and `h2c` (HTTP/2 with prior knowledge, cleartext).
public enum ListenerProtocol: String, Sendable, Hashable, CaseIterable {
    case http1
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
    /// The HTTP/2 SETTINGS this listener advertises (`http2:`; only with `h2c` in `protocols`).
    public var http2: HTTP2ListenerConfig

    public init(
        name: String,
        address: SocketAddressSpec,
        protocols: Set<ListenerProtocol> = [.http1],
        tls: TLSConfig? = nil,
        http2: HTTP2ListenerConfig = HTTP2ListenerConfig()
    ) {
        self.name = name
        self.address = address
        self.protocols = protocols
        self.tls = tls
        self.http2 = http2
    }
}

/// `listeners[].http2`: what an HTTP/2 connection on the listener advertises in its SETTINGS frame
/// (RFC 9113 §6.5.2). The defaults are those of `GatewayHTTP.HTTP2Settings` (docs/http2.md); the
/// ranges are checked when decoding.
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

    public static let maxConcurrentStreamsRange = 1...0x7fff_ffff
    public static let maxHeaderListSizeRange = 1024...0x7fff_ffff
    public static let initialWindowSizeRange = 0...0x7fff_ffff
    public static let connectionWindowSizeRange = 65535...0x7fff_ffff
    public static let maxFrameSizeRange = 16384...16_777_215

    public init(
        maxConcurrentStreams: Int = 128,
        maxHeaderListSize: Int = 16 * 1024,
        initialWindowSize: Int = 64 * 1024,
        connectionWindowSize: Int = 1024 * 1024,
        maxFrameSize: Int = 16 * 1024
    ) {
        self.maxConcurrentStreams = maxConcurrentStreams
        self.maxHeaderListSize = maxHeaderListSize
        self.initialWindowSize = initialWindowSize
        self.connectionWindowSize = connectionWindowSize
        self.maxFrameSize = maxFrameSize
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

    public init(certificates: [Certificate]) {
        self.certificates = certificates
    }
}
