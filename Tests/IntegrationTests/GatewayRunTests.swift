import Foundation
import GatewayTestSupport
import Testing

/// The real binary, as ops run it: `gatewayd run` on a config, curl as the client.
@Suite("gatewayd run (real process, loopback, curl)", .serialized, .timeLimit(.minutes(2)))
struct GatewayRunTests {
    static let config = """
        workers: 2
        listeners:
          - {name: public, address: 127.0.0.1:0}
        admin: {address: 127.0.0.1:0}
        limits: {max_body: 1KiB, drain_timeout: 5s}
        upstreams:
          - {name: demo, url: demo}
        routes:
          - {name: api, match: {path_prefix: /api}, upstream: demo}
          - {name: default, match: {path_prefix: /}, upstream: demo}
        """

    @Test("serves the demo upstream, answers health, logs JSON, refuses bad requests") func serves() throws {
        let gw = try GatewayProcess(config: Self.config)
        defer { gw.stop() }
        let (code, body) = try curl(["-H", "X-Demo: 1", gw.url("public", "/api/orders?id=7")])
        #expect(code == 200)
        let json = try #require((try? JSONSerialization.jsonObject(with: Data(body.utf8))) as? [String: Any])
        #expect(json["route"] as? String == "api")
        #expect(json["target"] as? String == "/api/orders?id=7")
        let headers = try #require(json["headers"] as? [String: String])
        #expect(headers["X-Forwarded-For"] == "127.0.0.1")
        #expect(headers["X-Demo"] == "1")
        #expect(try curl([gw.url("public", "/other")]).1.contains("\"route\":\"default\""))
        #expect(try curl([gw.url("admin", "/healthz")]).0 == 200)
        #expect(try curl([gw.url("admin", "/readyz")]).0 == 200)
        let big = try curl(["-X", "POST", "--data-binary", String(repeating: "x", count: 2000), gw.url("public", "/api")])
        #expect(big.0 == 413)
        #expect(big.1.contains("\"error\":\"body_too_large\""))
        #expect(try curl(["--http1.1", gw.url("public", "/a%2Fb")]).0 == 400)
        let metrics = try curl([gw.url("admin", "/metrics")])
        #expect(metrics.0 == 200)
        #expect(metrics.1.contains("attest_gateway_requests_total{route=\"api\",status_class=\"2xx\",protocol=\"http1\"} 1"))
        #expect(metrics.1.contains("attest_gateway_requests_total{route=\"api\",status_class=\"4xx\",protocol=\"http1\"} 1"))
        #expect(metrics.1.contains("# TYPE attest_gateway_request_duration_seconds histogram"))
        // The access log is buffered per loop and flushed within a second (logging.access_log.flush).
        let log = waitForStdout(gw) { $0.split(separator: "\n").count >= 4 }.split(separator: "\n")
        #expect(log.count >= 4)
        #expect(log.contains { $0.contains("\"route\":\"api\"") && $0.contains("\"status\":200") })
    }

    @Test("SIGHUP: an invalid config is refused and the old one kept; a valid one applies") func reload() throws {
        let gw = try GatewayProcess(config: Self.config)
        defer { gw.stop() }
        try "workers: [".write(to: gw.configURL, atomically: true, encoding: .utf8)
        gw.signal(SIGHUP)
        usleep(500_000)
        #expect(gw.stderr.contains("reload refused"))
        #expect(try curl([gw.url("public", "/api")]).0 == 200)
        try Self.config.replacingOccurrences(of: "path_prefix: /api}", with: "path_prefix: /v2}")
            .write(to: gw.configURL, atomically: true, encoding: .utf8)
        gw.signal(SIGHUP)
        usleep(500_000)
        #expect(gw.stderr.contains("configuration reloaded"))
        #expect(try curl([gw.url("public", "/v2/x")]).1.contains("\"route\":\"api\""))
        #expect(try curl([gw.url("public", "/api/x")]).1.contains("\"route\":\"default\""))
        let metrics = try curl([gw.url("admin", "/metrics")]).1
        #expect(metrics.contains("attest_gateway_config_reloads_total{result=\"failure\"} 1"))
        #expect(metrics.contains("attest_gateway_config_reloads_total{result=\"success\"} 1"))
    }

