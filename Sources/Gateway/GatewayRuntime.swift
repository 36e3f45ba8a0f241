import AppAttest
import Foundation
import GatewayConfig
import GatewayCrypto
import GatewayHTTP
import GatewayIO
import GatewayPolicy
import GatewayProxy
import GatewayRedis

/// A configuration compiled into what the request path reads: matchers, resolved upstream
/// addresses, limits. Immutable; a reload builds a new one and swaps it in on every loop.
public final class GatewayRuntime: Sendable {
    /// A class: the request path hands a route to the closures of its steps, and a reference costs
    /// one retain where a copy of these fields cost one per field.
    public final class CompiledRoute: Sendable {
        public let name: String
        public let match: GatewayProxy.RouteMatch
        /// An upstream name; for a name in `demoUpstreams`, the in-process demo application.
        public let upstream: String
        public let maxBody: Int
        public let assertion: RoutePolicy
        /// Position in `routes` (file order): routers keep per-route state in arrays indexed by it.
        public let index: Int
        /// The route's DeviceCheck fallback (`assertion.fallback`), with its share window; nil: none.
        public let fallback: RouteFallback?
        /// `timeouts.response` and `timeouts.connect` (nil: the upstream's).
        public let responseTimeoutMillis: Int64?
        public let connectTimeoutMillis: Int64?
        /// `pass_server_header`: the upstream's `Server` field reaches the client.
        public let passServerHeader: Bool
        /// `assertion.verdict_header`: forwarded requests carry the signed verdict (`VerdictSigning`).
        public let verdictHeader: Bool

        init(
            name: String, match: GatewayProxy.RouteMatch, upstream: String, maxBody: Int, assertion: RoutePolicy, index: Int,
            fallback: RouteFallback?, responseTimeoutMillis: Int64? = nil, connectTimeoutMillis: Int64? = nil,
            passServerHeader: Bool = false, verdictHeader: Bool = false
        ) {
            self.verdictHeader = verdictHeader
            self.name = name
            self.match = match
            self.upstream = upstream
            self.maxBody = maxBody
            self.assertion = assertion
            self.index = index
            self.fallback = fallback
            self.responseTimeoutMillis = responseTimeoutMillis
            self.connectTimeoutMillis = connectTimeoutMillis
            self.passServerHeader = passServerHeader
        }
    }

    /// A route's fallback compiled: its settings and its share of fallback requests (kept across a
    /// reload that leaves the route's fallback as it was).
    public struct RouteFallback: Sendable {
        public let config: FallbackPolicy
        public let share: FallbackShare
        public var tokenTTLMillis: Int64 { config.tokenTTLMillis }
    }

    /// An upstream with a connection (not `demo`), as each loop builds its pools and balancer.
    public struct UpstreamPlan: Sendable {
        public struct Server: Sendable {
            /// The pool's target: the address at load, SNI the server's host (or `tls.server_name`).
            public let target: GatewayProxy.UpstreamTarget
            /// Health and current address, shared by the loops; kept across reloads while the
            /// server, its weight and its health policy are unchanged.
            public let shared: UpstreamServer
        }

        public let name: String
        public let servers: [Server]
        public let algorithm: UpstreamBalancer.Algorithm
        public let retries: Int
        public let healthCheck: UpstreamHealthChecker.Spec?
        /// Servers given by name are resolved again this often (nil: never).
        public let resolveIntervalMillis: Int64?
    }

    public struct CompileError: Error, CustomStringConvertible {
        public let description: String
        /// The problem at the value it is about (`file:line:column`), when it is about one.
        public let diagnostic: ConfigDiagnostic?

        public init(description: String) {
            self.description = description
            diagnostic = nil
        }

        /// `message` about the value at `path` of `config` (docs/configuration.md paths: `upstreams[0].url`).
        init(_ config: GatewayConfig, at path: String, _ message: String) {
            let d = config.sourceMap.diagnostic(at: path, message)
            description = d.description
            diagnostic = d
        }
    }

