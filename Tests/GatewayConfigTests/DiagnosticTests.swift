import Testing

@testable import GatewayConfig

/// Each kind of error: the exact `file:line:column: message` an operator reads.
@Suite("Diagnostics")
struct DiagnosticTests {
    @Test("an unknown key points at the key and suggests the closest known one")
    func unknownKeyWithSuggestion() {
        let yaml = """
            listeners:
              - {name: public, address: 0.0.0.0:8080}
            upstreams:
              - {name: demo, url: demo}
            routes:
              - {name: default, match: {path_prefix: /}, upstream: demo}
              - name: purchase
                match: {path_prefix: /api}
                upstrem: demo
            """
        #expect(
            ConfigFixture.errors(yaml) == [
                "gateway.yaml:7:5: missing required key \"upstream\" in routes[1]",
                "gateway.yaml:9:5: unknown key \"upstrem\" in routes[1] (did you mean \"upstream\"?)",
            ]
        )
    }

    @Test("an unknown key with nothing close gets no suggestion; top-level keys say so")
    func unknownKeyWithoutSuggestion() {
        #expect(
            ConfigFixture.errors(ConfigFixture.minimal + "\nfrobnicate: 1\nlimits: {colour: blue}") == [
                "gateway.yaml:7:1: unknown key \"frobnicate\" at the top level",
                "gateway.yaml:8:10: unknown key \"colour\" in limits",
            ]
        )
        #expect(
            ConfigFixture.errors(ConfigFixture.minimal + "\nroute: []") == [
                "gateway.yaml:7:1: unknown key \"route\" at the top level (did you mean \"routes\"?)"
            ]
        )
    }

    @Test("the same key twice in one mapping is an error at the second one")
    func duplicateKey() {
        let yaml = """
            listeners:
              - name: public
                address: 0.0.0.0:8080
                name: private
            upstreams: [{name: demo, url: demo}]
            routes: [{name: r, match: {path_prefix: /}, upstream: demo}]
            upstreams: []
            """
        #expect(
            ConfigFixture.errors(yaml) == [
                "gateway.yaml:4:5: duplicate key \"name\" in listeners[0] (first at 2:5)",
                "gateway.yaml:7:1: duplicate key \"upstreams\" at the top level (first at 5:1)",
            ]
        )
    }

    @Test("wrong types name what was expected and what was found")
    func wrongTypes() {
        let yaml = """
            workers: [1]
            listeners: {name: public}
            upstreams:
              - name: [demo]
                url: demo
                max_connections: "64"
            routes:
              - {name: r, match: /, upstream: demo}
            logging: {access_log: yes, level: }
            store: 64
            """
        #expect(
            ConfigFixture.errors(yaml) == [
                "gateway.yaml:1:10: workers must be \"auto\" or a positive integer, got a list",
                "gateway.yaml:2:12: listeners must be a list, got a mapping",
                "gateway.yaml:4:11: upstreams[0].name must be a string, got a list",
                "gateway.yaml:6:5: upstreams[0].max_connections has no effect on the demo upstream (it answers in process, without a connection); remove it",
                "gateway.yaml:6:22: upstreams[0].max_connections must be an integer from 1 to 100000, got the quoted string \"64\" (write it without quotes)",
                "gateway.yaml:8:22: routes[0].match must be a mapping, got \"/\"",
                "gateway.yaml:9:23: logging.access_log must be true, false or a mapping such as {path: /var/log/attest-gateway/access.log}, got \"yes\"",
                "gateway.yaml:9:35: logging.level must be one of \"debug\", \"info\", \"warning\" or \"error\", got an empty value",
                "gateway.yaml:10:8: store must be a mapping, got \"64\"",
            ]
        )
    }

    @Test("workers must be auto or a positive integer")
    func workers() {
        #expect(
            ConfigFixture.errors("# comment\n\nworkers: lots\n" + ConfigFixture.minimal) == [
                "gateway.yaml:3:10: workers must be \"auto\" or a positive integer, got \"lots\""
            ]
        )
        #expect(
            ConfigFixture.errors("workers: 0\n" + ConfigFixture.minimal) == [
                "gateway.yaml:1:10: workers must be \"auto\" or a positive integer, got \"0\""
            ]
        )
        #expect(
            ConfigFixture.errors("workers: 5000\n" + ConfigFixture.minimal) == [
                "gateway.yaml:1:10: workers must be at most 1024, got 5000"
            ]
        )
    }

    @Test("bad durations: no unit, unknown unit, fraction, zero, over the maximum")
    func durations() {
        let yaml =
            ConfigFixture.minimal + """

                limits:
                  idle_timeout: 60
                  header_timeout: 10sec
                  body_timeout: 1.5s
                  drain_timeout: 1h30m
                attest: {challenge_ttl: 0s}
                store: {snapshot_interval: 61m, data_dir: d}
                """
        #expect(
            ConfigFixture.errors(yaml) + ConfigFixture.errors(ConfigFixture.minimal + "\nattest: {challenge_ttl: 2h}")
                == [
                    "gateway.yaml:8:17: limits.idle_timeout needs a unit, one of ms, s, m or h (e.g. 60s), got \"60\"",
                    "gateway.yaml:9:19: limits.header_timeout must be a duration: a whole number and one unit, ms, s, m or h (e.g. 250ms, 30s, 5m, 1h), got \"10sec\"",
                    "gateway.yaml:10:17: limits.body_timeout must be a duration: a whole number and one unit, ms, s, m or h (e.g. 250ms, 30s, 5m, 1h), got \"1.5s\"",
                    "gateway.yaml:11:18: limits.drain_timeout must be a duration: a whole number and one unit, ms, s, m or h (e.g. 250ms, 30s, 5m, 1h), got \"1h30m\"",
                    "gateway.yaml:12:25: attest.challenge_ttl must be more than 0, got 0s",
                    "gateway.yaml:7:25: attest.challenge_ttl must be at most 1h, got 2h",
                ]
        )
    }

    @Test("bad sizes: unknown unit (with the right spelling), negative, too small, overflow")
    func sizes() {
        let yaml =
            ConfigFixture.minimal + """

                limits: {max_body: 64kib, max_header_bytes: -1, max_request_line: 8, max_connections: 0}
                """
        #expect(
            ConfigFixture.errors(yaml) == [
                "gateway.yaml:7:20: limits.max_body has an unknown unit \"kib\" (did you mean \"64KiB\"?)",
                "gateway.yaml:7:45: limits.max_header_bytes must be a size: a whole number of bytes, optionally with a unit B, KB, MB, GB (powers of 1000) or KiB, MiB, GiB (powers of 1024), e.g. 64KiB, got \"-1\"",
                "gateway.yaml:7:67: limits.max_request_line must be at least 16 bytes, got 8",
                "gateway.yaml:7:87: limits.max_connections must be an integer from 1 to 1000000, got 0",
            ]
        )
        #expect(
            ConfigFixture.errors(ConfigFixture.minimal + "\nlimits: {max_body: 99999999999GiB}") == [
                "gateway.yaml:7:20: limits.max_body is too large, got \"99999999999GiB\""
            ]
        )
    }

    @Test("bad addresses: no port, bad port, bad host, IPv6 without brackets")
    func addresses() {
        let yaml = """
            listeners:
              - {name: a, address: 0.0.0.0}
              - {name: b, address: "0.0.0.0:99999"}
              - {name: c, address: "300.1.1.1:80"}
              - {name: d, address: "::1:8080"}
              - {name: e, address: "[::1]"}
            upstreams: [{name: demo, url: demo}]
            routes: [{name: r, match: {path_prefix: /}, upstream: demo}]
            """
        #expect(
            ConfigFixture.errors(yaml) == [
                "gateway.yaml:2:24: listeners[0].address needs a port: must be HOST:PORT, [IPv6]:PORT or :PORT (e.g. 0.0.0.0:8080), got \"0.0.0.0\"",
                "gateway.yaml:3:24: listeners[1].address has an invalid port \"99999\" (0 to 65535), got \"0.0.0.0:99999\"",
                "gateway.yaml:4:24: listeners[2].address has an invalid host \"300.1.1.1\", got \"300.1.1.1:80\"",
                "gateway.yaml:5:24: listeners[3].address needs brackets around an IPv6 address (e.g. [::1]:8080), got \"::1:8080\"",
                "gateway.yaml:6:24: listeners[4].address needs a port: must be HOST:PORT, [IPv6]:PORT or :PORT (e.g. 0.0.0.0:8080), got \"[::1]\"",
            ]
        )
    }

    @Test("bad urls: scheme, credentials, query, port, host; tls on a non-https upstream")
    func urls() {
        let yaml = """
            listeners: [{name: public, address: ":8080"}]
            upstreams:
              - {name: a, url: "ftp://files.example.com"}
              - {name: b, url: "http://user:pw@example.com"}
              - {name: c, url: "http://example.com/x?y=1"}
              - {name: d, url: "http://example.com:0"}
              - {name: e, url: "http://exa mple.com"}
              - {name: f, url: "http://example.com", tls: {verify: false}}
              - {name: g, url: demo, tls: {}}
            routes: [{name: r, match: {path_prefix: /}, upstream: a}]
            """
        #expect(
            ConfigFixture.errors(yaml) == [
                "gateway.yaml:3:20: upstreams[0].url must be \"demo\" or an http:// or https:// url (e.g. http://127.0.0.1:8081), got \"ftp://files.example.com\"",
                "gateway.yaml:4:20: upstreams[1].url must not contain credentials (user@), got \"http://user:pw@example.com\"",
                "gateway.yaml:5:20: upstreams[2].url must not have a query or a fragment, got \"http://example.com/x?y=1\"",
                "gateway.yaml:6:20: upstreams[3].url has an invalid port \"0\" (1 to 65535), got \"http://example.com:0\"",
                "gateway.yaml:7:20: upstreams[4].url has an invalid host \"exa mple.com\", got \"http://exa mple.com\"",
                "gateway.yaml:8:42: upstreams[5].tls applies only to https:// urls, not to an http:// url",
                "gateway.yaml:9:26: upstreams[6].tls applies only to https:// urls, not to the demo upstream",
            ]
        )
    }

    @Test("duplicate listener, upstream and route names point at the repeat and at the first")
    func duplicateNames() {
        let yaml = """
            listeners:
              - {name: public, address: ":8080"}
              - {name: public, address: ":8081"}
            upstreams:
              - {name: demo, url: demo}
              - {name: demo, url: "http://127.0.0.1:8081"}
            routes:
              - {name: r, match: {path_prefix: /a}, upstream: demo}
              - {name: r, match: {path_prefix: /b}, upstream: demo}
            """
        #expect(
            ConfigFixture.errors(yaml) == [
                "gateway.yaml:3:12: duplicate listener name \"public\" (first defined at 2:12)",
                "gateway.yaml:6:12: duplicate upstream name \"demo\" (first defined at 5:12)",
                "gateway.yaml:9:12: duplicate route name \"r\" (first defined at 8:12)",
            ]
        )
    }

    @Test("a route naming an unknown upstream gets a suggestion and the list of upstreams")
    func missingUpstream() {
        let yaml = """
            listeners: [{name: public, address: ":8080"}]
            upstreams: [{name: legacy, url: "http://127.0.0.1:8081"}, {name: demo, url: demo}]
            routes:
              - {name: a, match: {path_prefix: /a}, upstream: legcy}
              - {name: b, match: {path_prefix: /b}, upstream: payments}
            """
        #expect(
            ConfigFixture.errors(yaml) == [
                "gateway.yaml:4:51: routes[0].upstream names \"legcy\", which is not an upstream (did you mean \"legacy\"?); the upstreams are \"demo\" and \"legacy\"",
                "gateway.yaml:5:51: routes[1].upstream names \"payments\", which is not an upstream; the upstreams are \"demo\" and \"legacy\"",
            ]
        )
    }

    @Test("an invalid enum value lists the choices and suggests the closest")
    func invalidEnum() {
        let yaml = """
            listeners: [{name: public, address: ":8080", protocols: [http2]}]
            upstreams: [{name: demo, url: demo}]
            routes:
              - name: r
                match: {path_prefix: /}
                upstream: demo
                assertion: {mode: enfroce, bind: bdy, on_store_error: closed}
            """
        #expect(
            ConfigFixture.errors(yaml) == [
                "gateway.yaml:1:58: listeners[0].protocols[0] must be one of \"http1\", \"h2\" or \"h2c\", got \"http2\" (did you mean \"http1\"?)",
                "gateway.yaml:7:23: routes[0].assertion.mode must be one of \"enforce\", \"shadow\" or \"off\", got \"enfroce\" (did you mean \"enforce\"?)",
                "gateway.yaml:7:38: routes[0].assertion.bind must be one of \"request\" or \"body\", got \"bdy\" (did you mean \"body\"?)",
                "gateway.yaml:7:59: routes[0].assertion.on_store_error must be one of \"fail_closed\" or \"fail_open\", got \"closed\"",
            ]
        )
    }

    @Test("missing required sections and keys point at the enclosing mapping")
    func missingRequired() {
        #expect(
            ConfigFixture.errors("# nothing else\nworkers: auto\n") == [
                "gateway.yaml:2:1: missing required key \"listeners\" at the top level",
                "gateway.yaml:2:1: missing required key \"upstreams\" at the top level",
                "gateway.yaml:2:1: missing required key \"routes\" at the top level",
            ]
        )
        #expect(
            ConfigFixture.errors("listeners: [{}]\nupstreams: []\nroutes: [{name: r, upstream: x}]") == [
                "gateway.yaml:1:13: missing required key \"name\" in listeners[0]",
                "gateway.yaml:1:13: missing required key \"address\" in listeners[0]",
                "gateway.yaml:2:12: upstreams must list at least one entry",
                "gateway.yaml:3:10: missing required key \"match\" in routes[0]",
            ]
        )
    }

    @Test("an empty file, a comment-only file and a non-mapping document are reported at 1:1")
    func emptyAndNonMapping() {
        let empty = "gateway.yaml:1:1: the configuration is empty: it needs at least listeners, upstreams and routes"
        #expect(ConfigFixture.errors("") == [empty])
        #expect(ConfigFixture.errors("# just a comment\n") == [empty])
        #expect(
            ConfigFixture.errors("- a\n- b\n") == ["gateway.yaml:1:1: the configuration must be a mapping, got a list"]
        )
    }

    @Test("YAML syntax errors report libyaml's position")
    func yamlSyntaxErrors() {
        #expect(
            ConfigFixture.errors("listeners:\n  - {name: public, address: 0.0.0.0:8080\nupstreams: []\n") == [
                "gateway.yaml:3:10: invalid YAML: did not find expected ',' or '}' (while parsing a flow mapping at 2:5)"
            ]
        )
        #expect(
            ConfigFixture.errors("workers: auto\n\tlisteners: []\n") == [
                "gateway.yaml:2:1: invalid YAML: found a tab character that violates indentation (while scanning a plain scalar at 1:10)"
            ]
        )
        #expect(
            ConfigFixture.errors("workers: auto\nlisteners: *nowhere\n") == [
                "gateway.yaml:2:12: invalid YAML: found undefined alias"
            ]
        )
        #expect(
            ConfigFixture.errors(ConfigFixture.minimal + "\n---\nworkers: 2\n").first?.hasPrefix(
                "gateway.yaml:7:1: invalid YAML: but found another document"
            ) == true
        )
    }

    @Test("many errors are all reported in one pass, sorted by position")
    func multipleErrorsSorted() {
        let yaml = """
            logging: {level: loud}
            workers: -2
            listeners:
              - {name: public, address: "0.0.0.0:8080", protocols: []}
            upstreams:
              - {name: demo, url: demo, connect_timeout: 5}
            routes:
              - {name: r, match: {path_prefix: x}, upstream: nope}
            store: {kind: memcache}
            """
        let errors = ConfigFixture.errors(yaml)
        #expect(
            errors == [
                "gateway.yaml:1:18: logging.level must be one of \"debug\", \"info\", \"warning\" or \"error\", got \"loud\"",
                "gateway.yaml:2:10: workers must be \"auto\" or a positive integer, got \"-2\"",
                "gateway.yaml:4:56: listeners[0].protocols must list at least one entry",
                "gateway.yaml:6:29: upstreams[0].connect_timeout has no effect on the demo upstream (it answers in process, without a connection); remove it",
                "gateway.yaml:6:46: upstreams[0].connect_timeout needs a unit, one of ms, s, m or h (e.g. 5s), got \"5\"",
                "gateway.yaml:8:36: routes[0].match.path_prefix must be a path starting with \"/\", got \"x\"",
                "gateway.yaml:8:50: routes[0].upstream names \"nope\", which is not an upstream; the only upstream is \"demo\"",
                "gateway.yaml:9:15: store.kind must be one of \"memory\" or \"redis\", got \"memcache\"",
            ]
        )
    }

    @Test("ConfigError prints one diagnostic per line; a file-level one has no position")
    func errorDescription() {
        let error = ConfigError(diagnostics: [
            ConfigDiagnostic(file: "g.yaml", line: 3, column: 14, message: "first"),
            ConfigDiagnostic(file: "g.yaml", line: 0, column: 0, message: "whole file"),
        ])
        #expect(error.description == "g.yaml:3:14: first\ng.yaml: whole file")
    }

    @Test("the file name given to parse appears in every diagnostic")
    func fileNameInDiagnostics() {
        #expect(
            throws: ConfigError(diagnostics: [
                ConfigDiagnostic(
                    file: "/srv/gw/prod.yaml",
                    line: 1,
                    column: 10,
                    message: "workers must be \"auto\" or a positive integer, got \"x\""
                )
            ])
        ) {
            try GatewayConfig.parse(
                yaml: "workers: x\n" + ConfigFixture.minimal,
                file: "/srv/gw/prod.yaml",
                baseDirectory: "/srv/gw"
            )
        }
    }
}
