import Foundation
import GatewayTestSupport
import Glibc
import Testing

/// `trusted_proxies` and `proxy_protocol` with the real gatewayd behind real proxies: nginx in front
/// (X-Forwarded-For, -Proto), HAProxy in TCP mode (PROXY protocol v1 and v2, TLS passed through).
/// The upstream is nginx's `/echo`, which shows the forwarding fields it received. Clients play
/// distinct addresses by binding 127.0.0.2 and 127.0.0.3 (`curl --interface`).
@Suite("Trusted proxies with nginx and HAProxy in front (real gatewayd)", .serialized, .timeLimit(.minutes(3)))
struct TrustedProxyTests {
    /// The access lines gatewayd wrote (stdout), as JSON objects.
    static func accessLines(_ gw: GatewayProcess) -> [[String: Any]] {
        gw.stdout.split(separator: "\n").compactMap { (try? JSONSerialization.jsonObject(with: Data($0.utf8))) as? [String: Any] }
    }

    static func waitForAccessLines(_ gw: GatewayProcess, _ count: Int) -> [[String: Any]] {
        for _ in 0..<100 {
            let lines = accessLines(gw)
            if lines.count >= count { return lines }
            usleep(20_000)
        }
        return accessLines(gw)
    }

    static func port(_ url: String) -> UInt16 { UInt16(url.split(separator: ":").last!.split(separator: "/").first!)! }

    @Test(
        "nginx in front: the upstream sees the client's chain and https, the access line and the rate limit the client; others are overwritten"
    )
    func nginxInFront() throws {
        guard NginxProcess.testsEnabled else { return }
        let echo = try NginxProcess()
        defer { echo.stop() }
        let gw = try GatewayProcess(
            config: """
                workers: 1
                trusted_proxies: [127.0.0.1/32]
                listeners:
                  - {name: public, address: 127.0.0.1:0}
                admin: {address: 127.0.0.1:0}
                attest: {challenge_rate: {per_client: 1/m, burst: 2}}
                upstreams:
                  - {name: echo, url: http://127.0.0.1:\(echo.port)}
                routes:
                  - {name: default, match: {path_prefix: /}, upstream: echo}
                """)
        defer { gw.stop() }
        let front = try NginxProcess(
            front: .init(
                upstreamPort: Self.port(gw.url("public", "/")),
                directives: [
                    "proxy_set_header Host $http_host;",
                    "proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;",
                    "proxy_set_header X-Forwarded-Proto https;",
                ]))
        defer { front.stop() }
        let viaNginx = "http://127.0.0.1:\(front.port)"

        // Through nginx, from 127.0.0.2: nginx appends its peer (the client), the gateway its own (nginx).
        let (code, body) = try curl(["--interface", "127.0.0.2", "-H", "Host: shop.example", viaNginx + "/echo/one"])
        #expect(code == 200)
        let e = echoFields(body)
        #expect(e["xff"] == "127.0.0.2, 127.0.0.1")
        #expect(e["xfproto"] == "https")
        #expect(e["xfhost"] == "shop.example")
        // A forged chain from the client stays on the left; the client is still the address nginx saw.
        let forged = echoFields(try curl(["--interface", "127.0.0.3", "-H", "X-Forwarded-For: 6.6.6.6", viaNginx + "/echo/two"]).1)
        #expect(forged["xff"] == "6.6.6.6, 127.0.0.3, 127.0.0.1")
        // Straight to the gateway from 127.0.0.2, which is not trusted: the fields are the gateway's.
        let direct = echoFields(
            try curl([
                "--interface", "127.0.0.2", "-H", "X-Forwarded-For: 6.6.6.6", "-H", "X-Forwarded-Proto: https", "-H",
                "X-Forwarded-Host: evil",
                "-H", "Host: shop.example", gw.url("public", "/echo/three"),
            ]).1)
        #expect(direct["xff"] == "127.0.0.2")
        #expect(direct["xfproto"] == "http")
        #expect(direct["xfhost"] == "shop.example")
        let lines = Self.waitForAccessLines(gw, 3)
        #expect(lines.map { $0["client"] as? String } == ["127.0.0.2", "127.0.0.3", "127.0.0.2"])

        // The per-client challenge rate: two clients behind the one nginx get a bucket each.
        func challenge(_ source: String) throws -> Int {
            try curl(["--interface", source, "-X", "POST", viaNginx + "/v1/attest/challenge"]).0
        }
        #expect(try challenge("127.0.0.2") == 201)
        #expect(try challenge("127.0.0.2") == 201)
        #expect(try challenge("127.0.0.2") == 429)
        #expect(try challenge("127.0.0.3") == 201)
        #expect(try challenge("127.0.0.3") == 201)
        #expect(try challenge("127.0.0.3") == 429)
        let limited = Self.waitForAccessLines(gw, 9).suffix(6)
        #expect(limited.map { $0["client"] as? String } == ["127.0.0.2", "127.0.0.2", "127.0.0.2", "127.0.0.3", "127.0.0.3", "127.0.0.3"])
        #expect(limited.map { $0["status"] as? Int } == [201, 201, 429, 201, 201, 429])

        // /explain names the client too (a refused challenge request, from a fresh client).
        let refused = try curl([
            "--interface", "127.0.0.4", "-X", "POST", "--data", "{\"keyId\":\"AAAA\"}", viaNginx + "/v1/attest/challenge",
        ])
        #expect(refused.0 == 400)
        let id = try #require((try JSONSerialization.jsonObject(with: Data(refused.1.utf8)) as? [String: Any])?["requestId"] as? String)
        let explained = try curl([gw.url("admin", "/explain/\(id)")])
        let entry = try #require(try JSONSerialization.jsonObject(with: Data(explained.1.utf8)) as? [String: Any])
        #expect(entry["client"] as? String == "127.0.0.4", "\(explained.1)")
    }

