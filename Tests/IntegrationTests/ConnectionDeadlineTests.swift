import Foundation
import GatewayTestSupport
import Glibc
import Testing

/// The venv's python with `h2` (scripts/install-deps.sh), or nil: skipped outside CI, failed under CI=true.
private let h2Python: String? = {
    let python = repositoryRoot.appendingPathComponent(".build-tools/venv/bin/python").path
    guard FileManager.default.isExecutableFile(atPath: python),
        let r = try? runProcess(URL(fileURLWithPath: python), ["-c", "import h2"], timeout: 30), r.status == 0
    else { return nil }
    return python
}()

private let leftoversScript = repositoryRoot.appendingPathComponent("Tests/h2/leftovers.py").path

/// No connection outlives its client (docs/http2.md, "Deadlines"). h2spec's conformance cases that
/// leave a response waiting on the client's flow-control window used to leave the server's socket
/// in CLOSE-WAIT for as long as the process lived: the client's EOF only marked the connection to
/// close when idle, and no timer covered a stream waiting on a window nobody would open. Each case is
/// replayed here (Tests/h2/leftovers.py) on h2c and on TLS, and the sockets gatewayd still holds on
/// the listener's port are counted from /proc after the client left.
@Suite("Connection deadlines: no socket outlives its client (h2spec's leftover cases, send_timeout)", .serialized, .timeLimit(.minutes(5)))
struct ConnectionDeadlineTests {
    static let h2specCases = ["generic/2/2", "generic/2/3", "http2/6.5.3/1", "http2/6.9.1/1", "http2/6.9.2/1", "http2/6.9.2/2"]

    /// A gatewayd with an h2c listener, a TLS listener (http1 + h2 by ALPN) and a plain HTTP/1.1 one;
    /// `limits` is the limits section (its timeouts decide what closes what).
    static func gateway(limits: String, pki: TLSTestPKI) throws -> GatewayProcess {
        let (cert, key) = try pki.leaf("gw", names: ["localhost"])
        return try GatewayProcess(
            config: """
                workers: 1
                listeners:
                  - {name: h2c, address: 127.0.0.1:0, protocols: [h2c]}
                  - {name: tls, address: 127.0.0.1:0, protocols: [http1, h2], tls: {certificate: \(cert), private_key: \(key)}}
                  - {name: h1, address: 127.0.0.1:0}
                admin: {address: 127.0.0.1:0}
                limits: \(limits)
                upstreams:
                  - {name: demo, url: demo}
                routes:
                  - {name: purchase, match: {path_prefix: /api/purchase}, upstream: demo, assertion: {mode: enforce}}
                  - {name: default, match: {path_prefix: /}, upstream: demo}
                apps:
                  - {team_id: "0352187391", bundle_ids: [com.apple.example_app_attest], environments: [production]}
                store: {kind: memory, shards: 4}
                """)
    }

    static func port(_ gw: GatewayProcess, _ listener: String) -> Int {
        Int(gw.addresses[listener]?.split(separator: ":").last ?? "") ?? 0
    }

    /// The access lines matching `filter`, once `count` of them were written (the access log is
    /// flushed in batches) or after 3 s.
    static func accessLines(_ gw: GatewayProcess, count: Int, _ filter: (String) -> Bool) -> [String] {
        let deadline = Date().addingTimeInterval(3)
        var lines = gw.stdoutLines.filter(filter)
        while lines.count < count && Date() < deadline {
            usleep(50_000)
            lines = gw.stdoutLines.filter(filter)
        }
        return lines
    }

    /// Runs one case of Tests/h2/leftovers.py; nil (recorded or skipped) without python's h2.
    func leftovers(_ args: [String]) throws -> [String: Any]? {
        guard let python = h2Python else {
            if ProcessInfo.processInfo.environment["CI"] == "true" {
                Issue.record("python with h2 is required under CI=true (scripts/install-deps.sh installs it into .build-tools/venv)")
            } else {
                print("skipped: .build-tools/venv/bin/python with h2 is missing (run scripts/install-deps.sh)")
            }
            return nil
        }
        let r = try runProcess(URL(fileURLWithPath: python), [leftoversScript] + args, timeout: 60)
        #expect(r.status == 0, "\(r.stderr)")
        guard let v = r.json else {
            Issue.record("no verdict from \(args): \(r.stdout) \(r.stderr)")
            return nil
        }
        return v
    }

