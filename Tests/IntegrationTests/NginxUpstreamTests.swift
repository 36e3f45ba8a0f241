import Foundation
import GatewayTestSupport
import Glibc
import Testing

/// `gatewayd run` in front of a real nginx: the client is a raw HTTP/1.1 socket (keep-alive and
/// pipelining need one), nginx's `/echo` shows what the upstream received.
final class NginxGateway: @unchecked Sendable {
    let nginx: NginxProcess
    let silent: ScriptedServer
    let gateway: GatewayProcess

    init(zeroFileBytes: Int64 = 0, maxBody: String = "1MiB") throws {
        nginx = try NginxProcess(zeroFileBytes: zeroFileBytes)
        // Accepts, reads the request and never answers (until the gateway gives up and closes).
        silent = try ScriptedServer { c in
            _ = c.readRequest()
            _ = c.readRequest()
        }
        let deadPort = try freeLoopbackPort()
        do {
            gateway = try GatewayProcess(
                config: """
                    workers: 1
                    listeners:
                      - {name: public, address: 127.0.0.1:0, protocols: [http1, h2c]}
                    admin: {address: 127.0.0.1:0}
                    limits: {max_request_line: 1KiB, max_header_bytes: 4KiB, max_header_count: 30, max_body: \(maxBody), drain_timeout: 2s}
                    upstreams:
                      - {name: nginx, url: "http://127.0.0.1:\(nginx.port)", max_connections: 8, response_timeout: 20s}
                      - {name: down, url: "http://127.0.0.1:\(deadPort)", connect_timeout: 2s}
                      - {name: silent, url: "http://127.0.0.1:\(silent.port)", response_timeout: 1s}
                    routes:
                      - {name: small, match: {path_prefix: /small}, upstream: nginx, max_body: 16}
                      - {name: down, match: {path_prefix: /down}, upstream: down}
                      - {name: silent, match: {path_prefix: /silent}, upstream: silent}
                      - {name: banner, match: {path_prefix: /banner}, upstream: nginx, pass_server_header: true}
                      - {name: nginx, match: {path_prefix: /}, upstream: nginx}
                    """)
        } catch {
            silent.stop()
            nginx.stop()
            throw error
        }
    }

    var port: UInt16 { UInt16(gateway.url("public", "").split(separator: ":").last!)! }

    func connect() throws -> HTTPTestConnection { try HTTPTestConnection(port: port) }

    func stop() {
        gateway.stop()
        silent.stop()
        nginx.stop()
    }
}

@Suite(
    "gatewayd → nginx (real upstream, loopback)", .serialized, .timeLimit(.minutes(2)),
    .enabled(
        if: NginxProcess.testsEnabled,
        "nginx is not installed (scripts/install-deps.sh installs it); skipped outside CI, fails under CI=true"))
struct NginxUpstreamTests {
    @Test("the upstream's Server banner is left out (HTTP/1.1 and h2c), passed on a route with pass_server_header") func serverBanner()
        throws
    {
        let f = try NginxGateway()
        defer { f.stop() }
        let c = try f.connect()
        let hidden = try c.request("GET /echo/x HTTP/1.1\r\nHost: example.test\r\n\r\n")
        #expect(hidden.status == 200)
        #expect(hidden.header("Server") == nil, "\(hidden.headers)")
        #expect(hidden.header("Via") == "1.1 attest-gateway")
        let passed = try c.request("GET /banner/echo/x HTTP/1.1\r\nHost: example.test\r\n\r\n")
        #expect(passed.header("Server")?.hasPrefix("nginx") == true, "\(passed.headers)")
        // HTTP/2 (h2c, prior knowledge) through curl: the same fields.
        let url = f.gateway.url("public", "")
        let h2Hidden = try runProcess(
            URL(fileURLWithPath: "/usr/bin/curl"), ["-s", "-D", "-", "-o", "/dev/null", "--http2-prior-knowledge", url + "/echo/x"])
        #expect(h2Hidden.stdout.hasPrefix("HTTP/2 200"), "\(h2Hidden.stdout)")
        #expect(!h2Hidden.stdout.lowercased().contains("\nserver:"), "\(h2Hidden.stdout)")
        let h2Passed = try runProcess(
            URL(fileURLWithPath: "/usr/bin/curl"), ["-s", "-D", "-", "-o", "/dev/null", "--http2-prior-knowledge", url + "/banner/echo/x"])
        #expect(h2Passed.stdout.lowercased().contains("\nserver: nginx"), "\(h2Passed.stdout)")
    }

