import GatewayWire
import Testing

@testable import GatewayConfig

@Suite("Defaults")
struct DefaultsTests {
    let config: GatewayConfig

    init() throws {
        config = try ConfigFixture.parse(ConfigFixture.minimal)
    }

    @Test("workers default to auto, which resolves to the core count (at least 1)")
    func workers() {
        #expect(config.workers == .auto)
        #expect(config.workers.resolved(coreCount: 8) == 8)
        #expect(config.workers.resolved(coreCount: 0) == 1)
        #expect(Workers.count(3).resolved(coreCount: 8) == 3)
    }

    @Test("a listener defaults to http1 without TLS")
    func listener() {
        #expect(
            config.listeners == [
                ListenerConfig(name: "public", address: SocketAddressSpec(host: "0.0.0.0", port: 8080))
            ]
        )
        #expect(config.listeners[0].protocols == [.http1])
        #expect(config.listeners[0].tls == nil)
    }

    @Test("admin defaults to 127.0.0.1:9090")
    func admin() {
        #expect(config.admin.address == SocketAddressSpec(host: "127.0.0.1", port: 9090))
    }

    @Test("limits default to 8KiB, 32KiB, 100, 10MiB, 60s, 10s, 30s, 30s, 10000")
    func limits() {
        let limits = config.limits
        #expect(limits.maxRequestLine == 8 * 1024)
        #expect(limits.maxHeaderBytes == 32 * 1024)
        #expect(limits.maxHeaderCount == 100)
        #expect(limits.maxBody == 10 * 1024 * 1024)
        #expect(limits.idleTimeout == .seconds(60))
        #expect(limits.headerTimeout == .seconds(10))
        #expect(limits.bodyTimeout == .seconds(30))
        #expect(limits.drainTimeout == .seconds(30))
        #expect(limits.maxConnections == 10_000)
        #expect(limits.maxReceipt == 16 * 1024)
    }

    @Test("store keys: max_keys derived (nil), 3 re-registrations per 1h, no idle eviction")
    func storeKeys() {
        #expect(
            config.store.keys == StoreConfig.Keys(maxKeys: nil, maxReregistrations: 3, reregistrationWindow: .seconds(3600), idleTTL: nil))
    }

    @Test("an upstream defaults to 64 connections, 2s connect, 30s response, 60s idle")
    func upstream() throws {
        let config = try ConfigFixture.parse(
            """
            listeners: [{name: public, address: ":8080"}]
            upstreams: [{name: legacy, url: "http://127.0.0.1:8081"}, {name: secure, url: "https://api.example.com"}]
            routes: [{name: r, match: {path_prefix: /}, upstream: legacy}]
            """
        )
        let legacy = config.upstreams[0]
        #expect(legacy.target == .url(UpstreamURL(scheme: .http, host: "127.0.0.1", port: 8081)))
        #expect(legacy.maxConnections == 64)
        #expect(legacy.connectTimeout == .seconds(2))
        #expect(legacy.responseTimeout == .seconds(30))
        #expect(legacy.idleTimeout == .seconds(60))
        #expect(legacy.tls == nil)
        let secure = config.upstreams[1]
        #expect(secure.target == .url(UpstreamURL(scheme: .https, host: "api.example.com", port: 443)))
        #expect(
            secure.tls
                == UpstreamTLSConfig(caFile: nil, serverName: nil, clientCertificate: nil, clientKey: nil, verify: true)
        )
    }

    @Test("a route without assertion is off and takes limits.max_body")
    func route() {
        let route = config.routes[0]
        #expect(route.name == "default")
        #expect(route.match == RouteMatch(methods: [], path: .prefix("/"), host: nil))
        #expect(route.upstream == "demo")
        #expect(route.maxBody == config.limits.maxBody)
        #expect(route.assertion == .off)
        #expect(route.assertion.mode == .off)
    }

    @Test("an assertion block defaults to bind request, challenge required, rollout 100%, fail_closed")
    func assertion() throws {
        let config = try ConfigFixture.parse(
            """
            listeners: [{name: public, address: 0.0.0.0:8080}]
            upstreams: [{name: demo, url: demo}]
            routes: [{name: r, match: {path_prefix: /}, upstream: demo, assertion: {mode: shadow}}]
            apps: [{team_id: ABCDE12345, bundle_ids: [com.example.shop]}]
            """
        )
        let policy = config.routes[0].assertion
        #expect(policy.mode == .shadow)
        #expect(policy.bind == .request)
        #expect(policy.challenge == .required)
        #expect(policy.rollout == .hundred)
        #expect(policy.rollout.basisPoints == 10_000)
        #expect(policy.onStoreError == .failClosed)
    }

    @Test("an app defaults to production, any validation category, no minimum version")
    func app() throws {
        let config = try ConfigFixture.parse(
            minimalPlus: "apps: [{team_id: ABCDE12345, bundle_ids: [com.example.shop]}]"
        )
        #expect(config.apps == [AppConfig(teamID: "ABCDE12345", bundleIDs: ["com.example.shop"])])
        #expect(config.apps[0].environments == [.production])
        #expect(config.apps[0].validationCategories == nil)
        #expect(config.apps[0].minBundleVersion == nil)
        #expect(config.apps[0].appIDs == ["ABCDE12345.com.example.shop"])
    }

    @Test("an app verifies receipts and does not require the macOS key policy unless told")
    func appReceiptsAndMacOS() throws {
        let config = try ConfigFixture.parse(minimalPlus: "apps: [{team_id: ABCDE12345, bundle_ids: [com.example.shop]}]")
        #expect(config.apps[0].receipts == .verify)
        #expect(config.apps[0].requireMacOSSecurity == false)
    }

    @Test("apps, trust roots default to empty")
    func appsAndTrust() {
        #expect(config.apps.isEmpty)
        #expect(config.trust.extraRoots.isEmpty)
        #expect(config.trust.extraReceiptRoots.isEmpty)
    }

    @Test("attest defaults to /v1/attest/challenge, /v1/attest/register, 5m, X-App-Attest-Verified-Key-Id")
    func attest() {
        #expect(config.attest.challengePath == "/v1/attest/challenge")
        #expect(config.attest.registerPath == "/v1/attest/register")
        #expect(config.attest.challengeTTL == .seconds(300))
        #expect(config.attest.verifiedKeyHeader == "X-App-Attest-Verified-Key-Id")
    }

    @Test("the store defaults to memory, 64 shards, no snapshots, 30s interval")
    func store() {
        #expect(config.store.kind == "memory")
        #expect(
            config.store.backend
                == .memory(StoreConfig.Memory(shards: 64, dataDirectory: nil, snapshotInterval: .seconds(30)))
        )
    }

    @Test("a redis store defaults to port 6379, database 0, timeout 1s, no replicas")
    func redisStore() throws {
        let config = try ConfigFixture.parse(minimalPlus: "store: {kind: redis, url: redis://cache.internal}")
        #expect(config.store.kind == "redis")
        #expect(
            config.store.backend
                == .redis(
                    StoreConfig.Redis(
                        url: RedisURL(host: "cache.internal", port: 6379, database: 0),
                        timeout: .seconds(1),
                        waitReplicas: 0
                    )
                )
        )
    }

    @Test("logging defaults to info with the access log on")
    func logging() {
        #expect(config.logging.level == .info)
        #expect(config.logging.accessLog)
    }

    @Test("the in-code defaults of every section equal what an absent section yields")
    func inCodeDefaultsMatch() {
        #expect(config.admin == AdminConfig())
        #expect(config.limits == LimitsConfig())
        #expect(config.trust == TrustConfig())
        #expect(config.attest == AttestConfig())
        #expect(config.store == StoreConfig())
        #expect(config.logging == LoggingConfig())
    }
}
