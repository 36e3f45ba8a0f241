import CGatewayNGHTTP2
@testable import GatewayHTTP
import Testing

/// The proxy submits upstream response heads to HTTP/2 from the upstream's bytes
/// (`submitResponse(streamID:head:from:…)`); these tests hold that path to the string path it
/// replaces (materialize, hop-by-hop strip, Via rewrite, Content-Length removal, `submitResponse`
/// with `HTTPFields`): the same header list, in the same order, byte for byte.
@Suite("HTTP/2 response heads from upstream bytes")
struct HTTP2ResponseHeadTests {
    static let heads: [String] = ResponseHeadLinesTests.heads.filter { !$0.hasPrefix("HTTP/1.1 100") } + [
        "HTTP/1.1 200 OK\r\nHost: upstream\r\nX-Empty:\r\nX-Tab: a\tb\r\nVia: 1.0 far\r\nConnection: via\r\nContent-Length: 1\r\n\r\n",
        "HTTP/1.1 204 No Content\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\nCONTENT-TYPE: text/plain\r\nConnection: set-cookie\r\n\r\n",
        "HTTP/1.1 200 OK\r\nX-Obs: \u{FF}\u{80}\r\nVia: 1.1 \u{E9}\r\nContent-Length: 0\r\n\r\n",
        ResponseHeadLinesTests.many,
    ]

    /// The string path: what `HTTP2Stream` sent before the byte path (and still sends when a route
    /// sets response headers).
    static func stringPath(_ head: HTTPResponseHead, dropContentLength: Bool) -> [(String, String)] {
        var fields = head.headers
        HopByHop.strip(&fields, isRequest: false)
        fields.collapseContentLength()
        if fields.contains("Via") {
            let via = fields.values("Via").joined(separator: ", ")
            fields.remove("Via")
            fields.append("Via", via.isEmpty ? "1.1 test" : "\(via), 1.1 test")
        } else {
            fields.append("Via", "1.1 test")
        }
        if dropContentLength { fields.remove("Content-Length") }
        return HTTP2ServerSession.responseFields(status: head.status, fields)
    }

    @Test("the header list built from bytes equals the string path's", arguments: heads)
    func sameFields(_ text: String) throws {
        let raw = ResponseHeadLinesTests.bytes(text)
        let (lines, _) = try #require(try raw.withUnsafeBytes { try HTTP1Parser().parseResponseHeadLines($0, requestMethod: "GET") })
        let head = raw.withUnsafeBytes { lines.materialize($0) }
        for drop in [false, true] {
            var block = HTTP2HeaderBlock()
            block.appendStatus(lines.status)
            raw.withUnsafeBytes { lines.appendHTTP2Fields(from: $0, via: "1.1 test", dropContentLength: drop, to: &block) }
            let expected = Self.stringPath(head, dropContentLength: drop)
            #expect(block.pairs.map { "\($0.0): \($0.1)" } == expected.map { "\($0.0): \($0.1)" }, "\(text.debugDescription) drop=\(drop)")
        }
    }

    @Test("HTTP/2 rules: names lowercased; host, non-token names and bad values dropped; Latin-1 kept as bytes")
    func rules() {
        var block = HTTP2HeaderBlock()
        block.appendStatus(204)
        var kept: [Bool] = []
        kept.append(block.append(name: "X-Upper", value: "v"))
        kept.append(block.append(name: "Host", value: "h"))
        kept.append(block.append(name: "bad name", value: "v"))
        kept.append(block.append(name: "", value: "v"))
        kept.append(block.append(name: "x-lead", value: " v"))
        kept.append(block.append(name: "x-trail", value: "v\t"))
        kept.append(block.append(name: "x-lf", value: "a\nb"))
        kept.append(block.append(name: "x-nul", value: "a\u{0}b"))
        kept.append(block.append(name: "x-latin", value: "caf\u{E9}"))
        kept.append(block.append(name: "x-empty", value: ""))
        #expect(kept == [true, false, false, false, false, false, false, false, true, true])
        #expect(block.pairs.map { "\($0.0)=\($0.1)" } == [":status=204", "x-upper=v", "x-latin=caf\u{E9}", "x-empty="])
        #expect(block.bytes.contains(0xE9))  // one byte, not UTF-8's two
    }

    @Test("through a session: the HEADERS frame of the byte path decodes to the string path's", arguments: heads)
    func sameFrames(_ text: String) throws {
        let raw = ResponseHeadLinesTests.bytes(text)
        let (lines, _) = try #require(try raw.withUnsafeBytes { try HTTP1Parser().parseResponseHeadLines($0, requestMethod: "GET") })
        let head = raw.withUnsafeBytes { lines.materialize($0) }
        func headers(_ submit: (HTTP2ServerSession) throws -> Void) throws -> [(String, String)] {
            let session = try HTTP2ServerSession()
            let events = session.receive(H2.start() + H2.request(stream: 1, H2.get))
            #expect(events.contains { if case .request(streamID: 1, _) = $0 { true } else { false } })
            try submit(session)
            return HeaderDecoder().decode(H2.frames(session.pullOutput()))[1] ?? []
        }
        let bytePath = try headers { s in
            try raw.withUnsafeBytes {
                try s.submitResponse(streamID: 1, head: lines, from: $0, via: "1.1 test", dropContentLength: true, endStream: true)
            }
        }
        let stringPath = try headers { s in
            var fields = HTTPFields()
            for (n, v) in Self.stringPath(head, dropContentLength: true).dropFirst() { fields.append(n, v) }
            try s.submitResponse(streamID: 1, status: head.status, headers: fields, endStream: true)
        }
        #expect(!bytePath.isEmpty)
        #expect(bytePath.map { "\($0.0): \($0.1)" } == stringPath.map { "\($0.0): \($0.1)" })
    }

    @Test("the byte path refuses what submitResponse refuses: unknown stream, second response")
    func refusals() throws {
        let raw = Array("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n".utf8)
        let (lines, _) = try #require(try raw.withUnsafeBytes { try HTTP1Parser().parseResponseHeadLines($0, requestMethod: "GET") })
        let session = try HTTP2ServerSession()
        _ = session.receive(H2.start() + H2.request(stream: 1, H2.get))
        func submit(_ id: Int32) throws(HTTP2SessionError) {
            let r: Result<Void, HTTP2SessionError> = raw.withUnsafeBytes { buf in
                Result { () throws(HTTP2SessionError) in
                    try session.submitResponse(streamID: id, head: lines, from: buf, via: "v", dropContentLength: false, endStream: true)
                }
            }
            try r.get()
        }
        #expect(throws: HTTP2SessionError.self) { try submit(3) }
        try submit(1)
        #expect(throws: HTTP2SessionError.self) { try submit(1) }
    }
}
