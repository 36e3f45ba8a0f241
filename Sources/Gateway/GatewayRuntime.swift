import AppAttest
import Foundation
import GatewayConfig
import GatewayCrypto
import GatewayHTTP
import GatewayIO
import GatewayPolicy
import GatewayProxy

/// A configuration compiled into what the request path reads: matchers, resolved upstream
/// addresses, limits. Immutable; a reload builds a new one and swaps it in on every loop.
public final class GatewayRuntime: Sendable {
    public struct CompiledRoute: Sendable {
        public let name: String
        public let match: GatewayProxy.RouteMatch
        /// An upstream name; for a name in `demoUpstreams`, the in-process demo application.
        public let upstream: String
        public let maxBody: Int
        public let assertion: AssertionPolicy
        /// Position in `routes` (file order): routers keep per-route state in arrays indexed by it.
        public let index: Int
    }

    public struct CompileError: Error, CustomStringConvertible {
        public let description: String
    }

    public let config: GatewayConfig
    public let routes: [CompiledRoute]
    /// Whether some route matches on the Host (else requests are routed without reading it).
    public let matchesHosts: Bool
    /// `attest.challenge_path` and `attest.register_path`, read on every request.
    public let challengePath: String
    public let registerPath: String
    /// Upstream name → target; demo upstreams have no entry.
    public let targets: [String: GatewayProxy.UpstreamTarget]
    /// Per https upstream: SHA-256 of its configuration and of the bytes of its CA and client files.
    /// A reload reuses the running `TLSClientContext` (and so the pool, its connections and its TLS
    /// sessions) while this is unchanged; a certificate rotated in place still takes effect.
    let upstreamTLSFingerprints: [String: [UInt8]]
    public let demoUpstreams: Set<String>
    public let downstreamLimits: DownstreamLimits
    public let workers: Int
    /// Apps, trust roots and challenge TTL compiled for registration and assertion checks.
    public let attest: AttestPolicy
    /// Subjects of the roots trusted besides Apple's (tests only; logged loudly at start and reload).
    public let extraRootSubjects: [String]
    /// Subjects of the roots trusted for receipts besides Apple Root CA - G3 (tests only; logged loudly).
    public let extraReceiptRootSubjects: [String]
    /// Removes a client-sent copy of the verified-key header: applied to every forwarded request.
    public let stripVerifiedHeader: HeaderEdit
    /// On protected routes also the three assertion headers, which never reach an upstream.
    public let stripAttestHeaders: HeaderEdit
    /// Listener name → its TLS context (certificates read and checked now), for TLS listeners.
    public let listenerTLS: [String: TLSServerContext]
    /// Listener name → its session ticket keys (TLS listeners), carried over from the previous
    /// runtime on reload (clients keep resuming); rotated by the server every `tls.ticket_rotation`.
    public let ticketKeys: [String: TLSTicketKeys]
    /// Listener name → the HTTP/2 SETTINGS its connections advertise (`listeners[].http2`), for
    /// listeners that serve HTTP/2 (h2c, or h2 by ALPN over TLS).
    public let http2Settings: [String: HTTP2Settings]
    /// Who may use the admin listener (`admin.token_file` read now: a missing, empty or
    /// world-readable token file fails the start, the reload and `gatewayd check`).
    public let adminAccess: AdminAccess
    /// What `gatewayd check` prints and start and reload log as warnings (the configuration is valid).
    public let warnings: [String]
    /// `attest.challenge_rate`: the per-client table (carried over from the previous runtime while
    /// its size is unchanged, so a reload forgets no client) and its rate; nil when `off`.
    public let clientLimit: AdmissionLimit<ClientRateLimiter>?
    /// `attest.registration_rate`: the process's bucket (carried over on reload) and its rate; nil when `off`.
    public let registrationLimit: AdmissionLimit<RateBucket>?

    /// A token bucket (or table of them) with the rate and burst of this configuration.
    public struct AdmissionLimit<Buckets: Sendable>: Sendable {
        public let buckets: Buckets
        public let ratePerSecond: Double
        public let burst: Int
    }

