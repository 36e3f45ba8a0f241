import Foundation
import GatewayHTTP
import GatewayIO
import GatewayProxy
import GatewayTestSupport
import Glibc
import Testing

/// An upstream for tests: buffers each request (bounded) and answers with what it saw, as
/// `X-Seen-*` response fields plus the body's length; `/big/N` answers N bytes, chunked when asked.
final class EchoUpstreamRouter: RequestRouter {
    func route(_ head: HTTPRequestHead, path: String, peer: SocketAddress?, requestID: RequestID) -> RouteDecision {
        if path.hasPrefix("/big/"), let n = Int(path.dropFirst(5)) {
            var body = [UInt8](repeating: 0, count: n)
            for i in body.indices { body[i] = UInt8(truncatingIfNeeded: i &* 7) }
            return .respond(routeName: "big", LocalResponse(status: 200, body: body))
        }
        return .buffer(maxBody: 64 << 20, routeName: "echo") { req, done in
            var h = HTTPFields()
            h.append("X-Seen-Method", req.head.method)
            h.append("X-Seen-Target", req.head.target)
            h.append("X-Seen-Body-Length", String(req.body.count))
            h.append("X-Seen-Body-Sum", String(req.body.reduce(0) { ($0 &+ Int($1)) & 0xffffff }))
            for f in req.head.headers { h.append("X-Seen-" + f.name, f.value) }
            done(.respond(LocalResponse(status: 200, headers: h, body: Array("echo".utf8))))
        }
    }
    func exchangeDidFinish(_ record: ExchangeRecord) {}
}

final class ProxyRouter: RequestRouter {
    let pool: UpstreamPool
    let maxBody: Int
    nonisolated(unsafe) static var records: [ExchangeRecord] = []
    init(pool: UpstreamPool, maxBody: Int) {
        self.pool = pool
        self.maxBody = maxBody
    }
    func route(_ head: HTTPRequestHead, path: String, peer: SocketAddress?, requestID: RequestID) -> RouteDecision {
        .forward(Forward(routeName: "default", pool: pool, maxBody: maxBody))
    }
    func exchangeDidFinish(_ record: ExchangeRecord) {}
}

/// Upstream + proxy on loopback port 0, each on its own loop; stopped by `stop()`.
final class ProxyFixture: @unchecked Sendable {
    let upstreamLoop = EventLoop(index: 10)
    let proxyLoop = EventLoop(index: 11)
    let upstream: HTTPServer
    let proxy: HTTPServer
    var pool: UpstreamPool!

    init(
        upstreamAddress: SocketAddress? = nil, maxBody: Int = 64 << 20, limits: DownstreamLimits = DownstreamLimits(),
        responseTimeoutMillis: Int64 = 5000
    ) throws {
        Socket.ignoreSIGPIPE()
        upstream = try HTTPServer(address: try SocketAddress("127.0.0.1:0"), loops: [upstreamLoop], limits: limits) { _ in
            EchoUpstreamRouter()
        }
        let target = UpstreamTarget(
            name: "legacy", address: upstreamAddress ?? upstream.address, maxConnections: 4, connectTimeoutMillis: 1000,
            responseTimeoutMillis: responseTimeoutMillis)
        let box = PoolBox()
        proxy = try HTTPServer(address: try SocketAddress("127.0.0.1:0"), loops: [proxyLoop], limits: limits) { loop in
            let p = UpstreamPool(target: target, loop: loop)
            box.pool = p
            return ProxyRouter(pool: p, maxBody: maxBody)
        }
        pool = box.pool
    }

    final class PoolBox: @unchecked Sendable { var pool: UpstreamPool? }

    var port: UInt16 { proxy.address.port }
    var upstreamConnects: Int { proxyLoop.queue.sync { pool.connectsStarted } }

    func stop() {
        proxy.drain(deadlineMillis: 0)
        upstream.drain(deadlineMillis: 0)
        proxyLoop.queue.sync { pool.closeIdle() }
        proxyLoop.shutdownAndWait()
        upstreamLoop.shutdownAndWait()
    }
}