    @Test("HAProxy in TCP mode with PROXY v1 and v2, TLS and h2 passed through: the client is the PROXY source")
    func haproxyInFront() throws {
        guard HAProxyProcess.testsEnabled, NginxProcess.testsEnabled else { return }
        let pki = try TLSTestPKI()
        defer { pki.remove() }
        let (cert, key) = try pki.leaf("gw", names: ["gateway.test"])
        let echo = try NginxProcess()
        defer { echo.stop() }
        let gw = try GatewayProcess(
            config: """
                workers: 1
                trusted_proxies: [127.0.0.1/32]
                listeners:
                  - {name: public, address: 127.0.0.1:0}
                  - {name: pp, address: 127.0.0.1:0, proxy_protocol: true}
                  - name: pps
                    address: 127.0.0.1:0
                    protocols: [http1, h2]
                    tls: {certificate: \(cert), private_key: \(key)}
                    proxy_protocol: true
                admin: {address: 127.0.0.1:0}
                limits: {header_timeout: 2s}
                upstreams:
                  - {name: echo, url: http://127.0.0.1:\(echo.port)}
                routes:
                  - {name: default, match: {path_prefix: /}, upstream: echo}
                """)
        defer { gw.stop() }
        let haproxy = try HAProxyProcess(routes: [
            .init(name: "v1", serverPort: Self.port(gw.url("pp", "/")), serverOptions: "send-proxy"),
            .init(name: "v2", serverPort: Self.port(gw.url("pp", "/")), serverOptions: "send-proxy-v2"),
            .init(name: "tls", serverPort: Self.port(gw.url("pps", "/")), serverOptions: "send-proxy-v2"),
        ])
        defer { haproxy.stop() }
        for (route, source) in [("v1", "127.0.0.2"), ("v2", "127.0.0.3")] {
            let (code, body) = try curl([
                "--interface", source, "-H", "X-Forwarded-For: 6.6.6.6", "http://127.0.0.1:\(haproxy.ports[route]!)/echo/\(route)",
            ])
            #expect(code == 200, "\(route)")
            #expect(echoFields(body)["xff"] == source, "\(route)")
        }
        // TLS from the client to the gateway through HAProxy, HTTP/2 by ALPN (h2).
        let r = try runProcess(
            URL(fileURLWithPath: "/usr/bin/curl"),
            [
                "-sS", "--max-time", "10", "-k", "--http2", "--interface", "127.0.0.2", "-o", "-", "-w", "\n%{http_version}",
                "https://127.0.0.1:\(haproxy.ports["tls"]!)/echo/tls",
            ])
        #expect(r.status == 0, "\(r.stderr)")
        let tls = echoFields(r.stdout)
        #expect(tls["xff"] == "127.0.0.2")
        #expect(tls["xfproto"] == "https")
        #expect(r.stdout.hasSuffix("\n2"), "\(r.stdout)")
        let lines = Self.waitForAccessLines(gw, 3)
        #expect(lines.map { $0["client"] as? String } == ["127.0.0.2", "127.0.0.3", "127.0.0.2"])
        #expect(lines.map { $0["protocol"] as? String } == ["http1", "http1", "h2"])

        // Not through the balancer: a trusted peer without a header, and an untrusted peer, are closed.
        let noHeader = try curl(["http://127.0.0.1:\(Self.port(gw.url("pp", "/")))/echo/x"])
        #expect(noHeader.0 == 0)
        let stranger = try curl(["--interface", "127.0.0.2", "http://127.0.0.1:\(Self.port(gw.url("pp", "/")))/echo/x"])
        #expect(stranger.0 == 0)
        var metrics = ""
        for _ in 0..<50 {
            metrics = try curl([gw.url("admin", "/metrics")]).1
            if metrics.contains("reason=\"untrusted_peer\"") && metrics.contains("reason=\"not_proxy_protocol\"") { break }
            usleep(20_000)
        }
        #expect(metrics.contains("attest_gateway_proxy_protocol_failures_total{listener=\"pp\",reason=\"not_proxy_protocol\"} 1"))
        #expect(metrics.contains("attest_gateway_proxy_protocol_failures_total{listener=\"pp\",reason=\"untrusted_peer\"} 1"))
        #expect(gw.stderr.contains("\"msg\":\"connection closed: no valid PROXY protocol header\""))
        #expect(Self.accessLines(gw).count == 3)
    }
}
