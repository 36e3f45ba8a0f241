import Testing

@_spi(Testing) @testable import GatewayHTTP
@testable import GatewayProxy

/// What the client sees of an upstream's response head (`DownstreamResponseHead`, Forwarding/): the
/// byte writers for HTTP/1.1 and HTTP/2 clients held to the rules applied on strings (hop-by-hop
/// strip, Content-Length once, Via extended, framing fields), byte for byte and field for field.
@Suite("Response heads: what the client sees")
struct ResponseForwardingTests {
    static let heads: [String] = [
        "HTTP/1.1 200 OK\r\nServer: nginx\r\nDate: Mon, 23 Nov 2026 14:00:00 GMT\r\nContent-Type: application/json\r\nContent-Length: 31\r\nConnection: keep-alive\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-A: 1\r\nConnection: X-A, close\r\n\r\n",
        "HTTP/1.1 200 \r\nContent-Length: 0\r\n\r\n",
        "HTTP/1.1 404 Not Found\r\nVia: 1.1 a\r\nvia: 1.0 b\r\nKeep-Alive: timeout=5\r\nContent-Length: 2\r\n\r\n",
        "HTTP/1.1 200 OK\r\nVia: \r\nContent-Length:  7  \r\n\r\n",
        "HTTP/1.1 200 OK\r\nVia: \r\nVia:\r\nUpgrade: h2c\r\nTrailer: X\r\nProxy-Authenticate: Basic\r\nTE: trailers\r\n\r\n",
        "HTTP/1.0 200 OK\r\nX-Latin: caf\u{E9}\r\nconnection: Keep-Alive, x-latin\r\nHost: h\r\n\r\n",
        "HTTP/1.1 301 Moved\r\nLocation: /x\r\nConnection: host, location\r\nContent-Length: 0\r\n\r\n",
        "HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\nContent-Length: 9\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: , Chunked ,\r\nConnection: Close\r\n\r\n",
        "HTTP/1.0 200 OK\r\nContent-Length: 3, 3\r\nCONNECTION: keep-alive\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 0003\r\nContent-Length: 3\r\nConnection: keep-alive, close\r\n\r\n",
        "HTTP/1.1 204 No Content\r\nTransfer-Encoding: gzip\r\nContent-Length: x\r\n\r\n",
        "HTTP/1.0 200 OK\r\n\r\n",
        "HTTP/1.1 200 OK\r\nVia: 1.0 hidden\r\nVia: 1.1 kept\r\nConnection: via\r\nContent-Length: 0\r\n\r\n",
        "HTTP/1.1 200 OK\r\nX-A: 1\r\nConnection: keep-alive\r\nConnection: x-a\r\nKeep-Alive: 5\r\nContent-Length: 0\r\n\r\n",
        "HTTP/1.1 200 OK\r\nHost: upstream\r\nX-Empty:\r\nX-Tab: a\tb\r\nVia: 1.0 far\r\nConnection: via\r\nContent-Length: 1\r\n\r\n",
        "HTTP/1.1 204 No Content\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\nCONTENT-TYPE: text/plain\r\nConnection: set-cookie\r\n\r\n",
        "HTTP/1.1 200 OK\r\nX-Obs: \u{FF}\u{80}\r\nVia: 1.1 \u{E9}\r\nContent-Length: 0\r\n\r\n",
        "HTTP/1.1 200 OK\r\nX-Request-Id: upstream-own\r\nx-request-id: second\r\nContent-Length: 0\r\n\r\n",
        many,
    ]

    /// Past the 64 fields whose classes the parser keeps as bits: the rest are classified by name.
    static let many: String = {
        var t = "HTTP/1.1 200 OK\r\n"
        for i in 0..<62 { t += "X-F\(i): \(i)\r\n" }
        t += "Via: 1.0 early\r\nConnection: x-late, keep-alive\r\n"
        t += "X-Late: 1\r\nvia: 1.1 late\r\nKeep-Alive: 5\r\nContent-Length: 3\r\nTE: trailers\r\nX-Kept: yes\r\nserver: late/1\r\n\r\n"
        return t
    }()

