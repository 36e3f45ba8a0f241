import AppAttest
import AppAttestSimulator
import Foundation
@_spi(Testing) import GatewayCrypto
import GatewayTestSupport
import GatewayWire
import Glibc
import Testing

/// Certificates made with the openssl CLI in a temporary directory: two CAs (the trusted one and a
/// stranger) and P-256 leaves with subjectAltName DNS names, `localhost` and 127.0.0.1. Keys are 0600.
final class TLSTestPKI: @unchecked Sendable {
    let dir: URL

    init() throws {
        dir = FileManager.default.temporaryDirectory.appendingPathComponent("gw-tls-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        for ca in ["ca", "wrong-ca"] {
            try openssl([
                "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", path("\(ca).key"),
                "-out", path("\(ca).pem"), "-days", "2", "-subj", "/CN=Gateway Test \(ca)",
            ])
        }
    }

    func path(_ name: String) -> String { dir.appendingPathComponent(name).path }

    /// `<file>.pem` and `<file>.key` for `names` (the first is the subject CN), issued by `ca`.
    @discardableResult
    func leaf(_ file: String, names: [String], cn: String? = nil, ca: String = "ca") throws -> (cert: String, key: String) {
        let csr = path("\(file).csr")
        try openssl([
            "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", path("\(file).key"),
            "-out", csr, "-subj", "/CN=\(cn ?? names[0])",
        ])
        let ext = path("\(file).ext")
        try ("subjectAltName=" + (names.map { "DNS:\($0)" } + ["DNS:localhost", "IP:127.0.0.1"]).joined(separator: ",") + "\n")
            .write(toFile: ext, atomically: true, encoding: .utf8)
        try openssl([
            "x509", "-req", "-in", csr, "-CA", path("\(ca).pem"), "-CAkey", path("\(ca).key"), "-CAcreateserial",
            "-days", "2", "-extfile", ext, "-out", path("\(file).pem"),
        ])
        chmod(path("\(file).key"), 0o600)
        return (path("\(file).pem"), path("\(file).key"))
    }

    private func openssl(_ args: [String]) throws {
        let r = try runProcess(URL(fileURLWithPath: "/usr/bin/openssl"), args)
        guard r.status == 0 else { throw HTTPTestError("openssl \(args.first ?? ""): \(r.stderr)") }
    }

    func remove() { try? FileManager.default.removeItem(at: dir) }
}

/// A blocking TLS client over a loopback socket, driving a `TLSSession` by hand (10 s socket
/// timeout): for keep-alive requests and for looking at the certificate the gateway presented.
final class TLSTestClient {
    let socket: LoopbackClient
    let session: TLSSession
    private var plaintext: [UInt8] = []

    init(port: UInt16, serverName: String, caFile: String, resuming: TLSResumableSession? = nil) throws {
        let context = try TLSClientContext(configuration: TLSClientConfiguration(caFile: caFile))
        session = try context.makeSession(serverName: serverName, resuming: resuming)
        socket = try LoopbackClient(port: port)
        while true {
            flush()
            switch session.handshakeState {
            case .done: return
            case .failed(let f): throw f
            case .plainHTTPOnTLSPort: throw HTTPTestError("plain HTTP?")
            case .inProgress: break
            }
            let chunk = socket.receiveSome()
            guard !chunk.isEmpty else { throw HTTPTestError("closed during the handshake") }
            session.feed(chunk)
        }
    }

    var peerSubject: String { session.peerCertificate?.subject ?? "" }

    private func flush() {
        let c = session.takeCiphertext()
        if !c.isEmpty { socket.send(c) }
    }

    /// Sends one request (with `Content-Length` for a body) and reads one response with a `Content-Length`.
    func request(_ method: String, _ target: String, headers: [(String, String)] = [], body: [UInt8] = []) throws
        -> (status: Int, headers: [String: String], body: String)
    {
        var head = "\(method) \(target) HTTP/1.1\r\nHost: gateway.test\r\n"
        for (k, v) in headers { head += "\(k): \(v)\r\n" }
        if !body.isEmpty || method == "POST" { head += "Content-Length: \(body.count)\r\n" }
        var rest = Array((head + "\r\n").utf8) + body
        while !rest.isEmpty {
            let n = try session.writePlaintext(rest)
            rest.removeFirst(n)
            flush()
        }
        while true {
            if let split = plaintext.firstRange(of: Array("\r\n\r\n".utf8)) {
                var lines = String(decoding: plaintext[..<split.lowerBound], as: UTF8.self).components(separatedBy: "\r\n")
                let statusLine = lines.removeFirst().split(separator: " ")
                var fields: [String: String] = [:]
                for l in lines {
                    guard let c = l.firstIndex(of: ":") else { continue }
                    fields[l[..<c].lowercased()] = l[l.index(after: c)...].trimmingCharacters(in: .whitespaces)
                }
                let length = Int(fields["content-length"] ?? "0") ?? 0
                if plaintext.count - split.upperBound >= length {
                    let bodyEnd = split.upperBound + length
                    let text = String(decoding: plaintext[split.upperBound..<bodyEnd], as: UTF8.self)
                    plaintext.removeFirst(bodyEnd)
                    return (statusLine.count > 1 ? Int(statusLine[1]) ?? 0 : 0, fields, text)
                }
            }
            let chunk = socket.receiveSome()
            guard !chunk.isEmpty else { throw HTTPTestError("connection closed before a whole response") }
            session.feed(chunk)
            let r = session.readPlaintext { plaintext += $0 }
            flush()
            if case .failed(let f) = r { throw f }
        }
    }

