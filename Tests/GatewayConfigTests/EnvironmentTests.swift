import Testing

@testable import GatewayConfig

/// `${VAR}` and `${VAR:-default}` in values, from the environment given to the loader.
@Suite("Environment variables in values")
struct EnvironmentTests {
    static func parse(_ yaml: String, _ environment: [String: String]) throws(ConfigError) -> GatewayConfig {
        try GatewayConfig.parse(yaml: yaml, file: "gateway.yaml", baseDirectory: "/etc/gw", environment: environment)
    }

    static func errors(_ yaml: String, _ environment: [String: String]) -> [String] {
        do {
            _ = try parse(yaml, environment)
            return []
        } catch {
            return error.diagnostics.map(\.description)
        }
    }

    /// Block style takes `${…}` as it is; in flow style (`{…}`, `[…]`) braces are YAML's, so quote it.
    static let redis = """
        listeners: [{name: public, address: "0.0.0.0:${PORT:-8080}"}]
        upstreams: [{name: api, url: "${API_URL}"}]
        routes: [{name: r, match: {path_prefix: /}, upstream: api}]
        store:
          kind: redis
          url: ${REDIS_URL}
          timeout: ${REDIS_TIMEOUT:-1s}
        workers: ${WORKERS:-auto}
        """

    @Test("one file, two environments: values come from the environment, defaults where unset or empty")
    func substitution() throws {
        let prod = try Self.parse(
            Self.redis,
            [
                "API_URL": "http://10.0.0.5:8081", "REDIS_URL": "redis://redis.prod:6379/2", "PORT": "9000", "WORKERS": "4",
                "REDIS_TIMEOUT": "",
            ])
        #expect(prod.listeners[0].address == SocketAddressSpec(host: "0.0.0.0", port: 9000))
        #expect(prod.upstreams[0].target.description == "http://10.0.0.5:8081")
        #expect(prod.workers == .count(4))  // a plain value stays plain: read as a number
        guard case .redis(let r) = prod.store.backend else { throw Unexpected() }
        #expect(r.url.host == "redis.prod" && r.url.database == 2)
        #expect(r.timeout == .seconds(1))  // set but empty: the default

        let dev = try Self.parse(Self.redis, ["API_URL": "http://127.0.0.1:8081", "REDIS_URL": "redis://127.0.0.1"])
        #expect(dev.listeners[0].address.port == 8080)
        #expect(dev.workers == .auto)
    }

    @Test("an unset variable without a default is an error at its ${, naming the value; all of them at once")
    func unset() {
        #expect(
            Self.errors(Self.redis, [:]) == [
                "gateway.yaml:2:31: upstreams[0].url uses the environment variable API_URL, which is not set; set it, or "
                    + "give a default: ${API_URL:-value}",
                "gateway.yaml:6:8: store.url uses the environment variable REDIS_URL, which is not set; set it, or give a "
                    + "default: ${REDIS_URL:-value}",
            ])
        // Inside a longer value, the column is the reference's own.
        let inside = """
            listeners: [{name: public, address: "127.0.0.1:${PORT}"}]
            upstreams: [{name: demo, url: demo}]
            routes: [{name: r, match: {path_prefix: /}, upstream: demo}]
            """
        #expect(
            Self.errors(inside, [:]) == [
                "gateway.yaml:1:48: listeners[0].address uses the environment variable PORT, which is not set; set it, or "
                    + "give a default: ${PORT:-value}"
            ])
    }

    @Test("$${ is a literal ${; any other $ is itself; keys are never substituted")
    func escaping() throws {
        let yaml =
            ConfigFixture.minimal + """

                attest: {challenge_path: "/v1/$${challenge}", register_path: /v1/$register$}
                """
        let config = try Self.parse(yaml, ["challenge": "x", "register": "y"])
        #expect(config.attest.challengePath == "/v1/${challenge}")
        #expect(config.attest.registerPath == "/v1/$register$")
        #expect(
            Self.errors(ConfigFixture.minimal + "\n${KEY}: 1", ["KEY": "workers"]) == [
                "gateway.yaml:7:1: unknown key \"${KEY}\" at the top level"
            ])
    }

    @Test("a value is never read as YAML again: a variable cannot add structure")
    func noInjection() {
        let yaml = """
            listeners: [{name: public, address: "0.0.0.0:8080"}]
            upstreams: [{name: demo, url: demo}]
            routes: [{name: r, match: {path_prefix: /}, upstream: demo}]
            logging:
              level: ${LEVEL}
            """
        #expect(
            Self.errors(yaml, ["LEVEL": "info, access_log: false"]) == [
                "gateway.yaml:5:10: logging.level must be one of \"debug\", \"info\", \"warning\" or \"error\", got "
                    + "\"info, access_log: false\""
            ])
    }

    @Test("malformed references")
    func malformed() {
        let base = "listeners: [{name: public, address: \"0.0.0.0:8080\"}]\nupstreams: [{name: demo, url: demo}]\n"
        func errors(_ route: String) -> [String] {
            Self.errors(base + "routes: [{name: r, match: {path_prefix: \"\(route)\"}, upstream: demo}]", ["A": "a"])
        }
        #expect(
            errors("/${A") == [
                "gateway.yaml:3:43: routes[0].match.path_prefix has \"${\" without a closing \"}\" (write $${ for a literal ${)"
            ])
        #expect(
            errors("/x/${1A}") == [
                "gateway.yaml:3:45: routes[0].match.path_prefix has \"${1A}\", which is not ${NAME} or ${NAME:-default} (NAME: "
                    + "letters, digits and _, not starting with a digit; write $${ for a literal ${)"
            ])
        #expect(errors("/${A:}").first?.contains("which is not ${NAME} or ${NAME:-default}") == true)
        #expect(errors("/${B:-${A}}").first?.contains("a default is plain text, it cannot refer to another variable") == true)
        #expect(errors("/${A}/${B:-b}") == [])
    }

    @Test("positions of values survive decoding: SourceMap")
    func sourceMap() throws {
        let config = try ConfigFixture.parse(
            """
            listeners:
              - name: public
                address: 0.0.0.0:8080
            upstreams:
              - {name: demo, url: demo}
            routes: [{name: r, match: {path_prefix: /}, upstream: demo}]
            store: {kind: memory, data_dir: ./data}
            """)
        #expect(config.sourceMap.location("listeners[0].address")! == (3, 14))
        #expect(config.sourceMap.location("upstreams[0].url")! == (5, 23))
        #expect(config.sourceMap.location("store.data_dir")! == (7, 33))
        // A default falls back to its section; nothing written at all: no position.
        #expect(config.sourceMap.location("upstreams[0].tls")! == (5, 5))
        #expect(config.sourceMap.location("admin.address") == nil)
        #expect(config.sourceMap.diagnostic(at: "admin.address", "m").description == "gateway.yaml: m")
    }

    struct Unexpected: Error {}
}
