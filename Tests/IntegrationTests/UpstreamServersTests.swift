import Foundation
import GatewayTestSupport
import Glibc
import Synchronization
import Testing

/// Upstreams of several servers as ops meet them (real gatewayd, real nginx and scripted servers):
/// load shared, a server killed under load (no GET fails, it is ejected, counted, and comes back
/// when restarted), a POST that was sent not retried, active health checks, a name re-resolved,
/// and a route's own response timeout.
@Suite(
    "Upstreams with several servers (real process)", .serialized, .timeLimit(.minutes(3)),
    .enabled(if: NginxProcess.testsEnabled, "nginx not installed (scripts/install-deps.sh)"))
struct UpstreamServersTests {
    /// One scrape: `name{labels}` → value.
    static func metrics(_ gw: GatewayProcess) throws -> [String: Double] {
        var out: [String: Double] = [:]
        for line in try curl([gw.url("admin", "/metrics")]).1.split(separator: "\n") where !line.hasPrefix("#") {
            guard let space = line.lastIndex(of: " ") else { continue }
            out[String(line[..<space])] = Double(line[line.index(after: space)...])
        }
        return out
    }

    static func waitUntil(_ seconds: Double = 10, _ what: String, _ condition: () throws -> Bool) throws {
        let deadline = Date().addingTimeInterval(seconds)
        while try !condition() {
            guard Date() < deadline else { throw HTTPTestError("not within \(seconds) s: \(what)") }
            usleep(50_000)
        }
    }

    /// GET /echo on a kept-alive connection; the port of the nginx that answered (0: not 200).
    static func echoPort(_ c: HTTPTestConnection) throws -> (Int, UInt16) {
        let r = try c.request("GET /echo HTTP/1.1\r\nHost: x\r\n\r\n")
        return (r.status, UInt16(echoFields(r.text)["port"] ?? "") ?? 0)
    }

    @Test("two servers share the load; one killed under load: no GET fails, it is ejected and counted; restarted, it is back")
    func killedUnderLoad() throws {
        let a = try NginxProcess()
        let b = try NginxProcess()
        defer { a.stop(); b.stop() }
        let gw = try GatewayProcess(
            config: """
                workers: 2
                listeners: [{name: public, address: 127.0.0.1:0}]
                admin: {address: 127.0.0.1:0}
                logging: {access_log: false}
                upstreams:
                  - name: api
                    servers: ["http://127.0.0.1:\(a.port)", "http://127.0.0.1:\(b.port)"]
                    max_fails: 2
                    fail_timeout: 1s
                    max_fail_timeout: 2s
                routes: [{name: all, match: {path_prefix: /}, upstream: api}]
                """)
        defer { gw.stop() }
        let port = UInt16(gw.addresses["public"]!.split(separator: ":").last!)!

        // Shared: both answer, about half each.
        let c = try HTTPTestConnection(port: port)
        var byPort: [UInt16: Int] = [:]
        for _ in 0..<200 {
            let (status, p) = try Self.echoPort(c)
            #expect(status == 200)
            byPort[p, default: 0] += 1
        }
        #expect((byPort[a.port] ?? 0) >= 60 && (byPort[b.port] ?? 0) >= 60, "\(byPort)")

        // Load from four clients; a is killed a moment in.
        let failures = Mutex<[String]>([])
        let done = Mutex(false)
        let served = Mutex(0)
        let group = DispatchGroup()
        for _ in 0..<4 {
            group.enter()
            Thread {
                defer { group.leave() }
                do {
                    var conn = try HTTPTestConnection(port: port)
                    while !done.withLock({ $0 }) {
                        let r = try conn.request("GET /echo HTTP/1.1\r\nHost: x\r\n\r\n")
                        if r.status != 200 { failures.withLock { $0.append("\(r.status) \(r.text)") } }
                        served.withLock { $0 += 1 }
                        if r.header("Connection") == "close" { conn = try HTTPTestConnection(port: port) }
                    }
                } catch {
                    failures.withLock { $0.append("\(error)") }
                }
            }.start()
        }
        usleep(500_000)
        a.stop()
        // While the load goes on, a is out (ejected, tried again now and then, ejected again).
        let server = "127.0.0.1:\(a.port)"
        let shownDown = Result {
            try Self.waitUntil(5, "a's ejection counted and shown") {
                let m = try Self.metrics(gw)
                return (m["attest_gateway_upstream_server_ejections_total{upstream=\"api\",server=\"\(server)\"}"] ?? 0) >= 1
                    && m["attest_gateway_upstream_server_up{upstream=\"api\",server=\"\(server)\"}"] == 0
            }
        }
        usleep(1_000_000)
        done.withLock { $0 = true }
        #expect(group.wait(timeout: .now() + 30) == .success)
        try shownDown.get()
        #expect(failures.withLock { $0 }.isEmpty, "\(failures.withLock { $0.prefix(5) })")
        #expect(served.withLock { $0 } > 200)
        usleep(1_100_000)  // the per-second counts published
        let m = try Self.metrics(gw)
        let retries = m["attest_gateway_upstream_retries_total{upstream=\"api\"}"] ?? 0
        #expect(retries >= 1 && retries < 40, "GETs that met the dead server went to the other: \(retries)")
        // max_fails (2) failures in a row before the first ejection: refused connections, or kept-alive
        // ones reset by the kill and refused when tried again.
        let failed = ["connect_failed", "closed"].reduce(0.0) {
            $0 + (m["attest_gateway_upstream_server_failures_total{upstream=\"api\",server=\"\(server)\",reason=\"\($1)\"}"] ?? 0)
        }
        #expect(failed >= 2)
        #expect(m["attest_gateway_upstream_server_ejections_total{upstream=\"api\",server=\"127.0.0.1:\(b.port)\"}"] == 0)
        #expect((m["attest_gateway_upstream_server_requests_total{upstream=\"api\",server=\"127.0.0.1:\(b.port)\"}"] ?? 0) >= 100)
        #expect(m["attest_gateway_upstream_errors_total{upstream=\"api\",reason=\"upstream_unavailable\"}"] == 0)
        #expect(gw.stderr.contains("upstream server ejected"), "\(gw.stderr)")

        // Restarted where it was: once its ejection is over, it answers again and gets its share.
        let restarted = try NginxProcess(port: a.port)
        defer { restarted.stop() }
        try Self.waitUntil(10, "a serves again") {
            var fromA = 0
            for _ in 0..<20 where try Self.echoPort(c).1 == a.port { fromA += 1 }
            return fromA >= 5
        }
        try Self.waitUntil(5, "a shown up again") {
            try Self.metrics(gw)["attest_gateway_upstream_server_up{upstream=\"api\",server=\"\(server)\"}"] == 1
        }
    }

