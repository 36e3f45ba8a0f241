import CGatewayNGHTTP2
import Testing

@testable import GatewayHTTP

/// The proxy submits upstream response heads to HTTP/2 by filling the session's header block
/// (`submitResponse(streamID:status:endStream:fields:)`, its fields from the upstream's bytes:
/// GatewayProxyTests); these tests hold that path to `submitResponse` with `HTTPFields`: the same
/// HEADERS, the same refusals, and the block's HTTP/2 rules.
@Suite("HTTP/2 response heads filled field by field")
struct HTTP2ResponseHeadTests {
    static let heads: [String] =
        ResponseHeadLinesTests.heads.filter { !$0.hasPrefix("HTTP/1.1 100") } + [
            "HTTP/1.1 200 OK\r\nHost: upstream\r\nX-Empty:\r\nX-Tab: a\tb\r\nVia: 1.0 far\r\nConnection: via\r\nContent-Length: 1\r\n\r\n",
            "HTTP/1.1 204 No Content\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\nCONTENT-TYPE: text/plain\r\nConnection: set-cookie\r\n\r\n",
            "HTTP/1.1 200 OK\r\nX-Obs: \u{FF}\u{80}\r\nVia: 1.1 \u{E9}\r\nContent-Length: 0\r\n\r\n",
            ResponseHeadLinesTests.many,
        ]

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

    @Test("through a session: the HEADERS frame of a filled block decodes to the HTTPFields path's", arguments: heads)
    func sameFrames(_ text: String) throws {
        let raw = ResponseHeadLinesTests.bytes(text)
        let (lines, _) = try #require(try raw.withUnsafeBytes { try HTTP1Parser().parseResponseHeadLines($0, requestMethod: "GET") })
        let head = raw.withUnsafeBytes { lines.materialize($0) }
        var fields = head.headers
        HopByHop.strip(&fields, isRequest: false)
        func headers(_ submit: (HTTP2ServerSession) throws -> Void) throws -> [(String, String)] {
            let session = try HTTP2ServerSession()
            let events = session.receive(H2.start() + H2.request(stream: 1, H2.get))
            #expect(events.contains { if case .request(streamID: 1, _) = $0 { true } else { false } })
            try submit(session)
            return HeaderDecoder().decode(H2.frames(session.pullOutput()))[1] ?? []
        }
        let filled = try headers { s in
            try s.submitResponse(streamID: 1, status: head.status, endStream: true) { block in
                for f in fields { block.append(name: f.name, value: f.value) }
            }
        }
        let stringPath = try headers { s in try s.submitResponse(streamID: 1, status: head.status, headers: fields, endStream: true) }
        #expect(!filled.isEmpty)
        #expect(filled.map { "\($0.0): \($0.1)" } == stringPath.map { "\($0.0): \($0.1)" })
    }

    @Test("a filled block is refused where submitResponse refuses: unknown stream, second response")
    func refusals() throws {
        let raw = Array("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n".utf8)
        let (lines, _) = try #require(try raw.withUnsafeBytes { try HTTP1Parser().parseResponseHeadLines($0, requestMethod: "GET") })
        let session = try HTTP2ServerSession()
        _ = session.receive(H2.start() + H2.request(stream: 1, H2.get))
        func submit(_ id: Int32) throws(HTTP2SessionError) {
            let r: Result<Void, HTTP2SessionError> = raw.withUnsafeBytes { buf in
                Result { () throws(HTTP2SessionError) in
                    try session.submitResponse(streamID: id, status: lines.status, endStream: true) { block in
                        for f in lines.fields {
                            block.append(
                                name: UnsafeRawBufferPointer(rebasing: buf[f.name]), value: UnsafeRawBufferPointer(rebasing: buf[f.value]))
                        }
                    }
                }
            }
            try r.get()
        }
        #expect(throws: HTTP2SessionError.self) { try submit(3) }
        try submit(1)
        #expect(throws: HTTP2SessionError.self) { try submit(1) }
    }
}
