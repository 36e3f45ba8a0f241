@_spi(Testing) import GatewayHTTP
import GatewayTestSupport
import Testing

/// The HTTP/1.1 proxy parses request heads into byte ranges (`parseRequestHeadLines`) and builds the
/// string head (`materialize`) only when a route needs it; these tests hold the byte path to
/// `parseRequestHead`: the same head, framing, persistence, `Expect` and Host, and the same errors.
@Suite("Request heads as byte ranges")
struct RequestHeadLinesTests {
    static let heads: [String] = [
        "GET / HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n",
        "\r\nGET /a?b=c HTTP/1.1\r\nHost: h\r\nUser-Agent: wrk\r\nAccept: */*\r\nConnection: keep-alive\r\n\r\n",
        "POST /p HTTP/1.1\r\nhost: h\r\nContent-Length:  5 \r\nExpect: 100-Continue\r\n\r\n",
        "POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: Chunked\r\nConnection: close\r\n\r\n",
        "GET / HTTP/1.0\r\n\r\n",
        "GET / HTTP/1.0\r\nConnection: Keep-Alive\r\nX-Latin: caf\u{E9}\r\n\r\n",
        "GET / HTTP/1.0\r\nHost: a\r\nExpect: 100-continue\r\n\r\n",
        "PUT /x HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\nExpect: nope\r\nExpect: 100-continue\r\n\r\n",
        "DELETE /x HTTP/1.1\r\nHOST: h\r\nContent-Length: 3, 3\r\nconnection: x, CLOSE\r\nX-Empty:\r\n\r\n",
        "OPTIONS * HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: , chunked ,\r\n\r\n",
        "\r\n\r\n\r\n\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n",
        "POST http://Shop.Example:80/api/x?q HTTP/1.1\r\nHost: other\r\nX_Under: 1\r\n\r\n",
        "GET HTTPS://[::1]:8443 HTTP/1.0\r\n\r\n",
        "OPTIONS * HTTP/1.1\r\nHost: h.\r\n\r\n",
    ]

    static let bad: [String] = [
        "GET / HTTP/1.1\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a\r\nhost: b\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
        "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: +1\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
        "GET  / HTTP/1.1\r\nHost: h\r\n\r\n",
        "GET / HTTP/2.0\r\nHost: h\r\n\r\n",
        "GET / HTTP/1.2\r\nHost: h\r\n\r\n",
        "G@T / HTTP/1.1\r\nHost: h\r\n\r\n",
        "GET /\u{7F} HTTP/1.1\r\nHost: h\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: h\r\n X: folded\r\n\r\n",
        "GET / HTTP/1.1\r\nHost : h\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: h\nX: y\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: h\r\nX: a\u{00}b\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: h\r\n: empty\r\n\r\n",
        "\r\n\r\n\r\n\r\n\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n",
        "GET / HTTP/1.0\r\nHost: a\r\nHost: b\r\n\r\n",
        "post / HTTP/1.1\r\nHost: h\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: h/evil@x\r\n\r\n",
        "GET * HTTP/1.1\r\nHost: h\r\n\r\n",
        "GET http://u@h/ HTTP/1.1\r\nHost: h\r\n\r\n",
    ]

    static func bytes(_ s: String) -> [UInt8] { s.unicodeScalars.map { UInt8($0.value) } }

    static func lines(_ raw: [UInt8], _ parser: HTTP1Parser, _ storage: inout [HTTPFieldRange])
        -> Result<(HTTPRequestHeadLines, Int)?, HTTPParseError>
    {
        do { return .success(try raw.withUnsafeBytes { try parser.parseRequestHeadLines($0, reusing: &storage) }) } catch {
            return .failure(error as! HTTPParseError)
        }
    }

    static func strings(_ raw: [UInt8], _ parser: HTTP1Parser) -> Result<(HTTPRequestHead, Int)?, HTTPParseError> {
        do { return .success(try raw.withUnsafeBytes { try parser.parseRequestHead($0) }) } catch {
            return .failure(error as! HTTPParseError)
        }
    }

    @Test("same head, framing, persistence, Expect and Host as parseRequestHead", arguments: heads)
    func sameHead(_ text: String) throws {
        let raw = Self.bytes(text)
        var storage: [HTTPFieldRange] = []
        let (lines, end) = try #require(try raw.withUnsafeBytes { try HTTP1Parser().parseRequestHeadLines($0, reusing: &storage) })
        let (head, end2) = try #require(try raw.withUnsafeBytes { try HTTP1Parser().parseRequestHead($0) })
        #expect(end == end2 && end == raw.count)
        #expect(raw.withUnsafeBytes { lines.materialize($0) } == head)
        #expect(lines.keepAlive == head.keepAlive && lines.framing == head.framing && lines.expectsContinue == head.expectsContinue)
        #expect(lines.host.map { r in raw.withUnsafeBytes { String(decoding: $0[r], as: UTF8.self) } } == head.headers["Host"])
        #expect(raw.withUnsafeBytes { lines.methodIs($0, "GET") } == (head.method == "GET"))
    }

