import GatewayWire
import Testing

@testable import GatewayConfig

@Suite("Every key set")
struct FullConfigTests {
    static let yaml = """
        workers: 4
        listeners:
          - name: public
            address: "[::]:8443"
            protocols: [h2, http1]
            tls: {certificate: certs/server.pem, private_key: /abs/server.key}
            proxy_protocol: true
          - name: sni
            address: 127.0.0.1:9443
            trusted_proxies: [192.168.0.0/16]
            tls:
              certificates:
                - {certificate: a.pem, private_key: a.key}
                - {certificate: b.pem, private_key: b.key, server_names: [API.example.com, "*.api.example.com"]}
        admin: {address: "[::1]:9999"}
        trusted_proxies: [10.0.0.0/8, "2001:db8::/32", 127.0.0.1]
        limits:
          max_request_line: 4KiB
          max_header_bytes: 16KB
          max_header_count: 50
          max_body: 1MiB
          idle_timeout: 5m
          header_timeout: 2500ms
          body_timeout: 1h
          drain_timeout: 0s
          max_connections: 500
        upstreams:
          - {name: legacy, url: http://Backend.Internal:8081/base, max_connections: 8, connect_timeout: 250ms, response_timeout: 5s, idle_timeout: 1m}
          - name: payments
            url: https://[2001:db8::1]:8443
            tls: {ca_file: ca.pem, server_name: payments.internal, client_certificate: c.pem, client_key: c.key, verify: true}
        routes:
          - name: purchase
            match: {methods: [POST, PUT], path_prefix: /api/purchase, host: Shop.Example.com}
            upstream: payments
            max_body: 64KiB
            assertion: {mode: enforce, bind: body, challenge: optional, rollout: 12.5%, on_store_error: fail_open}
          - name: exact
            match: {path: /health}
            upstream: legacy
        apps:
          - team_id: ABCDE12345
            bundle_ids: [com.example.shop, com.example.shop.Clip]
            environments: [development, production]
            validation_categories: [app_store, testflight, developer_id]
            min_bundle_version: 4.10
          - {team_id: ABCDE12345, bundle_ids: [com.example.mac], receipts: ignore, require_macos_security: true}
        trust: {extra_roots: [roots/test.pem, ../other/root.pem], extra_receipt_roots: [roots/receipt-root.pem]}
        attest: {challenge_path: /c, register_path: /r, challenge_ttl: 1h, verified_key_header: X-Key}
        store: {kind: memory, shards: 4096, data_dir: ./data, snapshot_interval: 10s}
        logging: {level: debug, access_log: false}
        """

    let config: GatewayConfig

    init() throws {
        config = try ConfigFixture.parse(Self.yaml)
    }

