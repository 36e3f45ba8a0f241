/// An upstream (backend) the gateway forwards to, and its connection pool.
public struct UpstreamConfig: Sendable, Equatable {
    /// Unique among upstreams; routes refer to it.
    public var name: String
    public var target: UpstreamTarget
    /// Pool size. Default 64.
    public var maxConnections: Int
    /// Default 2s.
    public var connectTimeout: Duration
    /// Time from the request's last byte to the response head. Default 30s.
    public var responseTimeout: Duration
    /// How long an idle pooled connection is kept. Default 60s.
    public var idleTimeout: Duration
    /// Client-side TLS: set (with defaults if the YAML has no `tls`) exactly when the url is https.
    public var tls: UpstreamTLSConfig?

    public init(
        name: String,
        target: UpstreamTarget,
        maxConnections: Int = 64,
        connectTimeout: Duration = .seconds(2),
        responseTimeout: Duration = .seconds(30),
        idleTimeout: Duration = .seconds(60),
        tls: UpstreamTLSConfig? = nil
    ) {
        self.name = name
        self.target = target
        self.maxConnections = maxConnections
        self.connectTimeout = connectTimeout
        self.responseTimeout = responseTimeout
        self.idleTimeout = idleTimeout
        self.tls = tls
    }
}

/// Where an upstream is: the in-process demo application (`url: demo`) or a URL.
public enum UpstreamTarget: Sendable, Equatable, CustomStringConvertible {
    case demo
    case url(UpstreamURL)

    public var description: String {
        switch self {
        case .demo: "demo"
        case .url(let url): url.description
        }
    }
}

/// `http://host[:port][/path]` or `https://…`, with the port filled in (80, 443) and the host lowercased.
public struct UpstreamURL: Sendable, Equatable, CustomStringConvertible {
    public enum Scheme: String, Sendable, Equatable {
        case http
        case https
    }

    public var scheme: Scheme
    /// A name, an IPv4 address or an IPv6 address (without brackets).
    public var host: String
    public var port: UInt16
    /// As written after the authority, `""` when absent (`/`, `/base`…).
    public var path: String

    public init(scheme: Scheme, host: String, port: UInt16, path: String = "") {
        self.scheme = scheme
        self.host = host
        self.port = port
        self.path = path
    }

    public var description: String {
        let shownHost = host.contains(":") ? "[\(host)]" : host
        return "\(scheme.rawValue)://\(shownHost):\(port)\(path)"
    }
}

/// Client-side TLS towards an https upstream. File paths are resolved against the config file's directory.
public struct UpstreamTLSConfig: Sendable, Equatable {
    /// PEM roots to trust instead of the system's. nil: the system roots.
    public var caFile: String?
    /// SNI and the name checked in the certificate. nil: the url's host.
    public var serverName: String?
    /// Client certificate and key (PEM paths) for mutual TLS: both or neither.
    public var clientCertificate: String?
    public var clientKey: String?
    /// Verify the upstream's certificate chain and name. Default true.
    public var verify: Bool

    public init(
        caFile: String? = nil,
        serverName: String? = nil,
        clientCertificate: String? = nil,
        clientKey: String? = nil,
        verify: Bool = true
    ) {
        self.caFile = caFile
        self.serverName = serverName
        self.clientCertificate = clientCertificate
        self.clientKey = clientKey
        self.verify = verify
    }
}