    /// - Parameter previous: the running runtime on reload (its ticket keys are kept).
    public init(_ config: GatewayConfig, coreCount: Int, previous: GatewayRuntime? = nil) throws(CompileError) {
        self.config = config
        workers = config.workers.resolved(coreCount: coreCount)
        var listenerTLS: [String: TLSServerContext] = [:]
        var ticketKeys: [String: TLSTicketKeys] = [:]
        for l in config.listeners {
            guard let tls = l.tls else { continue }
            let keys = previous?.ticketKeys[l.name] ?? TLSTicketKeys()
            ticketKeys[l.name] = keys
            do {
                listenerTLS[l.name] = try TLSServerContext(configuration: Self.serverConfiguration(l, tls), ticketKeys: keys)
            } catch {
                throw CompileError(description: "listener \(l.name): tls: \(error.message)")
            }
        }
        self.listenerTLS = listenerTLS
        self.ticketKeys = ticketKeys
        var http2Settings: [String: HTTP2Settings] = [:]
        for l in config.listeners where l.protocols.contains(.h2c) {
            let settings = Self.http2Settings(l.http2)
            do {
                try settings.validate()
            } catch {
                throw CompileError(description: "listener \(l.name): http2: \(error)")
            }
            http2Settings[l.name] = settings
        }
        self.http2Settings = http2Settings
        var targets: [String: GatewayProxy.UpstreamTarget] = [:]
        var fingerprints: [String: [UInt8]] = [:]
        var demo: Set<String> = []
        for u in config.upstreams {
            switch u.target {
            case .demo:
                demo.insert(u.name)
            case .url(let url):
                var client: TLSClientContext?
                if url.scheme == .https {
                    let t = u.tls ?? UpstreamTLSConfig()
                    let fingerprint = Self.fingerprint(u, t)
                    fingerprints[u.name] = fingerprint
                    if let p = previous, p.upstreamTLSFingerprints[u.name] == fingerprint, let running = p.targets[u.name]?.tls {
                        client = running
                    } else {
                        do {
                            client = try TLSClientContext(configuration: Self.clientConfiguration(t))
                        } catch {
                            throw CompileError(description: "upstream \(u.name): tls: \(error.message)")
                        }
                    }
                }
                let address: SocketAddress
                do {
                    address = try SocketAddress.resolve(host: url.host, port: url.port)
                } catch {
                    throw CompileError(description: "upstream \(u.name): \(error)")
                }
                targets[u.name] = GatewayProxy.UpstreamTarget(
                    name: u.name, address: address,
                    maxConnections: max(1, (u.maxConnections + workers - 1) / workers),
                    connectTimeoutMillis: u.connectTimeout.millis, responseTimeoutMillis: u.responseTimeout.millis,
                    idleTimeoutMillis: u.idleTimeout.millis,
                    tls: client, tlsServerName: client == nil ? nil : (u.tls?.serverName ?? url.host))
            }
        }
        self.targets = targets
        upstreamTLSFingerprints = fingerprints
        demoUpstreams = demo
        routes = config.routes.enumerated().map { index, r in
            let path: (String?, String?) =
                switch r.match.path {
                case .prefix(let p): (p, nil)
                case .exact(let p): (nil, p)
                }
            return CompiledRoute(
                name: r.name,
                match: GatewayProxy.RouteMatch(methods: Set(r.match.methods), pathPrefix: path.0, exactPath: path.1, host: r.match.host),
                upstream: r.upstream, maxBody: r.maxBody, assertion: r.assertion, index: index)
        }
        matchesHosts = routes.contains { $0.match.host != nil }
        challengePath = config.attest.challengePath
        registerPath = config.attest.registerPath
        let roots: [X509Certificate]
        do {
            roots = try X509Certificate.loadPEMFiles(config.trust.extraRoots)
        } catch {
            throw CompileError(description: "trust.extra_roots: \(error)")
        }
        extraRootSubjects = roots.map(\.subject)
        let receiptRoots: [X509Certificate]
        do {
            receiptRoots = try X509Certificate.loadPEMFiles(config.trust.extraReceiptRoots)
        } catch {
            throw CompileError(description: "trust.extra_receipt_roots: \(error)")
        }
        extraReceiptRootSubjects = receiptRoots.map(\.subject)
        do {
            attest = try AttestPolicy(
                apps: config.apps, extraRoots: roots, extraReceiptRoots: receiptRoots, challengeTTLMillis: config.attest.challengeTTL.millis)
        } catch {
            throw CompileError(description: error.description)
        }
        do {
            adminAccess = try AdminAccess(config.admin)
        } catch {
            throw CompileError(description: error.description)
        }
        var warnings: [String] = []
        if !adminAccess.requiresToken, !Self.isLoopback(config.admin.address.host) {
            warnings.append(
                "admin.address \(config.admin.address) is not a loopback address and admin.token_file is not set: "
                    + "/explain (client addresses, key ids, why requests were refused) is open to whoever reaches it")
        }
        self.warnings = warnings
        let rates = config.attest.challengeRate
        clientLimit = rates.perClient.map { rate in
            let running = previous?.clientLimit?.buckets
            let table = running.flatMap { previous?.config.attest.challengeRate.clients == rates.clients ? $0 : nil }
            return AdmissionLimit(buckets: table ?? ClientRateLimiter(capacity: rates.clients), ratePerSecond: rate.perSecond, burst: rates.burst)
        }
        registrationLimit = config.attest.registrationRate.map { rate in
            AdmissionLimit(
                buckets: previous?.registrationLimit?.buckets ?? RateBucket(), ratePerSecond: rate.perSecond,
                burst: max(1, Int(rate.perSecond.rounded(.up))))
        }
        let verifiedHeader = config.attest.verifiedKeyHeader
        stripVerifiedHeader = HeaderEdit(remove: [verifiedHeader])
        stripAttestHeaders = HeaderEdit(remove: [AttestHeaders.keyID, AttestHeaders.challenge, AttestHeaders.assertion, verifiedHeader])
        let l = config.limits
        downstreamLimits = DownstreamLimits(
            parser: HTTP1Parser.Limits(maxRequestLine: l.maxRequestLine, maxHeaderBytes: l.maxHeaderBytes, maxHeaderCount: l.maxHeaderCount),
            idleTimeoutMillis: l.idleTimeout.millis, headerTimeoutMillis: l.headerTimeout.millis,
            bodyTimeoutMillis: l.bodyTimeout.millis)
    }