/// A raw client reading HTTP/1.1 responses off a blocking loopback socket.
final class RawClient {
    let socket: LoopbackClient
    var buffer: [UInt8] = []

    init(port: UInt16) throws { socket = try LoopbackClient(port: port) }
    init(socket: LoopbackClient) { self.socket = socket }

    func send(_ s: String) { socket.send(s) }
    func send(_ bytes: [UInt8]) { socket.send(bytes) }
    func isClosedByPeer() -> Bool { socket.isClosedByPeer() }

    private func fill() -> Bool {
        let chunk = socket.receiveSome()
        buffer += chunk
        return !chunk.isEmpty
    }

    struct Response {
        var head: HTTPResponseHead
        var body: [UInt8]
        var text: String { String(decoding: body, as: UTF8.self) }
    }

    /// Reads one response (to a request with `method`); nil if the connection closed first.
    /// Heads up to 1 MiB: the tests of large heads read them through here.
    static let parser = HTTP1Parser(limits: .init(maxHeaderBytes: 1 << 20))

    func readResponse(method: String = "GET") -> Response? {
        while true {
            if let (h, end) = try? buffer.withUnsafeBytes({ try Self.parser.parseResponseHead($0, requestMethod: method) }) {
                buffer.removeFirst(end)
                var body: [UInt8] = []
                switch h.framing {
                case .none:
                    break
                case .contentLength(let n):
                    while buffer.count < Int(n) { guard fill() else { return nil } }
                    body = Array(buffer[0..<Int(n)])
                    buffer.removeFirst(Int(n))
                case .chunked:
                    var d = ChunkedDecoder()
                    var pos = 0
                    loop: while true {
                        let e = try? buffer.withUnsafeBytes { try d.next($0, from: pos) }
                        switch e {
                        case .data(let r)?: body += buffer[r]; pos = r.upperBound
                        case .needMore(let c)?:
                            buffer.removeFirst(c); pos = 0
                            guard fill() else { return nil }
                        case .end(let e)?: buffer.removeFirst(e); break loop
                        case nil: return nil
                        }
                    }
                case .untilClose:
                    while fill() {}
                    body = buffer
                    buffer = []
                }
                return Response(head: h, body: body)
            }
            guard fill() else { return nil }
        }
    }

}

@Suite("Reverse proxy over loopback (in process)", .timeLimit(.minutes(3)), .serialized)
struct ProxyTests {
    @Test("GET is forwarded with forwarding fields set and hop-by-hop fields removed") func forwardingHeaders() throws {
        let f = try ProxyFixture()
        defer { f.stop() }
        let c = try RawClient(port: f.port)
        c.send(
            "GET /a/b?x=1 HTTP/1.1\r\nHost: shop.example\r\nConnection: keep-alive, X-Secret\r\nX-Secret: s\r\nKeep-Alive: 5\r\nX-Forwarded-For: 10.0.0.1\r\nX-Forwarded-Proto: https\r\nTE: trailers, gzip\r\nX-App: 1\r\n\r\n"
        )
        let r = try #require(c.readResponse())
        #expect(r.head.status == 200)
        #expect(r.text == "echo")
        let h = r.head.headers
        #expect(h["X-Seen-Target"] == "/a/b?x=1")
        // The peer is no trusted proxy: its X-Forwarded-For and -Proto are replaced, not kept.
        #expect(h["X-Seen-X-Forwarded-For"] == "127.0.0.1")
        #expect(h["X-Seen-X-Forwarded-Proto"] == "http")
        #expect(h["X-Seen-X-Forwarded-Host"] == "shop.example")
        #expect(h["X-Seen-Host"] == "shop.example")
        #expect(h["X-Seen-Via"] == "1.1 attest-gateway")
        #expect(h["X-Seen-TE"] == "trailers")
        #expect(h["X-Seen-X-App"] == "1")
        #expect(h["X-Seen-X-Secret"] == nil)
        #expect(h["X-Seen-Keep-Alive"] == nil)
        #expect(h["X-Seen-Connection"] == nil)
        #expect(h["Via"] == "1.1 attest-gateway")
    }

