import GatewayHTTP
import Testing

/// Sends one request header block on stream 1 and expects it to be treated as malformed: not
/// delivered, RST_STREAM PROTOCOL_ERROR (RFC 9113 §8.1.1), and the connection still serving stream 3.
func expectMalformed(
    _ fields: [(String, String)], endStream: Bool = true, sourceLocation: SourceLocation = #_sourceLocation
) throws {
    let server = try HTTP2ServerSession()
    let events = server.receive(H2.start() + H2.request(stream: 1, fields, endStream: endStream))
    #expect(events.isEmpty, "malformed request delivered: \(events)", sourceLocation: sourceLocation)
    let frames = H2.frames(server.pullOutput())
    #expect(H2.resets(frames) == [1: .protocolError], sourceLocation: sourceLocation)
    #expect(H2.goaways(frames).isEmpty, "a stream error, not a connection error", sourceLocation: sourceLocation)
    let next = server.receive(H2.request(stream: 3, H2.get))
    #expect(next.first.map { if case .request(3, _) = $0 { true } else { false } } == true, sourceLocation: sourceLocation)
}

func expectAccepted(_ fields: [(String, String)], sourceLocation: SourceLocation = #_sourceLocation) throws -> HTTPRequestHead? {
    let server = try HTTP2ServerSession()
    let events = server.receive(H2.start() + H2.request(stream: 1, fields))
    #expect(H2.resets(H2.frames(server.pullOutput())).isEmpty, sourceLocation: sourceLocation)
    guard case .request(1, let head)? = events.first else {
        Issue.record("not delivered: \(events)", sourceLocation: sourceLocation)
        return nil
    }
    return head
}

/// The request validation rules, each sent over the wire (hand-built HEADERS, literal HPACK).
@Suite("HTTP/2 conformance: malformed requests")
struct HTTP2ConformanceTests {
    @Test("RFC 9113 §8.2.1: an uppercase field name → RST_STREAM PROTOCOL_ERROR")
    func uppercaseName() throws { try expectMalformed(H2.get + [("X-Upper", "1")]) }

    @Test("RFC 9113 §8.2.1: a field name with a space → RST_STREAM PROTOCOL_ERROR")
    func invalidNameCharacter() throws { try expectMalformed(H2.get + [("x bad", "1")]) }

    @Test("RFC 9113 §8.2.1: a field value with CR, LF or NUL → RST_STREAM PROTOCOL_ERROR")
    func invalidValueCharacters() throws {
        for value in ["a\r\nx-injected: 1", "a\nb", "a\u{0}b"] { try expectMalformed(H2.get + [("x-v", value)]) }
    }

    @Test("RFC 9113 §8.2.1: a field value with leading or trailing whitespace → RST_STREAM PROTOCOL_ERROR")
    func valueWhitespace() throws {
        try expectMalformed(H2.get + [("x-v", " a")])
        try expectMalformed(H2.get + [("x-v", "a\t")])
    }

    @Test(
        "RFC 9113 §8.2.2: connection-specific fields (connection, keep-alive, proxy-connection, transfer-encoding, upgrade) → RST_STREAM PROTOCOL_ERROR"
    )
    func connectionSpecific() throws {
        try expectMalformed(H2.get + [("connection", "keep-alive")])
        try expectMalformed(H2.get + [("keep-alive", "timeout=5")])
        try expectMalformed(H2.get + [("proxy-connection", "keep-alive")])
        try expectMalformed(H2.get + [("transfer-encoding", "chunked")])
        try expectMalformed(H2.get + [("upgrade", "websocket")])
    }

    @Test("RFC 9113 §8.2.2: te other than trailers (te: gzip) → RST_STREAM PROTOCOL_ERROR")
    func teGzip() throws { try expectMalformed(H2.get + [("te", "gzip")]) }

    @Test("RFC 9113 §8.2.2: te: trailers is accepted and passed on")
    func teTrailers() throws {
        let head = try expectAccepted(H2.get + [("te", "trailers")])
        #expect(head?.headers["te"] == "trailers")
    }

    @Test("RFC 9113 §8.3.1: a missing :path → RST_STREAM PROTOCOL_ERROR")
    func missingPath() throws { try expectMalformed(H2.get.filter { $0.0 != ":path" }) }

    @Test("RFC 9113 §8.3.1: an empty :path → RST_STREAM PROTOCOL_ERROR")
    func emptyPath() throws { try expectMalformed(H2.get.map { $0.0 == ":path" ? (":path", "") : $0 }) }

