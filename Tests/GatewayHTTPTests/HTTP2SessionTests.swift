import CGatewayNGHTTP2
@_spi(Testing) import GatewayHTTP
import Testing

/// Answers every request with `body` once its request body has ended (the gateway's part in tests).
final class Responder {
    let session: HTTP2ServerSession
    var heads: [Int32: HTTPRequestHead] = [:]
    var bodies: [Int32: [UInt8]] = [:]
    var ended: Set<Int32> = []
    var closed: [Int32: HTTP2ErrorCode] = [:]
    var resets: [Int32: HTTP2ErrorCode] = [:]
    var writable: [Int32] = []
    var consumeRequestData = true
    var respond: (Int32, HTTPRequestHead) -> (Int, HTTPFields, [UInt8])? = { _, head in
        (200, HTTPFields([("content-type", "text/plain")]), Array("you asked for \(head.target)".utf8))
    }

    init(_ session: HTTP2ServerSession) { self.session = session }

    func handle(_ event: HTTP2Event) throws {
        switch event {
        case .request(let id, let head): heads[id] = head
        case .requestData(let id, let bytes):
            bodies[id, default: []] += bytes
            if consumeRequestData { session.consume(streamID: id, count: bytes.count) }
        case .requestEnd(let id):
            ended.insert(id)
            if let (status, fields, body) = respond(id, heads[id]!) {
                try session.submitResponse(streamID: id, status: status, headers: fields, endStream: body.isEmpty)
                if !body.isEmpty { try session.sendResponseBody(streamID: id, body, endStream: true) }
            }
        case .streamClosed(let id, let code): closed[id] = code
        case .streamReset(let id, let code): resets[id] = code
        case .responseWritable(let id): writable.append(id)
        default: break
        }
    }
}

@Suite("HTTP/2 server session")
struct HTTP2SessionTests {
    // MARK: requests and responses

    @Test("RFC 9113 §3.4, §8.3.1: a GET is delivered as an HTTPRequestHead and answered on its stream")
    func get() throws {
        let server = try HTTP2ServerSession()
        let client = H2TestClient()
        let responder = Responder(server)
        let id = client.request(path: "/hello?x=1", headers: [("accept", "text/plain"), ("cookie", "a=1"), ("cookie", "b=2")])
        let events = try pump(client, server, handle: responder.handle)

        let head = try #require(responder.heads[id])
        #expect(head.method == "GET")
        #expect(head.target == "/hello?x=1")
        #expect(head.minorVersion == 1)
        #expect(head.framing == .none)
        #expect(head.headers.fields.first == HTTPFields.Field("Host", "api.example"))
        #expect(head.headers["accept"] == "text/plain")
        #expect(head.headers.values("cookie") == ["a=1; b=2"], "RFC 9113 §8.2.3: cookie crumbs joined")
        #expect(events.first == .request(streamID: id, head: head))
        #expect(events.contains(.requestEnd(streamID: id)))

        // Empty crumbs are left out (fuzz/FailCases/FuzzHTTP2): "a=1; ; " would end in a space.
        let crumbs = client.request(path: "/c", headers: [("cookie", "a=1"), ("cookie", ""), ("cookie", "")])
        let empty = client.request(path: "/d", headers: [("cookie", ""), ("cookie", "")])
        _ = try pump(client, server, handle: responder.handle)
        #expect(try #require(responder.heads[crumbs]).headers.values("cookie") == ["a=1"])
        #expect(try #require(responder.heads[empty]).headers.values("cookie") == [""])

        let response = try #require(client.responses[id])
        #expect(response.status == "200")
        #expect(String(decoding: response.body, as: UTF8.self) == "you asked for /hello?x=1")
        #expect(response.closed == .noError)
        #expect(responder.closed[id] == .noError)
        #expect(server.openStreamCount == 0)
        #expect(!server.isFinished, "an idle connection stays open")
    }

    @Test("RFC 9113 §8.1, §6.1; RFC 9110 §8.6: a POST body in several DATA frames, framed by content-length")
    func postInSeveralDataFrames() throws {
        let server = try HTTP2ServerSession()
        let client = H2TestClient()
        let responder = Responder(server)
        let body = (0..<40_000).map { UInt8($0 % 251) }
        let id = client.request(method: "POST", path: "/api/purchase", headers: [("content-length", "40000")], body: body)
        let events = try pump(client, server, handle: responder.handle)

        #expect(responder.heads[id]?.framing == .contentLength(40_000))
        #expect(responder.bodies[id] == body)
        let chunks = events.filter { if case .requestData = $0 { true } else { false } }
        #expect(chunks.count >= 3, "40000 bytes need at least 3 DATA frames of 16384")
        #expect(client.responses[id]?.status == "200")
        #expect(client.responses[id]?.closed == .noError)
    }

