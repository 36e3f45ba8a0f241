import Foundation
import GatewayTestSupport
import Testing

/// `admin.allow`: a client outside the networks gets its connection closed before anything is
/// read or served (curl sees an empty reply, no status); one inside is served; a reload applies a
/// new list to the next connections; the public listeners are not affected.
@Suite("admin.allow (real gatewayd)", .serialized, .timeLimit(.minutes(2)))
struct AdminAllowTests {
    static func config(allow: String) -> String {
        """
        listeners:
          - {name: public, address: 127.0.0.1:0}
        admin: {address: 127.0.0.1:0, allow: \(allow)}
        limits: {drain_timeout: 1s}
        upstreams:
          - {name: demo, url: demo}
        routes:
          - {name: default, match: {path_prefix: /}, upstream: demo}
        """
    }

    /// curl's status for an admin path: 0 when the connection was closed without a response.
    static func status(_ gw: GatewayProcess, _ path: String) throws -> Int { try curl([gw.url("admin", path)]).0 }

    @Test("outside admin.allow: closed before any response (every path); inside: served; reload switches")
    func allowList() throws {
        let gw = try GatewayProcess(config: Self.config(allow: "[10.0.0.0/8, '2001:db8::/32']"))
        defer { gw.stop() }
        for path in ["/healthz", "/readyz", "/metrics", "/explain", "/no-such-path"] {
            #expect(try Self.status(gw, path) == 0, "\(path) answered a client outside admin.allow")
        }
        #expect(try curl([gw.url("public", "/")]).0 == 200, "the public listener is not filtered")
        var logged = false
        for _ in 0..<50 where !logged {
            logged = gw.stderrLines.contains {
                $0.contains("admin connection closed: the client is not in admin.allow") && $0.contains("\"client\":\"127.0.0.1\"")
            }
            if !logged { usleep(20_000) }
        }
        #expect(logged, "\(gw.stderr)")
        // One line per 30 s, whatever the number of refused connections.
        #expect(gw.stderrLines.filter { $0.contains("admin connection closed") }.count == 1)

        // A reload lets loopback in (a single address is a /32)...
        try Self.config(allow: "[10.0.0.0/8, 127.0.0.1]").write(to: gw.configURL, atomically: true, encoding: .utf8)
        gw.signal(SIGHUP)
        var served = false
        for _ in 0..<100 where !served {
            served = (try? Self.status(gw, "/healthz")) == 200
            if !served { usleep(50_000) }
        }
        #expect(served, "after the reload 127.0.0.1 is allowed")
        #expect(try Self.status(gw, "/metrics") == 200)

        // ...and the next one shuts it out again.
        try Self.config(allow: "[192.168.0.0/16]").write(to: gw.configURL, atomically: true, encoding: .utf8)
        gw.signal(SIGHUP)
        var closed = false
        for _ in 0..<100 where !closed {
            closed = (try? Self.status(gw, "/healthz")) == 0
            if !closed { usleep(50_000) }
        }
        #expect(closed, "after the second reload 127.0.0.1 is refused again")
    }

    @Test("a loopback network in admin.allow serves every admin path as before")
    func loopbackAllowed() throws {
        let gw = try GatewayProcess(config: Self.config(allow: "[127.0.0.0/8, '::1']"))
        defer { gw.stop() }
        #expect(try Self.status(gw, "/healthz") == 200)
        #expect(try Self.status(gw, "/readyz") == 200)
        #expect(!gw.stderr.contains("admin connection closed"))
    }
}
