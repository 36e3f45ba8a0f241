import GatewayHTTP
import GatewayTestSupport
import Testing

/// The proxy copies response heads as bytes (`parseResponseHeadLines`, then its writer, tested in
/// GatewayProxyTests); these tests hold the parse to the string path: same checks, same errors.
@Suite("Response heads as byte ranges")
struct ResponseHeadLinesTests {
    static let heads: [String] = [
        "HTTP/1.1 200 OK\r\nServer: nginx\r\nDate: Mon, 23 Nov 2026 14:00:00 GMT\r\nContent-Type: application/json\r\nContent-Length: 31\r\nConnection: keep-alive\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-A: 1\r\nConnection: X-A, close\r\n\r\n",
        "HTTP/1.1 200 \r\nContent-Length: 0\r\n\r\n",
        "HTTP/1.1 404 Not Found\r\nVia: 1.1 a\r\nvia: 1.0 b\r\nKeep-Alive: timeout=5\r\nContent-Length: 2\r\n\r\n",
        "HTTP/1.1 200 OK\r\nVia: \r\nContent-Length:  7  \r\n\r\n",
        "HTTP/1.1 200 OK\r\nVia: \r\nVia:\r\nUpgrade: h2c\r\nTrailer: X\r\nProxy-Authenticate: Basic\r\nTE: trailers\r\n\r\n",
        "HTTP/1.0 200 OK\r\nX-Latin: caf\u{E9}\r\nconnection: Keep-Alive, x-latin\r\nHost: h\r\n\r\n",
        "HTTP/1.1 301 Moved\r\nLocation: /x\r\nConnection: host, location\r\nContent-Length: 0\r\n\r\n",
        "HTTP/1.1 100 Continue\r\n\r\n",
        "HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\nContent-Length: 9\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: , Chunked ,\r\nConnection: Close\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding:\r\nTransfer-Encoding: chunked\r\n\r\n",
        "HTTP/1.0 200 OK\r\nContent-Length: 3, 3\r\nCONNECTION: keep-alive\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 0003\r\nContent-Length: 3\r\nConnection: keep-alive, close\r\n\r\n",
        "HTTP/1.1 204 No Content\r\nTransfer-Encoding: gzip\r\nContent-Length: x\r\n\r\n",
        "HTTP/1.0 200 OK\r\n\r\n",
        "HTTP/1.1 200 OK\r\nVia: 1.0 hidden\r\nVia: 1.1 kept\r\nConnection: via\r\nContent-Length: 0\r\n\r\n",
        "HTTP/1.1 200 OK\r\nX-A: 1\r\nConnection: keep-alive\r\nConnection: x-a\r\nKeep-Alive: 5\r\nContent-Length: 0\r\n\r\n",
    ]

    /// Past the 64 fields whose classes the parser keeps as bits: the rest are classified by name.
    static let many: String = {
        var t = "HTTP/1.1 200 OK\r\n"
        for i in 0..<62 { t += "X-F\(i): \(i)\r\n" }
        t += "Via: 1.0 early\r\nConnection: x-late, keep-alive\r\n"
        t += "X-Late: 1\r\nvia: 1.1 late\r\nKeep-Alive: 5\r\nContent-Length: 3\r\nTE: trailers\r\nX-Kept: yes\r\n\r\n"
        return t
    }()

    static let bad: [String] = [
        "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 1, 2\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
        "HTTP/1.1 20 OK\r\n\r\n",
        "HTTP/1.1 200OK\r\n\r\n",
        "HTTP/2.0 200 OK\r\n\r\n",
        "HTTP/1.1 200 OK\r\nX: a\u{01}b\r\n\r\n",
        "HTTP/1.1 200 OK\r\n X: folded\r\n\r\n",
        "HTTP/1.1 200 OK\r\nX : y\r\n\r\n",
        "HTTP/1.1 200 OK\nX: y\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: ,\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, \r\nContent-Length: 0\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: \r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 12345678901234567890\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 1,,1\r\n\r\n",
    ]

    /// Latin-1 bytes of a test string (the heads above use U+00E9 for an obs-text byte).
    static func bytes(_ s: String) -> [UInt8] { s.unicodeScalars.map { UInt8($0.value) } }