    /// Latin-1 bytes of a test string (U+00E9 etc. for obs-text bytes).
    static func bytes(_ s: String) -> [UInt8] { s.unicodeScalars.map { UInt8($0.value) } }

    /// The rules on strings, one step each (the model the writers are held to).
    static func model(_ r: HTTPResponseHead, dropContentLength: Bool, requestID: String = "", passServer: Bool = false) -> HTTPFields {
        var fields = r.headers
        HopByHop.strip(&fields, isRequest: false)
        if !passServer { fields.remove("Server") }  // the backend's banner, unless the route passes it
        fields.collapseContentLength()
        fields.remove("X-Request-Id")  // the gateway's: an upstream's never reaches the client
        let via = fields.values("Via").joined(separator: ", ")
        fields.remove("Via")
        fields.append("Via", via.isEmpty ? "1.1 attest-gateway" : "\(via), 1.1 attest-gateway")
        if !requestID.isEmpty { fields.append("X-Request-Id", requestID) }
        if dropContentLength { fields.remove("Content-Length") }
        return fields
    }

    static func parse(_ text: String) throws -> ([UInt8], HTTPResponseHeadLines, HTTPResponseHead) {
        let raw = bytes(text)
        let (lines, _) = try #require(try raw.withUnsafeBytes { try HTTP1Parser().parseResponseHeadLines($0, requestMethod: "GET") })
        return (raw, lines, raw.withUnsafeBytes { lines.materialize($0) })
    }