    /// ALPN `h2,http/1.1` when the listener speaks HTTP/2, else `http/1.1` only.
    static func serverConfiguration(_ l: ListenerConfig, _ tls: TLSConfig) -> TLSServerConfiguration {
        TLSServerConfiguration(
            certificates: tls.certificates.map {
                .init(certificatePath: $0.certificatePath, privateKeyPath: $0.privateKeyPath, serverNames: $0.serverNames)
            },
            alpnProtocols: l.protocols.contains(.h2c) ? ["h2", "http/1.1"] : ["http/1.1"])
    }

    /// The configured SETTINGS and flood limits over `HTTP2Settings`' defaults. The decoder has
    /// checked the ranges, so the values fit.
    static func http2Settings(_ c: HTTP2ListenerConfig) -> HTTP2Settings {
        var s = HTTP2Settings()
        s.maxConcurrentStreams = UInt32(clamping: c.maxConcurrentStreams)
        s.maxHeaderListSize = UInt32(clamping: c.maxHeaderListSize)
        s.initialWindowSize = UInt32(clamping: c.initialWindowSize)
        s.connectionWindowSize = UInt32(clamping: c.connectionWindowSize)
        s.maxFrameSize = UInt32(clamping: c.maxFrameSize)
        s.maxContinuations = c.maxContinuations
        s.maxResetsPerWindow = c.maxResets
        let (seconds, attoseconds) = c.resetWindow.components
        s.resetWindowNanoseconds = UInt64(seconds) * 1_000_000_000 + UInt64(attoseconds / 1_000_000_000)
        s.maxOutboundAck = c.maxOutboundAck
        s.maxSettingsEntries = c.maxSettingsEntries
        return s
    }

    static func clientConfiguration(_ t: UpstreamTLSConfig) -> TLSClientConfiguration {
        TLSClientConfiguration(caFile: t.caFile, verify: t.verify, clientCertificatePath: t.clientCertificate, clientKeyPath: t.clientKey)
    }

    /// The position of the first route whose match holds (file order; no copy of the route).
    public func routeIndex(method: String, path: String, host: String?) -> Int? {
        // Borrowed in place: a subscript read would copy each route (a retain per string in it).
        routes.withUnsafeBufferPointer { routes in
            var i = 0
            while i < routes.count {
                if routes[i].match.matches(method: method, path: path, host: host) { return i }
                i += 1
            }
            return nil
        }
    }
}

extension GatewayRuntime {
    /// `127.0.0.0/8`, `::1` and `localhost`: reachable from this host only.
    static func isLoopback(_ host: String) -> Bool {
        let h = host.lowercased()
        return h == "localhost" || h == "::1" || h.hasPrefix("127.")
    }

    /// What an https upstream's TLS context is made of: its configuration and its files' bytes (an
    /// unreadable file hashes as empty; building the context then reports it).
    static func fingerprint(_ u: UpstreamConfig, _ t: UpstreamTLSConfig) -> [UInt8] {
        let hasher = SHA256.Hasher()
        hasher.update(Array("\(u.target)|\(t)".utf8))
        for path in [t.caFile, t.clientCertificate, t.clientKey] {
            hasher.update([0])
            if let path, let data = FileManager.default.contents(atPath: path) { hasher.update([UInt8](data)) }
        }
        return hasher.finalize()
    }
}

extension Duration {
    var millis: Int64 {
        let (s, atto) = components
        return s * 1000 + atto / 1_000_000_000_000_000
    }
}