    @Test("same head, framing and persistence as parseResponseHead", arguments: heads + [many])
    func sameHead(_ text: String) throws {
        let raw = Self.bytes(text)
        for method in ["GET", "HEAD"] {
            let (lines, end) = try #require(try raw.withUnsafeBytes { try HTTP1Parser().parseResponseHeadLines($0, requestMethod: method) })
            let (head, end2) = try #require(try raw.withUnsafeBytes { try HTTP1Parser().parseResponseHead($0, requestMethod: method) })
            #expect(end == end2 && end == raw.count)
            #expect(raw.withUnsafeBytes { lines.materialize($0) } == head)
            #expect(lines.keepAlive == head.keepAlive && lines.framing == head.framing && lines.status == head.status)
        }
    }

    @Test("malformed heads fail with the same error", arguments: bad)
    func sameErrors(_ text: String) {
        let raw = Self.bytes(text)
        var e1: HTTPParseError?
        var e2: HTTPParseError?
        do { _ = try raw.withUnsafeBytes { try HTTP1Parser().parseResponseHeadLines($0, requestMethod: "GET") } } catch {
            e1 = error as? HTTPParseError
        }
        do { _ = try raw.withUnsafeBytes { try HTTP1Parser().parseResponseHead($0, requestMethod: "GET") } } catch {
            e2 = error as? HTTPParseError
        }
        #expect(e1 != nil)
        #expect(e1 == e2)
    }

    /// Heads assembled at random from fields that decide framing and persistence (valid, odd and
    /// invalid values): both paths must give the same head or the same error, for GET and HEAD.
    /// Field lines that decide framing and persistence, valid, odd and invalid (shared with the
    /// request heads' random test).
    static let framingFields = [
        "Content-Length: 5", "Content-Length: 0", "Content-Length: 5, 5", "Content-Length: 5,6", "content-length: 07",
        "Content-Length: ", "Content-Length: a", "Transfer-Encoding: chunked", "transfer-encoding: CHUNKED",
        "Transfer-Encoding: gzip, chunked", "Transfer-Encoding: ,", "Transfer-Encoding: chunked,", "Transfer-Encoding:",
        "Connection: close", "Connection: keep-alive", "connection: Keep-Alive, Close", "Connection: x, KEEP-ALIVE",
        "Connection:", "X-Other: close", "Keep-Alive: timeout=5",
    ]

    @Test("random framing and persistence fields: the byte path decides like the string path")
    func randomDifferential() throws {
        let pool = Self.framingFields + ["Via: 1.0 a"]
        var rng = SeededRandom(seed: 0x5eed)
        for _ in 0..<3000 {
            let version = rng.next() % 4 == 0 ? "1.0" : "1.1"
            let status = [200, 204, 304, 404, 101, 100][Int(rng.next() % 6)]
            var text = "HTTP/\(version) \(status) X\r\n"
            for _ in 0..<Int(rng.next() % 5) { text += pool[Int(rng.next() % UInt64(pool.count))] + "\r\n" }
            text += "\r\n"
            let raw = Self.bytes(text)
            for method in ["GET", "HEAD"] {
                var e1: HTTPParseError?
                var e2: HTTPParseError?
                var a: (HTTPResponseHeadLines, Int)?
                var b: (HTTPResponseHead, Int)?
                do { a = try raw.withUnsafeBytes { try HTTP1Parser().parseResponseHeadLines($0, requestMethod: method) } } catch {
                    e1 = error as? HTTPParseError
                }
                do { b = try raw.withUnsafeBytes { try HTTP1Parser().parseResponseHead($0, requestMethod: method) } } catch {
                    e2 = error as? HTTPParseError
                }
                #expect(e1 == e2, "\(text.debugDescription) \(method)")
                if let (lines, _) = a, let (head, _) = b {
                    #expect(lines.framing == head.framing && lines.keepAlive == head.keepAlive, "\(text.debugDescription) \(method)")
                } else {
                    #expect(a == nil && b == nil, "\(text.debugDescription) \(method)")
                }
            }
        }
    }

    @Test("an incomplete head asks for more") func incomplete() throws {
        let raw = Array("HTTP/1.1 200 OK\r\nContent-Length: 3\r\n".utf8)
        #expect(try raw.withUnsafeBytes { try HTTP1Parser().parseResponseHeadLines($0, requestMethod: "GET") } == nil)
    }
}