    func close() {
        _ = session.shutdown()
        flush()
        socket.close()
    }
}

/// A private nginx serving https on loopback with a given certificate (a real TLS upstream); one
/// process (`master_process off`), killed by `stop()`. `keepalive_timeout 0`: every response closes
/// its connection, so each request makes the gateway connect (and resume) again.
final class TLSNginx: @unchecked Sendable {
    let prefix: URL
    private(set) var port: UInt16 = 0
    private var process: Process?

    init(certificate: String, key: String) throws {
        guard let binary = NginxProcess.binary else { throw HTTPTestError("nginx not found") }
        prefix = FileManager.default.temporaryDirectory.appendingPathComponent("gw-tls-nginx-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: prefix.appendingPathComponent("logs"), withIntermediateDirectories: true)
        for _ in 0..<3 {
            port = try freeLoopbackPort()
            let p = prefix.path
            let conf = """
                daemon off;
                master_process off;
                worker_processes 1;
                error_log \(p)/logs/error.log warn;
                pid \(p)/nginx.pid;
                events { worker_connections 128; }
                http {
                    access_log off;
                    client_body_temp_path \(p)/tmp-body; proxy_temp_path \(p)/tmp-proxy; fastcgi_temp_path \(p)/tmp-fcgi;
                    uwsgi_temp_path \(p)/tmp-uwsgi; scgi_temp_path \(p)/tmp-scgi;
                    keepalive_timeout 0;
                    server {
                        listen 127.0.0.1:\(port) ssl;
                        ssl_certificate \(certificate);
                        ssl_certificate_key \(key);
                        ssl_protocols TLSv1.2 TLSv1.3;
                        location / {
                            default_type text/plain;
                            return 200 "proto=$ssl_protocol reused=$ssl_session_reused xfproto=$http_x_forwarded_proto\\n";
                        }
                    }
                }
                """
            try conf.write(to: prefix.appendingPathComponent("nginx.conf"), atomically: true, encoding: .utf8)
            let proc = Process()
            proc.executableURL = URL(fileURLWithPath: binary)
            proc.arguments = ["-p", p + "/", "-c", prefix.appendingPathComponent("nginx.conf").path, "-e", "\(p)/logs/error.log"]
            proc.standardInput = FileHandle.nullDevice
            proc.standardOutput = FileHandle.nullDevice
            proc.standardError = FileHandle.nullDevice
            try proc.run()
            let deadline = Date().addingTimeInterval(10)
            while Date() < deadline && proc.isRunning {
                if (try? LoopbackClient(port: port)) != nil {
                    process = proc
                    return
                }
                usleep(20_000)
            }
            if proc.isRunning { kill(proc.processIdentifier, SIGKILL) }
            proc.waitUntilExit()
        }
        try? FileManager.default.removeItem(at: prefix)
        throw HTTPTestError("nginx (ssl) did not start")
    }

    func stop() {
        if let p = process, p.isRunning {
            kill(p.processIdentifier, SIGKILL)
            p.waitUntilExit()
        }
        process = nil
        try? FileManager.default.removeItem(at: prefix)
    }

    deinit { stop() }
}

@Suite("TLS listeners and https upstreams (real gatewayd, curl, openssl, nginx; loopback)", .serialized, .timeLimit(.minutes(3)))
struct TLSTests {
    static let appID = "ABCDE12345.com.example.shop"

    /// A gateway with one TLS listener (a.test default, b.test by SNI) in front of `upstream`.
    static func gateway(_ pki: TLSTestPKI, upstream: String = "{name: demo, url: demo}", extra: String = "", routes: String = "")
        throws -> GatewayProcess
    {
        try GatewayProcess(
            config: """
                workers: 2
                listeners:
                  - name: secure
                    address: 127.0.0.1:0
                    tls:
                      certificates:
                        - {certificate: \(pki.path("a.pem")), private_key: \(pki.path("a.key")), server_names: [a.test]}
                        - {certificate: \(pki.path("b.pem")), private_key: \(pki.path("b.key")), server_names: [b.test]}
                admin: {address: 127.0.0.1:0}
                limits: {header_timeout: 2s, drain_timeout: 2s}
                upstreams:
                  - \(upstream)
                \(extra)
                routes:
                \(routes)
                  - {name: all, match: {path_prefix: /}, upstream: \(upstream.contains("name: demo") ? "demo" : "up")}
                """)
    }

