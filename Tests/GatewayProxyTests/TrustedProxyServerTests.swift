import Foundation
import GatewayCrypto
import GatewayHTTP
@_spi(Testing) import GatewayIO
import GatewayProxy
import GatewayTestSupport
import Glibc
import Synchronization
import Testing

/// Forwards everything to the echo upstream, except `/whoami`, answered locally from the buffered
/// request (its client, and the X-Forwarded-For the demo upstream would see); records each route
/// call's client and each exchange.
final class ClientRecordingRouter: RequestRouter, @unchecked Sendable {
    let pool: UpstreamPool
    let clients = Mutex<[String]>([])
    /// Each finished exchange's client as the access line shows it, and its protocol.
    let peers = Mutex<[String]>([])
    let protocols = Mutex<[String]>([])
    init(pool: UpstreamPool) { self.pool = pool }
    func route(_ head: HTTPRequestHead, path: String, peer: SocketAddress?, requestID: RequestID) -> RouteDecision {
        clients.withLock { $0.append(peer?.host ?? "none") }
        if path == "/whoami" {
            return .buffer(maxBody: 1024, routeName: "whoami") { request, done in
                let seen = request.upstreamFields(edit: HeaderEdit(), upstream: "u")
                let text = "client=\(request.peer?.host ?? "none")\nxff=\(seen["X-Forwarded-For"] ?? "")\n"
                done(.respond(LocalResponse(status: 200, body: Array(text.utf8))))
            }
        }
        return .forward(Forward(routeName: "default", pool: pool, maxBody: 1 << 20))
    }
    func exchangeDidFinish(_ record: ExchangeRecord) {
        let peer = record.peer
        let proto = record.protocolName
        peers.withLock { $0.append(peer) }
        protocols.withLock { $0.append(proto) }
    }
}

/// The echo upstream + a proxy whose listener trusts `trusted` (and reads PROXY headers with
/// `proxyProtocol`), each on its own loop.
final class TrustedProxyFixture: @unchecked Sendable {
    let upstreamLoop = EventLoop(index: 30)
    let proxyLoop = EventLoop(index: 31)
    let upstream: HTTPServer
    let proxy: HTTPServer
    let router: ClientRecordingRouter
    let failures = Mutex<[String]>([])

    init(
        trusted: [(String, Int)], proxyProtocol: Bool = false, protocols: ServedProtocols = .http1, tls: TLSServerContext? = nil,
        headerTimeoutMillis: Int64 = 10_000
    ) throws {
        Socket.ignoreSIGPIPE()
        upstream = try HTTPServer(address: try SocketAddress("127.0.0.1:0"), loops: [upstreamLoop], limits: DownstreamLimits()) { _ in
            EchoUpstreamRouter()
        }
        let target = UpstreamTarget(
            name: "legacy", address: upstream.address, maxConnections: 8, connectTimeoutMillis: 1000,
            responseTimeoutMillis: 5000)
        var limits = DownstreamLimits(headerTimeoutMillis: headerTimeoutMillis)
        limits.trustedProxies = ClientAddressTests.networks(trusted)
        limits.proxyProtocol = proxyProtocol
        let box = Box()
        proxy = try HTTPServer(
            address: try SocketAddress("127.0.0.1:0"), loops: [proxyLoop], limits: limits,
            scheme: tls == nil ? "http" : "https", protocols: protocols, tls: tls
        ) { loop in
            let r = ClientRecordingRouter(pool: UpstreamPool(target: target, loop: loop))
            box.router = r
            return r
        }
        router = box.router!
        proxy.onProxyProtocolFailure = { [weak self] _, reason, peer in self?.failures.withLock { $0.append("\(reason) \(peer.host)") } }
    }

    final class Box: @unchecked Sendable { var router: ClientRecordingRouter? }

    var port: UInt16 { proxy.address.port }
    var clients: [String] { router.clients.withLock { $0 } }
    var recordedPeers: [String] { router.peers.withLock { $0 } }
    var recordedProtocols: [String] { router.protocols.withLock { $0 } }
    var failureReasons: [String] { failures.withLock { $0 } }

    func stop() {
        proxy.drain(deadlineMillis: 0)
        upstream.drain(deadlineMillis: 0)
        proxyLoop.queue.sync { router.pool.closeIdle() }
        proxyLoop.shutdownAndWait()
        upstreamLoop.shutdownAndWait()
    }

