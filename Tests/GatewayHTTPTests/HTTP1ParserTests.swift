import Foundation
@_spi(Testing) import GatewayHTTP
import GatewayTestSupport
import Testing

/// Feeds a whole message to the parser the way a connection would: head first, then the body by its
/// framing. `chunkSize` splits the input to simulate bytes arriving in pieces (1 = drip-feed).
struct MessageOutcome: Equatable {
    var head: HTTPRequestHead
    var body: [UInt8]
    var consumed: Int
}

func parseMessage(_ bytes: [UInt8], chunkSize: Int, limits: HTTP1Parser.Limits = .init()) throws -> MessageOutcome? {
    let parser = HTTP1Parser(limits: limits)
    var received: [UInt8] = []
    var offset = 0
    var head: HTTPRequestHead? = nil
    var body: [UInt8] = []
    var chunked = ChunkedDecoder()
    var remaining: UInt64 = 0
    while true {
        if offset < bytes.count {
            let n = min(chunkSize, bytes.count - offset)
            received += bytes[offset..<offset + n]
            offset += n
        } else if head == nil {
            return nil
        }
        var pos = 0
        if head == nil {
            guard let (h, end) = try received.withUnsafeBytes({ try parser.parseRequestHead($0) }) else {
                if offset >= bytes.count { return nil }
                continue
            }
            head = h
            received.removeFirst(end)
            if case .contentLength(let n) = h.framing { remaining = n }
        }
        switch head!.framing {
        case .none, .untilClose:
            return MessageOutcome(head: head!, body: body, consumed: offset - received.count)
        case .contentLength:
            let take = Int(min(UInt64(received.count), remaining))
            body += received.prefix(take)
            received.removeFirst(take)
            remaining -= UInt64(take)
            if remaining == 0 { return MessageOutcome(head: head!, body: body, consumed: offset - received.count) }
        case .chunked:
            loop: while true {
                let event = try received.withUnsafeBytes { try chunked.next($0, from: pos) }
                switch event {
                case .data(let r):
                    body += received[r]
                    pos = r.upperBound
                case .needMore(let c):
                    received.removeFirst(c)
                    pos = 0
                    break loop
                case .end(let e):
                    received.removeFirst(e)
                    return MessageOutcome(head: head!, body: body, consumed: offset - received.count)
                }
            }
        }
        if offset >= bytes.count { return nil }
    }
}

struct ConformanceCase: CustomTestStringConvertible, Sendable {
    let name: String
    let expect: String
    let bytes: [UInt8]
    var testDescription: String { "\(name) → \(expect)" }

    static let all: [ConformanceCase] = {
        let dir = repositoryRoot.appendingPathComponent("Tests/GatewayHTTPTests/Resources/http1")
        let files = (try? FileManager.default.contentsOfDirectory(atPath: dir.path)) ?? []
        return files.filter { $0.hasSuffix(".http") }.sorted().map { f in
            let data = [UInt8](FileManager.default.contents(atPath: dir.appendingPathComponent(f).path)!)
            let nl = data.firstIndex(of: 0x0a)!
            let header = String(decoding: data[..<nl], as: UTF8.self)
            return ConformanceCase(
                name: String(f.dropLast(5)), expect: String(header.dropFirst("# expect: ".count)), bytes: Array(data[(nl + 1)...]))
        }
    }()
}

@Suite("HTTP/1.1 request parsing (RFC 9112)")
struct HTTP1ParserTests {
    @Test("conformance and smuggling cases, whole and drip-fed", arguments: ConformanceCase.all)
    func conformance(_ c: ConformanceCase) throws {
        for chunkSize in [c.bytes.count, 1, 7] {
            do {
                let outcome = try parseMessage(c.bytes, chunkSize: chunkSize)
                #expect(c.expect == "ok", "\(c.name) parsed but must fail with \(c.expect)")
                #expect(outcome != nil, "\(c.name): incomplete")
                #expect(outcome?.consumed == c.bytes.count, "\(c.name): leftover bytes")
            } catch let e as HTTPParseError {
                #expect(e.kind.rawValue == c.expect, "\(c.name): \(e)")
            }
        }
    }