    @Test("RFC 9113 §8.3.1: a :path not in origin form → RST_STREAM PROTOCOL_ERROR")
    func pathNotOriginForm() throws { try expectMalformed(H2.get.map { $0.0 == ":path" ? (":path", "api/x") : $0 }) }

    @Test("RFC 9113 §8.3.1: a missing :method → RST_STREAM PROTOCOL_ERROR")
    func missingMethod() throws { try expectMalformed(H2.get.filter { $0.0 != ":method" }) }

    @Test("RFC 9113 §8.3.1: a missing :scheme → RST_STREAM PROTOCOL_ERROR")
    func missingScheme() throws { try expectMalformed(H2.get.filter { $0.0 != ":scheme" }) }

    @Test("RFC 9113 §8.3: a pseudo-header after a regular field → RST_STREAM PROTOCOL_ERROR")
    func pseudoAfterRegular() throws {
        try expectMalformed([(":method", "GET"), (":scheme", "https"), ("accept", "*/*"), (":path", "/"), (":authority", "a")])
    }

    @Test("RFC 9113 §8.3: an unknown pseudo-header → RST_STREAM PROTOCOL_ERROR")
    func unknownPseudo() throws { try expectMalformed(H2.get + [(":foo", "bar")]) }

    @Test("RFC 9113 §8.3.2: a response pseudo-header (:status) in a request → RST_STREAM PROTOCOL_ERROR")
    func statusInRequest() throws { try expectMalformed([(":status", "200")] + H2.get) }

    @Test("RFC 9113 §8.3: a repeated pseudo-header → RST_STREAM PROTOCOL_ERROR")
    func repeatedPseudo() throws { try expectMalformed(H2.get + [(":path", "/other")]) }

    @Test("RFC 9113 §8.3.1: host contradicting :authority → RST_STREAM PROTOCOL_ERROR")
    func authorityHostMismatch() throws { try expectMalformed(H2.get + [("host", "evil.example")]) }

    @Test("RFC 9113 §8.3.1: neither :authority nor host → RST_STREAM PROTOCOL_ERROR")
    func noAuthority() throws { try expectMalformed(H2.get.filter { $0.0 != ":authority" }) }

    @Test("RFC 9113 §8.3.1: host without :authority is used as the Host")
    func hostOnly() throws {
        let head = try expectAccepted(H2.get.filter { $0.0 != ":authority" } + [("host", "legacy.example")])
        #expect(head?.headers.fields.first == HTTPFields.Field("Host", "legacy.example"))
        #expect(head?.headers.values("host").count == 1)
    }

    @Test("RFC 9110 §8.6: two different content-length values → RST_STREAM PROTOCOL_ERROR")
    func conflictingContentLength() throws {
        try expectMalformed(H2.get + [("content-length", "1"), ("content-length", "2")], endStream: false)
    }

    @Test("RFC 9113 §8.1.1: DATA longer or shorter than content-length → RST_STREAM PROTOCOL_ERROR")
    func contentLengthMismatch() throws {
        for sent in [4, 12] {
            let server = try HTTP2ServerSession()
            var bytes = H2.start() + H2.request(stream: 1, H2.get + [("content-length", "10")], endStream: false)
            bytes += H2.data(stream: 1, Array(repeating: 0x61, count: sent), endStream: true)
            let events = server.receive(bytes)
            #expect(events.contains { if case .request(1, _) = $0 { true } else { false } })
            #expect(!events.contains(.requestEnd(streamID: 1)), "a body of \(sent) bytes must not look complete")
            #expect(H2.resets(H2.frames(server.pullOutput())) == [1: .protocolError])
            #expect(server.takeEvents().contains(.streamClosed(streamID: 1, code: .protocolError)))
        }
    }

    @Test("RFC 9113 §8.1: trailers carrying a pseudo-header → RST_STREAM PROTOCOL_ERROR")
    func pseudoInTrailers() throws {
        let server = try HTTP2ServerSession()
        var bytes = H2.start() + H2.request(stream: 1, H2.get, endStream: false)
        bytes += H2.request(stream: 1, [(":path", "/x")], endStream: true)
        let events = server.receive(bytes)
        #expect(!events.contains(.requestEnd(streamID: 1)))
        #expect(H2.resets(H2.frames(server.pullOutput())) == [1: .protocolError])
    }

