import Testing

@testable import GatewayConfig

/// Rules that span keys or sections, each with the diagnostic an operator reads.
@Suite("Cross-field validation")
struct ValidationTests {
    static let base = """
        listeners: [{name: public, address: "0.0.0.0:8080"}]
        upstreams: [{name: demo, url: demo}]
        """

    @Test("bind: request requires challenge: required; body may relax it")
    func bindRequestNeedsChallenge() throws {
        let yaml =
            Self.base + """

                routes:
                  - {name: r, match: {path_prefix: /}, upstream: demo, assertion: {mode: enforce, challenge: off}}
                apps: [{team_id: ABCDE12345, bundle_ids: [com.example.shop]}]
                """
        #expect(
            ConfigFixture.errors(yaml) == [
                "gateway.yaml:4:94: routes[0].assertion.challenge must be \"required\" when bind is \"request\" (the challenge is what makes a request assertion fresh); \"optional\" and \"off\" only apply to bind: body"
            ]
        )
        let relaxed = try ConfigFixture.parse(
            yaml.replacingOccurrences(of: "challenge: off", with: "bind: body, challenge: off")
        )
        #expect(relaxed.routes[0].assertion.challenge == .off)
        #expect(relaxed.routes[0].assertion.bind == .body)
    }

    @Test("assertion.client_data: v2 by default, v1 where a route opts in; only with bind: request; nothing else")
    func clientDataVersion() throws {
        func yaml(_ assertion: String) -> String {
            Self.base + """

                routes:
                  - {name: r, match: {path_prefix: /}, upstream: demo, assertion: {\(assertion)}}
                apps: [{team_id: ABCDE12345, bundle_ids: [com.example.shop]}]
                """
        }
        #expect(try ConfigFixture.parse(yaml("mode: enforce")).routes[0].assertion.clientData == .v2)
        #expect(AssertionPolicy(mode: .enforce).clientData == .v2)
        #expect(try ConfigFixture.parse(yaml("mode: enforce, client_data: v1")).routes[0].assertion.clientData == .v1)
        #expect(try ConfigFixture.parse(yaml("mode: shadow, bind: request, client_data: v2")).routes[0].assertion.clientData == .v2)
        #expect(
            ConfigFixture.errors(yaml("mode: enforce, client_data: v3")) == [
                "gateway.yaml:4:96: routes[0].assertion.client_data must be one of \"v1\" or \"v2\", got \"v3\" (did you mean \"v1\"?)"
            ])
        #expect(
            ConfigFixture.errors(yaml("mode: enforce, client_data: 2")) == [
                "gateway.yaml:4:96: routes[0].assertion.client_data must be one of \"v1\" or \"v2\", got \"2\" (did you mean \"v2\"?)"
            ])
        #expect(
            ConfigFixture.errors(yaml("mode: enforce, bind: body, client_data: v1")) == [
                "gateway.yaml:4:108: routes[0].assertion.client_data only applies to bind: request (with bind: body the client data is the body itself); remove it"
            ])
        #expect(ConfigFixture.errors(yaml("mode: enforce, clientdata: v1")).first?.contains("unknown key") == true)
    }

    @Test("assertion.counter_window: off by default, 1…64 where a route opts in, with any binding and mode enforce or shadow")
    func counterWindow() throws {
        func yaml(_ assertion: String) -> String {
            Self.base + """

                routes:
                  - {name: r, match: {path_prefix: /}, upstream: demo, assertion: {\(assertion)}}
                apps: [{team_id: ABCDE12345, bundle_ids: [com.example.shop]}]
                """
        }
        #expect(try ConfigFixture.parse(yaml("mode: enforce")).routes[0].assertion.counterWindow == 0)
        #expect(AssertionPolicy(mode: .enforce).counterWindow == 0)
        for n in [1, 8, 64] {
            #expect(try ConfigFixture.parse(yaml("mode: enforce, counter_window: \(n)")).routes[0].assertion.counterWindow == n)
        }
        #expect(
            try ConfigFixture.parse(yaml("mode: shadow, bind: body, challenge: \"off\", counter_window: 16")).routes[0].assertion
                == AssertionPolicy(mode: .shadow, bind: .body, challenge: .off, counterWindow: 16))
        #expect(
            ConfigFixture.errors(yaml("mode: enforce, counter_window: 0")) == [
                "gateway.yaml:4:99: routes[0].assertion.counter_window must be an integer from 1 to 64, got 0"
            ])
        #expect(
            ConfigFixture.errors(yaml("mode: enforce, counter_window: 65")) == [
                "gateway.yaml:4:99: routes[0].assertion.counter_window must be an integer from 1 to 64, got 65"
            ])
        #expect(
            ConfigFixture.errors(yaml("mode: enforce, counter_window: \"8\"")) == [
                "gateway.yaml:4:99: routes[0].assertion.counter_window must be an integer from 1 to 64, got the quoted string \"8\" (write it without quotes)"
            ])
        #expect(ConfigFixture.errors(yaml("mode: enforce, counter_window: on")).count == 1)
        #expect(ConfigFixture.errors(yaml("mode: enforce, counterwindow: 8")).first?.contains("unknown key") == true)
        // A per-key challenge budget of 8: one live challenge per request in flight on such a route.
        let store = try ConfigFixture.parse(yaml("mode: enforce, counter_window: 8") + "\nstore: {max_challenges_per_key: 8}").store
        guard case .memory(let m) = store.backend else { Issue.record("not memory"); return }
        #expect(m.maxChallengesPerKey == 8)
    }

    @Test("admin.token_file and protect_metrics: a path resolved against the config's directory; protect_metrics needs the file")
    func adminToken() throws {
        let open = try ConfigFixture.parse(minimalPlus: "admin: {address: 127.0.0.1:9091}")
        #expect(open.admin.tokenFile == nil && open.admin.protectMetrics == false)
        let guarded = try ConfigFixture.parse(minimalPlus: "admin: {token_file: secrets/admin-token, protect_metrics: true}")
        #expect(guarded.admin.tokenFile == "/etc/attest-gateway/secrets/admin-token")
        #expect(guarded.admin.protectMetrics)
        #expect(guarded.admin.address == AdminConfig().address)
        #expect(
            try ConfigFixture.parse(minimalPlus: "admin: {token_file: /run/credentials/gw/admin-token}").admin.tokenFile
                == "/run/credentials/gw/admin-token")
        #expect(
            ConfigFixture.errors(ConfigFixture.minimal + "\nadmin: {protect_metrics: true}") == [
                "gateway.yaml:7:26: admin.protect_metrics needs admin.token_file (the bearer token that /metrics then requires)"
            ])
        #expect(
            ConfigFixture.errors(ConfigFixture.minimal + "\nadmin: {token_file: /t, protect_metrics: yes}") == [
                "gateway.yaml:7:42: admin.protect_metrics must be true or false, got \"yes\""
            ])
        #expect(ConfigFixture.errors(ConfigFixture.minimal + "\nadmin: {token_file: [a]}").count == 1)
        #expect(ConfigFixture.errors(ConfigFixture.minimal + "\nadmin: {token: abc}").first?.contains("unknown key") == true)
    }

    @Test("a route in enforce or shadow mode needs at least one app; off does not")
    func assertionRoutesNeedApps() throws {
        let yaml =
            Self.base + """

                routes:
                  - {name: open, match: {path_prefix: /open}, upstream: demo, assertion: {mode: off}}
                  - {name: r, match: {path_prefix: /}, upstream: demo, assertion: {mode: shadow}}
                """
        let message =
            "gateway.yaml:5:74: routes[1].assertion.mode is \"shadow\", which needs at least one entry in apps (the team and bundle ids whose devices may attest)"
        #expect(ConfigFixture.errors(yaml) == [message])
        #expect(ConfigFixture.errors(yaml + "\napps: []") == [message])
        let withApp = try ConfigFixture.parse(yaml + "\napps: [{team_id: ABCDE12345, bundle_ids: [com.example.shop]}]")
        #expect(withApp.routes.map(\.assertion.mode) == [.off, .shadow])
    }

    @Test("listener addresses must not collide, including through a wildcard host")
    func listenerAddressesUnique() throws {
        let yaml = """
            listeners:
              - {name: a, address: "0.0.0.0:8080"}
              - {name: b, address: "0.0.0.0:8080"}
              - {name: c, address: "127.0.0.1:8080"}
              - {name: d, address: "127.0.0.1:8081"}
              - {name: e, address: ":0"}
              - {name: f, address: ":0"}
            upstreams: [{name: demo, url: demo}]
            routes: [{name: r, match: {path_prefix: /}, upstream: demo}]
            """
        #expect(
            ConfigFixture.errors(yaml) == [
                "gateway.yaml:3:24: address 0.0.0.0:8080 of listener \"b\" is also used by listener \"a\" (0.0.0.0:8080, at 2:24)",
                "gateway.yaml:4:24: address 127.0.0.1:8080 of listener \"c\" overlaps the address of listener \"a\" (0.0.0.0:8080, at 2:24)",
            ]
        )
    }

    @Test("the admin address, given or default, must not collide with a listener")
    func adminAddressDistinct() {
        #expect(
            ConfigFixture.errors(
                Self.base
                    + "\nroutes: [{name: r, match: {path_prefix: /}, upstream: demo}]\nadmin: {address: \"127.0.0.1:8080\"}"
            ) == [
                "gateway.yaml:4:18: admin.address 127.0.0.1:8080 overlaps the address of listener \"public\" (0.0.0.0:8080, at 1:37)"
            ]
        )
        #expect(
            ConfigFixture.errors(
                """
                listeners: [{name: public, address: "127.0.0.1:9090"}]
                upstreams: [{name: demo, url: demo}]
                routes: [{name: r, match: {path_prefix: /}, upstream: demo}]
                """
            ) == [
                "gateway.yaml:1:37: the address 127.0.0.1:9090 of listener \"public\" is also the default admin address 127.0.0.1:9090: choose another port, or set admin.address"
            ]
        )
    }

    @Test("store shards must be a power of two from 1 to 4096")
    func shards() throws {
        for good in [1, 2, 64, 4096] {
            let config = try ConfigFixture.parse(minimalPlus: "store: {shards: \(good)}")
            #expect(config.store.backend == .memory(.init(shards: good)))
        }
        #expect(
            ConfigFixture.errors(ConfigFixture.minimal + "\nstore: {shards: 48}") == [
                "gateway.yaml:7:17: store.shards must be a power of two (1, 2, 4 … 4096), got 48"
            ]
        )
        #expect(
            ConfigFixture.errors(ConfigFixture.minimal + "\nstore: {shards: 8192}") == [
                "gateway.yaml:7:17: store.shards must be an integer from 1 to 4096, got 8192"
            ]
        )
        #expect(
            ConfigFixture.errors(ConfigFixture.minimal + "\nstore: {shards: 0}") == [
                "gateway.yaml:7:17: store.shards must be an integer from 1 to 4096, got 0"
            ]
        )
    }

    @Test("store keys of the other kind are errors; redis needs a url")
    func storeKinds() {
        #expect(
            ConfigFixture.errors(ConfigFixture.minimal + "\nstore: {kind: redis, shards: 4, data_dir: ./d}") == [
                "gateway.yaml:7:8: missing required key \"url\" in store",
                "gateway.yaml:7:22: store.shards applies only to kind \"memory\"; this store is \"redis\"",
                "gateway.yaml:7:33: store.data_dir applies only to kind \"memory\"; this store is \"redis\"",
            ]
        )
        #expect(
            ConfigFixture.errors(ConfigFixture.minimal + "\nstore: {wait_replicas: 1, timeout: 1s}") == [
                "gateway.yaml:7:9: store.wait_replicas applies only to kind \"redis\"; this store is \"memory\"",
                "gateway.yaml:7:27: store.timeout applies only to kind \"redis\"; this store is \"memory\"",
            ]
        )
    }

    @Test("key bounds: max_keys, max_reregistrations, reregistration_window on both kinds, key_idle_ttl on memory; limits.max_receipt")
    func keyBounds() throws {
        let memory = try ConfigFixture.parse(
            minimalPlus: """
                limits: {max_receipt: 8KiB}
                store: {max_keys: 1000, max_reregistrations: 5, reregistration_window: 30m, key_idle_ttl: 2160h}
                """)
        #expect(memory.limits.maxReceipt == 8 * 1024)
        #expect(
            memory.store.keys
                == StoreConfig.Keys(
                    maxKeys: 1000, maxReregistrations: 5, reregistrationWindow: .seconds(1800), idleTTL: .seconds(2160 * 3600)))
        let redis = try ConfigFixture.parse(minimalPlus: "store: {kind: redis, url: redis://r:6379, max_keys: 50, max_reregistrations: 1}")
        #expect(redis.store.keys == StoreConfig.Keys(maxKeys: 50, maxReregistrations: 1))
        #expect(
            ConfigFixture.errors(ConfigFixture.minimal + "\nstore: {kind: redis, url: redis://r, key_idle_ttl: 1h}") == [
                "gateway.yaml:7:38: store.key_idle_ttl applies only to kind \"memory\"; this store is \"redis\""
            ]
        )
        #expect(
            ConfigFixture.errors(
                ConfigFixture.minimal + """

                    store: {max_keys: 0, max_reregistrations: 101, reregistration_window: 0s, key_idle_ttl: 500ms}
                    limits: {max_receipt: 64KiB}
                    """) == [
                    "gateway.yaml:7:19: store.max_keys must be an integer from 1 to 1000000000, got 0",
                    "gateway.yaml:7:43: store.max_reregistrations must be an integer from 1 to 100, got 101",
                    "gateway.yaml:7:71: store.reregistration_window must be more than 0, got 0s",
                    "gateway.yaml:7:89: store.key_idle_ttl must be at least 1s, got 500ms",
                    "gateway.yaml:8:23: limits.max_receipt must be from 4096 (4KiB) to 32768 (32KiB) bytes, got 65536 (64KiB)",
                ]
        )
        #expect(
            ConfigFixture.errors(ConfigFixture.minimal + "\nstore: {reregistration_window: 721h, max_keys: many}") == [
                "gateway.yaml:7:32: store.reregistration_window must be at most 720h, got 721h",
                "gateway.yaml:7:48: store.max_keys must be an integer from 1 to 1000000000, got \"many\"",
            ]
        )
    }

    @Test("rollout must be a percentage from 0% to 100%")
    func rollout() throws {
        let route =
            "routes: [{name: r, match: {path_prefix: /}, upstream: demo, assertion: {mode: enforce, rollout: %@}}]"
        let apps = "apps: [{team_id: ABCDE12345, bundle_ids: [com.example.shop]}]"
        func yaml(_ rollout: String) -> String {
            Self.base + "\n" + route.replacingOccurrences(of: "%@", with: rollout) + "\n" + apps
        }
        #expect(try ConfigFixture.parse(yaml("0%")).routes[0].assertion.rollout == .zero)
        #expect(try ConfigFixture.parse(yaml("\"25%\"")).routes[0].assertion.rollout == Percentage(basisPoints: 2500))
        #expect(
            ConfigFixture.errors(yaml("150%")) == [
                "gateway.yaml:3:97: routes[0].assertion.rollout must be between 0% and 100%, got \"150%\""
            ]
        )
        #expect(
            ConfigFixture.errors(yaml("25")) == [
                "gateway.yaml:3:97: routes[0].assertion.rollout needs a % sign (write 25%), got \"25\""
            ]
        )
    }

    @Test("challenge_ttl must be more than 0 and at most 1h; the attest paths must differ")
    func attest() throws {
        #expect(
            try ConfigFixture.parse(minimalPlus: "attest: {challenge_ttl: 1h}").attest.challengeTTL == .seconds(3600)
        )
        #expect(
            ConfigFixture.errors(ConfigFixture.minimal + "\nattest: {challenge_ttl: 61m}") == [
                "gateway.yaml:7:25: attest.challenge_ttl must be at most 1h, got 61m"
            ]
        )
        #expect(
            ConfigFixture.errors(ConfigFixture.minimal + "\nattest: {challenge_path: /a, register_path: /a}") == [
                "gateway.yaml:7:45: attest.challenge_path and attest.register_path must differ, both are \"/a\""
            ]
        )
        #expect(
            ConfigFixture.errors(
                ConfigFixture.minimal + "\nattest: {challenge_path: v1/c, verified_key_header: \"X:Y\"}"
            ) == [
                "gateway.yaml:7:26: attest.challenge_path must be a path starting with \"/\", got \"v1/c\"",
                "gateway.yaml:7:53: attest.verified_key_header must be a header name such as X-App-Attest-Verified-Key-Id, got \"X:Y\"",
            ]
        )
    }

    @Test("a route match needs exactly one of path_prefix and path; methods are uppercase and distinct")
    func routeMatch() {
        let yaml =
            Self.base + """

                routes:
                  - {name: a, match: {path_prefix: /a, path: /a}, upstream: demo}
                  - {name: b, match: {methods: [GET]}, upstream: demo}
                  - {name: c, match: {methods: [get, POST, POST, "GE T"], path: /c, host: "bad host"}, upstream: demo}
                """
        #expect(
            ConfigFixture.errors(yaml) == [
                "gateway.yaml:4:40: routes[0].match must have either path_prefix or path, not both",
                "gateway.yaml:5:22: routes[1].match needs path_prefix (e.g. path_prefix: /) or path",
                "gateway.yaml:6:33: routes[2].match.methods[0] must be an uppercase HTTP method such as GET or POST, got \"get\" (did you mean \"GET\"?)",
                "gateway.yaml:6:44: routes[2].match.methods lists \"POST\" more than once",
                "gateway.yaml:6:50: routes[2].match.methods[3] must be an uppercase HTTP method such as GET or POST, got \"GE T\"",
                "gateway.yaml:6:75: routes[2].match.host must be a host name such as api.example.com, got \"bad host\"",
            ]
        )
    }

    @Test("listener TLS ticket_rotation: 1h by default, 2s…24h, in either form")
    func listenerTicketRotation() throws {
        func yaml(_ tls: String) -> String {
            """
            listeners:
              - name: public
                address: ":8443"
                tls: \(tls)
            upstreams: [{name: demo, url: demo}]
            routes: [{name: r, match: {path_prefix: /}, upstream: demo}]
            """
        }
        let plain = try ConfigFixture.parse(yaml("{certificate: a.pem, private_key: a.key}"))
        #expect(plain.listeners[0].tls?.ticketRotation == .seconds(3600))
        let short = try ConfigFixture.parse(yaml("{certificate: a.pem, private_key: a.key, ticket_rotation: 2s}"))
        #expect(short.listeners[0].tls?.ticketRotation == .seconds(2))
        let list = try ConfigFixture.parse(yaml("{ticket_rotation: 24h, certificates: [{certificate: a.pem, private_key: a.key}]}"))
        #expect(list.listeners[0].tls?.ticketRotation == .seconds(86400))
        #expect(list.listeners[0].tls?.certificates.count == 1)
        #expect(
            ConfigFixture.errors(yaml("{certificate: a.pem, private_key: a.key, ticket_rotation: 1500ms}")) == [
                "gateway.yaml:4:68: listeners[0].tls.ticket_rotation must be at least 2s, got 1500ms"
            ])
        #expect(
            ConfigFixture.errors(yaml("{certificate: a.pem, private_key: a.key, ticket_rotation: 25h}")) == [
                "gateway.yaml:4:68: listeners[0].tls.ticket_rotation must be at most 24h, got 25h"
            ])
        #expect(
            ConfigFixture.errors(yaml("{ticket_rotation: 0s, certificate: a.pem}")) == [
                "gateway.yaml:4:10: missing required key \"private_key\" in listeners[0].tls",
                "gateway.yaml:4:28: listeners[0].tls.ticket_rotation must be more than 0, got 0s",
            ])
    }

    @Test("listener TLS: one form or the other, SNI names on every later certificate, unique names")
    func listenerTLS() throws {
        func errors(_ tls: String) -> [String] {
            ConfigFixture.errors(
                """
                listeners:
                  - name: public
                    address: ":8443"
                    tls: \(tls)
                upstreams: [{name: demo, url: demo}]
                routes: [{name: r, match: {path_prefix: /}, upstream: demo}]
                """
            )
        }
        #expect(
            errors("{certificate: a.pem, private_key: a.key, certificates: []}") == [
                "gateway.yaml:4:51: listeners[0].tls must have either certificate and private_key, or certificates, not both"
            ]
        )
        #expect(
            errors("{}") == [
                "gateway.yaml:4:10: listeners[0].tls needs certificate and private_key (or a certificates list for SNI)"
            ]
        )
        #expect(
            errors("{certificate: a.pem}") == [
                "gateway.yaml:4:10: missing required key \"private_key\" in listeners[0].tls"
            ]
        )
        #expect(
            errors(
                "{certificates: [{certificate: a.pem, private_key: a.key}, {certificate: b.pem, private_key: b.key}]}"
            ) == [
                "gateway.yaml:4:68: listeners[0].tls.certificates[1] needs server_names: only the first certificate is used when no server name matches"
            ]
        )
        #expect(
            errors(
                "{certificates: [{certificate: a.pem, private_key: a.key, server_names: [a.example]}, {certificate: b.pem, private_key: b.key, server_names: [A.example]}]}"
            ) == [
                "gateway.yaml:4:151: duplicate server name \"a.example\" (first defined at 4:82)"
            ]
        )
        #expect(
            errors("{certificate: \"\", private_key: a.key}") == [
                "gateway.yaml:4:24: listeners[0].tls.certificate must not be empty"
            ]
        )
    }

    @Test("upstream TLS: a client certificate needs its key")
    func upstreamTLS() {
        let yaml = """
            listeners: [{name: public, address: ":8080"}]
            upstreams: [{name: s, url: "https://s.example", tls: {client_certificate: c.pem, verify: "false"}}]
            routes: [{name: r, match: {path_prefix: /}, upstream: s}]
            """
        #expect(
            ConfigFixture.errors(yaml) == [
                "gateway.yaml:2:55: upstreams[0].tls has client_certificate but no client_key: mutual TLS needs both",
                "gateway.yaml:2:90: upstreams[0].tls.verify must be true or false, got the quoted string \"false\"",
            ]
        )
    }

    @Test("apps: team ids, bundle ids, environments, categories, versions, and unique app ids")
    func apps() {
        let yaml =
            ConfigFixture.minimal + """

                apps:
                  - {team_id: ABCDE1234, bundle_ids: []}
                  - {team_id: "0352187391", bundle_ids: [com.example.a, ".bad"], environments: [], min_bundle_version: 4.x}
                  - {team_id: ABCDE12345, bundle_ids: [com.example.shop], validation_categories: [appstore]}
                  - {team_id: ABCDE12345, bundle_ids: [com.example.shop]}
                """
        #expect(
            ConfigFixture.errors(yaml) == [
                "gateway.yaml:8:15: apps[0].team_id must be Apple's 10-character team id (A-Z, 0-9), got \"ABCDE1234\"",
                "gateway.yaml:8:38: apps[0].bundle_ids must list at least one entry",
                "gateway.yaml:9:57: apps[1].bundle_ids[1] must be a bundle id such as com.example.shop, got \".bad\"",
                "gateway.yaml:9:80: apps[1].environments must list at least one entry",
                "gateway.yaml:9:104: apps[1].min_bundle_version must be a dotted version such as '4.2' or '4.2.1', got \"4.x\"",
                "gateway.yaml:10:83: apps[2].validation_categories[0] must be one of \"os\", \"testflight\", \"development\", \"app_store\", \"enterprise\", \"developer_id\" or \"other\", got \"appstore\" (did you mean \"app_store\"?)",
                "gateway.yaml:11:40: duplicate app id \"ABCDE12345.com.example.shop\" (first defined at 10:40)",
            ]
        )
    }

    @Test("apps: receipts is verify or ignore, require_macos_security a boolean; trust.extra_receipt_roots a list of files")
    func receiptsAndMacOS() {
        let yaml =
            ConfigFixture.minimal + """

                apps:
                  - {team_id: ABCDE12345, bundle_ids: [com.example.a], receipts: verfy}
                  - {team_id: ABCDE12345, bundle_ids: [com.example.b], require_macos_security: yes}
                  - {team_id: ABCDE12345, bundle_ids: [com.example.c], receipts: [verify]}
                trust: {extra_receipt_roots: roots/receipt-root.pem}
                """
        #expect(
            ConfigFixture.errors(yaml) == [
                "gateway.yaml:8:66: apps[0].receipts must be one of \"verify\" or \"ignore\", got \"verfy\" (did you mean \"verify\"?)",
                "gateway.yaml:9:80: apps[1].require_macos_security must be true or false, got \"yes\"",
                "gateway.yaml:10:66: apps[2].receipts must be one of \"verify\" or \"ignore\", got a list",
                "gateway.yaml:11:30: trust.extra_receipt_roots must be a list, got \"roots/receipt-root.pem\"",
            ]
        )
    }

    @Test("keys merged in with << are checked like written ones; explicit keys win")
    func mergeKeys() throws {
        let yaml = """
            listeners: [{name: public, address: ":8080"}]
            upstreams:
              - &base {name: a, url: demo, max_conections: 3}
              - {<<: *base, name: b}
            routes: [{name: r, match: {path_prefix: /}, upstream: a}]
            """
        #expect(
            ConfigFixture.errors(yaml) == [
                "gateway.yaml:3:32: unknown key \"max_conections\" in upstreams[0] (did you mean \"max_connections\"?)",
                "gateway.yaml:3:32: unknown key \"max_conections\" in upstreams[1] (did you mean \"max_connections\"?)",
            ]
        )
        #expect(
            ConfigFixture.errors("listeners: [{<<: 3}]\nupstreams: []\nroutes: []").contains(
                "gateway.yaml:1:18: the merge key << in listeners[0] needs a mapping or a list of mappings, got \"3\""
            )
        )
    }

    @Test("an alias bomb is refused instead of expanded")
    func aliasBomb() {
        var yaml = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n"
        for level in 1...6 {
            let previous = "*a\(level - 1)"
            yaml += "a\(level): &a\(level) [\(Array(repeating: previous, count: 10).joined(separator: ", "))]\n"
        }
        let errors = ConfigFixture.errors(yaml)
        #expect(errors.count == 1)
        #expect(errors.first?.contains("the document expands to more than 100000 values") == true)
    }
}