    @Test("a POST the server closed on after it was sent is not retried (502); a GET is, on the other server")
    func postNotRetried() throws {
        let closedOn = Mutex<[String]>([])
        let closer = try ScriptedServer { conn in
            if let r = conn.readRequest() { closedOn.withLock { $0.append(r.method) } }
            conn.close()
        }
        defer { closer.stop() }
        let b = try NginxProcess()
        defer { b.stop() }
        let gw = try GatewayProcess(
            config: """
                workers: 1
                listeners: [{name: public, address: 127.0.0.1:0, protocols: [http1, h2c]}]
                admin: {address: 127.0.0.1:0}
                upstreams:
                  - name: api
                    servers: [{url: "http://127.0.0.1:\(closer.port)", weight: 1000}, "http://127.0.0.1:\(b.port)"]
                    max_fails: 0
                routes: [{name: all, match: {path_prefix: /}, upstream: api}]
                """)
        defer { gw.stop() }
        for version in ["--http1.1", "--http2-prior-knowledge"] {
            let post = try curl([version, "-X", "POST", "--data-binary", "order=1", gw.url("public", "/echo")])
            #expect(post.0 == 502 && post.1.contains("\"error\":\"upstream_closed\""), "\(version) \(post)")
            let get = try curl([version, gw.url("public", "/echo")])
            #expect(get.0 == 200 && echoFields(get.1)["port"] == String(b.port), "\(version) \(get)")
        }
        #expect(closedOn.withLock { $0 } == ["POST", "GET", "POST", "GET"])
        let m = try Self.metrics(gw)
        #expect(m["attest_gateway_upstream_errors_total{upstream=\"api\",reason=\"upstream_closed\"}"] == 2)
        try Self.waitUntil(5, "retries published") { try Self.metrics(gw)["attest_gateway_upstream_retries_total{upstream=\"api\"}"] == 2 }
        #expect(
            m["attest_gateway_upstream_server_failures_total{upstream=\"api\",server=\"127.0.0.1:\(closer.port)\",reason=\"closed\"}"] == 4)
    }

    /// A server answering `name`, and `/health` with 200 or 503 as `healthy` says.
    final class Switchable: @unchecked Sendable {
        final class Flag: Sendable { let value = Mutex(true) }
        let flag = Flag()
        let server: ScriptedServer
        var healthy: Bool {
            get { flag.value.withLock { $0 } }
            set { flag.value.withLock { $0 = newValue } }
        }
        init(_ name: String) throws {
            let flag = flag
            server = try ScriptedServer { conn in
                while let r = conn.readRequest() {
                    if r.target == "/health" {
                        conn.respond(status: flag.value.withLock { $0 } ? 200 : 503, "h")
                    } else {
                        conn.respond(name)
                    }
                }
            }
        }
    }

    @Test("an active health check takes a failing server out of the balance, and puts it back when it passes")
    func activeHealthCheck() throws {
        let a = try Switchable("a")
        let b = try Switchable("b")
        defer { a.server.stop(); b.server.stop() }
        let gw = try GatewayProcess(
            config: """
                workers: 2
                listeners: [{name: public, address: 127.0.0.1:0}]
                admin: {address: 127.0.0.1:0}
                upstreams:
                  - name: api
                    servers: ["http://127.0.0.1:\(a.server.port)", "http://127.0.0.1:\(b.server.port)"]
                    health_check: {path: /health, interval: 200ms, timeout: 150ms}
                routes: [{name: all, match: {path_prefix: /}, upstream: api}]
                """)
        defer { gw.stop() }
        func answers(_ n: Int) throws -> [String] { try (0..<n).map { _ in try curl([gw.url("public", "/x")]).1 } }
        #expect(Set(try answers(6)) == ["a", "b"])
        a.healthy = false
        try Self.waitUntil(5, "a out of the balance") { try answers(6) == Array(repeating: "b", count: 6) }
        let server = "127.0.0.1:\(a.server.port)"
        try Self.waitUntil(5, "a shown down") {
            let m = try Self.metrics(gw)
            return m["attest_gateway_upstream_server_up{upstream=\"api\",server=\"\(server)\"}"] == 0
                && (m["attest_gateway_upstream_server_failures_total{upstream=\"api\",server=\"\(server)\",reason=\"health_check\"}"] ?? 0)
                    >= 1
        }
        #expect(gw.stderr.contains("failed its health check"))
        a.healthy = true
        try Self.waitUntil(5, "a back in the balance") { Set(try answers(6)) == ["a", "b"] }
        try Self.waitUntil(5, "a shown up") {
            try Self.metrics(gw)["attest_gateway_upstream_server_up{upstream=\"api\",server=\"\(server)\"}"] == 1
        }
        #expect(gw.stderr.contains("passes its health check again"))
    }

    @Test("a server given by name is resolved again on resolve_interval (localhost), and served")
    func nameReResolved() throws {
        let b = try NginxProcess()
        defer { b.stop() }
        let gw = try GatewayProcess(
            config: """
                listeners: [{name: public, address: 127.0.0.1:0}]
                admin: {address: 127.0.0.1:0}
                upstreams: [{name: api, url: "http://localhost:\(b.port)", resolve_interval: 1s}]
                routes: [{name: all, match: {path_prefix: /}, upstream: api}]
                """)
        defer { gw.stop() }
        #expect(try curl([gw.url("public", "/fixed")]).0 == 200)
        let key = "attest_gateway_upstream_dns_resolutions_total{upstream=\"api\",server=\"localhost:\(b.port)\",result=\"success\"}"
        #expect(try Self.metrics(gw)[key] != nil)
        try Self.waitUntil(8, "two lookups") { (try Self.metrics(gw)[key] ?? 0) >= 2 }
        #expect(
            try Self.metrics(gw)[
                "attest_gateway_upstream_dns_resolutions_total{upstream=\"api\",server=\"localhost:\(b.port)\",result=\"failure\"}"] == 0)
        #expect(try curl([gw.url("public", "/fixed")]).0 == 200)
    }

    @Test("a route's response timeout replaces the upstream's for its requests only")
    func routeResponseTimeout() throws {
        // Answers /late after 1 s; never answers /never.
        let slow = try ScriptedServer { conn in
            while let r = conn.readRequest() {
                if r.target.hasPrefix("/never") { _ = conn.readRequest(); return }
                usleep(1_000_000)
                conn.respond("late")
            }
        }
        defer { slow.stop() }
        let gw = try GatewayProcess(
            config: """
                workers: 1
                listeners: [{name: public, address: 127.0.0.1:0}]
                admin: {address: 127.0.0.1:0}
                upstreams: [{name: api, url: "http://127.0.0.1:\(slow.port)", response_timeout: 20s}]
                routes:
                  - {name: quick, match: {path_prefix: /late/quick}, upstream: api, timeouts: {response: 300ms}}
                  - {name: never, match: {path_prefix: /never}, upstream: api, timeouts: {response: 400ms}}
                  - {name: rest, match: {path_prefix: /}, upstream: api}
                """)
        defer { gw.stop() }
        var start = Date()
        let quick = try curl([gw.url("public", "/late/quick")])
        #expect(quick.0 == 504 && quick.1.contains("upstream_timeout"), "\(quick)")
        #expect(Date().timeIntervalSince(start) < 0.9)
        start = Date()
        let never = try curl([gw.url("public", "/never")])
        #expect(never.0 == 504 && Date().timeIntervalSince(start) < 2)
        // The upstream's own 20 s on the other route: the late answer comes through.
        let late = try curl([gw.url("public", "/late")])
        #expect(late.0 == 200 && late.1 == "late", "\(late)")
    }
}