    public let config: GatewayConfig
    public let routes: [CompiledRoute]
    /// Whether some route matches on the Host (else requests are routed without reading it).
    public let matchesHosts: Bool
    /// Whether some protected route is limited to methods other than POST: then a POST that goes to
    /// a plain route on a path such a route protects has its body read for a `_method` override
    /// (`overrideGuarded`), which frameworks would otherwise run as the protected method.
    public let guardsBodyOverride: Bool
    /// `attest.challenge_path` and `attest.register_path`, read on every request.
    public let challengePath: String
    public let registerPath: String
    /// Upstream name → target (the first server's); demo upstreams have no entry.
    public let targets: [String: GatewayProxy.UpstreamTarget]
    /// Upstream name → its servers, balance, health checks; demo upstreams have no entry.
    public let upstreamPlans: [String: UpstreamPlan]
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
    /// Subjects of the roots trusted for Android attestations besides Google's (tests only; logged loudly).
    public let extraAndroidRootSubjects: [String]
    /// The TLS client context of `android.status_url` (its `ca_file`, else the system's CAs), when an
    /// app has `android` and the list is fetched; nil otherwise.
    let androidStatusTLS: TLSClientContext?
    /// `android.ca_file`'s path and bytes, hashed: a reload keeps `androidStatusTLS` while it is unchanged.
    private let androidStatusCAFingerprint: [UInt8]

    /// The PEM files of one of `trust`'s lists, each error at its file's position (`key[i]`).
    static func loadRoots(_ paths: [String], key: String, _ config: GatewayConfig) throws(CompileError) -> [X509Certificate] {
        var roots: [X509Certificate] = []
        for (i, path) in paths.enumerated() {
            do {
                roots += try X509Certificate.loadPEMFiles([path])
            } catch {
                throw CompileError(config, at: "\(key)[\(i)]", "\(key)[\(i)] \(error)")
            }
        }
        return roots
    }

    /// SHA-256 of a CA file's path and bytes ([] for the system's CAs).
    static func caFingerprint(_ path: String?) -> [UInt8] {
        guard let path else { return [] }
        let hasher = SHA256.Hasher()
        hasher.update(Array(path.utf8))
        hasher.update([0])
        if let data = FileManager.default.contents(atPath: path) { hasher.update([UInt8](data)) }
        return hasher.finalize()
    }
    /// Removes a client-sent copy of the verified-key header: applied to every forwarded request.
    public let stripVerifiedHeader: HeaderEdit
    /// On protected routes also the three assertion headers, which never reach an upstream.
    public let stripAttestHeaders: HeaderEdit
    /// `accounts.window` in milliseconds, read on every verified request (a `Duration`'s conversion
    /// is a 128-bit multiplication).
    public let accountWindowMillis: Int64
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
    /// `store.kind: redis`: the password (`password_file` read now) and the TLS context (`store.tls`
    /// files read now) every Redis connection uses; nil for the memory store.
    public let storeSecurity: RedisSecurity?
    /// What `gatewayd check` prints and start and reload log as warnings (the configuration is valid).
    public let warnings: [String]
    /// `attest.challenge_rate`: the per-client table (carried over from the previous runtime while
    /// its size is unchanged, so a reload forgets no client) and its rate; nil when `off`.
    public let clientLimit: AdmissionLimit<ClientRateLimiter>?
    /// `attest.registration_rate`: the process's bucket (carried over on reload) and its rate; nil when `off`.
    public let registrationLimit: AdmissionLimit<RateBucket>?
    /// `apple` compiled (the key file read and checked now); kept from the previous runtime while
    /// nothing of it changed (its token, TLS context and pools go on). nil without `apple`.
    let apple: AppleServices?
    /// `verdict` compiled (the key file read and checked now) with the keys its JWKS publishes (a
    /// replaced key stays for its tokens' ttl after the reload); nil without `verdict`.
    let verdict: VerdictSigning?
    /// `verdict.publish`: the listeners answer `/.well-known/jwks.json` (read per request: a flag,
    /// not the section).
    let publishesJWKS: Bool