    @Test("HTTP/1.1: the written head equals the rules on strings, for every framing choice", arguments: heads)
    func http1(_ text: String) throws {
        let (raw, lines, head) = try Self.parse(text)
        for drop in [false, true] {
            for chunked in [false, true] {
                for (connection, passServer) in [(nil, false), ("close", true), ("keep-alive", false), (nil, true)] as [(String?, Bool)] {
                    let id = connection == nil ? "" : "rid-1"
                    var out: [UInt8] = [1, 2]  // appends after what is there
                    HeadWriter.appendHead(to: &out) { w in
                        raw.withUnsafeBytes { buf in
                            var i = id
                            i.withUTF8 {
                                DownstreamResponseHead.writeHTTP1(
                                    lines, from: buf, dropContentLength: drop, chunked: chunked,
                                    connection: connection, requestID: UnsafeRawBufferPointer($0),
                                    passServer: passServer, to: &w)
                            }
                        }
                    }
                    var fields = Self.model(head, dropContentLength: drop, requestID: id, passServer: passServer)
                    if chunked { fields.append("Transfer-Encoding", "chunked") }
                    if let connection { fields.set("Connection", connection) }
                    let expected = [1, 2] + HTTP1Serializer.responseHead(status: head.status, reason: head.reason, headers: fields)
                    #expect(
                        out == expected,
                        "\(text.debugDescription) drop=\(drop) chunked=\(chunked) connection=\(connection ?? "nil") passServer=\(passServer)"
                    )
                }
            }
        }
    }

    /// The HTTP/2 header list the byte writer builds for `lines`, as "name: value" lines.
    static func http2Pairs(
        _ raw: [UInt8], _ lines: HTTPResponseHeadLines, drop: Bool, requestID: String,
        routeFields: HTTPFields = HTTPFields(), passServer: Bool = false
    ) -> [String] {
        var block = HTTP2HeaderBlock()
        block.appendStatus(lines.status)
        var id = requestID
        raw.withUnsafeBytes { buf in
            id.withUTF8 {
                DownstreamResponseHead.appendHTTP2(
                    lines, from: buf, dropContentLength: drop, requestID: UnsafeRawBufferPointer($0),
                    routeFields: routeFields, passServer: passServer, to: &block)
            }
        }
        return block.pairs.map { "\($0.0): \($0.1)" }
    }

    @Test("HTTP/2: the header list built from bytes equals the rules on strings", arguments: heads)
    func http2(_ text: String) throws {
        let (raw, lines, head) = try Self.parse(text)
        for drop in [false, true] {
            for passServer in [false, true] {
                let id = drop ? "rid-2" : ""
                let expected = HTTP2ServerSession.responseFields(
                    status: head.status, Self.model(head, dropContentLength: drop, requestID: id, passServer: passServer))
                #expect(
                    Self.http2Pairs(raw, lines, drop: drop, requestID: id, passServer: passServer) == expected.map { "\($0.0): \($0.1)" },
                    "\(text.debugDescription) drop=\(drop) passServer=\(passServer)")
            }
        }
    }

    @Test("a route's response fields: set over the upstream's, after the same rules")
    func routeFields() throws {
        let (_, _, head) = try Self.parse(
            "HTTP/1.1 200 OK\r\nX-Next: upstream\r\nVia: 1.0 a\r\nConnection: close\r\nContent-Length: 2\r\n\r\n")
        let fields = DownstreamResponseHead.fields(
            head, routeFields: HTTPFields([("X-Next", "gateway"), ("X-New", "1")]),
            dropContentLength: true)
        #expect(fields.map { "\($0.name): \($0.value)" } == ["Via: 1.0 a, 1.1 attest-gateway", "X-Next: gateway", "X-New: 1"])
    }

    /// Route fields that take the byte path (`Forward.responseFieldsAsBytes`): new names, and names an
    /// upstream also sends (in another case), which the route's value replaces.
    static let routeFieldSets: [HTTPFields] = [
        HTTPFields([("X-App-Attest-Next-Challenge", "abc"), ("X-App-Attest-Next-Challenge-Expires", "2026-11-26T13:00:00.000Z")]),
        HTTPFields([("x-a", "route"), ("Set-Cookie", "r=1"), ("X-F61", "61"), ("x-kept", "no")]),
        HTTPFields([("ETag", "\"r\""), ("Location", "/route")]),
    ]

    @Test(
        "HTTP/1.1 and HTTP/2: a route's response fields written with the upstream's bytes equal the rules on strings",
        arguments: heads)
    func routeFieldsAsBytes(_ text: String) throws {
        let (raw, lines, head) = try Self.parse(text)
        for routeFields in Self.routeFieldSets {
            #expect(Forward.writableAsBytes(routeFields))
            for drop in [false, true] {
                for connection in [nil, "close"] {
                    let id = connection == nil ? "" : "rid-3"
                    var out: [UInt8] = []
                    HeadWriter.appendHead(to: &out) { w in
                        raw.withUnsafeBytes { buf in
                            var i = id
                            i.withUTF8 {
                                DownstreamResponseHead.writeHTTP1(
                                    lines, from: buf, dropContentLength: drop, chunked: drop,
                                    connection: connection, requestID: UnsafeRawBufferPointer($0),
                                    routeFields: routeFields, to: &w)
                            }
                        }
                    }
                    var fields = DownstreamResponseHead.fields(head, routeFields: routeFields, dropContentLength: drop, requestID: id)
                    if drop { fields.append("Transfer-Encoding", "chunked") }
                    if let connection { fields.set("Connection", connection) }
                    let expected = HTTP1Serializer.responseHead(status: head.status, reason: head.reason, headers: fields)
                    #expect(out == expected, "\(text.debugDescription) drop=\(drop) \(routeFields)")
                }
                let id = drop ? "rid-4" : ""
                let expected = HTTP2ServerSession.responseFields(
                    status: head.status,
                    DownstreamResponseHead.fields(head, routeFields: routeFields, dropContentLength: drop, requestID: id))
                #expect(
                    Self.http2Pairs(raw, lines, drop: drop, requestID: id, routeFields: routeFields) == expected.map { "\($0.0): \($0.1)" },
                    "\(text.debugDescription) drop=\(drop)")
            }
        }
    }

    @Test("route fields the proxy rewrites itself keep the string path")
    func routeFieldsOnStrings() {
        for name in ["Via", "content-length", "X-Request-Id", "Connection", "Transfer-Encoding", "Keep-Alive", "TE", "Upgrade"] {
            #expect(!Forward.writableAsBytes(HTTPFields([("X-Ok", "1"), (name, "x")])), "\(name)")
        }
        #expect(Forward.writableAsBytes(HTTPFields()))
    }
}