    @Test("keep-alive downstream and upstream: ten requests, one upstream connection") func keepAlive() throws {
        let f = try ProxyFixture()
        defer { f.stop() }
        let c = try RawClient(port: f.port)
        for i in 0..<10 {
            c.send("GET /\(i) HTTP/1.1\r\nHost: x\r\n\r\n")
            let r = try #require(c.readResponse())
            #expect(r.head.headers["X-Seen-Target"] == "/\(i)")
        }
        #expect(f.upstreamConnects == 1)
    }

    @Test("pipelined requests are answered in order") func pipelining() throws {
        let f = try ProxyFixture()
        defer { f.stop() }
        let c = try RawClient(port: f.port)
        c.send((0..<5).map { "POST /p\($0) HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nab" }.joined())
        for i in 0..<5 {
            let r = try #require(c.readResponse())
            #expect(r.head.headers["X-Seen-Target"] == "/p\(i)")
            #expect(r.head.headers["X-Seen-Body-Length"] == "2")
        }
    }

    @Test("bodies: Content-Length and chunked requests, chunk re-encoding upstream") func bodies() throws {
        let f = try ProxyFixture()
        defer { f.stop() }
        let c = try RawClient(port: f.port)
        let body = [UInt8](repeating: 0x41, count: 300_000)
        c.send(Array("PUT /cl HTTP/1.1\r\nHost: x\r\nContent-Length: \(body.count)\r\n\r\n".utf8) + body)
        let r1 = try #require(c.readResponse())
        #expect(r1.head.headers["X-Seen-Body-Length"] == String(body.count))
        #expect(r1.head.headers["X-Seen-Content-Length"] == String(body.count))
        c.send(
            "POST /ch HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=x\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: 1\r\n\r\n"
        )
        let r2 = try #require(c.readResponse())
        #expect(r2.head.headers["X-Seen-Body-Length"] == "11")
        #expect(r2.head.headers["X-Seen-Transfer-Encoding"] == "chunked")
    }

    @Test("responses: large bodies stream through; HEAD has none") func responses() throws {
        let f = try ProxyFixture()
        defer { f.stop() }
        let c = try RawClient(port: f.port)
        c.send("GET /big/5000000 HTTP/1.1\r\nHost: x\r\n\r\n")
        let r = try #require(c.readResponse())
        #expect(r.body.count == 5_000_000)
        #expect(r.body[4_999_999] == UInt8(truncatingIfNeeded: 4_999_999 &* 7))
        c.send("HEAD /big/10 HTTP/1.1\r\nHost: x\r\n\r\n")
        let h = try #require(c.readResponse(method: "HEAD"))
        #expect(h.head.headers["Content-Length"] == "10")
        #expect(h.body.isEmpty)
    }

    @Test("HTTP/1.0 client: answered and closed") func http10() throws {
        let f = try ProxyFixture()
        defer { f.stop() }
        let c = try RawClient(port: f.port)
        c.send("GET /old HTTP/1.0\r\n\r\n")
        let r = try #require(c.readResponse())
        #expect(r.head.status == 200)
        #expect(c.isClosedByPeer())
    }

    @Test("Expect: 100-continue gets an interim answer before the body is sent") func expectContinue() throws {
        let f = try ProxyFixture()
        defer { f.stop() }
        let c = try RawClient(port: f.port)
        c.send("POST /e HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n")
        let interim = try #require(c.readResponse())
        #expect(interim.head.status == 100)
        c.send("body")
        let r = try #require(c.readResponse())
        #expect(r.head.status == 200)
        #expect(r.head.headers["X-Seen-Body-Length"] == "4")
        #expect(r.head.headers["X-Seen-Expect"] == nil)
    }

