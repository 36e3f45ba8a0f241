import Dispatch
import Foundation
import GatewayHTTP
import GatewayIO
import GatewayProxy
import GatewayTestSupport
import Glibc
import Synchronization
import Testing

/// The gateway's own requests (`UpstreamClient`) through the proxy's pool and exchange, on an event
/// loop: the request as sent, the whole response, a kept-alive connection reused, and the exchange's
/// failures (response timeout, refused connection) and the body bound.
@Suite("UpstreamClient: the gateway's own requests on the upstream machinery", .timeLimit(.minutes(3)), .serialized)
struct UpstreamClientTests {
    /// A loop with a pool to `port` and a client on it.
    final class Fixture: @unchecked Sendable {
        let loop = EventLoop(index: 0)
        let client: UpstreamClient

        init(port: UInt16, responseTimeoutMillis: Int64 = 5_000, maxResponseBytes: Int = 64 * 1024) throws {
            let target = UpstreamTarget(
                name: "apple", address: try SocketAddress("127.0.0.1:\(port)"), maxConnections: 2, connectTimeoutMillis: 1_000,
                responseTimeoutMillis: responseTimeoutMillis)
            let loop = loop
            client =
                loop.queue.sync {
                    LoopBox(UpstreamClient(pool: UpstreamPool(target: target, loop: loop), maxResponseBytes: maxResponseBytes))
                }.value
        }

        /// Sends on the loop and waits for the completion (bounded).
        func send(_ request: UpstreamRequest) -> Result<UpstreamResponse, UpstreamClientError> {
            let box = Mutex<Result<UpstreamResponse, UpstreamClientError>?>(nil)
            let done = DispatchSemaphore(value: 0)
            let client = LoopBox(client)
            loop.queue.async {
                client.value.send(request) { result in
                    box.withLock { $0 = result }
                    done.signal()
                }
            }
            precondition(done.wait(timeout: .now() + 20) == .success, "no completion")
            return box.withLock { $0! }
        }

        func stop() {
            let client = LoopBox(client)
            loop.queue.sync { client.value.pool.closeIdle() }
            loop.shutdownAndWait()
        }
    }

    static let post = UpstreamRequest(
        method: "POST", target: "/v1/attestationData", authority: "data.example",
        fields: [("Authorization", "token.a.b")], body: Array("cmVjZWlwdA==".utf8))

    @Test(
        "the request goes as given (method, target, Host, fields, Content-Length, body); the response comes back whole; the connection is reused"
    )
    func roundTrip() throws {
        let seen = Mutex<[ScriptedRequest]>([])
        let server = try ScriptedServer { conn in
            while let r = conn.readRequest() {
                seen.withLock { $0.append(r) }
                conn.respond(status: 200, "bmV3", headers: "Content-Type: base64\r\n")
            }
        }
        defer { server.stop() }
        let f = try Fixture(port: server.port)
        defer { f.stop() }
        for _ in 0..<2 {
            let response = try f.send(Self.post).get()
            #expect(response.status == 200)
            #expect(response.body == Array("bmV3".utf8))
            #expect(response.headers["Content-Type"] == "base64")
        }
        #expect(server.accepted == 1)
        let requests = seen.withLock { $0 }
        #expect(requests.count == 2)
        let r = try #require(requests.first)
        #expect(r.method == "POST" && r.target == "/v1/attestationData")
        #expect(r.header("Host") == "data.example")
        #expect(r.header("Authorization") == "token.a.b")
        #expect(r.header("Content-Length") == "12")
        #expect(r.body == Array("cmVjZWlwdA==".utf8))
        #expect(f.client.inFlight == 0)
    }

    @Test("a status without a body (304) and a chunked body both complete")
    func framings() throws {
        let server = try ScriptedServer { conn in
            guard conn.readRequest() != nil else { return }
            conn.write("HTTP/1.1 304 Not Modified\r\nContent-Length: 0\r\n\r\n")
            guard conn.readRequest() != nil else { return }
            conn.write("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
            _ = conn.readRequest()
        }
        defer { server.stop() }
        let f = try Fixture(port: server.port)
        defer { f.stop() }
        let first = try f.send(Self.post).get()
        #expect(first.status == 304 && first.body.isEmpty)
        let second = try f.send(Self.post).get()
        #expect(second.status == 200 && second.body == Array("abcde".utf8))
    }

    @Test("no answer within the response timeout: upstream_timeout; a refused connection: upstream_unavailable")
    func failures() throws {
        let server = try ScriptedServer { conn in
            _ = conn.readRequest()
            usleep(3_000_000)
        }
        defer { server.stop() }
        let f = try Fixture(port: server.port, responseTimeoutMillis: 300)
        defer { f.stop() }
        let started = Date()
        #expect(f.send(Self.post) == .failure(.exchange(.upstreamTimeout)))
        #expect(Date().timeIntervalSince(started) < 2.5)

        // A port nobody listens on.
        let closed = try ScriptedServer { _ in }
        let port = closed.port
        closed.stop()
        let g = try Fixture(port: port)
        defer { g.stop() }
        #expect(g.send(Self.post) == .failure(.exchange(.upstreamUnavailable)))
    }

    @Test("a response body over the bound fails the call (and the connection is not reused)")
    func bound() throws {
        let server = try ScriptedServer { conn in
            while conn.readRequest() != nil { conn.respond(String(repeating: "x", count: 2_000)) }
        }
        defer { server.stop() }
        let f = try Fixture(port: server.port, maxResponseBytes: 1_000)
        defer { f.stop() }
        #expect(f.send(Self.post) == .failure(.responseTooLarge(1_000)))
        #expect(f.send(Self.post) == .failure(.responseTooLarge(1_000)))
        #expect(server.accepted == 2)
    }
}

/// A loop-confined value carried to its loop.
struct LoopBox<T>: @unchecked Sendable {
    let value: T
    init(_ value: T) { self.value = value }
}

extension Result: @retroactive Equatable where Success == UpstreamResponse, Failure == UpstreamClientError {
    public static func == (a: Self, b: Self) -> Bool {
        switch (a, b) {
        case (.failure(let x), .failure(let y)): x == y
        case (.success(let x), .success(let y)): x.status == y.status && x.body == y.body
        default: false
        }
    }
}
