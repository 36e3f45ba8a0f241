import Foundation
import GatewayTestSupport
import Glibc
import Testing

/// What SIGHUP applies to a real `gatewayd run`, and what it says needs a restart: listeners opened,
/// drained and switched on their socket, the admin listener moved, a bind that fails refusing the
/// whole reload, logging switched, and `workers`/`store.*` as pending-restart keys.
@Suite(
    "SIGHUP applies listeners, admin address and logging; workers and store wait for a restart (real gatewayd)",
    .serialized, .timeLimit(.minutes(2)))
struct ReloadTests {
    static func config(
        workers: Int = 1, listeners: String = "  - {name: public, address: 127.0.0.1:0}", admin: String = "127.0.0.1:0",
        upstream: String = "demo", demoPrefix: String = "/demo", logging: String = "{level: info, access_log: true}",
        store: String = "{kind: memory}", limits: String = "drain_timeout: 5s"
    ) -> String {
        """
        workers: \(workers)
        listeners:
        \(listeners)
        admin: {address: \(admin)}
        limits: {\(limits)}
        upstreams:
          - {name: up, url: "\(upstream)"\(upstream == "demo" ? "" : ", response_timeout: 20s")}
          - {name: demo, url: demo}
        routes:
          - {name: demo, match: {path_prefix: \(demoPrefix)}, upstream: demo}
          - {name: up, match: {path_prefix: /}, upstream: up}
        store: \(store)
        logging: \(logging)
        """
    }

    /// Writes `yaml` as the gateway's file, sends SIGHUP and waits (bounded) for the reload's
    /// `configuration reloaded` or `reload refused` line; returns it (nil: neither came).
    static func reload(_ gw: GatewayProcess, _ yaml: String) throws -> String? {
        let before = Self.reloadLines(gw).count
        try yaml.write(to: gw.configURL, atomically: true, encoding: .utf8)
        gw.signal(SIGHUP)
        let deadline = Date().addingTimeInterval(10)
        while Date() < deadline {
            let lines = Self.reloadLines(gw)
            if lines.count > before { return lines[before] }
            usleep(20_000)
        }
        return nil
    }

    static func reloadLines(_ gw: GatewayProcess) -> [String] {
        gw.stderrLines.filter { $0.contains("\"msg\":\"configuration reloaded\"") || $0.contains("\"msg\":\"reload refused") }
    }

    /// A field of a JSON log line.
    static func field(_ line: String?, _ key: String) -> String? {
        guard let line, let obj = (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any] else { return nil }
        return obj[key] as? String
    }

    /// The port of the listener a reload opened (its `listener opened` line).
    static func openedPort(_ gw: GatewayProcess, _ name: String) -> UInt16? {
        let line = gw.stderrLines.last { $0.contains("\"msg\":\"listener opened\"") && $0.contains("\"listener\":\"\(name)\"") }
        return field(line, "address").flatMap { $0.split(separator: ":").last }.flatMap { UInt16($0) }
    }

    static func port(_ gw: GatewayProcess, _ name: String) -> UInt16 { UInt16(gw.url(name, "").split(separator: ":").last!)! }

    /// The value of one series on `/metrics` (nil: not there).
    static func metric(_ gw: GatewayProcess, _ series: String) throws -> Double? {
        let text = try curl([gw.url("admin", "/metrics")]).1
        return text.split(separator: "\n").first { $0.hasPrefix(series + " ") }.flatMap { Double($0.dropFirst(series.count + 1)) }
    }

    @Test("a listener added by SIGHUP serves at once; the unchanged one keeps its socket and its open connections")
    func listenerAdded() throws {
        let base = Self.config(workers: 2)
        let gw = try GatewayProcess(config: base)
        defer { gw.stop() }
        let publicPort = Self.port(gw, "public")
        let open = try HTTPTestConnection(port: publicPort)
        #expect(try open.request("GET /demo/1 HTTP/1.1\r\nHost: x\r\n\r\n").status == 200)

        let line = try Self.reload(
            gw,
            Self.config(
                workers: 2,
                listeners: """
                      - {name: public, address: 127.0.0.1:0}
                      - {name: extra, address: 127.0.0.1:0, protocols: [http1, h2c]}
                    """))
        #expect(Self.field(line, "msg") == "configuration reloaded", "\(gw.stderr)")
        #expect(Self.field(line, "listeners_opened") == "extra")
        #expect(Self.field(line, "changed") == "listeners")
        let extra = try #require(Self.openedPort(gw, "extra"), "\(gw.stderr)")
        #expect(extra != publicPort)
        let h1 = try curl(["http://127.0.0.1:\(extra)/demo/x"])
        #expect(h1.0 == 200 && h1.1.contains("\"route\":\"demo\""))
        let h2 = try curl(["--http2-prior-knowledge", "http://127.0.0.1:\(extra)/demo/y"])
        #expect(h2.0 == 200 && h2.1.contains("\"route\":\"demo\""))
        // The unchanged listener: same port, the connection opened before the reload still served.
        #expect(try open.request("GET /demo/2 HTTP/1.1\r\nHost: x\r\n\r\n").status == 200)
        #expect(try curl(["http://127.0.0.1:\(publicPort)/demo/z"]).0 == 200)
        #expect(!gw.stderr.contains("after a restart"), "\(gw.stderr)")
    }