    @Test("RFC 9113 §8.1: a body without content-length is delivered with unknown length (chunked upstream)")
    func postWithoutContentLength() throws {
        let server = try HTTP2ServerSession()
        let client = H2TestClient()
        let responder = Responder(server)
        let id = client.request(method: "PUT", path: "/u", body: Array(repeating: 7, count: 100))
        try pump(client, server, handle: responder.handle)
        #expect(responder.heads[id]?.framing == .chunked)
        #expect(responder.bodies[id]?.count == 100)
    }

    @Test("RFC 9113 §5.1.2, §5.3: several concurrent streams are answered independently, in any order")
    func concurrentStreams() throws {
        let server = try HTTP2ServerSession()
        let client = H2TestClient()
        let responder = Responder(server)
        var held: [Int32] = []
        responder.respond = { id, _ in
            held.append(id)
            return nil
        }
        let ids = (0..<5).map { client.request(path: "/r\($0)") }
        try pump(client, server, handle: responder.handle)
        #expect(held == ids)
        #expect(server.openStreamCount == 5)
        for id in held.reversed() {
            try server.submitResponse(streamID: id, status: 200, headers: HTTPFields(), endStream: false)
            try server.sendResponseBody(streamID: id, Array("stream \(id)".utf8), endStream: true)
        }
        try pump(client, server, handle: responder.handle)
        for id in ids {
            #expect(String(decoding: client.responses[id]?.body ?? [], as: UTF8.self) == "stream \(id)")
            #expect(client.responses[id]?.closed == .noError)
        }
        #expect(server.openStreamCount == 0)
    }

    @Test("RFC 9113 §5.2, §6.9: a large response waits for the client's WINDOW_UPDATE")
    func responseFlowControl() throws {
        var settings = HTTP2Settings()
        settings.responseHighWater = 16 * 1024
        let server = try HTTP2ServerSession(settings: settings)
        let client = H2TestClient(settings: [(NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 1000)], autoConsume: false)
        let responder = Responder(server)
        let body = (0..<100_000).map { UInt8($0 % 253) }
        responder.respond = { _, _ in nil }
        let id = client.request(path: "/big")
        try pump(client, server, handle: responder.handle)
        try server.submitResponse(streamID: id, status: 200, headers: HTTPFields([("content-length", "100000")]), endStream: false)
        try server.sendResponseBody(streamID: id, body, endStream: true)
        #expect(server.shouldPauseUpstream(streamID: id))
        try pump(client, server, handle: responder.handle)

        // The client's stream window (1000) is all the server may send before a WINDOW_UPDATE.
        #expect(client.responses[id]?.body.count == 1000)
        #expect(server.bufferedResponseBytes(streamID: id) == 99_000)
        #expect(client.responses[id]?.closed == nil)

        var rounds = 0
        while client.responses[id]?.closed == nil, rounds < 1000 {
            client.consumeAll()
            try pump(client, server, handle: responder.handle)
            rounds += 1
        }
        #expect(rounds > 1, "the body needed several window updates")
        #expect(client.responses[id]?.body == body)
        #expect(client.responses[id]?.closed == .noError)
        #expect(responder.writable == [id], "reported once when the buffer fell below the high-water mark")
    }

    @Test("RFC 9113 §5.2, §6.9: request DATA beyond the window waits until the consumer acknowledges it")
    func requestBackPressure() throws {
        var settings = HTTP2Settings()
        settings.initialWindowSize = 32 * 1024
        let server = try HTTP2ServerSession(settings: settings)
        let client = H2TestClient()
        let responder = Responder(server)
        responder.consumeRequestData = false
        let body = (0..<200_000).map { UInt8($0 % 249) }
        try pump(client, server)  // SETTINGS exchanged first: before them, the client may assume 65535
        let id = client.request(method: "POST", path: "/upload", headers: [("content-length", "200000")], body: body)
        try pump(client, server, handle: responder.handle)
        #expect(responder.bodies[id]?.count == 32 * 1024, "the stream window holds the client back")

        var rounds = 0
        while !responder.ended.contains(id), rounds < 100 {
            let have = responder.bodies[id]?.count ?? 0
            server.consume(streamID: id, count: have)
            server.consume(streamID: id, count: have)  // an extra acknowledgement is ignored
            responder.bodies[id] = []
            try pump(client, server, handle: responder.handle)
            rounds += 1
        }
        #expect(rounds >= 6, "200000 bytes through a 32 KiB window need at least 6 acknowledgements")
        #expect(client.responses[id]?.status == "200")
    }

