import Foundation
import GatewayHTTP
import GatewayIO
import GatewayProxy
import GatewayTestSupport
import Glibc
import Synchronization
import Testing

/// Routes every request to one upstream of several servers; `.buffer` for paths under `/whole`
/// (the body read whole first, as a protected route's), and the route's own response timeout.
final class BalancedRouter: RequestRouter {
    let balancer: UpstreamBalancer
    let responseTimeoutMillis: Int64?
    init(balancer: UpstreamBalancer, responseTimeoutMillis: Int64?) {
        self.balancer = balancer
        self.responseTimeoutMillis = responseTimeoutMillis
    }
    private var forward: Forward {
        Forward(routeName: "r", pool: balancer.pools[0], maxBody: 1 << 20, balancer: balancer, responseTimeoutMillis: responseTimeoutMillis)
    }
    func route(_ head: HTTPRequestHead, path: String, peer: SocketAddress?, requestID: RequestID) -> RouteDecision {
        if path.hasPrefix("/whole") {
            let f = forward
            return .buffer(maxBody: 1 << 20, routeName: "r") { _, done in done(.forward(f)) }
        }
        return .forward(forward)
    }
    func exchangeDidFinish(_ record: ExchangeRecord) {}
}

/// A proxy on its own loop in front of servers at `addresses` (one upstream, balanced).
final class BalancedProxyFixture: @unchecked Sendable {
    let loop = EventLoop(index: 12)
    let proxy: HTTPServer
    let servers: [UpstreamServer]
    private let box = ProxyFixture.PoolBox()
    private var balancer: UpstreamBalancer?

    init(
        _ addresses: [SocketAddress], weights: [Int]? = nil, policy: PassiveHealth.Policy = PassiveHealth.Policy(),
        responseTimeoutMillis: Int64? = nil, upstreamResponseTimeoutMillis: Int64 = 5000
    ) throws {
        Socket.ignoreSIGPIPE()
        let servers = addresses.enumerated().map { i, a in
            UpstreamServer(
                upstream: "u", label: a.description, host: a.host, port: a.port, weight: weights?[i] ?? 1, address: a, policy: policy)
        }
        self.servers = servers
        let holder = BalancerBox()
        proxy = try HTTPServer(address: try SocketAddress("127.0.0.1:0"), loops: [loop], limits: DownstreamLimits()) { loop in
            let pools = servers.map { s in
                UpstreamPool(
                    target: UpstreamTarget(
                        name: "u", address: s.address, maxConnections: 4, connectTimeoutMillis: 1000,
                        responseTimeoutMillis: upstreamResponseTimeoutMillis),
                    loop: loop, server: s)
            }
            let b = UpstreamBalancer(name: "u", pools: pools, retries: pools.count - 1)
            holder.balancer = b
            return BalancedRouter(balancer: b, responseTimeoutMillis: responseTimeoutMillis)
        }
        balancer = holder.balancer
    }

    final class BalancerBox: @unchecked Sendable { var balancer: UpstreamBalancer? }

    var port: UInt16 { proxy.address.port }

    func get(_ path: String) throws -> RawClient.Response? {
        let c = try RawClient(port: port)
        c.send("GET \(path) HTTP/1.1\r\nHost: x\r\n\r\n")
        return c.readResponse()
    }

    var retries: Int { loop.queue.sync { balancer!.retriesTotal } }

    func stop() {
        proxy.drain(deadlineMillis: 0)
        loop.queue.sync { balancer?.closeIdle() }
        withExtendedLifetime(balancer) { loop.shutdownAndWait() }
    }
}

/// A server that answers every request with `name` (keep-alive), counting requests by method.
final class NamedServer: @unchecked Sendable {
    final class Seen: Sendable { let list = Mutex<[String]>([]) }
    let server: ScriptedServer
    let seen = Seen()
    init(_ name: String) throws {
        let seen = self.seen
        server = try ScriptedServer { conn in
            while let r = conn.readRequest() {
                seen.list.withLock { $0.append("\(r.method) \(r.target) \(r.bodyLength)") }
                conn.respond(name)
            }
        }
    }
    var address: SocketAddress { try! SocketAddress(host: "127.0.0.1", port: server.port) }
    var requests: [String] { seen.list.withLock { $0 } }
}

@Suite(
    "An upstream of several servers: balance, retries on another server, passive health (in process)",
    .timeLimit(.minutes(3)), .serialized)
struct BalancedProxyTests {
    /// A server that reads each request and closes the connection without answering.
    final class Count: Sendable {
        let value = Mutex(0)
        var now: Int { value.withLock { $0 } }
    }

    static func closer(_ count: Count) throws -> ScriptedServer {
        try ScriptedServer { conn in
            if conn.readRequest() != nil { count.value.withLock { $0 += 1 } }
            conn.close()
        }
    }

    /// A port nothing listens on (taken from a server that is gone).
    static func deadAddress() throws -> SocketAddress {
        let gone = try ScriptedServer { _ in }
        let port = gone.port
        gone.stop()
        return try SocketAddress(host: "127.0.0.1", port: port)
    }