    /// A token bucket (or table of them) with the rate and burst of this configuration.
    public struct AdmissionLimit<Buckets: Sendable>: Sendable {
        public let buckets: Buckets
        public let ratePerSecond: Double
        public let burst: Int
    }

    /// The downstream limits of a listener: `downstreamLimits` with its rule for foldable names, its
    /// trusted proxies and whether it reads a PROXY protocol header.
    public func downstreamLimits(for listener: ListenerConfig) -> DownstreamLimits {
        var limits = downstreamLimits
        limits.dropFoldableNames = listener.underscoresInHeaders == .drop
        limits.trustedProxies = TrustedProxies(networks: listener.trustedProxies.map { ($0.address, $0.prefixLength) })
        limits.proxyProtocol = listener.proxyProtocol
        return limits
    }

    /// - Parameter previous: the running runtime on reload (its ticket keys are kept, and its
    ///   `workers`: the event loops are started once, so a changed `workers` waits for a restart).
    public init(_ config: GatewayConfig, coreCount: Int, previous: GatewayRuntime? = nil) throws(CompileError) {
        self.config = config
        workers = previous?.workers ?? config.workers.resolved(coreCount: coreCount)
        var listenerTLS: [String: TLSServerContext] = [:]
        var ticketKeys: [String: TLSTicketKeys] = [:]
        for l in config.listeners {
            guard let tls = l.tls else { continue }
            let keys = previous?.ticketKeys[l.name] ?? TLSTicketKeys()
            ticketKeys[l.name] = keys
            do {
                listenerTLS[l.name] = try TLSServerContext(configuration: Self.serverConfiguration(l, tls), ticketKeys: keys)
            } catch {
                let i = config.listeners.firstIndex { $0.name == l.name } ?? 0
                throw CompileError(config, at: "listeners[\(i)].tls", "listeners[\(i)].tls (listener \(l.name)): \(error.message)")
            }
        }
        self.listenerTLS = listenerTLS
        self.ticketKeys = ticketKeys
        var http2Settings: [String: HTTP2Settings] = [:]
        for l in config.listeners where l.servesHTTP2 {
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
        var plans: [String: UpstreamPlan] = [:]
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
                            let i = config.upstreams.firstIndex { $0.name == u.name } ?? 0
                            throw CompileError(
                                config, at: "upstreams[\(i)].tls", "upstreams[\(i)].tls (upstream \(u.name)): \(error.message)")
                        }
                    }
                }
                let plan = try Self.plan(u, config: config, workers: workers, tls: client, previous: previous?.upstreamPlans[u.name])
                plans[u.name] = plan
                targets[u.name] = plan.servers[0].target
            }
        }
        self.targets = targets
        upstreamPlans = plans
        upstreamTLSFingerprints = fingerprints
        demoUpstreams = demo
        routes = config.routes.enumerated().map { index, r in
            let path: (String?, String?) =
                switch r.match.path {
                case .prefix(let p): (p, nil)
                case .exact(let p): (nil, p)
                }
            var fold: PathFold = []
            for f in r.match.effectiveFold(assertion: r.assertion.mode) {
                switch f {
                case .case: fold.insert(.case)
                case .params: fold.insert(.params)
                case .suffix: fold.insert(.suffix)
                case .trim: fold.insert(.trim)
                }
            }
            return CompiledRoute(
                name: r.name,
                match: GatewayProxy.RouteMatch(
                    methods: Set(r.match.methods), pathPrefix: path.0, exactPath: path.1, host: r.match.host, fold: fold),
                upstream: r.upstream, maxBody: r.maxBody, assertion: RoutePolicy(r.assertion, route: r.name), index: index,
                fallback: r.assertion.fallback.map { c in
                    let f = FallbackPolicy(c)
                    let kept = previous?.routes.first { $0.name == r.name }?.fallback.flatMap { $0.config == f ? $0 : nil }
                    return kept ?? RouteFallback(config: f, share: FallbackShare(FallbackShare.Settings(f)))
                },
                responseTimeoutMillis: r.timeouts.response?.millis, connectTimeoutMillis: r.timeouts.connect?.millis,
                passServerHeader: r.passServerHeader, verdictHeader: r.assertion.verdictHeader)
        }
        matchesHosts = routes.contains { $0.match.host != nil }
        guardsBodyOverride = routes.contains(where: Self.protectsOnlyOtherMethods)
        challengePath = config.attest.challengePath
        registerPath = config.attest.registerPath
        let roots = try Self.loadRoots(config.trust.extraRoots, key: "trust.extra_roots", config)
        extraRootSubjects = roots.map(\.subject)
        let receiptRoots = try Self.loadRoots(config.trust.extraReceiptRoots, key: "trust.extra_receipt_roots", config)
        extraReceiptRootSubjects = receiptRoots.map(\.subject)
        let androidRoots = try Self.loadRoots(config.trust.extraAndroidRoots, key: "trust.extra_android_roots", config)
        extraAndroidRootSubjects = androidRoots.map(\.subject)
        do {
            attest = try AttestPolicy(
                apps: config.apps.map(AppPolicy.init), extraRoots: roots, extraReceiptRoots: receiptRoots,
                challengeTTLMillis: config.attest.challengeTTL.millis,
                maxReceiptBytes: config.limits.maxReceipt,
                firstRefreshSpreadMillis: min(RiskSchedule.firstRefreshSpreadMillis, (config.risk.refresh?.millis ?? .max) / 10),
                extraAndroidRoots: androidRoots)
        } catch {
            throw CompileError(config, at: "apps", "apps: \(error.description)")
        }
        if !attest.androidApps.isEmpty, config.android.statusURL != nil {
            // Kept from the running runtime while the CA file (path and bytes) is unchanged, so that a
            // reload does not restart the status list's refresh (its client, its back-off).
            let fingerprint = Self.caFingerprint(config.android.caFile)
            if let p = previous, let running = p.androidStatusTLS, p.androidStatusCAFingerprint == fingerprint {
                androidStatusTLS = running
            } else {
                do {
                    androidStatusTLS = try TLSClientContext(configuration: TLSClientConfiguration(caFile: config.android.caFile))
                } catch {
                    throw CompileError(
                        config, at: config.android.caFile == nil ? "android" : "android.ca_file", "android.ca_file: \(error.message)")
                }
            }
            androidStatusCAFingerprint = fingerprint
        } else {
            androidStatusTLS = nil
            androidStatusCAFingerprint = []
        }
        do {
            adminAccess = try AdminAccess(config.admin)
        } catch {
            throw CompileError(config, at: "admin.token_file", error.description)
        }
        if case .redis(let redis) = config.store.backend {
            do {
                storeSecurity = try RedisAccess.security(redis)
            } catch {
                throw CompileError(description: error.description)
            }
        } else {
            storeSecurity = nil
        }
        if let a = config.apple {
            do {
                let fresh = try AppleServices(a)
                apple = previous?.apple.flatMap { $0.fingerprint == fresh.fingerprint ? $0 : nil } ?? fresh
            } catch {
                throw CompileError(config, at: error.path, error.description)
            }
        } else {
            apple = nil
        }
        if let v = config.verdict {
            do {
                verdict = try VerdictSigning(v, previous: previous?.verdict, nowMillis: AttestContext.nowMillis())
            } catch {
                throw CompileError(config, at: "verdict.key", error.description)
            }
        } else {
            verdict = nil
        }
        publishesJWKS = verdict?.publish ?? false
        var warnings: [String] = []
        if !adminAccess.requiresToken, !Self.isLoopback(config.admin.address.host) {
            warnings.append(
                "admin.address \(config.admin.address) is not a loopback address and admin.token_file is not set: "
                    + "/explain (client addresses, key ids, why requests were refused) is open to whoever reaches it")
        }
        let routed = Set(config.routes.map(\.upstream))
        for (i, u) in config.upstreams.enumerated() where !routed.contains(u.name) {
            warnings.append("upstreams[\(i)] \"\(u.name)\" is named by no route: nothing is forwarded to it")
        }
        for l in config.listeners {
            guard let everyone = l.trustedProxies.first(where: { $0.prefixLength == 0 }) else { continue }
            warnings.append(
                "listener \"\(l.name)\" trusts \(everyone) as proxies: any client there can choose the address it is logged "
                    + "and rate-limited as (X-Forwarded-For) and claim https (X-Forwarded-Proto); list only the balancers' networks")
        }
        self.warnings = warnings
        let rates = config.attest.challengeRate
        clientLimit = rates.perClient.map { rate in
            let running = previous?.clientLimit?.buckets
            let table = running.flatMap { previous?.config.attest.challengeRate.clients == rates.clients ? $0 : nil }
            return AdmissionLimit(
                buckets: table ?? ClientRateLimiter(capacity: rates.clients), ratePerSecond: rate.perSecond, burst: rates.burst)
        }
        registrationLimit = config.attest.registrationRate.map { rate in
            AdmissionLimit(
                buckets: previous?.registrationLimit?.buckets ?? RateBucket(), ratePerSecond: rate.perSecond,
                burst: max(1, Int(rate.perSecond.rounded(.up))))
        }
        let verifiedHeader = config.attest.verifiedKeyHeader
        accountWindowMillis = config.accounts.window.millis
        stripVerifiedHeader = HeaderEdit(remove: [verifiedHeader])
        stripAttestHeaders = HeaderEdit(remove: [
            AttestHeaders.keyID, AttestHeaders.challenge, AttestHeaders.assertion, verifiedHeader, AttestHeaders.deviceToken,
        ])
        let l = config.limits
        var downstream = DownstreamLimits(
            parser: HTTP1Parser.Limits(
                maxRequestLine: l.maxRequestLine, maxHeaderBytes: l.maxHeaderBytes, maxHeaderCount: l.maxHeaderCount),
            idleTimeoutMillis: l.idleTimeout.millis, headerTimeoutMillis: l.headerTimeout.millis,
            bodyTimeoutMillis: l.bodyTimeout.millis, sendTimeoutMillis: l.sendTimeout.millis)
        downstream.discardBodyBytes = l.discardBody
        downstreamLimits = downstream
    }

    /// ALPN `h2,http/1.1` when the listener serves both, `h2` or `http/1.1` when it serves one: a
    /// client offering none of them fails the handshake (no_application_protocol).
    static func serverConfiguration(_ l: ListenerConfig, _ tls: TLSConfig) -> TLSServerConfiguration {
        TLSServerConfiguration(
            certificates: tls.certificates.map {
                .init(certificatePath: $0.certificatePath, privateKeyPath: $0.privateKeyPath, serverNames: $0.serverNames)
            },
            alpnProtocols: (l.protocols.contains(.h2) ? ["h2"] : []) + (l.protocols.contains(.http1) ? ["http/1.1"] : []))
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
    /// `host` is the request's Host value (or absolute-form authority) as sent, nil when no route
    /// matches on hosts; it is made a match key once (`RequestSyntax.hostMatchKey`).
    /// A protected route whose methods are listed and do not include POST.
    static func protectsOnlyOtherMethods(_ r: CompiledRoute) -> Bool {
        r.assertion.mode != .off && !r.match.methods.isEmpty && !r.match.methods.contains("POST")
    }

    /// Whether a route that protects other methods than POST matches `path` and `host`: a POST
    /// there that carries `_method` (body or query) would run that protected method's handler on
    /// Laravel, Symfony, Rails or Express's method-override.
    public func overrideGuarded(path: String, host: String?) -> Bool {
        guard guardsBodyOverride else { return false }
        let hostKey = host.flatMap { RequestSyntax.hostMatchKey($0) }
        for r in routes where Self.protectsOnlyOtherMethods(r) {
            if let m = r.match.methods.first, r.match.matches(method: m, path: path, hostKey: hostKey) { return true }
        }
        return false
    }

    public func routeIndex(method: String, path: String, host: String?) -> Int? {
        let hostKey = host.flatMap { RequestSyntax.hostMatchKey($0) }
        // Borrowed in place: a subscript read would copy each route (a retain per string in it).
        return routes.withUnsafeBufferPointer { routes in
            var i = 0
            while i < routes.count {
                if routes[i].match.matches(method: method, path: path, hostKey: hostKey) { return i }
                i += 1
            }
            return nil
        }
    }
}

