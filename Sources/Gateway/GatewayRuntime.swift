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
    }

    public struct CompileError: Error, CustomStringConvertible {
        public let description: String
    }

    public let config: GatewayConfig
    public let routes: [CompiledRoute]
    /// Upstream name → target; demo upstreams have no entry.
    public let targets: [String: GatewayProxy.UpstreamTarget]
    public let demoUpstreams: Set<String>
    public let downstreamLimits: DownstreamLimits
    public let workers: Int
    /// Apps, trust roots and challenge TTL compiled for registration and assertion checks.
    public let attest: AttestPolicy
    /// Subjects of the roots trusted besides Apple's (tests only; logged loudly at start and reload).
    public let extraRootSubjects: [String]
    /// Removes a client-sent copy of the verified-key header: applied to every forwarded request.
    public let stripVerifiedHeader: @Sendable (inout HTTPFields) -> Void

    public init(_ config: GatewayConfig, coreCount: Int) throws(CompileError) {
        self.config = config
        workers = config.workers.resolved(coreCount: coreCount)
        var targets: [String: GatewayProxy.UpstreamTarget] = [:]
        var demo: Set<String> = []
        for u in config.upstreams {
            switch u.target {
            case .demo:
                demo.insert(u.name)
            case .url(let url):
                guard url.scheme == .http else {
                    throw CompileError(description: "upstream \(u.name): https upstreams arrive with the TLS work; use http:// for now")
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
                    idleTimeoutMillis: u.idleTimeout.millis)
            }
        }
        self.targets = targets
        demoUpstreams = demo
        routes = config.routes.map { r in
            let path: (String?, String?) =
                switch r.match.path {
                case .prefix(let p): (p, nil)
                case .exact(let p): (nil, p)
                }
            return CompiledRoute(
                name: r.name,
                match: GatewayProxy.RouteMatch(methods: Set(r.match.methods), pathPrefix: path.0, exactPath: path.1, host: r.match.host),
                upstream: r.upstream, maxBody: r.maxBody, assertion: r.assertion)
        }
        var roots: [X509Certificate] = []
        for path in config.trust.extraRoots {
            let pem: String
            do {
                pem = try String(contentsOfFile: path, encoding: .utf8)
            } catch {
                throw CompileError(description: "trust.extra_roots: cannot read \(path): \(error.localizedDescription)")
            }
            let certs: [X509Certificate]
            do {
                certs = try X509Certificate.parsePEM(pem)
            } catch {
                throw CompileError(description: "trust.extra_roots: \(path): \(error)")
            }
            guard !certs.isEmpty else { throw CompileError(description: "trust.extra_roots: \(path): no certificate in the file") }
            roots += certs
        }
        extraRootSubjects = roots.map(\.subject)
        do {
            attest = try AttestPolicy(apps: config.apps, extraRoots: roots, challengeTTLMillis: config.attest.challengeTTL.millis)
        } catch {
            throw CompileError(description: error.description)
        }
        let verifiedHeader = config.attest.verifiedKeyHeader
        stripVerifiedHeader = { fields in fields.remove(verifiedHeader) }
        if case .redis = config.store.backend {
            throw CompileError(description: "store.kind redis: the Redis store is not part of this build yet; use kind: memory")
        }
        let l = config.limits
        downstreamLimits = DownstreamLimits(
            parser: HTTP1Parser.Limits(maxRequestLine: l.maxRequestLine, maxHeaderBytes: l.maxHeaderBytes, maxHeaderCount: l.maxHeaderCount),
            idleTimeoutMillis: l.idleTimeout.millis, headerTimeoutMillis: l.headerTimeout.millis,
            bodyTimeoutMillis: l.bodyTimeout.millis)
    }

    /// The first route whose match holds (file order).
    public func route(method: String, path: String, host: String?) -> CompiledRoute? {
        routes.first { $0.match.matches(method: method, path: path, host: host) }
    }
}

extension Duration {
    var millis: Int64 {
        let (s, atto) = components
        return s * 1000 + atto / 1_000_000_000_000_000
    }
}