    @Test("keep-alive: ten requests on one client connection use one upstream connection") func keepAlive() throws {
        let f = try NginxGateway()
        defer { f.stop() }
        let c = try f.connect()
        var upstreamConnections: Set<String> = []
        for i in 1...10 {
            let r = try c.request("GET /echo/\(i) HTTP/1.1\r\nHost: example.test\r\n\r\n")
            #expect(r.status == 200)
            let e = echoFields(r.text)
            #expect(e["uri"] == "/echo/\(i)")
            #expect(e["conn_requests"] == String(i), "nginx counted \(e["conn_requests"] ?? "?") requests on the upstream connection")
            upstreamConnections.insert(e["conn"] ?? "?")
        }
        #expect(upstreamConnections.count == 1)
    }

    @Test("pipelining: requests sent in one write are answered in order, HEAD included") func pipelining() throws {
        let f = try NginxGateway()
        defer { f.stop() }
        let c = try f.connect()
        c.send(
            "GET /echo/first HTTP/1.1\r\nHost: x\r\n\r\n" + "HEAD /fixed HTTP/1.1\r\nHost: x\r\n\r\n"
                + "GET /echo/third HTTP/1.1\r\nHost: x\r\n\r\n" + "GET /fixed HTTP/1.1\r\nHost: x\r\n\r\n")
        let r1 = try c.readResponse()
        let r2 = try c.readResponse(method: "HEAD")
        let r3 = try c.readResponse()
        let r4 = try c.readResponse()
        #expect(echoFields(r1.text)["uri"] == "/echo/first")
        #expect(r2.status == 200 && r2.body.isEmpty && r2.header("Content-Length") == "17")
        #expect(echoFields(r3.text)["uri"] == "/echo/third")
        #expect(r4.text == "hello from nginx\n")
    }

