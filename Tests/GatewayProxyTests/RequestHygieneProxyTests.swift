import Foundation
import GatewayHTTP
import GatewayIO
import GatewayProxy
import GatewayTestSupport
import Glibc
import Testing

/// Forwards everything to one pool, with `responseHeaders` (which take the response through the
/// string path) or without (the byte path).
final class PlainForwardRouter: RequestRouter, @unchecked Sendable {
    let pool: UpstreamPool
    let responseHeaders: HTTPFields
    init(pool: UpstreamPool, responseHeaders: HTTPFields) {
        self.pool = pool
        self.responseHeaders = responseHeaders
    }
    func route(_ head: HTTPRequestHead, path: String, peer: SocketAddress?, requestID: RequestID) -> RouteDecision {
        .forward(Forward(routeName: "default", pool: pool, maxBody: 1 << 20, responseHeaders: responseHeaders))
    }
    func exchangeDidFinish(_ record: ExchangeRecord) {}
}

/// A proxy serving HTTP/1.1 and h2c in front of the echo upstream (or `upstreamAddress`).
final class HygieneProxyFixture: @unchecked Sendable {
    let upstreamLoop = EventLoop(index: 30)
    let proxyLoop = EventLoop(index: 31)
    let upstream: HTTPServer
    let proxy: HTTPServer
    var pool: UpstreamPool!

    init(upstreamAddress: SocketAddress? = nil, dropFoldableNames: Bool = true, responseHeaders: HTTPFields = HTTPFields()) throws {
        Socket.ignoreSIGPIPE()
        upstream = try HTTPServer(address: try SocketAddress("127.0.0.1:0"), loops: [upstreamLoop], limits: DownstreamLimits()) { _ in
            EchoUpstreamRouter()
        }
        let target = UpstreamTarget(
            name: "legacy", address: upstreamAddress ?? upstream.address, maxConnections: 4, connectTimeoutMillis: 1000,
            responseTimeoutMillis: 5000)
        var limits = DownstreamLimits()
        limits.dropFoldableNames = dropFoldableNames
        let box = ProxyFixture.PoolBox()
        proxy = try HTTPServer(
            address: try SocketAddress("127.0.0.1:0"), loops: [proxyLoop], limits: limits,
            protocols: [.http1, .h2c]
        ) { loop in
            let p = UpstreamPool(target: target, loop: loop)
            box.pool = p
            return PlainForwardRouter(pool: p, responseHeaders: responseHeaders)
        }
        pool = box.pool
    }

    var port: UInt16 { proxy.address.port }
    var upstreamConnects: Int { proxyLoop.queue.sync { pool.connectsStarted } }
    func url(_ path: String) -> String { "http://127.0.0.1:\(port)\(path)" }

    func stop() {
        proxy.drain(deadlineMillis: 0)
        upstream.drain(deadlineMillis: 0)
        proxyLoop.queue.sync { pool.closeIdle() }
        proxyLoop.shutdownAndWait()
        upstreamLoop.shutdownAndWait()
    }
}

/// curl over h2c with the raw response head kept (duplicate fields included): status and field lines.
func h2Raw(_ args: [String]) throws -> (status: Int, lines: [String], body: String) {
    let r = try runProcess(
        URL(fileURLWithPath: curlPath), ["-sS", "-i", "--max-time", "20", "--http2-prior-knowledge"] + args, timeout: 30)
    guard let split = r.stdout.range(of: "\r\n\r\n") else { return (0, ["curl exit \(r.status): \(r.stderr)"], "") }
    var lines = r.stdout[..<split.lowerBound].components(separatedBy: "\r\n")
    let status = lines.removeFirst().split(separator: " ")
    return (status.count > 1 ? Int(status[1]) ?? 0 : 0, lines, String(r.stdout[split.upperBound...]))
}

@Suite(
    "Request hygiene through the proxy (in process): syntax refused, absolute-form, owned and underscore fields",
    .timeLimit(.minutes(3)), .serialized)
