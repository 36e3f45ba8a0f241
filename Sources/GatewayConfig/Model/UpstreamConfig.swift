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
    /// The servers requests are balanced over: `url` is one server, `servers` lists them (then
    /// `target` is the first one's url). Empty for the demo upstream. Same scheme and path for all.
    public var servers: [UpstreamServerConfig]
    /// How a request picks a server (several servers only). Default round robin.
    public var balance: UpstreamBalance
    /// Failures in a row (connect error or timeout, TLS handshake failure, connection closed before
    /// any response) that eject a server; 0: never ejected. Default 3.
    public var maxFails: Int
    /// How long the first ejection lasts; each further ejection in a row doubles it. Default 10s.
    public var failTimeout: Duration
    /// The longest an ejection lasts, however many came before. Default 300s.
    public var maxFailTimeout: Duration
    /// Active health checks; nil: none (passive health only).
    public var healthCheck: UpstreamHealthCheckConfig?
    /// How often servers given by host name are resolved again; nil: resolved once at load (every
    /// server is an IP address, or `resolve_interval: off`). Default 30s when some server is a name.
    public var resolveInterval: Duration?
    /// Further servers a failed request may be sent to (idempotent, or not sent yet). Default 1.
    public var retries: Int

    /// Servers an upstream may list (a request's tried servers are a 64-bit set).
    public static let maximumServers = 64

    /// The default of `resolve_interval` when a server is given by name.
    public static let defaultResolveInterval: Duration = .seconds(30)

    /// - Parameters:
    ///   - servers: nil: the url of `target` as the only server (none for `demo`).
    ///   - resolveInterval: nil: the default (30s when a server is a name, else none).
    public init(
        name: String,
        target: UpstreamTarget,
        maxConnections: Int = 64,
        connectTimeout: Duration = .seconds(2),
        responseTimeout: Duration = .seconds(30),
        idleTimeout: Duration = .seconds(60),
        tls: UpstreamTLSConfig? = nil,
        servers: [UpstreamServerConfig]? = nil,
        balance: UpstreamBalance = .roundRobin,
        maxFails: Int = 3,
        failTimeout: Duration = .seconds(10),
        maxFailTimeout: Duration = .seconds(300),
        healthCheck: UpstreamHealthCheckConfig? = nil,
        resolveInterval: Duration? = nil,
        retries: Int = 1
    ) {
        self.name = name
        self.target = target
        self.maxConnections = maxConnections
        self.connectTimeout = connectTimeout
        self.responseTimeout = responseTimeout
        self.idleTimeout = idleTimeout
        self.tls = tls
        let list: [UpstreamServerConfig]
        if let servers {
            list = servers
        } else if case .url(let url) = target {
            list = [UpstreamServerConfig(url: url)]
        } else {
            list = []
        }
        self.servers = list
        self.balance = balance
        self.maxFails = maxFails
        self.failTimeout = failTimeout
        self.maxFailTimeout = maxFailTimeout
        self.healthCheck = healthCheck
        self.resolveInterval = resolveInterval ?? (list.contains { $0.url.hostIsName } ? Self.defaultResolveInterval : nil)
        self.retries = retries
    }
}

/// One server of an upstream: `servers[]` as a url, or `{url, weight}`.
public struct UpstreamServerConfig: Sendable, Equatable {
    public var url: UpstreamURL
    /// Its share of requests relative to the others' (round robin), or of connections (least
    /// connections). 1 to 1000, default 1.
    public var weight: Int

    public init(url: UpstreamURL, weight: Int = 1) {
        self.url = url
        self.weight = weight
    }

    /// `host:port` (`[v6]:port`): the server's name in metrics and logs, unique within its upstream.
    public var label: String {
        let shownHost = url.host.contains(":") ? "[\(url.host)]" : url.host
        return "\(shownHost):\(url.port)"
    }
}

/// `upstreams[].balance`.
public enum UpstreamBalance: String, Sendable, Equatable, CaseIterable {
    /// Smooth weighted round robin (nginx's): over any window, each server gets its weight's share,
    /// interleaved rather than in runs.
    case roundRobin = "round_robin"
    /// The server with the fewest requests in progress on the event loop, relative to its weight;
    /// ties go round robin.
    case leastConnections = "least_connections"
}

/// `upstreams[].health_check`: a request sent to every server on an interval; a server that fails
/// one is taken out of the balance until one passes.
public struct UpstreamHealthCheckConfig: Sendable, Equatable {
    /// Requested with GET, with the server's host as Host.
    public var path: String
    /// Default 10s.
    public var interval: Duration
    /// The whole check (connect, answer). Default 2s; less than `interval`.
    public var timeout: Duration
    /// The status that passes; nil: any 2xx or 3xx.
    public var expectStatus: Int?

    public init(path: String, interval: Duration = .seconds(10), timeout: Duration = .seconds(2), expectStatus: Int? = nil) {
        self.path = path
        self.interval = interval
        self.timeout = timeout
        self.expectStatus = expectStatus
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

    /// The host is a name to resolve (not an IP address literal).
    public var hostIsName: Bool { !HostSyntax.isIPv4(host) && !HostSyntax.isIPv6(host) }
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