    static func pki() throws -> TLSTestPKI {
        let pki = try TLSTestPKI()
        try pki.leaf("a", names: ["a.test"])
        try pki.leaf("b", names: ["b.test"])
        return pki
    }

    static func openssl(_ args: [String]) throws -> ProcessResult {
        try runProcess(URL(fileURLWithPath: "/usr/bin/openssl"), args, timeout: 15)
    }

    @Test("curl --cacert: GET and POST over TLS with HTTP/1.1 by ALPN, X-Forwarded-Proto https; SNI picks the certificate")
    func curlAndSNI() throws {
        let pki = try Self.pki()
        defer { pki.remove() }
        let gw = try Self.gateway(pki)
        defer { gw.stop() }
        let port = HTTPCall.port(gw, "secure")
        let get = try runProcess(
            URL(fileURLWithPath: "/usr/bin/curl"),
            [
                "-s", "--max-time", "10", "--cacert", pki.path("ca.pem"), "-w", "\n%{http_code} %{http_version}",
                "https://localhost:\(port)/hello?x=1",
            ])
        let getLines = get.stdout.split(separator: "\n").map(String.init)
        #expect(getLines.last == "200 1.1", "curl: \(get.stdout) \(get.stderr)")
        let json = try #require((try? JSONSerialization.jsonObject(with: Data((getLines.first ?? "").utf8))) as? [String: Any])
        #expect((json["headers"] as? [String: String])?["X-Forwarded-Proto"] == "https")

        let post = try runProcess(
            URL(fileURLWithPath: "/usr/bin/curl"),
            [
                "-s", "--max-time", "10", "--cacert", pki.path("ca.pem"), "-w", "\n%{http_code}", "--data-binary",
                String(repeating: "z", count: 50_000),
                "https://localhost:\(port)/upload",
            ])
        #expect(post.stdout.hasSuffix("\n200"), "curl: \(post.stderr)")
        #expect(post.stdout.contains("\"bodyBytes\":50000"), "\(post.stdout.prefix(300))")

        for name in ["a.test", "b.test"] {
            let r = try runProcess(
                URL(fileURLWithPath: "/usr/bin/curl"),
                [
                    "-s", "-v", "--max-time", "10", "--cacert", pki.path("ca.pem"), "--resolve", "\(name):\(port):127.0.0.1",
                    "-o", "/dev/null", "-w", "%{http_code}", "https://\(name):\(port)/",
                ])
            #expect(r.stdout == "200")
            #expect(r.stderr.contains("subject: CN=\(name)"), "\(name): \(r.stderr)")
        }
        // No SNI (an IP address): the first certificate.
        let bare = try TLSTestClient(port: port, serverName: "127.0.0.1", caFile: pki.path("ca.pem"))
        #expect(bare.peerSubject.contains("CN=a.test"))
        bare.close()
    }

    @Test("openssl s_client: TLS 1.1 refused, 1.2 and 1.3 accepted, ALPN shown, a session ticket resumed")
    func versionsALPNResumption() throws {
        let pki = try Self.pki()
        defer { pki.remove() }
        let gw = try Self.gateway(pki)
        defer { gw.stop() }
        let target = "127.0.0.1:\(HTTPCall.port(gw, "secure"))"
        let old = try Self.openssl(["s_client", "-connect", target, "-tls1_1", "-servername", "a.test"])
        #expect(old.status != 0)
        #expect(old.stdout.contains("Cipher is (NONE)") || old.stderr.contains("alert protocol version"), "\(old.stderr)")
        for (flag, version) in [("-tls1_2", "TLSv1.2"), ("-tls1_3", "TLSv1.3")] {
            let r = try Self.openssl([
                "s_client", "-connect", target, flag, "-servername", "a.test", "-alpn", "h2,http/1.1",
                "-CAfile", pki.path("ca.pem"), "-verify_return_error",
            ])
            #expect(r.status == 0, "\(flag): \(r.stderr)")
            #expect(r.stdout.contains("New, \(version)"), "\(flag): \(r.stdout.prefix(400))")
            #expect(r.stdout.contains("ALPN protocol: http/1.1"))
            #expect(r.stdout.contains("Verify return code: 0 (ok)"))
        }
        let sess = pki.path("session.pem")
        // stdin open for a second: TLS 1.3 tickets arrive after the handshake, and s_client stops at stdin's end.
        let first = try runProcess(
            URL(fileURLWithPath: "/bin/sh"),
            [
                "-c", "sleep 1 | /usr/bin/openssl s_client -connect \(target) -servername a.test -sess_out \(sess)",
            ], timeout: 15)
        #expect(first.stdout.contains("New, TLSv1.3"))
        let again = try Self.openssl(["s_client", "-connect", target, "-servername", "a.test", "-sess_in", sess])
        #expect(again.stdout.contains("Reused, TLSv1.3"), "\(again.stdout.prefix(400))")
        let metrics = try curl([gw.url("admin", "/metrics")]).1
        #expect(metrics.contains("attest_gateway_tls_handshakes_total{listener=\"secure\",version=\"TLSv1.3\",resumed=\"true\"} 1"))
        #expect(metrics.contains("attest_gateway_tls_handshakes_total{listener=\"secure\",version=\"TLSv1.2\",resumed=\"false\"} 1"))
        #expect(metrics.contains("attest_gateway_tls_handshake_failures_total{listener=\"secure\",reason=\"unsupported_version\"} 1"))
    }