struct RequestHygieneProxyTests {
    @Test("HTTP/1.1: a lowercase method, an invalid Host, GET * and userinfo are 400 with their own codes; nothing goes upstream")
    func http1Refusals() throws {
        let f = try HygieneProxyFixture()
        defer { f.stop() }
        let cases: [(String, String)] = [
            ("post /api/purchase HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}", "bad_method"),
            ("GET / HTTP/1.1\r\nHost: h/evil@x\r\n\r\n", "bad_host"),
            ("GET / HTTP/1.1\r\nHost: shop.example.com:http\r\n\r\n", "bad_host"),
            ("GET / HTTP/1.0\r\nHost: a\r\nHost: shop.example.com\r\n\r\n", "bad_host"),
            ("GET * HTTP/1.1\r\nHost: x\r\n\r\n", "bad_target"),
            ("POST http://user@shop.example.com/api/purchase HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", "bad_target"),
        ]
        for (request, code) in cases {
            let c = try RawClient(port: f.port)
            c.send(request)
            let r = try #require(c.readResponse())
            #expect(r.head.status == 400, "\(request.debugDescription)")
            #expect(r.text.contains("\"error\":\"\(code)\""), "\(request.debugDescription): \(r.text)")
            #expect(c.isClosedByPeer())
        }
        #expect(f.upstreamConnects == 0)
    }

    @Test("HTTP/1.1 absolute-form: the target's authority replaces Host, the upstream gets origin-form")
    func absoluteForm() throws {
        let f = try HygieneProxyFixture()
        defer { f.stop() }
        let c = try RawClient(port: f.port)
        c.send("POST http://Shop.Example:80/api/purchase?x=1 HTTP/1.1\r\nHost: other.example\r\nContent-Length: 2\r\n\r\nab")
        let r = try #require(c.readResponse())
        #expect(r.head.status == 200)
        #expect(r.head.headers["X-Seen-Target"] == "/api/purchase?x=1")
        #expect(r.head.headers.values("X-Seen-Host") == ["Shop.Example:80"])
        #expect(r.head.headers["X-Seen-X-Forwarded-Host"] == "Shop.Example:80")
        c.send("GET https://shop.example?q HTTP/1.1\r\nHost: shop.example\r\n\r\n")
        let empty = try #require(c.readResponse())
        #expect(empty.head.headers["X-Seen-Target"] == "/?q")
        let old = try RawClient(port: f.port)
        old.send("GET http://legacy.example/x HTTP/1.0\r\n\r\n")
        let r10 = try #require(old.readResponse())
        #expect(r10.head.headers["X-Seen-Target"] == "/x")
        #expect(r10.head.headers.values("X-Seen-Host") == ["legacy.example"])
    }

    static let forged: [(String, String)] = [
        ("X_App_Attest_Verified_Key_Id", "forged"), ("X-App-Attest-Verified-Key-Id", "forged"), ("X-HTTP-Method-Override", "POST"),
        ("X-HTTP-Method", "POST"), ("X-Method-Override", "POST"), ("X-Original-URL", "/api/purchase"),
        ("X-Rewrite-URL", "/api/purchase"), ("X-Forwarded-Port", "443"), ("X-Forwarded_Prefix", "/x"), ("X-Request-Id", "mine one"),
        ("X-App-Attest-Risk-Metric", "1"), ("X-Device-Check-Bits", "1"), ("X_Custom", "c"), ("X-Kept", "k"),
        ("X.App.Attest.Verified.Key.Id", "forged"), ("X~HTTP~Method~Override", "POST"),
    ]

    static func seenNames(_ headers: [String]) -> [String] {
        headers.compactMap { n in n.lowercased().hasPrefix("x-seen-") ? String(n.dropFirst(7)).lowercased() : nil }
    }