    @Test("limits: a body over max_body is 413 before it is read; smuggling attempts are 400 and closed") func limitsAndSmuggling() throws {
        let f = try ProxyFixture(maxBody: 1000)
        defer { f.stop() }
        let c1 = try RawClient(port: f.port)
        c1.send("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n")
        let r1 = try #require(c1.readResponse())
        #expect(r1.head.status == 413)
        #expect(r1.text.contains("\"error\":\"body_too_large\""))
        #expect(c1.isClosedByPeer())
        let c2 = try RawClient(port: f.port)
        c2.send(
            "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n800\r\n" + String(repeating: "a", count: 0x800)
                + "\r\n0\r\n\r\n")
        #expect(try #require(c2.readResponse()).head.status == 413)
        let c3 = try RawClient(port: f.port)
        c3.send(
            "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"
        )
        let r3 = try #require(c3.readResponse())
        #expect(r3.head.status == 400)
        #expect(c3.isClosedByPeer())
        let c4 = try RawClient(port: f.port)
        c4.send("GET /api%2Fpurchase HTTP/1.1\r\nHost: x\r\n\r\n")
        #expect(try #require(c4.readResponse()).head.status == 400)
    }

    @Test("heads larger than the loop's 64 KiB head buffer go through whole, both ways (max_header_bytes raised)")
    func headsBeyondScratch() throws {
        var limits = DownstreamLimits()
        limits.parser.maxHeaderBytes = 512 * 1024
        let f = try ProxyFixture(limits: limits)
        defer { f.stop() }
        let big = String(repeating: "b", count: 100_000)
        let c = try RawClient(port: f.port)
        c.send("GET /big-head HTTP/1.1\r\nHost: x\r\nX-Big: \(big)\r\n\r\n")
        let r = try #require(c.readResponse())
        #expect(r.head.status == 200)
        #expect(r.head.headers["X-Seen-X-Big"] == big)
        #expect(r.head.headers["X-Seen-X-Forwarded-For"] == "127.0.0.1")
        #expect(r.text == "echo")
    }

    @Test("a dead upstream is 502 with a JSON error") func deadUpstream() throws {
        let probe = try Socket.listen(try SocketAddress("127.0.0.1:0"), reusePort: false)
        let deadAddress = Socket.localAddress(probe)!
        Socket.close(probe)
        let f = try ProxyFixture(upstreamAddress: deadAddress)
        defer { f.stop() }
        let c = try RawClient(port: f.port)
        c.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        let r = try #require(c.readResponse())
        #expect(r.head.status == 502)
        #expect(r.head.headers["Content-Type"] == "application/json")
        let id = try #require(r.head.headers["X-Request-Id"])
        #expect(id.count == 15)
        #expect(r.text == "{\"error\":\"upstream_unavailable\",\"requestId\":\"\(id)\"}\n")
    }

    @Test("a slow upstream is 504 after the response timeout") func slowUpstream() throws {
        // An upstream that accepts and never answers.
        let silent = try Socket.listen(try SocketAddress("127.0.0.1:0"), reusePort: false)
        defer { Socket.close(silent) }
        let f = try ProxyFixture(upstreamAddress: Socket.localAddress(silent)!, responseTimeoutMillis: 300)
        defer { f.stop() }
        let c = try RawClient(port: f.port)
        let start = Date()
        c.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        let r = try #require(c.readResponse())
        #expect(r.head.status == 504)
        #expect(r.text.contains("upstream_timeout"))
        #expect(Date().timeIntervalSince(start) < 3)
    }

    @Test("header timeout: a client that never finishes its head gets 408") func headerTimeout() throws {
        let f = try ProxyFixture(limits: DownstreamLimits(headerTimeoutMillis: 300))
        defer { f.stop() }
        let c = try RawClient(port: f.port)
        c.send("GET / HTTP/1.1\r\nHost: x\r\n")
        let r = try #require(c.readResponse())
        #expect(r.head.status == 408)
        #expect(c.isClosedByPeer())
    }

    @Test("graceful drain: an idle connection is closed, a busy one finishes its response") func drain() throws {
        let f = try ProxyFixture()
        defer { f.stop() }
        let idle = try RawClient(port: f.port)
        idle.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        _ = try #require(idle.readResponse())
        let cut = f.proxy.drain(deadlineMillis: 2000)
        #expect(cut == 0)
        #expect(idle.isClosedByPeer())
        #expect(throws: (any Error).self) {
            _ = try RawClient(port: f.port).readResponse().map { $0 } ?? { throw POSIXError(.ECONNREFUSED) }()
        }
    }
}