    @Test("h2spec's six cases, client gone: no server socket left (h2c and TLS), with every other timeout at 60s")
    func clientLeft() throws {
        let pki = try TLSTestPKI()
        defer { pki.remove() }
        // Idle, header and send timeouts far away: only the client's EOF may close these.
        let gw = try Self.gateway(limits: "{idle_timeout: 60s, header_timeout: 60s, send_timeout: 60s, body_timeout: 60s}", pki: pki)
        defer { gw.stop() }
        let pid = gw.process.processIdentifier
        for (listener, tls) in [("h2c", false), ("tls", true)] {
            let port = Self.port(gw, listener)
            for name in Self.h2specCases {
                guard let v = try leftovers([name, "--port", String(port), "--leave", "close"] + (tls ? ["--tls"] : [])) else { return }
                // The case ran as h2spec runs it: the one DATA byte(s) it waits for came.
                #expect(v["status"] as? Int == 200, "\(listener) \(name): \(v)")
                #expect((v["data_bytes"] as? Int ?? 0) >= 1, "\(listener) \(name): \(v)")
                let left = ServerSockets.waitUntilNone(pid: pid, port: port, timeout: 3)
                #expect(left.isEmpty, "\(listener) \(name): gatewayd still holds \(left) after the client closed")
            }
        }
        // The streams ended as the client's leaving: client_closed in the access log, one per case.
        let closed = Self.accessLines(gw, count: 2 * Self.h2specCases.count) {
            $0.contains("\"protocol\":\"h2\"") && $0.contains("\"error\":\"client_closed\"")
        }
        #expect(closed.count == 2 * Self.h2specCases.count, "\(gw.stdoutLines.suffix(14))")
        #expect(gw.process.isRunning)
    }