    @Test("a listener removed by SIGHUP stops accepting at once; a slow request in flight on it completes, then it closes")
    func listenerRemoved() throws {
        let received = Gate()
        let release = Gate()
        let slow = try ScriptedServer { c in
            guard c.readRequest() != nil else { return }
            received.open()
            _ = release.wait(20)
            c.respond("slow answer\n")
        }
        defer { slow.stop() }
        defer { release.open() }  // first: a failed test must not leave the upstream thread waiting
        let upstream = "http://127.0.0.1:\(slow.port)"
        let gw = try GatewayProcess(
            config: Self.config(
                listeners: """
                      - {name: public, address: 127.0.0.1:0}
                      - {name: extra, address: 127.0.0.1:0}
                    """, upstream: upstream))
        defer { gw.stop() }
        let extraPort = Self.port(gw, "extra")
        let idle = try HTTPTestConnection(port: extraPort)
        #expect(try idle.request("GET /demo/1 HTTP/1.1\r\nHost: x\r\n\r\n").status == 200)
        let busy = try HTTPTestConnection(port: extraPort)
        busy.send("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
        #expect(received.wait())

        let line = try Self.reload(gw, Self.config(upstream: upstream))
        #expect(Self.field(line, "msg") == "configuration reloaded", "\(gw.stderr)")
        #expect(Self.field(line, "listeners_closed") == "extra")
        #expect(gw.stderr.contains("\"msg\":\"listener closed; draining\""))
        // Closed before the reload was reported: no new connection, and the idle one is closed.
        #expect((try? LoopbackClient(port: extraPort)) == nil, "the removed listener still accepts")
        #expect(idle.isClosedByPeer())
        // The request in flight finishes, and its connection closes after it.
        release.open()
        let r = try busy.readResponse()
        #expect(r.status == 200 && r.text == "slow answer\n")
        #expect(r.header("Connection")?.lowercased() == "close")
        #expect(busy.isClosedByPeer())
        #expect(waitForLog(gw, "\"msg\":\"listener drained\",\"listener\":\"extra\",\"connections_cut\":\"0\""), "\(gw.stderr)")
        #expect(try curl([gw.url("public", "/demo/2")]).0 == 200)
    }

    @Test("an address that cannot be bound refuses the whole reload: the running listeners and routes stay, nothing half-applied")
    func addressClash() throws {
        let holder = try ScriptedServer { _ in }  // a port another process holds
        defer { holder.stop() }
        let gw = try GatewayProcess(config: Self.config(workers: 2))
        defer { gw.stop() }
        let line = try Self.reload(
            gw,
            Self.config(
                workers: 2,
                listeners: """
                      - {name: public, address: 127.0.0.1:0}
                      - {name: extra, address: 127.0.0.1:0}
                      - {name: taken, address: 127.0.0.1:\(holder.port)}
                    """, demoPrefix: "/v2"))
        #expect(Self.field(line, "msg") == "reload refused; the running configuration is kept", "\(gw.stderr)")
        let error = try #require(Self.field(line, "error"))
        #expect(error.contains("gateway.yaml:5:"), "\(error)")
        #expect(
            error.contains("listeners[2].address (listener taken): cannot listen: bind 127.0.0.1:\(holder.port): Address already in use"),
            "\(error)")
        #expect(!gw.stderr.contains("configuration reloaded"))
        // The listener opened for the refused reload is closed again; the old routes serve.
        #expect(!gw.stderr.contains("\"msg\":\"listener opened\""))
        let old = try curl([gw.url("public", "/demo/1")])
        #expect(old.0 == 200 && old.1.contains("\"route\":\"demo\""))
        #expect(try curl([gw.url("public", "/v2/1")]).1.contains("\"route\":\"up\""))
        #expect(try Self.metric(gw, "attest_gateway_config_reloads_total{result=\"failure\"}") == 1)
        // The admin listener likewise.
        let adminLine = try Self.reload(gw, Self.config(workers: 2, admin: "127.0.0.1:\(holder.port)"))
        #expect(
            Self.field(adminLine, "error")?.contains("admin.address: cannot listen: bind 127.0.0.1:\(holder.port)") == true,
            "\(gw.stderr)")
        #expect(try curl([gw.url("admin", "/healthz")]).0 == 200)