    @Test("RFC 9113 §8.1: valid trailers end the request and are not passed on")
    func trailersEndRequest() throws {
        let server = try HTTP2ServerSession()
        var bytes = H2.start() + H2.request(stream: 1, H2.get + [("te", "trailers")], endStream: false)
        bytes += H2.data(stream: 1, [1, 2, 3])
        bytes += H2.request(stream: 1, [("x-checksum", "abc")], endStream: true)
        let events = server.receive(bytes)
        #expect(events.count == 3)
        #expect(events.last == .requestEnd(streamID: 1))
    }

    @Test("RFC 9113 §5.1.1: a client stream with an even id is a connection error PROTOCOL_ERROR")
    func evenStreamID() throws {
        let server = try HTTP2ServerSession()
        let events = server.receive(H2.start() + H2.request(stream: 2, H2.get))
        #expect(events.isEmpty)
        let goaways = H2.goaways(H2.frames(server.pullOutput()))
        #expect(goaways.map(\.errorCode) == [.protocolError])
        #expect(connectionErrors(server.takeEvents()) == [.protocolError])
        #expect(server.isFinished)
    }
}

/// The mapping to the gateway's `HTTPRequestHead` and the §8.3 rules, without the wire.
@Suite("HTTP/2 request head mapping")
struct HTTP2RequestHeadTests {
    func fields(_ pairs: [(String, String)]) -> [HTTPFields.Field] { pairs.map { HTTPFields.Field($0.0, $0.1) } }

    @Test("RFC 9113 §8.3.1: :authority becomes the first Host field; content-length sets the framing")
    func mapping() throws {
        let head = try HTTP2RequestHead.make(
            fields: fields([
                (":method", "POST"), (":scheme", "https"), (":authority", "api.example:8443"), (":path", "/api/purchase"),
                ("content-type", "application/json"), ("content-length", "12"), ("x-apple-assertion", "abc"),
            ]), endStream: false)
        #expect(head.method == "POST")
        #expect(head.target == "/api/purchase")
        #expect(head.framing == .contentLength(12))
        #expect(head.headers.fields.map(\.name) == ["Host", "content-type", "content-length", "x-apple-assertion"])
        #expect(head.headers["host"] == "api.example:8443")
        #expect(head.keepAlive)
    }

    @Test("RFC 9113 §8.3.1: OPTIONS * is the only non-origin :path allowed")
    func optionsAsterisk() throws {
        let ok = try HTTP2RequestHead.make(
            fields: fields([(":method", "OPTIONS"), (":scheme", "https"), (":authority", "a"), (":path", "*")]), endStream: true)
        #expect(ok.target == "*")
        #expect(throws: HTTP2RequestViolation.invalidPath("*")) {
            try HTTP2RequestHead.make(
                fields: self.fields([(":method", "GET"), (":scheme", "https"), (":authority", "a"), (":path", "*")]), endStream: true)
        }
    }

    @Test("RFC 9113 §8.3, §8.2.2: each violation is named")
    func violations() {
        let base = [(":method", "GET"), (":scheme", "https"), (":authority", "a"), (":path", "/")]
        let cases: [([(String, String)], HTTP2RequestViolation)] = [
            (base + [("X-A", "1")], .uppercaseName("X-A")),
            (base + [("connection", "close")], .connectionSpecificField("connection")),
            (base + [("te", "gzip")], .invalidTE("gzip")),
            (base + [(":foo", "1")], .unknownPseudoHeader(":foo")),
            (base + [(":path", "/b")], .repeatedPseudoHeader(":path")),
            ([("a", "1")] + base, .pseudoHeaderAfterRegular(":method")),
            (Array(base.dropLast()), .missingPseudoHeader(":path")),
            (base + [("host", "b")], .authorityMismatch(authority: "a", host: "b")),
            (base + [("content-length", "-1")], .invalidContentLength("-1")),
            (base + [("content-length", "1"), ("content-length", "2")], .invalidContentLength("2")),
            (base + [("x", "a\r\nb")], .invalidValue(name: "x")),
        ]
        for (f, violation) in cases {
            #expect(throws: violation) { try HTTP2RequestHead.make(fields: self.fields(f), endStream: true) }
        }
    }

    @Test("RFC 9110 §8.6: a repeated identical content-length is kept once")
    func repeatedContentLength() throws {
        let head = try HTTP2RequestHead.make(
            fields: fields([
                (":method", "PUT"), (":scheme", "https"), (":authority", "a"), (":path", "/"),
                ("content-length", "5"), ("content-length", "5"),
            ]), endStream: false)
        #expect(head.framing == .contentLength(5))
        #expect(head.headers.values("content-length") == ["5"])
    }
}