    @Test("the corpus is there") func corpus() { #expect(ConformanceCase.all.count >= 50) }

    @Test("a request head parses into method, exact target, version, fields and framing") func head() throws {
        let raw = Array(
            "POST /api/purchase?x=1%20y HTTP/1.1\r\nHost: shop\r\nContent-Length: 5\r\nX-Multi: a\r\nx-multi: b\r\n\r\nhello".utf8)
        let (h, end) = try #require(try raw.withUnsafeBytes { try HTTP1Parser().parseRequestHead($0) })
        #expect(h.method == "POST")
        #expect(h.target == "/api/purchase?x=1%20y")
        #expect(h.minorVersion == 1)
        #expect(h.headers["host"] == "shop")
        #expect(h.headers.values("X-MULTI") == ["a", "b"])
        #expect(h.framing == .contentLength(5))
        #expect(h.keepAlive)
        #expect(end == raw.count - 5)
    }

    @Test("keep-alive rules for HTTP/1.0 and 1.1, Expect: 100-continue") func connection() throws {
        func head(_ s: String) throws -> HTTPRequestHead {
            try #require(try Array(s.utf8).withUnsafeBytes { try HTTP1Parser().parseRequestHead($0) }).0
        }
        #expect(try !head("GET / HTTP/1.0\r\n\r\n").keepAlive)
        #expect(try head("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").keepAlive)
        #expect(try !head("GET / HTTP/1.1\r\nHost: x\r\nConnection: Close\r\n\r\n").keepAlive)
        #expect(try head("POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n").expectsContinue)
        #expect(try !head("POST / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n").expectsContinue)
    }

    @Test("an incomplete head asks for more; pipelined requests parse one after another") func incrementalAndPipelined() throws {
        let one = "GET /1 HTTP/1.1\r\nHost: x\r\n\r\n"
        let two = "GET /2 HTTP/1.1\r\nHost: x\r\n\r\n"
        let raw = Array((one + two).utf8)
        for cut in 0..<one.utf8.count {
            #expect(try Array(raw[..<cut]).withUnsafeBytes { try HTTP1Parser().parseRequestHead($0) } == nil)
        }
        let (h1, e1) = try #require(try raw.withUnsafeBytes { try HTTP1Parser().parseRequestHead($0) })
        let (h2, e2) = try #require(try raw.withUnsafeBytes { try HTTP1Parser().parseRequestHead($0, from: e1) })
        #expect(h1.target == "/1" && h2.target == "/2" && e2 == raw.count)
    }

    @Test("limits: request line, head bytes and field count, even before the head ends") func limits() {
        let limits = HTTP1Parser.Limits(maxRequestLine: 64, maxHeaderBytes: 256, maxHeaderCount: 4)
        func status(_ s: String) -> HTTPParseError.Kind? {
            do {
                _ = try Array(s.utf8).withUnsafeBytes { try HTTP1Parser(limits: limits).parseRequestHead($0) }
                return nil
            } catch { return (error as? HTTPParseError)?.kind }
        }
        #expect(status("GET /" + String(repeating: "a", count: 100)) == .requestLineTooLong)
        #expect(status("GET / HTTP/1.1\r\nHost: x\r\nX: " + String(repeating: "a", count: 300)) == .headersTooLarge)
        #expect(status("GET / HTTP/1.1\r\nHost: x\r\n" + String(repeating: "A: b\r\n", count: 5) + "\r\n") == .tooManyHeaders)
        #expect(status("GET / HTTP/1.1\r\nHost: x\r\n" + String(repeating: "A: b\r\n", count: 3) + "\r\n") == nil)
    }

    @Test("chunked bodies decode whole and drip-fed, with trailers kept") func chunked() throws {
        let raw = Array(
            "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n1;ext=1\r\n \r\nA\r\n0123456789\r\n0\r\nX-Trailer: t\r\n\r\nNEXT"
                .utf8)
        for size in [raw.count, 1, 3, 13] {
            let out = try #require(try parseMessage(raw, chunkSize: size))
            #expect(String(decoding: out.body, as: UTF8.self) == "hello 0123456789")
            #expect(out.consumed == raw.count - 4)
        }
    }

    @Test("responses: framing by status and method, until-close without length") func responses() throws {
        func framing(_ s: String, method: String = "GET") throws -> BodyFraming {
            try #require(try Array(s.utf8).withUnsafeBytes { try HTTP1Parser().parseResponseHead($0, requestMethod: method) }).0.framing
        }
        #expect(try framing("HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n") == .contentLength(3))
        #expect(try framing("HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n", method: "HEAD") == .none)
        #expect(try framing("HTTP/1.1 204 No Content\r\n\r\n") == .none)
        #expect(try framing("HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\n") == .none)
        #expect(try framing("HTTP/1.1 100 Continue\r\n\r\n") == .none)
        #expect(try framing("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n") == .chunked)
        #expect(try framing("HTTP/1.0 200 OK\r\n\r\n") == .untilClose)
        #expect(try framing("HTTP/1.1 200 \r\n\r\n") == .untilClose)
        #expect(throws: HTTPParseError.self) { try framing("HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n") }
        #expect(throws: HTTPParseError.self) { try framing("HTTP/1.1 20 OK\r\n\r\n") }
        #expect(throws: HTTPParseError.self) { try framing("HTTP/1.1 200OK\r\n\r\n") }
        let head = try #require(
            try Array("HTTP/1.1 503 Service Unavailable\r\nRetry-After: 5\r\n\r\n".utf8).withUnsafeBytes {
                try HTTP1Parser().parseResponseHead($0, requestMethod: "GET")
            })
        #expect(head.0.status == 503 && head.0.reason == "Service Unavailable" && head.0.headers["retry-after"] == "5")
    }

    @Test("random bytes never crash the head parser or the chunked decoder") func randomBytes() {
        var rng = SystemRandomNumberGenerator()
        for _ in 0..<3000 {
            let n = Int.random(in: 0..<200, using: &rng)
            var bytes = (0..<n).map { _ in UInt8.random(in: 0...255, using: &rng) }
            if Bool.random(using: &rng) { bytes = Array("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n".utf8) + bytes }
            _ = try? parseMessage(bytes, chunkSize: Int.random(in: 1...16, using: &rng))
        }
    }
}