        // One worker, a listener moved from 127.0.0.1:P to the wildcard on the same port: the old
        // socket holds the port until the reload would close it; the error says so.
        let p = try freeLoopbackPort()
        let one = try GatewayProcess(config: Self.config(listeners: "  - {name: public, address: 127.0.0.1:\(p)}"))
        defer { one.stop() }
        let moved = try Self.reload(one, Self.config(listeners: "  - {name: public, address: 0.0.0.0:\(p)}"))
        #expect(
            Self.field(moved, "error")?.contains(
                "cannot listen: bind 0.0.0.0:\(p): Address already in use (listener public holds it until this reload would close it: "
                    + "restart, or move it through another address in two reloads)") == true, "\(one.stderr)")
        #expect(try curl(["http://127.0.0.1:\(p)/demo/1"]).0 == 200)
    }

    @Test("protocols and limits changed on the same address: same socket, new connections get them, open ones are kept")
    func sameAddressNewProfile() throws {
        let gw = try GatewayProcess(config: Self.config())
        defer { gw.stop() }
        let port = Self.port(gw, "public")
        let open = try HTTPTestConnection(port: port)
        #expect(try open.request("GET /demo/1 HTTP/1.1\r\nHost: x\r\n\r\n").status == 200)
        #expect(try curl(["--http2-prior-knowledge", "http://127.0.0.1:\(port)/demo/h2"]).0 != 200)
        let longTarget = "/demo/" + String(repeating: "a", count: 1500)
        #expect(try curl(["http://127.0.0.1:\(port)\(longTarget)"]).0 == 200)

        let line = try Self.reload(
            gw,
            Self.config(
                listeners: "  - {name: public, address: 127.0.0.1:0, protocols: [http1, h2c]}",
                limits: "drain_timeout: 5s, max_request_line: 1KiB"))
        #expect(Self.field(line, "listeners_updated") == "public", "\(gw.stderr)")
        #expect(Self.field(line, "changed") == "listeners, limits")
        #expect(Self.field(line, "listeners_opened") == nil && Self.field(line, "listeners_closed") == nil)
        let h2 = try curl(["--http2-prior-knowledge", "http://127.0.0.1:\(port)/demo/h2"])
        #expect(h2.0 == 200 && h2.1.contains("\"route\":\"demo\""))
        #expect(try curl(["http://127.0.0.1:\(port)\(longTarget)"]).0 == 414)
        // The connection accepted before the reload keeps its limits.
        #expect(try open.request("GET \(longTarget) HTTP/1.1\r\nHost: x\r\n\r\n").status == 200)
    }

    @Test(
        "tls turned on, then off, by SIGHUP on the same address: the socket stays, new connections follow, the open one keeps its protocol")
    func tlsOnSameAddress() throws {
        let pki = try TLSTestPKI()
        defer { pki.remove() }
        let leaf = try pki.leaf("a", names: ["a.test"])
        let plain = Self.config()
        let gw = try GatewayProcess(config: plain)
        defer { gw.stop() }
        let port = Self.port(gw, "public")
        let open = try HTTPTestConnection(port: port)
        #expect(try open.request("GET /demo/1 HTTP/1.1\r\nHost: x\r\n\r\n").status == 200)

        let line = try Self.reload(
            gw,
            Self.config(
                listeners: "  - {name: public, address: 127.0.0.1:0, tls: {certificate: \(leaf.cert), private_key: \(leaf.key)}}"))
        #expect(Self.field(line, "listeners_updated") == "public", "\(gw.stderr)")
        let https = try curl(["--cacert", pki.path("ca.pem"), "--resolve", "a.test:\(port):127.0.0.1", "https://a.test:\(port)/demo/x"])
        #expect(https.0 == 200 && https.1.contains("\"X-Forwarded-Proto\":\"https\""), "\(https)")
        let refused = try curl(["http://127.0.0.1:\(port)/demo/y"])
        #expect(refused.0 == 400 && refused.1.contains("https_required"))
        // Accepted as plain TCP before the reload: still plain, still served.
        let kept = try open.request("GET /demo/2 HTTP/1.1\r\nHost: x\r\n\r\n")
        #expect(kept.status == 200 && kept.text.contains("\"X-Forwarded-Proto\":\"http\""))

        _ = try Self.reload(gw, plain)
        #expect(try curl(["http://127.0.0.1:\(port)/demo/z"]).0 == 200)
        let metrics = try curl([gw.url("admin", "/metrics")]).1
        #expect(metrics.contains("attest_gateway_tls_handshakes_total{listener=\"public\",version=\"TLSv1.3\",resumed=\"false\"} 1"))
    }

    @Test("admin.address moved by SIGHUP: the new address answers, the old one is closed")
    func adminMoved() throws {
        let gw = try GatewayProcess(config: Self.config())
        defer { gw.stop() }
        let oldPort = Self.port(gw, "admin")
        let newPort = try freeLoopbackPort()
        let line = try Self.reload(gw, Self.config(admin: "127.0.0.1:\(newPort)"))
        #expect(Self.field(line, "changed") == "admin.address", "\(gw.stderr)")
        #expect(gw.stderr.contains("\"msg\":\"admin listener moved\""))
        #expect(try curl(["http://127.0.0.1:\(newPort)/healthz"]).0 == 200)
        #expect((try? LoopbackClient(port: oldPort)) == nil, "the old admin address still accepts")
        let metrics = try curl(["http://127.0.0.1:\(newPort)/metrics"]).1
        #expect(metrics.contains("attest_gateway_config_reload_pending_restart 0"))
    }

    @Test("logging switched by SIGHUP: level debug logs the routes, access_log false stops the access log, level warning hides info")
    func loggingSwitched() throws {
        let gw = try GatewayProcess(config: Self.config())
        defer { gw.stop() }
        func accessLines() -> Int { gw.stdout.split(separator: "\n").filter { $0.contains("\"route\":\"demo\"") }.count }
        #expect(try curl([gw.url("public", "/demo/1")]).0 == 200)
        #expect(eventually { accessLines() == 1 })
        #expect(!gw.stderr.contains("\"level\":\"debug\""))

        let line = try Self.reload(gw, Self.config(logging: "{level: debug, access_log: false}"))
        #expect(Self.field(line, "changed") == "logging.level, logging.access_log", "\(gw.stderr)")
        #expect(gw.stderr.contains("\"level\":\"debug\",\"msg\":\"route\""), "\(gw.stderr)")
        #expect(try curl([gw.url("public", "/demo/2")]).0 == 200)
        usleep(300_000)
        #expect(accessLines() == 1, "the access log is still written: \(gw.stdout)")

        // warning: the info line of the next reload is not written; the access log is back.
        try Self.config(logging: "{level: warning, access_log: true}").write(to: gw.configURL, atomically: true, encoding: .utf8)
        gw.signal(SIGHUP)
        #expect(eventually { (try? Self.metric(gw, "attest_gateway_config_reloads_total{result=\"success\"}")) == 2 })
        #expect(gw.stderrLines.filter { $0.contains("\"msg\":\"configuration reloaded\"") }.count == 1)
        #expect(try curl([gw.url("public", "/demo/3")]).0 == 200)
        #expect(eventually { accessLines() == 2 })
    }

    @Test("workers and store.shards changed: a warning per key, the rest applied, pending_restart 1; the file reverted: 0")
    func pendingRestart() throws {
        let base = Self.config(workers: 1, store: "{kind: memory, shards: 64}")
        let gw = try GatewayProcess(config: base)
        defer { gw.stop() }
        let gauge = "attest_gateway_config_reload_pending_restart"
        #expect(try Self.metric(gw, gauge) == 0)

        let line = try Self.reload(gw, Self.config(workers: 2, demoPrefix: "/v2", store: "{kind: memory, shards: 32}"))
        #expect(Self.field(line, "msg") == "configuration reloaded", "\(gw.stderr)")
        #expect(Self.field(line, "pending_restart") == "workers, store.shards")
        #expect(Self.field(line, "changed") == "routes")
        #expect(
            gw.stderr.contains("\"msg\":\"reload: workers changed 1 → 2; takes effect after a restart\",\"key\":\"workers\""),
            "\(gw.stderr)")
        #expect(gw.stderr.contains("\"msg\":\"reload: store.shards changed 64 → 32; takes effect after a restart\""))
        #expect(try Self.metric(gw, gauge) == 1)
        #expect(try curl([gw.url("public", "/v2/x")]).1.contains("\"route\":\"demo\""), "the routes are applied")

        // Reloaded again unchanged: still pending, said again.
        _ = try Self.reload(gw, Self.config(workers: 2, demoPrefix: "/v2", store: "{kind: memory, shards: 32}"))
        #expect(try Self.metric(gw, gauge) == 1)
        #expect(gw.stderrLines.filter { $0.contains("reload: workers changed 1 → 2") }.count == 2)

        // The file reverted: nothing pending.
        let back = try Self.reload(gw, base)
        #expect(Self.field(back, "pending_restart") == nil, "\(gw.stderr)")
        #expect(try Self.metric(gw, gauge) == 0)
        #expect(gw.stderrLines.filter { $0.contains("reload: workers changed") }.count == 2)
    }
}

