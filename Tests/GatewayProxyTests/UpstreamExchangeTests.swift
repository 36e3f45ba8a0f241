import Foundation
import GatewayIO
import GatewayProxy
import GatewayTestSupport
import Glibc
import Synchronization
import Testing

/// The upstream half of a request (`UpstreamExchange`), through the HTTP/1.1 proxy in process.
@Suite("The upstream exchange (in process)", .timeLimit(.minutes(3)), .serialized)
struct UpstreamExchangeTests {
    @Test("an upstream that answers before the request body ended is not reused: it may still wait for that body")
    func earlyAnswerNotReused() throws {
        let sawSecond = Mutex(false)
        let upstream = try ScriptedServer { conn in
            if conn.index == 0 {
                // Reads the head and what came of the body, answers at once (keep-alive), then
                // keeps reading: anything more on this connection would be taken as the body.
                var seen: [UInt8] = []
                var buf = [UInt8](repeating: 0, count: 4096)
                while !String(decoding: seen, as: UTF8.self).contains("\r\n\r\n") {
                    let n = recv(conn.fd, &buf, buf.count, 0)
                    guard n > 0 else { return }
                    seen += buf[0..<n]
                }
                conn.write("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nearly")
                while true {
                    let n = recv(conn.fd, &buf, buf.count, 0)
                    guard n > 0 else { return }
                    if String(decoding: buf[0..<n], as: UTF8.self).contains("/second") { sawSecond.withLock { $0 = true } }
                }
            }
            while conn.readRequest() != nil { conn.respond("second") }
        }
        defer { upstream.stop() }
        let f = try ProxyFixture(upstreamAddress: try SocketAddress("127.0.0.1:\(upstream.port)"))
        defer { f.stop() }
        let first = try RawClient(port: f.port)
        first.send("POST /first HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nonly part of it")
        let early = try #require(first.readResponse())
        #expect(early.head.status == 200 && early.text == "early")
        #expect(early.head.headers["Connection"] == "close")
        let second = try RawClient(port: f.port)
        second.send("GET /second HTTP/1.1\r\nHost: x\r\n\r\n")
        let r = try #require(second.readResponse())
        #expect(r.head.status == 200 && r.text == "second")
        #expect(upstream.accepted == 2)
        #expect(!sawSecond.withLock { $0 })
    }
}