    /// Waits (bounded) until `done` holds.
    func wait(_ done: () -> Bool) {
        for _ in 0..<200 where !done() { usleep(10_000) }
    }
}

@Suite("Trusted proxies and the PROXY protocol through the proxy (in process)", .timeLimit(.minutes(2)), .serialized)
struct TrustedProxyServerTests {
    static func get(_ c: RawClient, _ path: String = "/a", _ fields: String = "") -> RawClient.Response? {
        c.send("GET \(path) HTTP/1.1\r\nHost: shop.example\r\n\(fields)\r\n")
        return c.readResponse()
    }

    @Test("from a trusted peer: the chain is kept and extended, -Proto and -Host kept; each request's client is its chain's")
    func trustedPeerHTTP1() throws {
        let f = try TrustedProxyFixture(trusted: [("127.0.0.1", 32), ("10.0.0.0", 8)])
        defer { f.stop() }
        let c = try RawClient(port: f.port)
        let r = try #require(
            Self.get(
                c, "/a",
                "X-Forwarded-For: 6.6.6.6, 203.0.113.7, 10.1.2.3\r\nX-Forwarded-Proto: https\r\n"
                    + "X-Forwarded-Host: shop.example.com\r\n"))
        #expect(r.head.headers["X-Seen-X-Forwarded-For"] == "6.6.6.6, 203.0.113.7, 10.1.2.3, 127.0.0.1")
        #expect(r.head.headers["X-Seen-X-Forwarded-Proto"] == "https")
        #expect(r.head.headers["X-Seen-X-Forwarded-Host"] == "shop.example.com")
        // The next request on the same connection names another client; the third none (the peer).
        let r2 = try #require(Self.get(c, "/b", "X-Forwarded-For: 198.51.100.4\r\n"))
        #expect(r2.head.headers["X-Seen-X-Forwarded-Proto"] == "http")
        #expect(r2.head.headers["X-Seen-X-Forwarded-Host"] == "shop.example")
        _ = try #require(Self.get(c, "/c"))
        // A buffered request carries the client, and forwards the chain the same way.
        let who = try #require(Self.get(c, "/whoami", "X-Forwarded-For: 192.0.2.44\r\n"))
        #expect(who.text == "client=192.0.2.44\nxff=192.0.2.44, 127.0.0.1\n")
        f.wait { f.recordedPeers.count >= 4 }
        #expect(f.clients == ["203.0.113.7", "198.51.100.4", "127.0.0.1", "192.0.2.44"])
        #expect(f.recordedPeers == ["203.0.113.7", "198.51.100.4", "127.0.0.1", "192.0.2.44"])
    }

    @Test("from any other peer: X-Forwarded-For, -Proto and -Host are the gateway's; the client is the peer")
    func untrustedPeer() throws {
        let f = try TrustedProxyFixture(trusted: [("127.0.0.1", 32)])
        defer { f.stop() }
        let c = try RawClient(socket: LoopbackClient(port: f.port, source: "127.0.0.2"))
        let r = try #require(
            Self.get(
                c, "/a",
                "X-Forwarded-For: 203.0.113.7\r\nX-Forwarded-Proto: https\r\nX-Forwarded-Host: evil\r\n"
                    + "X-Real-IP: 203.0.113.7\r\n"))
        #expect(r.head.headers["X-Seen-X-Forwarded-For"] == "127.0.0.2")
        #expect(r.head.headers["X-Seen-X-Forwarded-Proto"] == "http")
        #expect(r.head.headers["X-Seen-X-Forwarded-Host"] == "shop.example")
        #expect(r.head.headers["X-Seen-X-Real-IP"] == nil)
        let who = try #require(Self.get(c, "/whoami", "X-Forwarded-For: 192.0.2.44\r\n"))
        #expect(who.text == "client=127.0.0.2\nxff=127.0.0.2\n")
        f.wait { f.recordedPeers.count >= 2 }
        #expect(f.clients == ["127.0.0.2", "127.0.0.2"])
        #expect(f.recordedPeers == ["127.0.0.2", "127.0.0.2"])
        // A trusted peer's X-Real-IP goes too: X-Forwarded-For is the one client address a backend gets.
        let t = try RawClient(port: f.port)
        let kept = try #require(Self.get(t, "/a", "X-Forwarded-For: 203.0.113.7\r\nX-Real-IP: 203.0.113.7\r\n"))
        #expect(kept.head.headers["X-Seen-X-Forwarded-For"] == "203.0.113.7, 127.0.0.1")
        #expect(kept.head.headers["X-Seen-X-Real-IP"] == nil)
    }

    @Test("HTTP/2 (h2c) from a trusted peer: the same rules per stream")
    func trustedPeerHTTP2() throws {
        guard requireCurl() else { return }
        let f = try TrustedProxyFixture(trusted: [("127.0.0.1", 32)], protocols: [.http1, .h2c])
        defer { f.stop() }
        let a = try curlCall([
            "--http2-prior-knowledge", "-H", "X-Forwarded-For: 203.0.113.7", "-H", "X-Forwarded-Proto: https",
            "http://127.0.0.1:\(f.port)/a",
        ])
        #expect(a.version == "HTTP/2")
        #expect(a.headers["x-seen-x-forwarded-for"] == "203.0.113.7, 127.0.0.1")
        #expect(a.headers["x-seen-x-forwarded-proto"] == "https")
        let w = try curlCall(["--http2-prior-knowledge", "-H", "X-Forwarded-For: 198.51.100.9", "http://127.0.0.1:\(f.port)/whoami"])
        #expect(w.text == "client=198.51.100.9\nxff=198.51.100.9, 127.0.0.1\n")
        f.wait { f.recordedPeers.count >= 2 }
        #expect(f.clients == ["203.0.113.7", "198.51.100.9"])
        #expect(f.recordedPeers == ["203.0.113.7", "198.51.100.9"])
        #expect(f.recordedProtocols.allSatisfy { $0 == "h2" })
    }

    /// v2 headers as raw bytes.
    static func v2(command: UInt8 = 1, family: UInt8, _ body: [UInt8]) -> [UInt8] {
        [
            0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D, 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A, 0x20 | command, family,
            UInt8(body.count >> 8), UInt8(body.count & 0xff),
        ] + body
    }
    static let v2TCP4 = v2(family: 0x11, [203, 0, 113, 7, 127, 0, 0, 1, 0xDC, 0x04, 0x1F, 0x90])
    static let v2TCP6 = v2(
        family: 0x21,
        [0x20, 0x01, 0x0d, 0xb8] + [UInt8](repeating: 0, count: 11) + [7] + [UInt8](repeating: 0, count: 15)
            + [1] + [0x12, 0x34, 0x1F, 0x90] + [0x04, 0x00, 0x01, 0x00])
    static let v2Local = v2(command: 0, family: 0x00, [])

    @Test("PROXY v1 and v2 (TCP4, TCP6, UNKNOWN, LOCAL): the source is the connection's client")
    func proxyHeaders() throws {
        let f = try TrustedProxyFixture(trusted: [("127.0.0.1", 32)], proxyProtocol: true)
        defer { f.stop() }
        // The header, the connection's peer it leaves (UNKNOWN, LOCAL: the balancer itself, which is
        // trusted, so its X-Forwarded-For is read), and what the upstream sees of a forged chain.
        let cases: [([UInt8], String, String)] = [
            (Array("PROXY TCP4 203.0.113.7 127.0.0.1 56324 8080\r\n".utf8), "203.0.113.7", "203.0.113.7"),
            (Array("PROXY TCP6 2001:db8::7 ::1 56324 8080\r\n".utf8), "2001:db8::7", "2001:db8::7"),
            (Array("PROXY UNKNOWN\r\n".utf8), "127.0.0.1", "6.6.6.6, 127.0.0.1"),
            (Self.v2TCP4, "203.0.113.7", "203.0.113.7"),
            (Self.v2TCP6, "2001:db8::7", "2001:db8::7"),
            (Self.v2Local, "127.0.0.1", "6.6.6.6, 127.0.0.1"),
        ]
        for (header, peer, xff) in cases {
            let c = try RawClient(port: f.port)
            // The header and the request in one segment: the request is not lost behind the header.
            c.send(header + Array("GET /a HTTP/1.1\r\nHost: shop.example\r\nX-Forwarded-For: 6.6.6.6\r\n\r\n".utf8))
            let r = try #require(c.readResponse(), "\(peer)")
            #expect(r.head.headers["X-Seen-X-Forwarded-For"] == xff, "\(header)")
            // Keep-alive: the next request on the connection comes from the same peer.
            let r2 = try #require(Self.get(c, "/whoami"))
            #expect(r2.text == "client=\(peer)\nxff=\(peer)\n")
        }
        f.wait { f.recordedPeers.count >= 12 }
        #expect(f.recordedPeers == cases.flatMap { [$0.1 == "127.0.0.1" ? "6.6.6.6" : $0.1, $0.1] })
        #expect(f.failureReasons.isEmpty)
    }

    @Test("a PROXY source that is itself a trusted proxy: its X-Forwarded-For names the client")
    func proxyThenForwardedFor() throws {
        let f = try TrustedProxyFixture(trusted: [("127.0.0.1", 32), ("10.0.0.0", 8)], proxyProtocol: true)
        defer { f.stop() }
        let cdn = try RawClient(port: f.port)
        cdn.send(Array("PROXY TCP4 10.9.9.9 127.0.0.1 1000 8080\r\n".utf8))
        let r = try #require(Self.get(cdn, "/a", "X-Forwarded-For: 6.6.6.6, 203.0.113.5\r\nX-Forwarded-Proto: https\r\n"))
        #expect(r.head.headers["X-Seen-X-Forwarded-For"] == "6.6.6.6, 203.0.113.5, 10.9.9.9")
        #expect(r.head.headers["X-Seen-X-Forwarded-Proto"] == "https")
        let client = try RawClient(port: f.port)
        client.send(Array("PROXY TCP4 198.51.100.1 127.0.0.1 1000 8080\r\n".utf8))
        let r2 = try #require(Self.get(client, "/a", "X-Forwarded-For: 203.0.113.5\r\nX-Forwarded-Proto: https\r\n"))
        #expect(r2.head.headers["X-Seen-X-Forwarded-For"] == "198.51.100.1")
        #expect(r2.head.headers["X-Seen-X-Forwarded-Proto"] == "http")
        f.wait { f.recordedPeers.count >= 2 }
        #expect(f.recordedPeers == ["203.0.113.5", "198.51.100.1"])
    }

    @Test("a header arriving a few bytes at a time is read whole; the request after it too")
    func proxyHeaderInPieces() throws {
        let f = try TrustedProxyFixture(trusted: [("127.0.0.1", 32)], proxyProtocol: true)
        defer { f.stop() }
        for (header, client) in [
            (Array("PROXY TCP4 203.0.113.7 127.0.0.1 56324 8080\r\n".utf8), "203.0.113.7"),
            (Self.v2TCP6, "2001:db8::7"),
        ] {
            let c = try RawClient(port: f.port)
            var i = 0
            while i < header.count {
                c.send(Array(header[i..<min(header.count, i + 5)]))
                usleep(5_000)
                i += 5
            }
            let r = try #require(Self.get(c, "/whoami"))
            #expect(r.text.hasPrefix("client=\(client)\n"))
        }
    }

    /// Whether the server ended the connection (FIN, or a reset: it closes with the bytes it did not
    /// take unread), rather than the receive timing out.
    static func ended(_ c: LoopbackClient) -> Bool {
        while !c.receiveSome().isEmpty {}
        return c.lastErrno == 0 || c.lastErrno == ECONNRESET
    }

    @Test("closed without a request: an untrusted peer, no header, a malformed one, one too slow, a peer that leaves")
    func proxyRefusals() throws {
        let f = try TrustedProxyFixture(trusted: [("127.0.0.1", 32)], proxyProtocol: true, headerTimeoutMillis: 400)
        defer { f.stop() }
        // Not a trusted peer: closed at accept, whatever it sends.
        let stranger = try RawClient(socket: LoopbackClient(port: f.port, source: "127.0.0.2"))
        stranger.send(Array("PROXY TCP4 203.0.113.7 127.0.0.1 1 2\r\nGET /a HTTP/1.1\r\nHost: x\r\n\r\n".utf8))
        #expect(stranger.readResponse() == nil)
        // Plain HTTP, or a TLS ClientHello, where the header should be.
        let plain = try RawClient(port: f.port)
        #expect(Self.get(plain, "/a") == nil)
        let tls = try LoopbackClient(port: f.port)
        tls.send([0x16, 0x03, 0x01, 0x00, 0x05, 0x01, 0x00, 0x00, 0x01, 0x00])
        #expect(Self.ended(tls))
        let malformed = try RawClient(port: f.port)
        malformed.send(Array("PROXY TCP4 203.0.113.7 127.0.0.1 99999 8080\r\nGET /a HTTP/1.1\r\nHost: x\r\n\r\n".utf8))
        #expect(malformed.readResponse() == nil)
        let oversized = try LoopbackClient(port: f.port)
        oversized.send(Self.v2(family: 0x11, [UInt8](repeating: 0, count: 12) + [0xEE, 0x10, 0x00] + [UInt8](repeating: 0, count: 4096)))
        #expect(Self.ended(oversized))
        // Half a header, then nothing: closed at the header timeout.
        let slow = try LoopbackClient(port: f.port)
        let started = Date()
        slow.send(Array("PROXY TCP4 203.0.113.7".utf8))
        #expect(Self.ended(slow))
        #expect(Date().timeIntervalSince(started) >= 0.3)
        let leaving = try LoopbackClient(port: f.port)
        leaving.send(Array("PROXY TCP4 203.0".utf8))
        leaving.shutdownWrite()
        #expect(Self.ended(leaving))
        f.wait { f.failureReasons.count >= 7 }
        #expect(
            f.failureReasons.sorted() == [
                "closed 127.0.0.1", "malformed 127.0.0.1", "not_proxy_protocol 127.0.0.1", "not_proxy_protocol 127.0.0.1",
                "timeout 127.0.0.1", "too_large 127.0.0.1", "untrusted_peer 127.0.0.2",
            ])
        #expect(f.recordedPeers.isEmpty)
        // Every connection was released.
        f.wait { f.proxy.connectionCount == 0 }
        #expect(f.proxy.connectionCount == 0)
    }

    @Test("PROXY header, then TLS: the handshake and the request follow the header; the client is its source")
    func proxyThenTLS() throws {
        let files = try TLSServerFiles()
        defer { files.remove() }
        let f = try TrustedProxyFixture(trusted: [("127.0.0.1", 32)], proxyProtocol: true, tls: try files.context())
        defer { f.stop() }
        // Python's ssl module as the client: it writes the header in clear, then does TLS on the same socket.
        let script = """
            import socket, ssl, sys
            s = socket.create_connection(("127.0.0.1", \(f.port)), timeout=10)
            s.sendall(bytes.fromhex(sys.argv[1]))
            ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
            t = ctx.wrap_socket(s, server_hostname="localhost")
            t.sendall(b"GET /a HTTP/1.1\\r\\nHost: shop.example\\r\\nConnection: close\\r\\n\\r\\n")
            out = b""
            while True:
                b = t.recv(65536)
                if not b: break
                out += b
            sys.stdout.write(out.decode("latin-1"))
            """
        for (header, client) in [
            (Array("PROXY TCP4 203.0.113.7 127.0.0.1 56324 8443\r\n".utf8), "203.0.113.7"),
            (Self.v2TCP6, "2001:db8::7"),
        ] {
            let hex = header.map { String(format: "%02x", $0) }.joined()
            let r = try runProcess(URL(fileURLWithPath: "/usr/bin/python3"), ["-c", script, hex], timeout: 30)
            #expect(r.status == 0, "\(r.stderr)")
            #expect(r.stdout.hasPrefix("HTTP/1.1 200"), "\(r.stdout) \(r.stderr)")
            #expect(r.stdout.lowercased().contains("x-seen-x-forwarded-for: \(client)\r\n"))
            #expect(r.stdout.lowercased().contains("x-seen-x-forwarded-proto: https\r\n"))
        }
        f.wait { f.recordedPeers.count >= 2 }
        #expect(f.recordedPeers == ["203.0.113.7", "2001:db8::7"])
    }
}

/// A self-signed `localhost` certificate (openssl CLI), removed by `remove()`.
final class TLSServerFiles: @unchecked Sendable {
    let dir: URL

    init() throws {
        dir = FileManager.default.temporaryDirectory.appendingPathComponent("gw-proxy-tls-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        let r = try runProcess(
            URL(fileURLWithPath: "/usr/bin/openssl"),
            [
                "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", path("server.key"),
                "-out", path("server.pem"), "-days", "2", "-subj", "/CN=localhost",
            ])
        guard r.status == 0 else { throw HTTPTestError("openssl: \(r.stderr)") }
        chmod(path("server.key"), 0o600)
    }

    func path(_ name: String) -> String { dir.appendingPathComponent(name).path }

    func context() throws -> TLSServerContext {
        try TLSServerContext(
            configuration: TLSServerConfiguration(
                certificates: [.init(certificatePath: path("server.pem"), privateKeyPath: path("server.key"))], alpnProtocols: ["http/1.1"])
        )
    }

    func remove() { try? FileManager.default.removeItem(at: dir) }
}