/// Waits (bounded, 10 s) until `condition` holds.
private func eventually(_ condition: () -> Bool) -> Bool {
    let deadline = Date().addingTimeInterval(10)
    while Date() < deadline {
        if condition() { return true }
        usleep(20_000)
    }
    return condition()
}

/// SIGHUP and the listener's trust (docs/configuration.md: "A reload applies a change to new
/// connections"): `trusted_proxies` and `proxy_protocol` change what new connections get on the
/// same socket; a connection opened before keeps what it was accepted with.
@Suite("SIGHUP applies trusted_proxies and proxy_protocol to new connections (real gatewayd)", .serialized, .timeLimit(.minutes(2)))
struct ReloadTrustTests {
    static func config(trusted: String?, proxyProtocol: Bool) -> String {
        """
        workers: 1
        listeners:
          - {name: public, address: 127.0.0.1:0\(proxyProtocol ? ", proxy_protocol: true" : "")}
        admin: {address: 127.0.0.1:0}
        upstreams:
          - {name: demo, url: demo}
        routes:
          - {name: demo, match: {path_prefix: /}, upstream: demo}
        logging: {access_log: false}
        \(trusted.map { "trusted_proxies: [\($0)]" } ?? "")
        """
    }

    /// The X-Forwarded-For the demo upstream would have been sent.
    static func forwardedFor(_ response: HTTPTestResponse) -> String? {
        let obj = (try? JSONSerialization.jsonObject(with: Data(response.body))) as? [String: Any]
        return (obj?["headers"] as? [String: Any])?["X-Forwarded-For"] as? String
    }

