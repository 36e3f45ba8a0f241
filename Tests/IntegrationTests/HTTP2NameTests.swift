import Foundation
import GatewayTestSupport
import Glibc
import Testing

/// HTTP/2 has one name per kind of listener: `h2` on TLS (ALPN), `h2c` on cleartext (prior
/// knowledge). `gatewayd check` says which to write; an `[h2]` TLS listener serves only HTTP/2.
@Suite("h2 on TLS listeners, h2c on cleartext ones (real gatewayd)", .serialized, .timeLimit(.minutes(2)))
struct HTTP2NameTests {
    static func config(_ listener: String) -> String {
        """
        workers: 1
        listeners:
        \(listener)
        admin: {address: 127.0.0.1:0}
        limits: {header_timeout: 2s}
        upstreams:
          - {name: demo, url: demo}
        routes:
          - {name: default, match: {path_prefix: /}, upstream: demo}
        """
    }

    @Test("gatewayd check: h2c on a TLS listener and h2 on a plain one are errors at their position, saying which to write")
    func check() throws {
        let pki = try TLSTestPKI()
        defer { pki.remove() }
        let (cert, key) = try pki.leaf("gw", names: ["gateway.test"])
        func check(_ listener: String) throws -> ProcessResult {
            let file = pki.dir.appendingPathComponent("check-\(UUID().uuidString).yaml")
            try Self.config(listener).write(to: file, atomically: true, encoding: .utf8)
            return try runProcess(gatewaydBinary, ["check", "--config", file.path], timeout: 60)
        }
        let tlsH2c = try check(
            "  - {name: s, address: 127.0.0.1:0, protocols: [http1, h2c], tls: {certificate: \(cert), private_key: \(key)}}")
        #expect(tlsH2c.status == 2, "\(tlsH2c.stdout)\(tlsH2c.stderr)")
        #expect(
            tlsH2c.stderr.contains(
                ".yaml:3:56: listeners[0].protocols[1] is h2c, HTTP/2 over cleartext with prior knowledge, "
                    + "but this listener has tls, where HTTP/2 is chosen by ALPN: write h2"), "\(tlsH2c.stderr)")
        let plainH2 = try check("  - {name: p, address: 127.0.0.1:0, protocols: [h2]}")
        #expect(plainH2.status == 2)
        #expect(
            plainH2.stderr.contains(
                ".yaml:3:49: listeners[0].protocols[0] is h2, HTTP/2 over TLS chosen by ALPN, but this "
                    + "listener has no tls: write h2c (cleartext HTTP/2 with prior knowledge), or add tls"),
            "\(plainH2.stderr)")
        let good = try check(
            "  - {name: s, address: 127.0.0.1:0, protocols: [http1, h2], tls: {certificate: \(cert), private_key: \(key)}}")
        #expect(good.status == 0, "\(good.stderr)")
    }

    @Test("a TLS listener with [h2] serves HTTP/2 by ALPN and nothing else; [http1, h2] serves both")
    func h2Only() throws {
        let pki = try TLSTestPKI()
        defer { pki.remove() }
        let (cert, key) = try pki.leaf("gw", names: ["gateway.test"])
        let gw = try GatewayProcess(
            config: Self.config(
                """
                  - {name: h2only, address: 127.0.0.1:0, protocols: [h2], tls: {certificate: \(cert), private_key: \(key)}}
                  - {name: both, address: 127.0.0.1:0, protocols: [http1, h2], tls: {certificate: \(cert), private_key: \(key)}}
                """))
        defer { gw.stop() }
        func get(_ listener: String, _ flag: String) throws -> ProcessResult {
            try runProcess(
                URL(fileURLWithPath: "/usr/bin/curl"),
                [
                    "-sS", "--max-time", "10", "--cacert", pki.path("ca.pem"), flag, "-o", "/dev/null", "-w",
                    "%{http_code} %{http_version}",
                    "https://localhost:\(HTTPCall.port(gw, listener))/hello",
                ])
        }
        #expect(try get("h2only", "--http2").stdout == "200 2")
        #expect(try get("both", "--http2").stdout == "200 2")
        #expect(try get("both", "--http1.1").stdout == "200 1.1")
        // A client offering only http/1.1 fails the handshake (no_application_protocol)…
        let h1 = try get("h2only", "--http1.1")
        #expect(h1.status != 0 && !h1.stdout.hasPrefix("200"), "\(h1.stdout) \(h1.stderr)")
        // …and one that offers no ALPN protocol at all is closed without an answer.
        let noALPN = try runProcess(
            URL(fileURLWithPath: "/bin/sh"),
            [
                "-c",
                "printf 'GET /hello HTTP/1.1\\r\\nHost: localhost\\r\\n\\r\\n' | openssl s_client -quiet -ign_eof -connect 127.0.0.1:\(HTTPCall.port(gw, "h2only")) "
                    + "-servername localhost -CAfile \(pki.path("ca.pem")) 2>/dev/null",
            ], timeout: 30)
        #expect(!noALPN.stdout.contains("HTTP/1.1"), "\(noALPN.stdout)")
        // The same client on [http1, h2] is answered.
        let noALPNBoth = try runProcess(
            URL(fileURLWithPath: "/bin/sh"),
            [
                "-c",
                "printf 'GET /hello HTTP/1.1\\r\\nHost: localhost\\r\\nConnection: close\\r\\n\\r\\n' | openssl s_client -quiet -ign_eof -connect "
                    + "127.0.0.1:\(HTTPCall.port(gw, "both")) -servername localhost -CAfile \(pki.path("ca.pem")) 2>/dev/null",
            ], timeout: 30)
        #expect(noALPNBoth.stdout.hasPrefix("HTTP/1.1 200"), "\(noALPNBoth.stdout)")
    }
}