    @Test("HTTP/1.1 and h2c: gateway-owned fields never reach the upstream; underscore names only with allow", arguments: [true, false])
    func ownedAndUnderscore(drop: Bool) throws {
        let f = try HygieneProxyFixture(dropFoldableNames: drop)
        defer { f.stop() }
        let c = try RawClient(port: f.port)
        c.send("GET /hello HTTP/1.1\r\nHost: x\r\n" + Self.forged.map { "\($0.0): \($0.1)\r\n" }.joined() + "\r\n")
        let r = try #require(c.readResponse())
        let h1 = Self.seenNames(r.head.headers.map(\.name))
        guard requireCurl() else { return }
        let h2 = try h2Raw(Self.forged.flatMap { ["-H", "\($0.0): \($0.1)"] } + [f.url("/hello")])
        let h2Names = Self.seenNames(h2.lines.compactMap { $0.split(separator: ":").first.map(String.init) })
        for (protocolName, names) in [("http1", h1), ("h2", h2Names)] {
            #expect(names.contains("x-kept"), "\(protocolName): \(names)")
            #expect(names.contains("x_custom") == !drop, "\(protocolName): \(names)")
            for forbidden in [
                "x_app_attest_verified_key_id", "x-app-attest-verified-key-id", "x-http-method-override", "x-http-method",
                "x-method-override", "x-original-url", "x-rewrite-url", "x-forwarded-port", "x-forwarded_prefix",
                "x-app-attest-risk-metric", "x-device-check-bits", "x.app.attest.verified.key.id",
                "x~http~method~override",
            ] {
                #expect(!names.contains(forbidden), "\(protocolName): \(forbidden) reached the upstream")
            }
            // An invalid client id ("mine one": a space) is replaced: the upstream gets the gateway's one id.
            #expect(names.filter { $0 == "x-request-id" }.count == 1, "\(protocolName): \(names)")
        }
        #expect(r.head.headers["X-Seen-X-Request-Id"].map { $0.count == 15 && $0 != "mine one" } == true, "\(r.head.headers)")
        #expect(
            h2.lines.contains { $0.lowercased().hasPrefix("x-seen-x-request-id: ") && !$0.hasSuffix("mine one") && $0.count == 21 + 15 },
            "\(h2.lines)")
    }

    @Test("h2c: a lowercase :method and an invalid :authority are 400 with their own codes; nothing goes upstream")
    func http2Refusals() throws {
        guard requireCurl() else { return }
        let f = try HygieneProxyFixture()
        defer { f.stop() }
        let method = try h2Raw(["-X", "post", "--data-binary", "{}", f.url("/api/purchase")])
        #expect(method.status == 400 && method.body.contains("\"bad_method\""), "\(method)")
        let host = try h2Raw(["-H", "Host: h@evil", f.url("/hello")])
        #expect(host.status == 400 && host.body.contains("\"bad_host\""), "\(host)")
        let port = try h2Raw(["-H", "Host: shop.example.com:x", f.url("/hello")])
        #expect(port.status == 400 && port.body.contains("\"bad_host\""), "\(port)")
        #expect(f.upstreamConnects == 0)
    }

    @Test(
        "a repeated upstream Content-Length, or a list, reaches the client once; HTTP/1.1 and h2c, byte and string paths",
        arguments: [
            "Content-Length: 2\r\nContent-Length: 2\r\n", "Content-Length: 2, 2\r\n", "Content-Length: 2\r\ncontent-length: 02\r\n",
        ])
    func duplicateContentLength(fields: String) throws {
        let upstream = try ScriptedServer { c in
            while c.readRequest() != nil { c.write("HTTP/1.1 200 OK\r\nX-A: 1\r\n\(fields)X-B: 2\r\n\r\nok") }
        }
        defer { upstream.stop() }
        for extra in [HTTPFields(), HTTPFields([("X-Route", "r")])] {
            let f = try HygieneProxyFixture(upstreamAddress: try SocketAddress("127.0.0.1:\(upstream.port)"), responseHeaders: extra)
            defer { f.stop() }
            let c = try RawClient(port: f.port)
            c.send("GET /x HTTP/1.1\r\nHost: x\r\n\r\n")
            let r = try #require(c.readResponse())
            #expect(r.head.status == 200 && r.text == "ok")
            #expect(r.head.headers.values("Content-Length") == ["2"], "\(r.head.headers)")
            guard requireCurl() else { continue }
            let h2 = try h2Raw([f.url("/x")])
            #expect(h2.status == 200 && h2.body == "ok", "\(h2)")
            #expect(h2.lines.filter { $0.lowercased().hasPrefix("content-length:") } == ["content-length: 2"], "\(h2.lines)")
        }
    }
}
