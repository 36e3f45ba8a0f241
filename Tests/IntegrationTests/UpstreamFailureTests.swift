import Foundation
import GatewayTestSupport
import Testing

/// Upstream failures as ops see them, over HTTP/1.1 and HTTP/2 alike (one `UpstreamExchange` serves
/// both): the answer, `attest_gateway_upstream_errors_total{upstream,reason}`, and `error` in the
/// access line (there for every error the proxy answers).
@Suite("Upstream failures are answered, counted and logged (real process)", .serialized, .timeLimit(.minutes(2)))
struct UpstreamFailureTests {
    @Test("502 upstream_unavailable and 504 upstream_timeout counted and logged, a 400 logged, over HTTP/1.1 and HTTP/2")
    func countedAndLogged() throws {
        // An upstream that reads the request and never answers (the gateway gives up after 1 s)…
        let silent = try ScriptedServer { conn in
            _ = conn.readRequest()
            _ = conn.readRequest()  // returns when the gateway closes the connection
        }
        defer { silent.stop() }
        // …and a port where nothing listens (taken from a server that is gone).
        let gone = try ScriptedServer { _ in }
        let deadPort = gone.port
        gone.stop()
        let gw = try GatewayProcess(
            config: """
                workers: 1
                listeners:
                  - {name: public, address: 127.0.0.1:0, protocols: [http1, h2c]}
                admin: {address: 127.0.0.1:0}
                upstreams:
                  - {name: dead, url: http://127.0.0.1:\(deadPort)}
                  - {name: silent, url: http://127.0.0.1:\(silent.port), response_timeout: 1s}
                routes:
                  - {name: dead, match: {path_prefix: /dead}, upstream: dead}
                  - {name: silent, match: {path_prefix: /silent}, upstream: silent}
                """)
        defer { gw.stop() }
        for http2 in [false, true] {
            let version = http2 ? "--http2-prior-knowledge" : "--http1.1"
            let dead = try curl([version, gw.url("public", "/dead")])
            #expect(dead.0 == 502 && dead.1.contains("\"error\":\"upstream_unavailable\""), "\(version) \(dead)")
            let slow = try curl([version, gw.url("public", "/silent")])
            #expect(slow.0 == 504 && slow.1.contains("\"error\":\"upstream_timeout\""), "\(version) \(slow)")
            // Refused by the proxy before any upstream: answered, logged with its code, not counted.
            let ambiguous = try curl([version, "--path-as-is", gw.url("public", "/dead/a%2Fb")])
            #expect(ambiguous.0 == 400 && ambiguous.1.contains("\"error\":\"ambiguous_path\""), "\(version) \(ambiguous)")
        }
        let metrics = try curl([gw.url("admin", "/metrics")]).1
        #expect(metrics.contains("attest_gateway_upstream_errors_total{upstream=\"dead\",reason=\"upstream_unavailable\"} 2"), "\(metrics)")
        #expect(metrics.contains("attest_gateway_upstream_errors_total{upstream=\"silent\",reason=\"upstream_timeout\"} 2"), "\(metrics)")
        // The access log is buffered per loop and flushed within a second (logging.access_log.flush).
        let lines = waitForStdout(gw) { $0.split(separator: "\n").count >= 6 }.split(separator: "\n").map(String.init)
        #expect(!metrics.contains("reason=\"ambiguous_path\""))
        for (route, error) in [("dead", "upstream_unavailable"), ("silent", "upstream_timeout"), ("-", "ambiguous_path")] {
            for proto in ["http1", "h2"] {
                #expect(
                    lines.contains {
                        $0.contains("\"route\":\"\(route)\"") && $0.contains("\"error\":\"\(error)\"") && $0.contains("\"\(proto)\"")
                    },
                    "\(route) \(proto): \(lines)")
            }
        }
    }
}