    @Test("tls.ticket_rotation: 3s: a TLS 1.3 ticket resumes at once and after one rotation, not after two (full handshake)")
    func ticketRotation() throws {
        let pki = try Self.pki()
        defer { pki.remove() }
        let gw = try GatewayProcess(
            config: """
                workers: 1
                listeners:
                  - name: secure
                    address: 127.0.0.1:0
                    tls: {certificate: \(pki.path("a.pem")), private_key: \(pki.path("a.key")), ticket_rotation: 3s}
                admin: {address: 127.0.0.1:0}
                upstreams: [{name: demo, url: demo}]
                routes: [{name: all, match: {path_prefix: /}, upstream: demo}]
                """)
        defer { gw.stop() }
        let target = "127.0.0.1:\(HTTPCall.port(gw, "secure"))"
        let sess = pki.path("rotation.pem")
        /// Rotations so far, from the gateway's log (one line per rotation).
        func rotations() -> Int { gw.stderrLines.filter { $0.contains("\"msg\":\"tls ticket keys rotated\"") }.count }
        var resumed = 0
        func resume() throws -> String {
            let r = try Self.openssl(["s_client", "-connect", target, "-servername", "a.test", "-sess_in", sess])
            if r.stdout.contains("Reused, TLSv1.3") {
                resumed += 1
                return "reused"
            }
            if r.stdout.contains("New, TLSv1.3") { return "new" }
            return "failed: \(r.stdout.prefix(300)) \(r.stderr.prefix(300))"
        }
        func waitForRotation(_ n: Int) throws {
            let deadline = Date().addingTimeInterval(15)
            while rotations() < n {
                guard Date() < deadline else { throw HTTPTestError("rotation \(n) not logged within 15 s") }
                usleep(50_000)
            }
        }
        // The count is read around each step: a step that a rotation may have crossed is run again
        // (at most 3 times), so each expectation holds for a known number of rotations.
        var checked = false
        for _ in 0..<3 where !checked {
            let start = rotations()
            // stdin open briefly: the TLS 1.3 ticket arrives after the handshake.
            let first = try runProcess(
                URL(fileURLWithPath: "/bin/sh"),
                [
                    "-c", "sleep 0.5 | /usr/bin/openssl s_client -connect \(target) -servername a.test -sess_out \(sess)",
                ], timeout: 15)
            #expect(first.stdout.contains("New, TLSv1.3"), "\(first.stdout.prefix(300))")
            guard rotations() == start else { continue }
            let fresh = try resume()
            guard rotations() == start else { continue }
            #expect(fresh == "reused", "right after the ticket was issued")
            try waitForRotation(start + 1)
            let one = try resume()
            guard rotations() == start + 1 else { continue }
            #expect(one == "reused", "one rotation later: the ticket's key is the previous one")
            try waitForRotation(start + 2)
            #expect(try resume() == "new", "two rotations later: the ticket's key is forgotten, full handshake")
            checked = true
        }
        #expect(checked, "every attempt was crossed by a rotation (rotations: \(rotations()))")
        let log = gw.stderrLines.last { $0.contains("tls ticket keys rotated") } ?? ""
        #expect(log.contains("\"listener\":\"secure\""), "\(log)")
        let metrics = try curl([gw.url("admin", "/metrics")]).1
        #expect(
            metrics.contains("attest_gateway_tls_handshakes_total{listener=\"secure\",version=\"TLSv1.3\",resumed=\"true\"} \(resumed)"),
            "\(metrics)")
    }