    @Test("malformed heads fail with the same error", arguments: bad)
    func sameErrors(_ text: String) {
        var storage: [HTTPFieldRange] = []
        let raw = Self.bytes(text)
        let (a, b) = (Self.lines(raw, HTTP1Parser(), &storage), Self.strings(raw, HTTP1Parser()))
        guard case .failure(let e1) = a, case .failure(let e2) = b else {
            Issue.record("expected both to fail: \(a) \(b)")
            return
        }
        #expect(e1 == e2)
    }

    /// Heads assembled at random from fields that decide framing, persistence, Expect and Host
    /// (valid, odd and invalid values), under small limits too: the same head or the same error.
    @Test("random framing, persistence, Expect and Host fields: the byte path decides like the string path")
    func randomDifferential() throws {
        let pool =
            ResponseHeadLinesTests.framingFields + [
                "Host: a", "host: b", "HOST:", "Expect: 100-continue", "expect: 100-CONTINUE", "Expect: x", "X: caf\u{E9}",
                "Bad Name: x", "X: a\u{01}",
            ]
        let limits = [HTTP1Parser(), HTTP1Parser(limits: .init(maxRequestLine: 16, maxHeaderBytes: 64, maxHeaderCount: 3))]
        var rng = SeededRandom(seed: 0x7e57)
        var storage: [HTTPFieldRange] = []
        for i in 0..<4000 {
            let version = rng.next() % 4 == 0 ? "1.0" : "1.1"
            var text = (rng.next() % 8 == 0 ? "\r\n" : "") + "\(i % 3 == 0 ? "POST" : "GET") /t\(i) HTTP/\(version)\r\n"
            for _ in 0..<Int(rng.next() % 6) { text += pool[Int(rng.next() % UInt64(pool.count))] + "\r\n" }
            text += "\r\n"
            let raw = Self.bytes(text)
            for parser in limits {
                let a = Self.lines(raw, parser, &storage)
                let b = Self.strings(raw, parser)
                switch (a, b) {
                case (.success(let x?), .success(let y?)):
                    #expect(x.1 == y.1)
                    #expect(raw.withUnsafeBytes { x.0.materialize($0) } == y.0, "\(text.debugDescription)")
                    #expect(x.0.keepAlive == y.0.keepAlive && x.0.expectsContinue == y.0.expectsContinue, "\(text.debugDescription)")
                    if case .success(let x?) = a { storage = x.0.fields }  // reuse, as a connection does
                case (.failure(let e1), .failure(let e2)):
                    #expect(e1 == e2, "\(text.debugDescription)")
                case (.success(nil), .success(nil)):
                    break
                default:
                    Issue.record("paths differ for \(text.debugDescription): \(a) vs \(b)")
                }
            }
        }
    }

    @Test("an incomplete head asks for more; the field storage is reused") func incompleteAndReuse() throws {
        var storage: [HTTPFieldRange] = []
        let partial = Array("GET / HTTP/1.1\r\nHost: h\r\n".utf8)
        #expect(try partial.withUnsafeBytes { try HTTP1Parser().parseRequestHeadLines($0, reusing: &storage) } == nil)
        let full = Array("GET / HTTP/1.1\r\nHost: h\r\nA: 1\r\nB: 2\r\n\r\n".utf8)
        var (lines, _) = try #require(try full.withUnsafeBytes { try HTTP1Parser().parseRequestHeadLines($0, reusing: &storage) })
        #expect(lines.fields.count == 3)
        storage = []
        swap(&storage, &lines.fields)
        let capacity = storage.capacity
        let base = storage.withUnsafeBufferPointer { $0.baseAddress }
        let again = Array("GET / HTTP/1.1\r\nHost: h\r\n\r\n".utf8)
        let (second, _) = try #require(try again.withUnsafeBytes { try HTTP1Parser().parseRequestHeadLines($0, reusing: &storage) })
        #expect(second.fields.count == 1 && storage.isEmpty)
        #expect(second.fields.capacity == capacity && second.fields.withUnsafeBufferPointer { $0.baseAddress } == base)
    }
}
