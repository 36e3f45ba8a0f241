import Testing

@testable import GatewayConfig

/// `upstreams[].servers`, `balance`, `retries`, passive and active health, `resolve_interval`, and
/// `routes[].timeouts`: what is read, the defaults, and every key that could not have an effect.
@Suite("Upstreams of several servers, health, names, route timeouts (config)")
struct UpstreamServersConfigTests {
    static func upstream(_ body: String, route: String = "") -> String {
        """
        listeners: [{name: public, address: "0.0.0.0:8080"}]
        upstreams:
          - {name: api, \(body)}
          - {name: demo, url: demo}
        routes: [{name: r, match: {path_prefix: /}, upstream: api\(route)}]
        """
    }

    @Test("servers as urls or {url, weight}; balance, retries, health, resolve_interval read")
    func servers() throws {
        let config = try ConfigFixture.parse(
            Self.upstream(
                """
                servers: ["http://10.0.0.1:8080", {url: "http://backend.internal:8081", weight: 3}], balance: least_connections, \
                retries: 1, max_fails: 5, fail_timeout: 2s, max_fail_timeout: 1m, resolve_interval: 5s, \
                health_check: {path: /healthz, interval: 3s, timeout: 500ms, expect_status: 204}
                """))
        let u = config.upstreams[0]
        #expect(
            u.servers == [
                UpstreamServerConfig(url: UpstreamURL(scheme: .http, host: "10.0.0.1", port: 8080)),
                UpstreamServerConfig(url: UpstreamURL(scheme: .http, host: "backend.internal", port: 8081), weight: 3),
            ])
        #expect(u.servers.map(\.label) == ["10.0.0.1:8080", "backend.internal:8081"])
        #expect(u.target == .url(UpstreamURL(scheme: .http, host: "10.0.0.1", port: 8080)))
        #expect(u.balance == .leastConnections && u.retries == 1 && u.maxFails == 5)
        #expect(u.failTimeout == .seconds(2) && u.maxFailTimeout == .seconds(60) && u.resolveInterval == .seconds(5))
        #expect(
            u.healthCheck
                == UpstreamHealthCheckConfig(path: "/healthz", interval: .seconds(3), timeout: .milliseconds(500), expectStatus: 204))
    }

    @Test("defaults: url is one server; round robin, 1 retry, 3 fails, 10s doubling to 300s; names resolved every 30s, addresses never")
    func defaults() throws {
        let single = try ConfigFixture.parse(Self.upstream("url: http://127.0.0.1:8081")).upstreams[0]
        #expect(single.servers == [UpstreamServerConfig(url: UpstreamURL(scheme: .http, host: "127.0.0.1", port: 8081))])
        #expect(single.balance == .roundRobin && single.retries == 1 && single.maxFails == 3)
        #expect(single.failTimeout == .seconds(10) && single.maxFailTimeout == .seconds(300))
        #expect(single.healthCheck == nil && single.resolveInterval == nil)
        let named = try ConfigFixture.parse(Self.upstream("url: http://backend.internal:8081")).upstreams[0]
        #expect(named.resolveInterval == .seconds(30))
        let off = try ConfigFixture.parse(Self.upstream("url: http://backend.internal:8081, resolve_interval: off")).upstreams[0]
        #expect(off.resolveInterval == nil)
        let check = try ConfigFixture.parse(Self.upstream("url: http://127.0.0.1:1, health_check: {path: /h}")).upstreams[0]
        #expect(check.healthCheck == UpstreamHealthCheckConfig(path: "/h", interval: .seconds(10), timeout: .seconds(2)))
        let demo = try ConfigFixture.parse(Self.upstream("url: http://127.0.0.1:1")).upstreams[1]
        #expect(demo.servers.isEmpty && demo.resolveInterval == nil)
    }

    @Test("url and servers together, a demo server, mixed schemes, a server twice, a bad weight: each at its position")
    func badServers() {
        #expect(
            ConfigFixture.errors(Self.upstream("url: http://127.0.0.1:1, servers: [http://127.0.0.1:2]")) == [
                "gateway.yaml:3:17: upstreams[0] must have either url or servers, not both"
            ])
        #expect(
            ConfigFixture.errors(Self.upstream("servers: [demo]")) == [
                "gateway.yaml:3:27: upstreams[0].servers[0] must be an http:// or https:// url: demo is an upstream of its own (url: demo)"
            ])
        #expect(
            ConfigFixture.errors(Self.upstream("servers: [\"http://127.0.0.1:1\", \"https://127.0.0.1:2\"]")) == [
                "gateway.yaml:3:49: upstreams[0].servers[1] is https://127.0.0.1:2 but upstreams[0].servers[0] is http://127.0.0.1:1: "
                    + "the servers of an upstream share one scheme and path (and one tls setting); make another upstream for it"
            ])
        #expect(
            ConfigFixture.errors(Self.upstream("servers: [\"http://127.0.0.1:1\", {url: \"http://127.0.0.1:1\", weight: 2}]")) == [
                "gateway.yaml:3:55: upstreams[0].servers[1] repeats 127.0.0.1:1 (first at 3:27); give it a weight instead"
            ])
        #expect(
            ConfigFixture.errors(Self.upstream("servers: [{url: \"http://127.0.0.1:1\", weight: 0}]")) == [
                "gateway.yaml:3:63: upstreams[0].servers[0].weight must be an integer from 1 to 1000, got 0"
            ])
        #expect(
            ConfigFixture.errors(Self.upstream("servers: []")) == ["gateway.yaml:3:26: upstreams[0].servers must list at least one entry"])
        #expect(
            ConfigFixture.errors(Self.upstream("servers: [{weight: 2}]")) == [
                "gateway.yaml:3:27: missing required key \"url\" in upstreams[0].servers[0]"
            ])
        #expect(
            ConfigFixture.errors(Self.upstream("servers: [[http://127.0.0.1:1]]")) == [
                "gateway.yaml:3:27: upstreams[0].servers[0] must be an http:// or https:// url, or {url: …, weight: …}, got a list"
            ])
    }

    @Test("keys without effect: balance and retries with one server, too many retries, fail timeouts with max_fails 0, names")
    func noEffect() {
        #expect(
            ConfigFixture.errors(Self.upstream("url: http://127.0.0.1:1, balance: least_connections, retries: 1")) == [
                "gateway.yaml:3:42: upstreams[0].balance has no effect with a single server (it chooses among several servers); "
                    + "list servers, or remove it",
                "gateway.yaml:3:70: upstreams[0].retries has no effect with a single server (it sends a failed request to another "
                    + "server); list servers, or remove it",
            ])
        #expect(
            ConfigFixture.errors(Self.upstream("servers: [\"http://127.0.0.1:1\", \"http://127.0.0.1:2\"], retries: 2")) == [
                "gateway.yaml:3:72: upstreams[0].retries is 2 with 2 servers: a request tries each server once, so at most 1"
            ])
        #expect(
            ConfigFixture.errors(Self.upstream("url: http://127.0.0.1:1, max_fails: 0, fail_timeout: 5s")) == [
                "gateway.yaml:3:56: upstreams[0].fail_timeout has no effect with max_fails: 0 (no server is ejected); remove it"
            ])
        #expect(
            ConfigFixture.errors(Self.upstream("url: http://127.0.0.1:1, fail_timeout: 1m, max_fail_timeout: 30s")) == [
                "gateway.yaml:3:60: upstreams[0].max_fail_timeout (30s) must be at least upstreams[0].fail_timeout (1m)"
            ])
        #expect(
            ConfigFixture.errors(Self.upstream("url: http://127.0.0.1:1, resolve_interval: 10s")) == [
                "gateway.yaml:3:42: upstreams[0].resolve_interval has no effect: every server is an IP address (nothing to resolve); "
                    + "remove it"
            ])
        #expect(
            ConfigFixture.errors(Self.upstream("url: http://backend.internal, resolve_interval: 500ms")) == [
                "gateway.yaml:3:65: upstreams[0].resolve_interval must be at least 1s, got 500ms"
            ])
        #expect(
            ConfigFixture.errors(Self.upstream("servers: [\"http://127.0.0.1:1\", \"http://127.0.0.1:2\"], balance: random")) == [
                "gateway.yaml:3:81: upstreams[0].balance must be one of \"round_robin\" or \"least_connections\", got \"random\""
            ])
    }

    @Test("health_check: a path, a timeout less than the interval, a status")
    func healthCheck() {
        #expect(
            ConfigFixture.errors(Self.upstream("url: http://127.0.0.1:1, health_check: {interval: 1s}")) == [
                "gateway.yaml:3:56: missing required key \"path\" in upstreams[0].health_check"
            ])
        #expect(
            ConfigFixture.errors(Self.upstream("url: http://127.0.0.1:1, health_check: {path: /h, interval: 1s, timeout: 1s}")) == [
                "gateway.yaml:3:81: upstreams[0].health_check.timeout (1s) must be less than upstreams[0].health_check.interval (1s): "
                    + "one check at a time per server"
            ])
        #expect(
            ConfigFixture.errors(Self.upstream("url: http://127.0.0.1:1, health_check: {path: /h, expect_status: 42}")) == [
                "gateway.yaml:3:82: upstreams[0].health_check.expect_status must be an integer from 100 to 599, got 42"
            ])
        #expect(
            ConfigFixture.errors(Self.upstream("url: http://127.0.0.1:1, health_check: {path: h}")) == [
                "gateway.yaml:3:63: upstreams[0].health_check.path must be a path starting with \"/\", got \"h\""
            ])
    }

    @Test("the demo upstream takes none of them")
    func demo() {
        let yaml = """
            listeners: [{name: public, address: "0.0.0.0:8080"}]
            upstreams:
              - {name: demo, url: demo, retries: 1, health_check: {path: /h}}
            routes: [{name: r, match: {path_prefix: /}, upstream: demo}]
            """
        #expect(
            ConfigFixture.errors(yaml) == [
                "gateway.yaml:3:29: upstreams[0].retries has no effect on the demo upstream (it answers in process, without a "
                    + "connection); remove it",
                "gateway.yaml:3:41: upstreams[0].health_check has no effect on the demo upstream (it answers in process, without a "
                    + "connection); remove it",
            ])
    }

    @Test("routes[].timeouts: response and connect override the upstream's; at least one; not on the demo upstream")
    func routeTimeouts() throws {
        let config = try ConfigFixture.parse(Self.upstream("url: http://127.0.0.1:1", route: ", timeouts: {response: 90s, connect: 250ms}"))
        #expect(config.routes[0].timeouts == RouteTimeouts(response: .seconds(90), connect: .milliseconds(250)))
        let plain = try ConfigFixture.parse(Self.upstream("url: http://127.0.0.1:1"))
        #expect(plain.routes[0].timeouts == RouteTimeouts())
        #expect(
            ConfigFixture.errors(Self.upstream("url: http://127.0.0.1:1", route: ", timeouts: {}")) == [
                "gateway.yaml:5:70: routes[0].timeouts must set response or connect (or both)"
            ])
        #expect(
            ConfigFixture.errors(Self.upstream("url: http://127.0.0.1:1", route: ", timeouts: {respons: 1s}")) == [
                "gateway.yaml:5:71: unknown key \"respons\" in routes[0].timeouts (did you mean \"response\"?)"
            ])
        let demo = Self.upstream("url: http://127.0.0.1:1").replacingOccurrences(
            of: "upstream: api", with: "upstream: demo, timeouts: {response: 1s}")
        #expect(
            ConfigFixture.errors(demo) == [
                "gateway.yaml:5:61: routes[0].timeouts has no effect on the demo upstream \"demo\" (it answers in process, without "
                    + "a connection); remove it"
            ])
    }
}