    @Test(
        "A client that stays connected but never opens its window: the stream is reset (CANCEL) after send_timeout, then the idle connection closes"
    )
    func windowNeverOpens() throws {
        let pki = try TLSTestPKI()
        defer { pki.remove() }
        let gw = try Self.gateway(limits: "{idle_timeout: 2s, header_timeout: 60s, send_timeout: 1s, body_timeout: 60s}", pki: pki)
        defer { gw.stop() }
        for (listener, tls) in [("h2c", false), ("tls", true)] {
            let port = Self.port(gw, listener)
            guard
                let v = try leftovers(
                    ["http2/6.9.1/1", "--port", String(port), "--leave", "stay", "--stay-seconds", "6"] + (tls ? ["--tls"] : []))
            else { return }
            let rst = v["rst"] as? [[String: Any]] ?? []
            #expect(rst.count == 1, "\(listener): \(v)")
            #expect(rst.first?["code"] as? String == "CANCEL", "\(listener): \(v)")
            // Checked every quarter of the timeout: reset between 1 s and 1.25 s (+ a wheel tick and
            // the machine's noise) after the last byte the client took.
            let after = rst.first?["after"] as? Double ?? 0
            #expect(after >= 0.9 && after <= 3.0, "\(listener): reset after \(after) s: \(v)")
            // With no stream left, the idle timeout (2 s) ends the connection: GOAWAY, then closed.
            #expect(v["closed"] as? Bool == true, "\(listener): \(v)")
            #expect(ServerSockets.waitUntilNone(pid: gw.process.processIdentifier, port: port, timeout: 3).isEmpty)
        }
        let timedOut = Self.accessLines(gw, count: 2) { $0.contains("\"error\":\"send_timeout\"") }
        #expect(timedOut.count == 2, "\(gw.stdoutLines.suffix(6))")
        let (code, metrics) = try curl([gw.url("admin", "/metrics")])
        #expect(code == 200)
        #expect(
            metrics.contains("attest_gateway_h2_streams_reset_total{reason=\"send_timeout\"} 2"),
            "\(metrics.split(separator: "\n").filter { $0.contains("reset") })")
    }

    @Test("A request body that stops after a complete refusal: RST_STREAM NO_ERROR after body_timeout (the stream no longer waits forever)")
    func bodyStopsAfterResponse() throws {
        let pki = try TLSTestPKI()
        defer { pki.remove() }
        let gw = try Self.gateway(limits: "{idle_timeout: 60s, header_timeout: 60s, send_timeout: 60s, body_timeout: 1s}", pki: pki)
        defer { gw.stop() }
        let port = Self.port(gw, "h2c")
        guard
            let v = try leftovers([
                "body-after-response", "--path", "/api/purchase", "--port", String(port), "--leave", "stay", "--stay-seconds", "4",
            ])
        else { return }
        #expect(v["status"] as? Int == 401, "\(v)")
        let rst = v["rst"] as? [[String: Any]] ?? []
        #expect(rst.first?["code"] as? String == "NO_ERROR", "\(v)")
        let after = rst.first?["after"] as? Double ?? 0
        #expect(after >= 0.9 && after <= 3.0, "reset after \(after) s: \(v)")
        // The connection itself stays usable: no GOAWAY (its idle timeout is 60 s).
        #expect(v["goaway"] is NSNull, "\(v)")
        #expect(Self.accessLines(gw, count: 1) { $0.contains("\"status\":401") && $0.contains("\"error\":\"body_timeout\"") }.count == 1)
    }

    @Test("HTTP/1.1: a pipelining client that never reads, last request Connection: close — reset after send_timeout, not held forever")
    func http1NeverReads() throws {
        let pki = try TLSTestPKI()
        defer { pki.remove() }
        let gw = try Self.gateway(limits: "{idle_timeout: 60s, header_timeout: 60s, send_timeout: 1s, body_timeout: 60s}", pki: pki)
        defer { gw.stop() }
        let port = Self.port(gw, "h1")
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #expect(fd >= 0)
        defer { close(fd) }
        var small: Int32 = 4096
        _ = setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, socklen_t(MemoryLayout<Int32>.size))
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = in_port_t(UInt16(port).bigEndian)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &addr) { p in
            p.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
        #expect(connected)
        // Enough requests that their answers (≈ 2.2 KB each, ≈ 6.6 MB in all) fill every buffer on
        // the way; the last asks for the close.
        let one = Array("GET /x HTTP/1.1\r\nHost: a\r\nX-Pad: \(String(repeating: "p", count: 2000))\r\n\r\n".utf8)
        var all: [UInt8] = []
        for _ in 0..<3000 { all += one }
        all += Array("GET /x HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n".utf8)
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
        var sent = 0
        let sendUntil = Date().addingTimeInterval(10)
        while sent < all.count && Date() < sendUntil {
            let n = all[sent...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if n > 0 { sent += n } else { usleep(10_000) }
        }
        #expect(sent == all.count, "the gateway stopped reading after \(sent) of \(all.count) bytes")
        // Without the send timeout the socket waited for the client forever (its idle timer is not
        // armed while closing after the answer). With it: gone within about a second of the stall.
        let left = ServerSockets.waitUntilNone(pid: gw.process.processIdentifier, port: port, timeout: 6)
        #expect(left.isEmpty, "gatewayd still holds \(left)")
        #expect(gw.process.isRunning)
    }

    @Test("Drain closes what can no longer finish: SIGTERM with a stalled stream ends after send_timeout, not the whole drain deadline")
    func drainWithStalledStream() throws {
        guard let python = h2Python else { _ = try leftovers([]); return }
        let pki = try TLSTestPKI()
        defer { pki.remove() }
        let gw = try Self.gateway(
            limits: "{idle_timeout: 60s, header_timeout: 60s, send_timeout: 1s, body_timeout: 60s, drain_timeout: 30s}", pki: pki)
        defer { gw.stop() }
        let port = Self.port(gw, "h2c")
        // A client that stays (8 s) with its window shut, in the background.
        let client = Process()
        client.executableURL = URL(fileURLWithPath: python)
        client.arguments = [leftoversScript, "http2/6.9.1/1", "--port", String(port), "--leave", "stay", "--stay-seconds", "8"]
        client.standardOutput = FileHandle.nullDevice
        client.standardError = FileHandle.nullDevice
        try client.run()
        defer { if client.isRunning { client.terminate() } }
        // Wait until the stream holds its byte (the client's connection is open on the server).
        let opened = Date().addingTimeInterval(5)
        while ServerSockets.open(pid: gw.process.processIdentifier, port: port).isEmpty && Date() < opened { usleep(20_000) }
        usleep(200_000)
        let start = Date()
        gw.signal(SIGTERM)
        let status = gw.waitForExit(timeout: 20)
        let took = Date().timeIntervalSince(start)
        #expect(status == 0)
        #expect(took < 6, "the drain took \(took) s (drain_timeout 30 s, send_timeout 1 s)")
    }
}
