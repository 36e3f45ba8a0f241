import AttestSim
import Foundation
import Testing

@Suite("attest-sim HTTP/1.1 client (loopback server)", .timeLimit(.minutes(3)))
struct HTTPClientTests {
    static func client(_ server: LoopbackServer, timeout: Double = 5) -> HTTPClient {
        HTTPClient(endpoint: HTTPEndpoint(host: "127.0.0.1", port: server.port), timeout: timeout)
    }

    @Test("sends Host and Content-Length, reads a Content-Length body, keeps the connection alive") func keepAlive() throws {
        let seen = Locked<[ServerRequest]>([])
        let server = try LoopbackServer { r in
            seen.mutate { $0.append(r) }
            return .bytes(httpResponse(200, headers: [("X-Echo", r.target)], body: "body of \(r.target)"), close: false)
        }
        defer { server.stop() }
        let c = Self.client(server)
        defer { c.close() }
        let a = try c.send(HTTPRequest(method: "POST", target: "/a?x=1", headers: [("X-T", "1")], body: Array("hello".utf8)))
        let b = try c.send(HTTPRequest(method: "GET", target: "/b"))
        #expect(a.status == 200 && a.bodyText == "body of /a?x=1" && a.header("x-echo") == "/a?x=1")
        #expect(b.status == 200 && b.bodyText == "body of /b")
        #expect(c.connectionsOpened == 1)
        #expect(server.connectionCount == 1)
        let raw = String(decoding: seen.value[0].raw, as: UTF8.self)
        #expect(raw == "POST /a?x=1 HTTP/1.1\r\nHost: 127.0.0.1:\(server.port)\r\nX-T: 1\r\nContent-Length: 5\r\n\r\nhello")
        #expect(String(decoding: seen.value[1].raw, as: UTF8.self) == "GET /b HTTP/1.1\r\nHost: 127.0.0.1:\(server.port)\r\n\r\n")
        #expect(seen.value.map(\.indexOnConnection) == [0, 1])
    }

    @Test("decodes a chunked body with extensions and trailers, then reuses the connection") func chunked() throws {
        let server = try LoopbackServer { r in
            if r.target == "/chunked" {
                let s = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n7\r\n, world\r\n0\r\nX-Trailer: t\r\n\r\n"
                return .bytes(Array(s.utf8), close: false)
            }
            return .bytes(httpResponse(204, "No Content"), close: false)
        }
        defer { server.stop() }
        let c = Self.client(server)
        defer { c.close() }
        let r = try c.send(HTTPRequest(method: "GET", target: "/chunked"))
        #expect(r.bodyText == "hello, world")
        #expect(try c.send(HTTPRequest(method: "GET", target: "/next")).status == 204)
        #expect(c.connectionsOpened == 1)
    }

    @Test("a body without length is read to the close; Connection: close opens a new connection next") func closeDelimited()
        throws
    {
        let server = try LoopbackServer { r in
            if r.target == "/eof" { return .bytes(Array("HTTP/1.1 200 OK\r\n\r\nuntil the end".utf8), close: true) }
            return .bytes(httpResponse(200, headers: [("Connection", "close")], body: "closing"), close: true)
        }
        defer { server.stop() }
        let c = Self.client(server)
        defer { c.close() }
        #expect(try c.send(HTTPRequest(method: "GET", target: "/eof")).bodyText == "until the end")
        #expect(!c.isConnected)
        #expect(try c.send(HTTPRequest(method: "GET", target: "/close")).bodyText == "closing")
        #expect(try c.send(HTTPRequest(method: "GET", target: "/close")).bodyText == "closing")
        #expect(c.connectionsOpened == 3)
    }

    @Test("1xx responses are skipped; HEAD and 304 have no body") func interimAndBodiless() throws {
        let server = try LoopbackServer { r in
            switch r.target {
            case "/continue":
                return .bytes(Array("HTTP/1.1 100 Continue\r\n\r\n".utf8) + httpResponse(201, "Created", body: "made"), close: false)
            case "/head":
                return .bytes(Array("HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n".utf8), close: false)
            default:
                return .bytes(Array("HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n".utf8), close: false)
            }
        }
        defer { server.stop() }
        let c = Self.client(server)
        defer { c.close() }
        let r = try c.send(HTTPRequest(method: "POST", target: "/continue", body: [1]))
        #expect(r.status == 201 && r.bodyText == "made")
        #expect(try c.send(HTTPRequest(method: "HEAD", target: "/head")).body.isEmpty)
        #expect(try c.send(HTTPRequest(method: "GET", target: "/304")).body.isEmpty)
        #expect(c.connectionsOpened == 1)
    }