    @Test("trusted_proxies turned on then proxy_protocol: new connections follow, an open one keeps its trust")
    func trustFollowsReload() throws {
        let gw = try GatewayProcess(config: Self.config(trusted: nil, proxyProtocol: false))
        defer { gw.stop() }
        let port = ReloadTests.port(gw, "public")
        let ask = "GET /who HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 203.0.113.7\r\n\r\n"
        let before = try HTTPTestConnection(port: port)
        // Not trusted: the client's X-Forwarded-For is replaced by the peer.
        #expect(Self.forwardedFor(try before.request(ask)) == "127.0.0.1")

        let trusted = try ReloadTests.reload(gw, Self.config(trusted: "127.0.0.1/32", proxyProtocol: false))
        #expect(trusted?.contains("configuration reloaded") == true, "\(trusted ?? "no reload line")")
        // A new connection from a trusted peer: the chain is kept and extended.
        #expect(Self.forwardedFor(try HTTPTestConnection(port: port).request(ask)) == "203.0.113.7, 127.0.0.1")
        // The connection accepted before the reload keeps its profile (not trusted).
        #expect(Self.forwardedFor(try before.request(ask)) == "127.0.0.1")

        let withProxy = try ReloadTests.reload(gw, Self.config(trusted: "127.0.0.1/32", proxyProtocol: true))
        #expect(withProxy?.contains("configuration reloaded") == true, "\(withProxy ?? "no reload line")")
        // Now every new connection must start with a PROXY header: a bare request is closed unanswered…
        #expect(throws: (any Error).self) { _ = try HTTPTestConnection(port: port).request(ask) }
        // …and one with a v1 header is served, its source the client (not a trusted proxy itself, so
        // what it says in X-Forwarded-For is replaced by its address).
        let proxied = try HTTPTestConnection(port: port)
        let answer = try proxied.request("PROXY TCP4 198.51.100.9 127.0.0.1 40000 80\r\n" + ask)
        #expect(answer.status == 200)
        #expect(Self.forwardedFor(answer) == "198.51.100.9")
    }
}