extension GatewayRuntime {
    /// An upstream's servers resolved now (a name that does not resolve fails the load, at its
    /// position), each with its shared state: the previous runtime's for a server unchanged (its
    /// health and re-resolved address go on), new otherwise.
    static func plan(
        _ u: UpstreamConfig, config: GatewayConfig, workers: Int, tls client: TLSClientContext?, previous: UpstreamPlan?
    ) throws(CompileError) -> UpstreamPlan {
        let i = config.upstreams.firstIndex { $0.name == u.name } ?? 0
        let policy = PassiveHealth.Policy(
            maxFails: u.maxFails, failTimeoutMillis: u.failTimeout.millis, maxFailTimeoutMillis: u.maxFailTimeout.millis)
        var servers: [UpstreamPlan.Server] = []
        for (k, s) in u.servers.enumerated() {
            let item = "upstreams[\(i)].servers[\(k)]"
            let path =
                !config.sourceMap.has("upstreams[\(i)].servers")
                ? "upstreams[\(i)].url"
                : config.sourceMap.has(item + ".url") ? item + ".url" : item
            let address: SocketAddress
            do {
                address = try SocketAddress.resolve(host: s.url.host, port: s.url.port)
            } catch {
                throw CompileError(config, at: path, "\(path) (upstream \(u.name)): \(error)")
            }
            let target = GatewayProxy.UpstreamTarget(
                name: u.name, address: address,
                maxConnections: max(1, (u.maxConnections + workers - 1) / workers),
                connectTimeoutMillis: u.connectTimeout.millis, responseTimeoutMillis: u.responseTimeout.millis,
                idleTimeoutMillis: u.idleTimeout.millis,
                tls: client, tlsServerName: client == nil ? nil : (u.tls?.serverName ?? s.url.host))
            let shared: UpstreamServer
            if let running = previous?.servers.first(where: { $0.shared.label == s.label })?.shared,
                running.weight == s.weight, running.policy == policy
            {
                running.updateAddress(address)
                shared = running
            } else {
                shared = UpstreamServer(
                    upstream: u.name, label: s.label, host: s.url.host, port: s.url.port, weight: s.weight, address: address,
                    policy: policy)
            }
            servers.append(UpstreamPlan.Server(target: target, shared: shared))
        }
        return UpstreamPlan(
            name: u.name, servers: servers, algorithm: u.balance == .leastConnections ? .leastConnections : .roundRobin,
            retries: u.servers.count > 1 ? u.retries : 0,
            healthCheck: u.healthCheck.map {
                UpstreamHealthChecker.Spec(
                    path: $0.path, intervalMillis: $0.interval.millis, timeoutMillis: $0.timeout.millis, expectStatus: $0.expectStatus)
            },
            resolveIntervalMillis: u.resolveInterval?.millis)
    }

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