    @Test("SIGHUP changing tls.ticket_rotation from 1h to 2s restarts the listener's rotation timer, with no restart warning")
    func ticketRotationReload() throws {
        let pki = try Self.pki()
        defer { pki.remove() }
        func config(_ rotation: String) -> String {
            """
            workers: 1
            listeners:
              - name: secure
                address: 127.0.0.1:0
                tls: {certificate: \(pki.path("a.pem")), private_key: \(pki.path("a.key")), ticket_rotation: \(rotation)}
            admin: {address: 127.0.0.1:0}
            upstreams: [{name: demo, url: demo}]
            routes: [{name: all, match: {path_prefix: /}, upstream: demo}]
            """
        }
        let gw = try GatewayProcess(config: config("1h"))
        defer { gw.stop() }
        #expect(!gw.stderr.contains("tls ticket keys rotated"))
        try config("2s").write(to: gw.configURL, atomically: true, encoding: .utf8)
        gw.signal(SIGHUP)
        try waitFor { gw.stderr.contains("configuration reloaded") }
        try waitFor { gw.stderr.contains("\"msg\":\"tls ticket keys rotated\",\"listener\":\"secure\"") }
        #expect(!gw.stderr.contains("listener changes take effect after a restart"), "\(gw.stderr)")
    }

    @Test("plain HTTP on the TLS port → 400 https_required and closed; garbage → closed; both counted; a silent client times out")
    func badClients() throws {
        let pki = try Self.pki()
        defer { pki.remove() }
        let gw = try Self.gateway(pki)
        defer { gw.stop() }
        let port = HTTPCall.port(gw, "secure")
        let plain = try HTTPTestConnection(port: port)
        plain.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        let r = try plain.readResponse()
        #expect(r.status == 400)
        #expect(r.json?["error"] as? String == "https_required")
        #expect(plain.isClosedByPeer())
        plain.close()

        let garbage = try LoopbackClient(port: port)
        garbage.send([0x16, 0x03, 0x01, 0x00, 0x08, 0x01, 0x00, 0x00, 0x04, 0xde, 0xad, 0xbe, 0xef] + [UInt8](repeating: 0x42, count: 64))
        #expect(garbage.isClosedByPeer())
        garbage.close()

        // Connects and says nothing: closed after limits.header_timeout (2 s).
        let silent = try LoopbackClient(port: port)
        #expect(silent.isClosedByPeer())
        silent.close()

        let metrics = try curl([gw.url("admin", "/metrics")]).1
        #expect(metrics.contains("attest_gateway_tls_handshake_failures_total{listener=\"secure\",reason=\"plain_http\"} 1"))
        #expect(metrics.contains("attest_gateway_tls_handshake_failures_total{listener=\"secure\",reason=\"protocol_error\"} 1"))
        #expect(metrics.contains("attest_gateway_tls_handshake_failures_total{listener=\"secure\",reason=\"timeout\"} 1"))
        // The listener still serves.
        let ok = try TLSTestClient(port: port, serverName: "a.test", caFile: pki.path("ca.pem"))
        #expect(try ok.request("GET", "/after").status == 200)
        ok.close()
    }