    @Test("a reused connection the server closed while idle is retried once on a new one") func idleCloseRetried() throws {
        // Each connection answers one request, then closes without saying so.
        let server = try LoopbackServer { r in
            r.indexOnConnection == 0 ? .bytes(httpResponse(200, body: "c\(r.connection)"), close: false) : .closeNow
        }
        defer { server.stop() }
        let c = Self.client(server)
        defer { c.close() }
        #expect(try c.send(HTTPRequest(method: "GET", target: "/1")).bodyText == "c0")
        #expect(try c.send(HTTPRequest(method: "GET", target: "/2")).bodyText == "c1")
        #expect(c.connectionsOpened == 2)
    }

    @Test("a fresh connection closed before the answer is an error, not retried") func freshCloseNotRetried() throws {
        let server = try LoopbackServer { _ in .closeNow }
        defer { server.stop() }
        let c = Self.client(server)
        defer { c.close() }
        #expect(throws: HTTPClientError.self) { try c.send(HTTPRequest(method: "POST", target: "/x", body: [1])) }
        #expect(server.connectionCount == 1)
    }

    @Test("truncated bodies, bad status lines and bad framing are typed errors") func badResponses() throws {
        let server = try LoopbackServer { r in
            switch r.target {
            case "/short": .bytes(Array("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc".utf8), close: true)
            case "/status": .bytes(Array("HTTP/2 200 OK\r\nContent-Length: 0\r\n\r\n".utf8), close: false)
            case "/cl": .bytes(Array("HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd".utf8), close: false)
            case "/te": .bytes(Array("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n".utf8), close: false)
            default: .bytes(Array("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n".utf8), close: false)
            }
        }
        defer { server.stop() }
        let c = Self.client(server)
        defer { c.close() }
        func error(_ target: String) -> HTTPClientError? {
            do {
                _ = try c.send(HTTPRequest(method: "GET", target: target))
                return nil
            } catch {
                return error
            }
        }
        #expect(error("/short")?.code == "connection_closed")
        #expect(error("/status")?.code == "bad_response")
        #expect(error("/cl")?.code == "bad_response")
        #expect(error("/te")?.code == "bad_response")
        #expect(error("/chunk")?.code == "bad_response")
    }

    @Test("a server that never answers times out; a closed port is a connect error") func timeoutAndRefused() throws {
        let server = try LoopbackServer { _ in .silent }
        let c = Self.client(server, timeout: 0.3)
        #expect(throws: HTTPClientError.timeout("no complete response within 0.3 s")) {
            try c.send(HTTPRequest(method: "GET", target: "/"))
        }
        c.close()
        let port = server.port
        server.stop()
        let refused = HTTPClient(endpoint: HTTPEndpoint(host: "127.0.0.1", port: port), timeout: 2)
        do {
            _ = try refused.send(HTTPRequest(method: "GET", target: "/"))
            Issue.record("a closed port answered")
        } catch {
            #expect(error.code == "connect_failed")
        }
    }

    @Test("gateway URLs: host, port, IPv6, and refused forms") func endpoints() throws {
        #expect(try HTTPEndpoint(url: "http://127.0.0.1:8080") == HTTPEndpoint(host: "127.0.0.1", port: 8080))
        #expect(try HTTPEndpoint(url: "http://gw.local/") == HTTPEndpoint(host: "gw.local", port: 80))
        #expect(try HTTPEndpoint(url: "http://[::1]:9") == HTTPEndpoint(host: "::1", port: 9))
        #expect(try HTTPEndpoint(url: "http://[::1]:9").hostHeader == "[::1]:9")
        #expect(try HTTPEndpoint(url: "http://gw.local").hostHeader == "gw.local")
        for bad in ["https://x:1", "http://", "http://x:0", "http://x:70000", "http://x:1/api", "http://u@x:1", "x:1", "http://x:a"] {
            #expect(throws: AttestSimError.self, "\(bad)") { try HTTPEndpoint(url: bad) }
        }
    }
}

/// A value shared between a test and a server thread.
final class Locked<T>: @unchecked Sendable {
    private let lock = NSLock()
    private var v: T
    init(_ v: T) { self.v = v }
    var value: T { lock.withLock { v } }
    func mutate<R>(_ f: (inout T) -> R) -> R { lock.withLock { f(&v) } }
}
