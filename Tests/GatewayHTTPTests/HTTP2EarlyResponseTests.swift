import GatewayHTTP
import Testing

/// A response sent before the request ended (the gateway's refusal from the head): the session
/// resets the request with RST_STREAM NO_ERROR only once the whole response is out (RFC 9113 §8.1).
@Suite("HTTP/2 server session: a complete response before the request ended")
struct HTTP2EarlyResponseTests {
    /// Starts a POST on stream 1 whose body is still coming, answers it at once with a body, and
    /// returns the server's frames on stream 1 (after `stopRequestAfterResponse` when `stop`).
    static func answerEarly(stop: Bool, requestEndsFirst: Bool = false) throws -> (HTTP2ServerSession, [H2.Frame]) {
        let server = try HTTP2ServerSession()
        var bytes = H2.start()
        bytes += H2.request(
            stream: 1, H2.get.map { $0.0 == ":method" ? ($0.0, "POST") : $0 } + [("content-length", "2000")],
            endStream: false)
        bytes += H2.data(stream: 1, Array(repeating: 1, count: 1000))
        let events = server.receive(bytes)
        #expect(events.first.map { if case .request(1, _) = $0 { true } else { false } } == true)
        for e in events { if case .requestData(let id, let b) = e { server.consume(streamID: id, count: b.count) } }
        if requestEndsFirst { _ = server.receive(H2.data(stream: 1, Array(repeating: 1, count: 1000), endStream: true)) }
        try server.submitResponse(streamID: 1, status: 401, headers: HTTPFields([("content-type", "application/json")]), endStream: false)
        try server.sendResponseBody(streamID: 1, Array("{\"error\":\"assertion_missing\"}\n".utf8), endStream: true)
        if stop { server.stopRequestAfterResponse(streamID: 1) }
        let frames = H2.frames(server.pullOutput()).filter { $0.stream == 1 }
        return (server, frames)
    }

    @Test("RFC 9113 §8.1: HEADERS, DATA with END_STREAM, then RST_STREAM NO_ERROR; later DATA is dropped, the connection lives")
    func resetAfterTheResponse() throws {
        let (server, frames) = try Self.answerEarly(stop: true)
        #expect(frames.map(\.type) == [H2.FrameType.headers.rawValue, H2.FrameType.data.rawValue, H2.FrameType.rstStream.rawValue])
        #expect(frames.count == 3 && frames[1].flags & H2.endStream != 0 && frames[1].payload.count > 0)
        #expect(frames.last?.errorCode == .noError)
        // The body the client had in flight is dropped by the session; the connection goes on.
        let late = server.receive(H2.data(stream: 1, Array(repeating: 2, count: 500)))
        #expect(!late.contains { if case .connectionError = $0 { true } else { false } })
        let next = server.receive(H2.request(stream: 3, H2.get))
        #expect(next.first.map { if case .request(3, _) = $0 { true } else { false } } == true)
        #expect(H2.goaways(H2.frames(server.pullOutput())).isEmpty)
    }

    @Test("without the call the stream stays half-closed (no reset); once the request ended no reset is sent either")
    func noResetOtherwise() throws {
        let (_, plain) = try Self.answerEarly(stop: false)
        #expect(!plain.contains { $0.type == H2.FrameType.rstStream.rawValue })
        let (_, ended) = try Self.answerEarly(stop: true, requestEndsFirst: true)
        #expect(!ended.contains { $0.type == H2.FrameType.rstStream.rawValue })
        #expect(ended.contains { $0.type == H2.FrameType.data.rawValue && $0.flags & H2.endStream != 0 })
    }
}