    @Test("a private key with mode 0644: gatewayd run exits 1 and check exits 2, naming the file and the mode")
    func loosePrivateKey() throws {
        let pki = try Self.pki()
        defer { pki.remove() }
        chmod(pki.path("b.key"), 0o644)
        let config = pki.path("gateway.yaml")
        try """
        listeners:
          - name: secure
            address: 127.0.0.1:0
            tls: {certificate: \(pki.path("b.pem")), private_key: \(pki.path("b.key"))}
        admin: {address: 127.0.0.1:0}
        upstreams: [{name: demo, url: demo}]
        routes: [{name: all, match: {path_prefix: /}, upstream: demo}]
        """.write(toFile: config, atomically: true, encoding: .utf8)
        let run = try runProcess(gatewaydBinary, ["run", "--config", config], timeout: 20)
        #expect(run.status == 1)
        #expect(run.stderr.contains("private key \(pki.path("b.key")) has mode 0644"), "\(run.stderr)")
        let check = try runProcess(gatewaydBinary, ["check", "--config", config], timeout: 20)
        #expect(check.status == 2)
        // At the listener's tls value, file:line:column like the decoder's diagnostics.
        #expect(
            check.stderr.contains("\(config):4:10: listeners[0].tls (listener secure):") && check.stderr.contains("chmod 600"),
            "\(check.stderr)")
    }

    @Test("SIGHUP with a new certificate: new connections get it, an open keep-alive connection keeps working; a bad one is refused")
    func reloadCertificate() throws {
        let pki = try Self.pki()
        defer { pki.remove() }
        let gw = try Self.gateway(pki)
        defer { gw.stop() }
        let port = HTTPCall.port(gw, "secure")
        let kept = try TLSTestClient(port: port, serverName: "a.test", caFile: pki.path("ca.pem"))
        #expect(try kept.request("GET", "/one").status == 200)
        #expect(kept.peerSubject == "CN=a.test")

        // Replace a.pem/a.key in place with a certificate for the same name, new subject.
        let fresh = try pki.leaf("a-new", names: ["a.test"], cn: "a.test reissued")
        try FileManager.default.removeItem(atPath: pki.path("a.pem"))
        try FileManager.default.removeItem(atPath: pki.path("a.key"))
        try FileManager.default.copyItem(atPath: fresh.cert, toPath: pki.path("a.pem"))
        try FileManager.default.copyItem(atPath: fresh.key, toPath: pki.path("a.key"))
        chmod(pki.path("a.key"), 0o600)
        gw.signal(SIGHUP)
        try waitFor { gw.stderr.contains("configuration reloaded") }

        let after = try TLSTestClient(port: port, serverName: "a.test", caFile: pki.path("ca.pem"))
        #expect(after.peerSubject == "CN=a.test reissued")
        #expect(try after.request("GET", "/new").status == 200)
        after.close()
        #expect(try kept.request("GET", "/two").status == 200)
        #expect(try kept.request("POST", "/three", body: Array("abc".utf8)).status == 200)

        // A key that is not the certificate's: the reload is refused, the running certificate stays.
        try FileManager.default.removeItem(atPath: pki.path("a.key"))
        try FileManager.default.copyItem(atPath: pki.path("b.key"), toPath: pki.path("a.key"))
        chmod(pki.path("a.key"), 0o600)
        gw.signal(SIGHUP)
        try waitFor { gw.stderr.contains("reload refused") }
        #expect(gw.stderr.contains("listeners[0].tls (listener secure):"))
        let still = try TLSTestClient(port: port, serverName: "a.test", caFile: pki.path("ca.pem"))
        #expect(still.peerSubject == "CN=a.test reissued")
        #expect(try still.request("GET", "/still").status == 200)
        still.close()
        kept.close()
    }

    @Test("https upstream: nginx with the test CA → 200 and resumed sessions; with the wrong CA → 502 upstream_tls, counted")
    func httpsUpstream() throws {
        let pki = try Self.pki()
        defer { pki.remove() }
        let up = try pki.leaf("upstream", names: ["upstream.test"])
        let nginx = try TLSNginx(certificate: up.cert, key: up.key)
        defer { nginx.stop() }
        let good = try Self.gateway(
            pki,
            upstream:
                "{name: up, url: \"https://127.0.0.1:\(nginx.port)\", tls: {ca_file: \(pki.path("ca.pem")), server_name: upstream.test}}")
        defer { good.stop() }
        let c = try TLSTestClient(port: HTTPCall.port(good, "secure"), serverName: "a.test", caFile: pki.path("ca.pem"))
        var reused: [String] = []
        for i in 0..<3 {
            let r = try c.request("GET", "/r\(i)")
            #expect(r.status == 200, "\(r.body)")
            #expect(r.body.contains("proto=TLSv1.3") && r.body.contains("xfproto=https"), "\(r.body)")
            reused.append(r.body.contains("reused=r") ? "r" : ".")
        }
        c.close()
        // nginx closes after each response: the 2nd and 3rd connections resume the previous one's session.
        #expect(reused == [".", "r", "r"])

        let bad = try Self.gateway(
            pki,
            upstream:
                "{name: up, url: \"https://127.0.0.1:\(nginx.port)\", tls: {ca_file: \(pki.path("wrong-ca.pem")), server_name: upstream.test}}"
        )
        defer { bad.stop() }
        let d = try TLSTestClient(port: HTTPCall.port(bad, "secure"), serverName: "a.test", caFile: pki.path("ca.pem"))
        let r = try d.request("GET", "/x")
        #expect(r.status == 502)
        #expect(r.body.contains("\"upstream_tls\""), "\(r.body)")
        d.close()
        let metrics = try curl([bad.url("admin", "/metrics")]).1
        #expect(metrics.contains("attest_gateway_upstream_tls_failures_total{upstream=\"up\",reason=\"certificate_verification\"} 1"))
        #expect(bad.stderr.contains("upstream TLS handshake failed") && bad.stderr.contains("certificate_verification"))
    }

    @Test("HTTP/2 over TLS by ALPN on an http1+h2 listener: curl --http2 and --http1.1, nghttp, h2load, and App Attest over h2")
    func http2OverTLS() throws {
        for tool in ["/usr/bin/curl", "/usr/bin/nghttp", "/usr/bin/h2load"] where !FileManager.default.isExecutableFile(atPath: tool) {
            try #require(ProcessInfo.processInfo.environment["CI"] != "true", "\(tool) is missing (scripts/install-deps.sh installs it)")
            return
        }
        let pki = try Self.pki()
        defer { pki.remove() }
        let ca = try TestCA()
        try ca.rootPEM.write(toFile: pki.path("attest-root.pem"), atomically: true, encoding: .utf8)
        try ca.receiptRootPEM.write(toFile: pki.path("receipt-root.pem"), atomically: true, encoding: .utf8)
        let gw = try GatewayProcess(
            config: """
                workers: 2
                listeners:
                  - name: secure
                    address: 127.0.0.1:0
                    protocols: [http1, h2]
                    tls: {certificate: \(pki.path("a.pem")), private_key: \(pki.path("a.key"))}
                admin: {address: 127.0.0.1:0}
                limits: {header_timeout: 2s, drain_timeout: 2s}
                upstreams:
                  - {name: demo, url: demo}
                apps:
                  - {team_id: ABCDE12345, bundle_ids: [com.example.shop], environments: [development]}
                trust: {extra_roots: [\(pki.path("attest-root.pem"))], extra_receipt_roots: [\(pki.path("receipt-root.pem"))]}
                routes:
                  - {name: purchase, match: {methods: [POST], path_prefix: /api/purchase}, upstream: demo, assertion: {mode: enforce}}
                  - {name: all, match: {path_prefix: /}, upstream: demo}
                """)
        defer { gw.stop() }
        let base = "https://localhost:\(HTTPCall.port(gw, "secure"))"
        func curl(_ args: [String]) throws -> (status: String, version: String, body: String, headers: String) {
            let headerFile = pki.path("headers-\(UUID().uuidString)")
            let r = try runProcess(
                URL(fileURLWithPath: "/usr/bin/curl"),
                [
                    "-s", "--max-time", "10", "--cacert", pki.path("ca.pem"), "-D", headerFile,
                    "-w", "\n%{http_code} %{http_version}",
                ] + args)
            var lines = r.stdout.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
            let last = (lines.popLast() ?? "").split(separator: " ").map(String.init)
            let headers = (try? String(contentsOfFile: headerFile, encoding: .utf8)) ?? ""
            return (last.first ?? "", last.count > 1 ? last[1] : "", lines.joined(separator: "\n"), headers)
        }
        let h2 = try curl(["--http2", "\(base)/hello"])
        #expect(h2.status == "200" && h2.version == "2", "\(h2)")
        #expect(h2.body.contains("\"X-Forwarded-Proto\":\"https\""))
        let h1 = try curl(["--http1.1", "\(base)/hello"])
        #expect(h1.status == "200" && h1.version == "1.1", "\(h1)")

        let nghttp = try runProcess(URL(fileURLWithPath: "/usr/bin/nghttp"), ["-nv", "\(base)/hello"], timeout: 15)
        #expect(nghttp.stdout.contains("negotiated protocol: h2"), "\(nghttp.stdout.suffix(600))")
        #expect(nghttp.stdout.contains(":status: 200"))
        let load = try runProcess(
            URL(fileURLWithPath: "/usr/bin/h2load"), ["-n", "400", "-c", "4", "-m", "8", "\(base)/hello"], timeout: 60)
        #expect(load.stdout.contains("400 succeeded, 0 failed, 0 errored"), "\(load.stdout.suffix(800))")
        #expect(load.stdout.contains("Application protocol: h2"))

        // App Attest over HTTP/2 and TLS: register, then a protected request, then its replay.
        let device = SimulatedDevice(appID: try AppID(Self.appID), environment: .development, ca: ca)
        let keyID = Base64.encode(device.keyID)
        func challenge() throws -> String {
            let r = try curl(["--http2", "-X", "POST", "\(base)/v1/attest/challenge"])
            #expect(r.status == "201" && r.version == "2", "\(r)")
            let json = try #require((try? JSONSerialization.jsonObject(with: Data(r.body.utf8))) as? [String: Any])
            return try #require(json["challenge"] as? String)
        }
        let ch = try challenge()
        let attestation = try device.attest(clientDataHash: SHA256.hash(Array(ch.utf8)))
        let reg = try curl([
            "--http2", "-H", "Content-Type: application/json", "--data-binary",
            "{\"keyId\":\"\(keyID)\",\"attestation\":\"\(Base64.encode(attestation))\",\"challenge\":\"\(ch)\"}",
            "\(base)/v1/attest/register",
        ])
        #expect(reg.status == "201", "\(reg)")
        let ch2 = try challenge()
        let body = "{\"sku\":7}"
        // Over TLS (scheme https) the authority keeps a port other than 443.
        let cd = ContractDevice.clientData(
            challenge: ch2, method: "POST", target: "/api/purchase?via=h2", authority: "localhost:\(HTTPCall.port(gw, "secure"))",
            body: Array(body.utf8))
        let assertion = Base64.encode(device.assert(clientDataHash: SHA256.hash(cd)))
        let signed = [
            "--http2", "-H", "X-App-Attest-Key-Id: \(keyID)", "-H", "X-App-Attest-Challenge: \(ch2)",
            "-H", "X-App-Assertion: \(assertion)", "--data-binary", body, "\(base)/api/purchase?via=h2",
        ]
        let ok = try curl(signed)
        #expect(ok.status == "200" && ok.version == "2", "\(ok)")
        #expect(ok.body.contains("\"X-App-Attest-Verified-Key-Id\":\"\(keyID)\""), "\(ok.body.prefix(400))")
        #expect(ok.headers.lowercased().contains("x-app-attest-next-challenge:"))
        let replay = try curl(signed)
        #expect(replay.status == "401" && replay.body.contains("\"error\":\"counter_replay\""), "\(replay)")
        let metrics = try runProcess(URL(fileURLWithPath: "/usr/bin/curl"), ["-s", gw.url("admin", "/metrics")]).stdout
        #expect(
            metrics.contains(
                "attest_gateway_assertion_verdicts_total{route=\"purchase\",mode=\"enforce\",verdict=\"accepted\",reason=\"ok\"} 1"))
        #expect(metrics.contains("protocol=\"h2\""))
        #expect(metrics.contains("attest_gateway_tls_handshakes_total{listener=\"secure\""))
    }

    @Test("App Attest over TLS: challenge, registration and an enforced assertion on one keep-alive TLS connection")
    func attestOverTLS() throws {
        let pki = try Self.pki()
        defer { pki.remove() }
        let ca = try TestCA()
        try ca.rootPEM.write(toFile: pki.path("attest-root.pem"), atomically: true, encoding: .utf8)
        try ca.receiptRootPEM.write(toFile: pki.path("receipt-root.pem"), atomically: true, encoding: .utf8)
        let gw = try Self.gateway(
            pki,
            extra: """
                apps:
                  - {team_id: ABCDE12345, bundle_ids: [com.example.shop], environments: [development]}
                trust: {extra_roots: [\(pki.path("attest-root.pem"))], extra_receipt_roots: [\(pki.path("receipt-root.pem"))]}
                """,
            routes: """
                  - {name: purchase, match: {methods: [POST], path_prefix: /api/purchase}, upstream: demo, assertion: {mode: enforce}}
                """)
        defer { gw.stop() }
        let c = try TLSTestClient(port: HTTPCall.port(gw, "secure"), serverName: "a.test", caFile: pki.path("ca.pem"))
        defer { c.close() }
        let device = SimulatedDevice(appID: try AppID(Self.appID), environment: .development, ca: ca)
        let keyID = Base64.encode(device.keyID)
        func challenge(_ purpose: String) throws -> String {
            let r = try c.request("POST", "/v1/attest/challenge", body: Array("{\"purpose\":\"\(purpose)\"}".utf8))
            #expect(r.status == 201, "\(r.body)")
            let json = try #require((try? JSONSerialization.jsonObject(with: Data(r.body.utf8))) as? [String: Any])
            return try #require(json["challenge"] as? String)
        }
        let ch = try challenge("register")
        let attestation = try device.attest(clientDataHash: SHA256.hash(Array(ch.utf8)))
        let reg = try c.request(
            "POST", "/v1/attest/register",
            body: Array(
                "{\"keyId\":\"\(keyID)\",\"attestation\":\"\(Base64.encode(attestation))\",\"challenge\":\"\(ch)\"}".utf8))
        #expect(reg.status == 201, "\(reg.body)")
        #expect(reg.body.contains(keyID))
        // A signed request with a fresh challenge: the demo upstream sees the verified key header.
        let ch2 = try challenge("assert")
        let body = Array("{\"sku\":1}".utf8)
        let cd = ContractDevice.clientData(challenge: ch2, method: "POST", target: "/api/purchase", authority: "gateway.test", body: body)
        let assertion = device.assert(clientDataHash: SHA256.hash(cd))
        let r = try c.request(
            "POST", "/api/purchase",
            headers: [
                ("X-App-Attest-Key-Id", keyID), ("X-App-Attest-Challenge", ch2), ("X-App-Assertion", Base64.encode(assertion)),
            ], body: body)
        #expect(r.status == 200, "\(r.body)")
        let json = try #require((try? JSONSerialization.jsonObject(with: Data(r.body.utf8))) as? [String: Any])
        let headers = try #require(json["headers"] as? [String: String])
        #expect(headers["X-App-Attest-Verified-Key-Id"] == keyID)
        #expect(headers["X-Forwarded-Proto"] == "https")
        // Without an assertion the same route is refused.
        #expect(try c.request("POST", "/api/purchase", body: body).status == 401)
    }
}

/// Polls `condition` every 20 ms for up to 10 s.
func waitFor(_ condition: () -> Bool) throws {
    let deadline = Date().addingTimeInterval(10)
    while Date() < deadline {
        if condition() { return }
        usleep(20_000)
    }
    throw HTTPTestError("condition not met within 10 s")
}