    @Test("chunked both ways: a chunked upload reaches nginx whole; nginx's chunked answer is re-chunked") func chunked() throws {
        let f = try NginxGateway()
        defer { f.stop() }
        let c = try f.connect()
        let chunks = (1...40).map { [UInt8](repeating: UInt8(64 + $0), count: $0 * 1000) }
        let total = chunks.reduce(0) { $0 + $1.count }
        c.send("POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        c.send(chunkedBody(chunks))
        let up = try c.readResponse()
        #expect(up.status == 200)
        #expect(up.text == "received=\(total)\n")
        // Content-Length upload on the same connection.
        let body = [UInt8](repeating: 120, count: 70_000)
        c.send("POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: \(body.count)\r\n\r\n")
        c.send(body)
        #expect(try c.readResponse().text == "received=70000\n")
        let down = try c.request("GET /chunked.html HTTP/1.1\r\nHost: x\r\n\r\n")
        #expect(down.status == 200)
        #expect(down.wasChunked)
        #expect(down.text == "start GET\n\(NginxProcess.chunkedText)\nend\n")
        #expect(try c.request("GET /fixed HTTP/1.1\r\nHost: x\r\n\r\n").text == "hello from nginx\n")
    }

    @Test("a large static file streams through intact") func largeFile() throws {
        let f = try NginxGateway()
        defer { f.stop() }
        let c = try f.connect()
        let r = try c.request("GET /large.bin HTTP/1.1\r\nHost: x\r\n\r\n")
        #expect(r.status == 200)
        #expect(r.body.count == NginxProcess.largeBytes)
        let firstBad = r.body.indices.first { r.body[$0] != NginxProcess.largePattern($0) }
        #expect(firstBad == nil, "body differs at byte \(firstBad ?? -1)")
    }

    @Test("HEAD, 204 and 304 carry no body, and the connection stays in step") func bodiless() throws {
        let f = try NginxGateway()
        defer { f.stop() }
        let c = try f.connect()
        let head = try c.request("HEAD /large.bin HTTP/1.1\r\nHost: x\r\n\r\n")
        #expect(head.status == 200 && head.body.isEmpty)
        #expect(head.header("Content-Length") == String(NginxProcess.largeBytes))
        let noContent = try c.request("GET /nocontent HTTP/1.1\r\nHost: x\r\n\r\n")
        #expect(noContent.status == 204 && noContent.body.isEmpty)
        let file = try c.request("GET /static.txt HTTP/1.1\r\nHost: x\r\n\r\n")
        #expect(file.text == "static file\n")
        let etag = try #require(file.header("ETag"))
        let notModified = try c.request("GET /static.txt HTTP/1.1\r\nHost: x\r\nIf-None-Match: \(etag)\r\n\r\n")
        #expect(notModified.status == 304 && notModified.body.isEmpty)
        // A stray body byte from any of the above would break this response's framing.
        let after = try c.request("GET /fixed HTTP/1.1\r\nHost: x\r\n\r\n")
        #expect(after.status == 200 && after.text == "hello from nginx\n")
    }

    @Test("the upstream sees X-Forwarded-For/Proto/Host and Via, not hop-by-hop fields; responses lose theirs") func forwarding() throws {
        let f = try NginxGateway()
        defer { f.stop() }
        let c = try f.connect()
        let r = try c.request(
            "GET /echo/fwd?q=1 HTTP/1.1\r\nHost: example.test:8443\r\nX-Forwarded-For: 203.0.113.7\r\n"
                + "X-Forwarded-Proto: https\r\nX-Forwarded-Host: spoofed.example\r\nConnection: keep-alive, X-Secret\r\n"
                + "X-Secret: s3cret\r\nKeep-Alive: timeout=1\r\nProxy-Authorization: Basic Zm9vOmJhcg==\r\nTE: gzip\r\n"
                + "X-Custom: kept\r\n\r\n")
        #expect(r.status == 200)
        let e = echoFields(r.text)
        #expect(e["uri"] == "/echo/fwd?q=1")
        #expect(e["host"] == "example.test:8443")
        // The client is no trusted proxy: its X-Forwarded-For, -Proto and -Host are replaced.
        #expect(e["xff"] == "127.0.0.1")
        #expect(e["xfproto"] == "http")
        #expect(e["xfhost"] == "example.test:8443")
        #expect(e["via"] == "1.1 attest-gateway")
        #expect(e["secret"] == "")
        #expect(e["keepalive"] == "")
        #expect(e["proxyauth"] == "")
        #expect(e["te"] == "")
        #expect(e["custom"] == "kept")
        #expect(e["protocol"] == "HTTP/1.1")
        #expect(!(e["connection"] ?? "").lowercased().contains("x-secret"))
        // nginx answered with Keep-Alive and Proxy-Connection (hop-by-hop): the client gets neither.
        #expect(r.header("X-Upstream") == "nginx")
        #expect(r.header("Proxy-Connection") == nil)
        #expect(r.header("Keep-Alive") == nil)
        #expect(r.values("Via") == ["1.1 attest-gateway"])
    }

    @Test("upstream down → 502 JSON; upstream silent → 504 JSON; nginx still served after both") func upstreamFailures() throws {
        let f = try NginxGateway()
        defer { f.stop() }
        let c = try f.connect()
        let down = try c.request("GET /down HTTP/1.1\r\nHost: x\r\n\r\n")
        #expect(down.status == 502)
        #expect(down.header("Content-Type") == "application/json")
        #expect(down.json?["error"] as? String == "upstream_unavailable")
        let c2 = try f.connect()
        let slow = try c2.request("GET /silent HTTP/1.1\r\nHost: x\r\n\r\n")
        #expect(slow.status == 504)
        #expect(slow.header("Content-Type") == "application/json")
        #expect(slow.json?["error"] as? String == "upstream_timeout")
        #expect(try f.connect().request("GET /fixed HTTP/1.1\r\nHost: x\r\n\r\n").status == 200)
    }

    @Test("limits: body over max_body 413, long request line 414, too many or too large fields 431") func limits() throws {
        let f = try NginxGateway()
        defer { f.stop() }
        let tooBig = try f.connect().request(
            "POST /small/x HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n" + String(repeating: "b", count: 100))
        #expect(tooBig.status == 413)
        #expect(tooBig.json?["error"] as? String == "body_too_large")
        let okSmall = try f.connect().request(
            "POST /small/x HTTP/1.1\r\nHost: x\r\nContent-Length: 16\r\n\r\n" + String(repeating: "b", count: 16))
        #expect(okSmall.status != 413)
        let longLine = try f.connect().request("GET /echo/\(String(repeating: "a", count: 1100)) HTTP/1.1\r\nHost: x\r\n\r\n")
        #expect(longLine.status == 414)
        let manyFields = (0..<40).map { "X-F\($0): v\r\n" }.joined()
        let many = try f.connect().request("GET /fixed HTTP/1.1\r\nHost: x\r\n\(manyFields)\r\n")
        #expect(many.status == 431)
        let large = try f.connect().request("GET /fixed HTTP/1.1\r\nHost: x\r\nX-Big: \(String(repeating: "v", count: 5000))\r\n\r\n")
        #expect(large.status == 431)
        // Each refusal closed its own connection only.
        #expect(try f.connect().request("GET /fixed HTTP/1.1\r\nHost: x\r\n\r\n").status == 200)
    }
}