    @Test("requests share the servers by weight")
    func sharesLoad() throws {
        let a = try NamedServer("a")
        let b = try NamedServer("b")
        defer { a.server.stop(); b.server.stop() }
        let f = try BalancedProxyFixture([a.address, b.address], weights: [1, 3])
        defer { f.stop() }
        var bodies: [String] = []
        for _ in 0..<8 { bodies.append(try #require(try f.get("/x")).text) }
        #expect(bodies.filter { $0 == "a" }.count == 2 && bodies.filter { $0 == "b" }.count == 6, "\(bodies)")
    }

    @Test("a GET the first server closed without an answer is sent to another; a POST that was sent is not (502)")
    func closedBeforeResponse() throws {
        let closed = Count()
        let a = try Self.closer(closed)
        let b = try NamedServer("b")
        defer { a.stop(); b.server.stop() }
        // a first (weight), never ejected here.
        let f = try BalancedProxyFixture(
            [try SocketAddress(host: "127.0.0.1", port: a.port), b.address], weights: [100, 1], policy: .init(maxFails: 0))
        defer { f.stop() }
        let get = try #require(try f.get("/get"))
        #expect(get.head.status == 200 && get.text == "b")
        #expect(closed.now == 1 && b.requests == ["GET /get 0"])
        #expect(f.retries == 1)

        let c = try RawClient(port: f.port)
        c.send("POST /post HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")
        let post = try #require(c.readResponse())
        #expect(post.head.status == 502)
        #expect(post.text.contains("upstream_closed"), "\(post.text)")
        #expect(closed.now == 2 && b.requests == ["GET /get 0"], "the POST must not reach b")
        #expect(f.retries == 1)

        // An idempotent method whose body was read whole first (a protected route's) goes again, body and all.
        let put = try RawClient(port: f.port)
        put.send("PUT /whole HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")
        let r = try #require(put.readResponse())
        #expect(r.head.status == 200 && r.text == "b")
        #expect(b.requests.last == "PUT /whole 5")
        // A streamed one does not: the body is gone.
        let streamed = try RawClient(port: f.port)
        streamed.send("PUT /streamed HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")
        #expect(try #require(streamed.readResponse()).head.status == 502)
        #expect(b.requests.count == 2)
    }

    @Test("a connection refused: any request goes to another server, a POST with its body too (nothing was sent)")
    func connectFailed() throws {
        let b = try NamedServer("b")
        defer { b.server.stop() }
        let f = try BalancedProxyFixture([try Self.deadAddress(), b.address], weights: [100, 1], policy: .init(maxFails: 0))
        defer { f.stop() }
        let c = try RawClient(port: f.port)
        c.send("POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")
        let r = try #require(c.readResponse())
        #expect(r.head.status == 200 && r.text == "b")
        #expect(b.requests == ["POST /p 5"])
    }

    @Test("a server failing max_fails times in a row is ejected: no more attempts on it until fail_timeout has passed")
    func ejected() throws {
        let b = try NamedServer("b")
        defer { b.server.stop() }
        let f = try BalancedProxyFixture(
            [try Self.deadAddress(), b.address], policy: .init(maxFails: 2, failTimeoutMillis: 1500, maxFailTimeoutMillis: 1500))
        defer { f.stop() }
        for _ in 0..<20 {
            let r = try #require(try f.get("/x"))
            #expect(r.head.status == 200)
        }
        // Two failures ejected it; after that every request went to b straight away.
        #expect(f.retries == 2, "\(f.retries)")
        #expect(f.servers[0].state.ejections == 1)
        #expect(b.requests.count == 20)
        // After fail_timeout it is tried again (on probation), fails, and is ejected for twice as long.
        usleep(1_700_000)
        for _ in 0..<4 { #expect(try #require(try f.get("/x")).head.status == 200) }
        #expect(f.retries == 3)
        #expect(f.servers[0].state.ejections == 2)
    }

    @Test("every server out: requests still go to one (the least recently failed), and it is back when it answers")
    func allOutStillServed() throws {
        let b = try NamedServer("b")
        defer { b.server.stop() }
        let f = try BalancedProxyFixture([try Self.deadAddress(), b.address], policy: .init(maxFails: 1, failTimeoutMillis: 60_000))
        defer { f.stop() }
        // b failed its health check, a is ejected after one refused connection.
        _ = f.servers[1].recordCheck(passed: false, now: 0)
        #expect(try #require(try f.get("/x")).text == "b")
        #expect(try #require(try f.get("/x")).text == "b", "a is out and failed last: b, though out too")
    }

    @Test("a route's response timeout replaces the upstream's")
    func routeResponseTimeout() throws {
        let silent = try ScriptedServer { conn in
            _ = conn.readRequest()
            _ = conn.readRequest()
        }
        defer { silent.stop() }
        let address = try SocketAddress(host: "127.0.0.1", port: silent.port)
        let f = try BalancedProxyFixture(
            [address, address], policy: .init(maxFails: 0), responseTimeoutMillis: 300,
            upstreamResponseTimeoutMillis: 20_000)
        defer { f.stop() }
        let start = Date()
        let r = try #require(try f.get("/slow"))
        #expect(r.head.status == 504 && r.text.contains("upstream_timeout"))
        #expect(Date().timeIntervalSince(start) < 3)
        #expect(f.retries == 0, "a response timeout is not retried")
    }
}