    @Test("a gateway in front of another gateway: a real HTTP upstream, pool reuse, upstream metrics") func chained() throws {
        // The gateway behind trusts the one in front (loopback): it keeps the chain the front wrote.
        let upstream = try GatewayProcess(config: Self.config + "\ntrusted_proxies: [127.0.0.1/32]")
        defer { upstream.stop() }
        let port = upstream.url("public", "").split(separator: ":").last!
        let front = try GatewayProcess(
            config: """
                workers: 1
                listeners:
                  - {name: public, address: 127.0.0.1:0}
                admin: {address: 127.0.0.1:0}
                upstreams:
                  - {name: legacy, url: http://127.0.0.1:\(port), max_connections: 4, response_timeout: 5s}
                routes:
                  - {name: all, match: {path_prefix: /}, upstream: legacy}
                """)
        defer { front.stop() }
        for i in 0..<5 {
            let (code, body) = try curl(["-H", "X-Forwarded-For: 203.0.113.9", front.url("public", "/api/\(i)")])
            #expect(code == 200)
            #expect(body.contains("\"target\":\"/api/\(i)\""))
            // The demo behind saw two hops of forwarding: curl's forged address was replaced by the front
            // (curl is no trusted proxy of the front), the front's chain kept by the gateway behind.
            #expect(body.contains("\"X-Forwarded-For\":\"127.0.0.1, 127.0.0.1\""))
            #expect(body.contains("\"Via\":\"1.1 attest-gateway, 1.1 attest-gateway\""))
        }
        let big = try curl(["-X", "POST", "--data-binary", String(repeating: "y", count: 900), front.url("public", "/api/big")])
        #expect(big.0 == 200 && big.1.contains("\"bodyBytes\":900"))
        // Pool gauges are reported once a second per loop.
        var metrics = ""
        for _ in 0..<30 {
            metrics = try curl([front.url("admin", "/metrics")]).1
            if metrics.contains("attest_gateway_upstream_pool_connections{upstream=\"legacy\",state=\"idle\"} 1") { break }
            usleep(100_000)
        }
        #expect(metrics.contains("attest_gateway_requests_total{route=\"all\",status_class=\"2xx\",protocol=\"http1\"} 6"))
        #expect(metrics.contains("attest_gateway_upstream_duration_seconds_count{upstream=\"legacy\"} 6"))
        #expect(metrics.contains("attest_gateway_upstream_pool_connections{upstream=\"legacy\",state=\"idle\"} 1"))
        upstream.stop()
        let down = try curl([front.url("public", "/api/x")])
        #expect(down.0 == 502)
        #expect(down.1.contains("upstream_"))
    }

    @Test("over limits.max_connections a connection is refused and counted") func connectionLimit() throws {
        let gw = try GatewayProcess(
            config: Self.config.replacingOccurrences(of: "workers: 2", with: "workers: 1")
                .replacingOccurrences(of: "drain_timeout: 5s}", with: "drain_timeout: 5s, max_connections: 1}"))
        defer { gw.stop() }
        let port = UInt16(gw.url("public", "").split(separator: ":").last!)!
        let held = try LoopbackClient(port: port)
        held.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        #expect(!held.receiveSome().isEmpty)  // answered, and kept open
        let refused = try LoopbackClient(port: port)
        #expect(refused.isClosedByPeer())
        let metrics = try curl([gw.url("admin", "/metrics")]).1
        #expect(metrics.contains("attest_gateway_connections_refused_total 1"))
        #expect(metrics.contains("attest_gateway_active_connections 1"))
    }

    @Test("SIGTERM drains and exits 0") func drain() throws {
        let gw = try GatewayProcess(config: Self.config)
        defer { gw.stop() }
        #expect(try curl([gw.url("public", "/")]).0 == 200)
        gw.signal(SIGTERM)
        #expect(gw.waitForExit() == 0)
        #expect(gw.stderr.contains("\"msg\":\"stopped\""))
    }

    @Test("gatewayd check: valid and invalid files") func check() throws {
        let gw = try runProcess(gatewaydBinary, ["check", "--config", repositoryRoot.appendingPathComponent("gateway.yaml").path])
        #expect(gw.status == 0)
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("gw-check-\(UUID().uuidString).yaml")
        try "workers: lots\nlisteners: []\n".write(to: dir, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(at: dir) }
        let bad = try runProcess(gatewaydBinary, ["check", "--config", dir.path])
        #expect(bad.status == 2)
        #expect(bad.stderr.contains(":1:10:"))
    }
}
