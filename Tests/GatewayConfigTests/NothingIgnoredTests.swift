import Testing

@testable import GatewayConfig

/// "Strict, nothing ignored": a key the gateway accepts always changes what it does. A key that
/// cannot, given its neighbours, is an error at its position, saying why and what to do.
@Suite("Every accepted key has an effect")
struct NothingIgnoredTests {
    static let base = """
        listeners: [{name: public, address: "0.0.0.0:8080"}]
        upstreams: [{name: demo, url: demo}]
        apps: [{team_id: ABCDE12345, bundle_ids: [com.example.shop]}]
        """

    static func route(_ assertion: String) -> String {
        base + "\nroutes:\n  - {name: r, match: {path_prefix: /}, upstream: demo, assertion: {\(assertion)}}\n"
    }

    @Test("rollout and on_store_error only apply to mode: enforce")
    func shadowKeys() throws {
        #expect(
            ConfigFixture.errors(Self.route("mode: shadow, rollout: 25%")) == [
                "gateway.yaml:5:82: routes[0].assertion.rollout only applies to mode: enforce (it picks the share of keys "
                    + "enforced; shadow verifies every key and forwards anyway); remove it, or set mode: enforce"
            ])
        #expect(
            ConfigFixture.errors(Self.route("mode: shadow, on_store_error: fail_open")) == [
                "gateway.yaml:5:82: routes[0].assertion.on_store_error only applies to mode: enforce (shadow forwards when "
                    + "the store cannot answer anyway); remove it, or set mode: enforce"
            ])
        // Block style: the position is the key's own line.
        let block =
            Self.base + """

                routes:
                  - name: r
                    match: {path_prefix: /}
                    upstream: demo
                    assertion:
                      mode: shadow
                      bind: body
                      rollout: 100%
                """
        #expect(
            ConfigFixture.errors(block) == [
                "gateway.yaml:11:7: routes[0].assertion.rollout only applies to mode: enforce (it picks the share of keys "
                    + "enforced; shadow verifies every key and forwards anyway); remove it, or set mode: enforce"
            ])
        // Where they apply they are accepted, and so are shadow's own keys.
        let enforce = try ConfigFixture.parse(Self.route("mode: enforce, rollout: 25%, on_store_error: fail_open"))
        #expect(enforce.routes[0].assertion.rollout == Percentage(basisPoints: 2500))
        #expect(enforce.routes[0].assertion.onStoreError == .failOpen)
        let shadow = try ConfigFixture.parse(Self.route("mode: shadow, bind: body, challenge: optional"))
        #expect(shadow.routes[0].assertion.challenge == .optional)
    }

    @Test("mode: off takes no other assertion key")
    func offKeys() {
        for key in [
            "bind: body", "challenge: required", "rollout: 50%", "on_store_error: fail_open", "client_data: v1", "counter_window: 8",
            "key_rate: {rate: 5/s}",
        ] {
            let name = String(key.prefix { $0 != ":" })
            #expect(
                ConfigFixture.errors(Self.route("mode: off, \(key)")) == [
                    "gateway.yaml:5:79: routes[0].assertion.\(name) has no effect with mode: off (the route verifies nothing); "
                        + "remove it, or set mode: enforce or shadow"
                ], "\(key)")
        }
        #expect(ConfigFixture.errors(Self.route("mode: off")) == [])
    }

    @Test("logging.level: the event log's four levels; swift-log's others are near misses")
    func loggingLevels() throws {
        for level in LoggingConfig.Level.allCases {
            #expect(try ConfigFixture.parse(minimalPlus: "logging: {level: \(level.rawValue)}").logging.level == level)
        }
        #expect(LoggingConfig.Level.debug < .info && LoggingConfig.Level.info < .warning && LoggingConfig.Level.warning < .error)
        #expect(
            ConfigFixture.errors(ConfigFixture.minimal + "\nlogging: {level: critical}") == [
                "gateway.yaml:7:18: logging.level must be one of \"debug\", \"info\", \"warning\" or \"error\", got \"critical\": "
                    + "the event log has no such level (did you mean \"error\"?)"
            ])
        #expect(
            ConfigFixture.errors(ConfigFixture.minimal + "\nlogging: {level: trace}").first?.hasSuffix("(did you mean \"debug\"?)") == true)
        #expect(
            ConfigFixture.errors(ConfigFixture.minimal + "\nlogging: {level: notice}").first?.hasSuffix("(did you mean \"info\"?)") == true)
    }

    @Test("store.snapshot_interval needs data_dir")
    func snapshotInterval() throws {
        #expect(
            ConfigFixture.errors(ConfigFixture.minimal + "\nstore: {kind: memory, snapshot_interval: 10s}") == [
                "gateway.yaml:7:23: store.snapshot_interval has no effect without store.data_dir (nothing is written to disk); "
                    + "add data_dir, or remove it"
            ])
        let config = try ConfigFixture.parse(minimalPlus: "store: {kind: memory, data_dir: ./data, snapshot_interval: 10s}")
        guard case .memory(let m) = config.store.backend else { throw Unexpected() }
        #expect(m.snapshotInterval == .seconds(10))
    }

    @Test("the demo upstream takes no pool or timeout keys")
    func demoUpstream() {
        let yaml = """
            listeners: [{name: public, address: "0.0.0.0:8080"}]
            upstreams:
              - {name: demo, url: demo, max_connections: 8, idle_timeout: 5s}
            routes: [{name: r, match: {path_prefix: /}, upstream: demo}]
            """
        #expect(
            ConfigFixture.errors(yaml) == [
                "gateway.yaml:3:29: upstreams[0].max_connections has no effect on the demo upstream (it answers in process, "
                    + "without a connection); remove it",
                "gateway.yaml:3:49: upstreams[0].idle_timeout has no effect on the demo upstream (it answers in process, "
                    + "without a connection); remove it",
            ])
    }

    @Test("upstream tls: ca_file is not read with verify: false")
    func caFileWithoutVerify() throws {
        let yaml = """
            listeners: [{name: public, address: "0.0.0.0:8080"}]
            upstreams:
              - {name: api, url: "https://api.internal", tls: {ca_file: ca.pem, verify: false}}
            routes: [{name: r, match: {path_prefix: /}, upstream: api}]
            """
        #expect(
            ConfigFixture.errors(yaml) == [
                "gateway.yaml:3:52: upstreams[0].tls.ca_file has no effect with verify: false (no certificate is checked); "
                    + "remove one of them"
            ])
        let unverified = try ConfigFixture.parse(yaml.replacingOccurrences(of: "ca_file: ca.pem, ", with: ""))
        #expect(unverified.upstreams[0].tls?.verify == false)
    }

    @Test("attest.challenge_rate.clients needs a per-client rate")
    func clientsWithoutRate() {
        #expect(
            ConfigFixture.errors(ConfigFixture.minimal + "\nattest: {challenge_rate: {per_client: off, clients: 2048}}") == [
                "gateway.yaml:7:44: attest.challenge_rate.clients has no effect with per_client: off (no client is tracked); remove it"
            ])
    }

    @Test("limits.max_body when every route has its own")
    func maxBodyDefaultUnused() throws {
        let yaml = """
            listeners: [{name: public, address: "0.0.0.0:8080"}]
            limits: {max_body: 2MiB}
            upstreams: [{name: demo, url: demo}]
            routes:
              - {name: a, match: {path_prefix: /a}, upstream: demo, max_body: 1KiB}
              - {name: b, match: {path_prefix: /}, upstream: demo, max_body: 0}
            """
        #expect(
            ConfigFixture.errors(yaml) == [
                "gateway.yaml:2:10: limits.max_body has no effect: it is the default of routes without their own max_body, "
                    + "and every route sets one; remove it"
            ])
        let used = try ConfigFixture.parse(yaml.replacingOccurrences(of: ", max_body: 0}", with: "}"))
        #expect(used.routes[1].maxBody == 2 * 1024 * 1024)
    }

    @Test("server_names with a single certificate")
    func singleCertificateNames() {
        let yaml = """
            listeners:
              - name: public
                address: "0.0.0.0:8443"
                tls: {certificates: [{certificate: a.pem, private_key: a.key, server_names: [a.example.com]}]}
            upstreams: [{name: demo, url: demo}]
            routes: [{name: r, match: {path_prefix: /}, upstream: demo}]
            """
        #expect(
            ConfigFixture.errors(yaml) == [
                "gateway.yaml:4:67: listeners[0].tls.certificates[0].server_names has no effect with a single certificate "
                    + "(it is served for every name); remove it, or add the other certificates"
            ])
    }

    struct Unexpected: Error {}
}