    @Test("workers and listeners, with TLS paths resolved against the config directory")
    func listeners() {
        #expect(config.workers == .count(4))
        #expect(config.listeners[0].address == SocketAddressSpec(host: "::", port: 8443))
        #expect(config.listeners[0].protocols == [.http1, .h2])
        #expect(config.trustedProxies.map(\.description) == ["10.0.0.0/8", "2001:db8::/32", "127.0.0.1/32"])
        #expect(config.listeners[0].trustedProxies == config.trustedProxies)
        #expect(config.listeners[0].proxyProtocol)
        #expect(config.listeners[1].trustedProxies.map(\.description) == ["192.168.0.0/16"])
        #expect(!config.listeners[1].proxyProtocol)
        #expect(
            config.listeners[0].tls
                == TLSConfig(certificates: [
                    .init(certificatePath: "/etc/attest-gateway/certs/server.pem", privateKeyPath: "/abs/server.key")
                ])
        )
        #expect(
            config.listeners[1].tls?.certificates == [
                .init(certificatePath: "/etc/attest-gateway/a.pem", privateKeyPath: "/etc/attest-gateway/a.key"),
                .init(
                    certificatePath: "/etc/attest-gateway/b.pem",
                    privateKeyPath: "/etc/attest-gateway/b.key",
                    serverNames: ["api.example.com", "*.api.example.com"]
                ),
            ]
        )
        #expect(config.admin.address == SocketAddressSpec(host: "::1", port: 9999))
    }

    @Test("limits in every unit")
    func limits() {
        #expect(
            config.limits
                == LimitsConfig(
                    maxRequestLine: 4096,
                    maxHeaderBytes: 16_000,
                    maxHeaderCount: 50,
                    maxBody: 1_048_576,
                    idleTimeout: .seconds(300),
                    headerTimeout: .milliseconds(2500),
                    bodyTimeout: .seconds(3600),
                    drainTimeout: .zero,
                    maxConnections: 500
                )
        )
    }

    @Test("upstreams with urls, pools and client TLS")
    func upstreams() {
        #expect(
            config.upstreams[0]
                == UpstreamConfig(
                    name: "legacy",
                    target: .url(UpstreamURL(scheme: .http, host: "backend.internal", port: 8081, path: "/base")),
                    maxConnections: 8,
                    connectTimeout: .milliseconds(250),
                    responseTimeout: .seconds(5),
                    idleTimeout: .seconds(60)
                )
        )
        #expect(config.upstreams[1].target == .url(UpstreamURL(scheme: .https, host: "2001:db8::1", port: 8443)))
        #expect(config.upstreams[1].target.description == "https://[2001:db8::1]:8443")
        #expect(
            config.upstreams[1].tls
                == UpstreamTLSConfig(
                    caFile: "/etc/attest-gateway/ca.pem",
                    serverName: "payments.internal",
                    clientCertificate: "/etc/attest-gateway/c.pem",
                    clientKey: "/etc/attest-gateway/c.key",
                    verify: true
                )
        )
    }

    @Test("routes keep file order, matches and policies")
    func routes() {
        #expect(config.routes.map(\.name) == ["purchase", "exact"])
        #expect(
            config.routes[0].match
                == RouteMatch(methods: ["POST", "PUT"], path: .prefix("/api/purchase"), host: "shop.example.com")
        )
        #expect(config.routes[0].maxBody == 65_536)
        #expect(
            config.routes[0].assertion
                == AssertionPolicy(
                    mode: .enforce,
                    bind: .body,
                    challenge: .optional,
                    rollout: Percentage(basisPoints: 1250),
                    onStoreError: .failOpen
                )
        )
        #expect(config.routes[1].match.path == .exact("/health"))
        #expect(config.routes[1].maxBody == 1_048_576)
    }

    @Test("apps, trust, attest, store and logging")
    func rest() {
        #expect(
            config.apps == [
                AppConfig(
                    teamID: "ABCDE12345",
                    bundleIDs: ["com.example.shop", "com.example.shop.Clip"],
                    environments: [.development, .production],
                    validationCategories: [.appStore, .testflight, .developerID],
                    minBundleVersion: BundleVersion("4.10")
                ),
                AppConfig(teamID: "ABCDE12345", bundleIDs: ["com.example.mac"], receipts: .ignore, requireMacOSSecurity: true),
            ]
        )
        #expect(config.trust.extraRoots == ["/etc/attest-gateway/roots/test.pem", "/etc/other/root.pem"])
        #expect(config.trust.extraReceiptRoots == ["/etc/attest-gateway/roots/receipt-root.pem"])
        #expect(
            config.attest
                == AttestConfig(
                    challengePath: "/c",
                    registerPath: "/r",
                    challengeTTL: .seconds(3600),
                    verifiedKeyHeader: "X-Key"
                )
        )
        #expect(
            config.store.backend
                == .memory(
                    .init(shards: 4096, dataDirectory: "/etc/attest-gateway/data", snapshotInterval: .seconds(10))
                )
        )
        #expect(config.logging == LoggingConfig(level: .debug, accessLog: false))
    }

    @Test("anchors, aliases and merge keys are standard YAML and work")
    func anchorsAndMerges() throws {
        let config = try ConfigFixture.parse(
            """
            listeners:
              - {name: public, address: 0.0.0.0:8080}
            upstreams:
              - &pool {name: a, url: "http://10.0.0.1:80", max_connections: 9, connect_timeout: 3s}
              - <<: *pool
                name: b
            routes:
              - {name: r, match: {path_prefix: /}, upstream: b}
            """
        )
        #expect(config.upstreams[1].name == "b")
        #expect(config.upstreams[1].maxConnections == 9)
        #expect(config.upstreams[1].connectTimeout == .seconds(3))
    }
}