    @Test("RFC 9113 §8.2.2, RFC 9110 §7.6.1: hop-by-hop fields are not sent in a response")
    func responseHopByHop() throws {
        let server = try HTTP2ServerSession()
        let client = H2TestClient()
        let responder = Responder(server)
        responder.respond = { _, _ in
            (
                204,
                HTTPFields([
                    ("Connection", "close, X-Private"), ("Keep-Alive", "timeout=5"), ("Transfer-Encoding", "chunked"),
                    ("Upgrade", "h2c"), ("X-Private", "1"), ("X-Kept", "yes"), ("Bad Name", "x"),
                ]), []
            )
        }
        let id = client.request(path: "/")
        try pump(client, server, handle: responder.handle)
        let response = try #require(client.responses[id])
        #expect(response.status == "204")
        #expect(response.headers.map(\.0) == [":status", "x-kept"])
    }

    @Test("RFC 9113 §8.1: a response status must be final (no 1xx) and submitted once")
    func responseMisuse() throws {
        let server = try HTTP2ServerSession()
        let client = H2TestClient()
        let responder = Responder(server)
        responder.respond = { _, _ in nil }
        let id = client.request(path: "/")
        try pump(client, server, handle: responder.handle)
        #expect(throws: HTTP2SessionError(.invalidStatus, "status 101")) {
            try server.submitResponse(streamID: id, status: 101, headers: HTTPFields(), endStream: true)
        }
        #expect(throws: HTTP2SessionError(.noResponse, "stream \(id) has no response head")) {
            try server.sendResponseBody(streamID: id, [1], endStream: true)
        }
        #expect(throws: HTTP2SessionError(.unknownStream, "stream 99 is not open")) {
            try server.submitResponse(streamID: 99, status: 200, headers: HTTPFields(), endStream: true)
        }
        try server.submitResponse(streamID: id, status: 200, headers: HTTPFields(), endStream: false)
        #expect(throws: HTTP2SessionError(.responseAlreadySubmitted, "stream \(id) already has a response")) {
            try server.submitResponse(streamID: id, status: 200, headers: HTTPFields(), endStream: true)
        }
        try server.sendResponseBody(streamID: id, [], endStream: true)
        try pump(client, server, handle: responder.handle)
        #expect(client.responses[id]?.status == "200")
        #expect(client.responses[id]?.closed == .noError)
    }

    @Test("RFC 9110 §15.2.1, RFC 9113 §8.1: 100 Continue is sent as an interim HEADERS before the final response")
    func interimContinue() throws {
        let server = try HTTP2ServerSession()
        let client = H2TestClient()
        let responder = Responder(server)
        var continued: [Int32] = []
        let handle: (HTTP2Event) throws -> Void = { event in
            if case .request(let id, let head) = event, head.expectsContinue {
                continued.append(id)
                #expect(throws: HTTP2SessionError(.invalidStatus, "status 101")) {
                    try server.submitInterimResponse(streamID: id, status: 101)
                }
                try server.submitInterimResponse(streamID: id, status: 100)
            }
            try responder.handle(event)
        }
        let id = client.request(method: "POST", path: "/p", headers: [("expect", "100-continue")], body: [1, 2, 3])
        try pump(client, server, handle: handle)
        #expect(continued == [id])
        #expect(client.responses[id]?.headers.filter { $0.0 == ":status" }.map(\.1) == ["100", "200"])
        #expect(responder.bodies[id] == [1, 2, 3])
    }

    @Test("RFC 9113 §6.4, §5.4.2: a stream reset by the client is reported and its bytes are given back")
    func peerReset() throws {
        let server = try HTTP2ServerSession()
        var bytes = H2.start()
        bytes += H2.request(stream: 1, H2.get + [("content-length", "10")], endStream: false)
        bytes += H2.data(stream: 1, Array(repeating: 1, count: 4))
        bytes += H2.rst(stream: 1, code: .cancel)
        let events = server.receive(bytes)
        #expect(events.count == 4)
        #expect(events.last == .streamClosed(streamID: 1, code: .cancel))
        #expect(events.contains(.streamReset(streamID: 1, code: .cancel)))
        #expect(throws: HTTP2SessionError(.unknownStream, "stream 1 is not open")) {
            try server.submitResponse(streamID: 1, status: 200, headers: HTTPFields(), endStream: true)
        }
        server.consume(streamID: 1, count: 4)  // late acknowledgement: ignored
        #expect(server.wantsRead)
    }

    @Test("RFC 9113 §6.9.1: unconsumed bytes of a stream the client reset go back to the connection window")
    func resetStreamGivesWindowBack() throws {
        var settings = HTTP2Settings()
        settings.connectionWindowSize = 65535
        let server = try HTTP2ServerSession(settings: settings)
        _ = server.pullOutput()
        var bytes = H2.start() + H2.request(stream: 1, H2.get + [("content-length", "60000")], endStream: false)
        for _ in 0..<4 { bytes += H2.data(stream: 1, Array(repeating: 0x62, count: 15000)) }
        server.receive(bytes)
        let before = H2.frames(server.pullOutput()).filter { $0.type == H2.FrameType.windowUpdate.rawValue }
        #expect(before.isEmpty, "nothing consumed yet: no WINDOW_UPDATE")
        let events = server.receive(H2.rst(stream: 1, code: .cancel))
        #expect(events.last == .streamClosed(streamID: 1, code: .cancel))
        let updates = H2.frames(server.pullOutput()).filter { $0.type == H2.FrameType.windowUpdate.rawValue && $0.stream == 0 }
        #expect(updates.map { H2.u32($0.payload, 0) } == [60000])
    }

    @Test("RFC 9113 §6.8: GOAWAY from the client is reported")
    func clientGoaway() throws {
        let server = try HTTP2ServerSession()
        let events = server.receive(H2.start() + H2.frame(.goaway, H2.be32(0) + H2.be32(0)))
        #expect(events == [.goaway(lastStreamID: 0, code: .noError)])
        _ = server.pullOutput()
        #expect(server.isFinished)
    }

    @Test("RFC 9113 §3.4: a connection that does not start with the preface is a connection error")
    func badPreface() throws {
        let server = try HTTP2ServerSession()
        let events = server.receive(Array("GET / HTTP/1.1\r\nHost: a\r\n\r\n".utf8))
        #expect(events.count == 1)
        guard case .connectionError(let code, _) = events.first else {
            Issue.record("expected a connection error, got \(events)")
            return
        }
        #expect(code == .protocolError)
        _ = server.pullOutput()
        #expect(server.isFinished)
    }

    @Test("RFC 9113 §6.8: drain sends GOAWAY(2^31-1) and PING, then GOAWAY(last stream); in-flight streams finish")
    func gracefulDrain() throws {
        let server = try HTTP2ServerSession()
        let client = H2TestClient()
        let responder = Responder(server)
        responder.respond = { _, _ in nil }
        let first = client.request(path: "/slow")
        try pump(client, server, handle: responder.handle)
        server.beginDrain()
        try pump(client, server, handle: responder.handle)
        #expect(client.goaways.map(\.lastStreamID) == [Int32.max, first], "notice, then the final GOAWAY after the PING ack")
        #expect(client.goaways.allSatisfy { $0.code == .noError })
        #expect(!server.isFinished, "stream \(first) is still in flight")

        try server.submitResponse(streamID: first, status: 200, headers: HTTPFields(), endStream: false)
        try server.sendResponseBody(streamID: first, Array("done".utf8), endStream: true)
        try pump(client, server, handle: responder.handle)
        #expect(String(decoding: client.responses[first]?.body ?? [], as: UTF8.self) == "done")
        #expect(server.isFinished)
    }

    @Test("RFC 9113 §6.8: a stream opened after the final GOAWAY is not processed")
    func drainIgnoresNewStreams() throws {
        let server = try HTTP2ServerSession()
        server.receive(H2.start() + H2.request(stream: 1, H2.get))
        server.beginDrain()
        server.finishDrain()
        _ = server.pullOutput()
        let events = server.receive(H2.request(stream: 3, H2.get))
        #expect(events.isEmpty)
        #expect(server.openStreamCount == 1)
        try server.submitResponse(streamID: 1, status: 200, headers: HTTPFields(), endStream: true)
        let frames = H2.frames(server.pullOutput())
        #expect(frames.contains { $0.type == H2.FrameType.headers.rawValue && $0.stream == 1 })
        #expect(server.isFinished)
    }

    @Test("RFC 9113 §6.5: the server's SETTINGS come first and carry the configured values")
    func settingsFrame() throws {
        var settings = HTTP2Settings()
        settings.maxConcurrentStreams = 7
        let server = try HTTP2ServerSession(settings: settings)
        let frames = H2.frames(server.pullOutput())
        let first = try #require(frames.first)
        #expect(first.type == H2.FrameType.settings.rawValue && first.flags == 0)
        var values: [UInt16: UInt32] = [:]
        for i in stride(from: 0, to: first.payload.count, by: 6) {
            values[UInt16(first.payload[i]) << 8 | UInt16(first.payload[i + 1])] = H2.u32(first.payload, i + 2)
        }
        #expect(values == [0x1: 4096, 0x2: 0, 0x3: 7, 0x4: 65536, 0x5: 16384, 0x6: 16384])
        #expect(frames.dropFirst().first?.type == H2.FrameType.windowUpdate.rawValue, "connection window raised")
    }

    @Test("RFC 9113 §6.5.2: settings outside their ranges are refused")
    func invalidSettings() {
        var s = HTTP2Settings()
        s.maxFrameSize = 1000
        #expect(throws: HTTP2SessionError.self) { try HTTP2ServerSession(settings: s) }
        s = HTTP2Settings()
        s.initialWindowSize = 1 << 31
        #expect(throws: HTTP2SessionError.self) { try HTTP2ServerSession(settings: s) }
    }
}
