import GatewayHTTP
import Testing

func requestIDs(_ events: [HTTP2Event]) -> [Int32] {
    events.compactMap { if case .request(let id, _) = $0 { id } else { nil } }
}

func connectionErrors(_ events: [HTTP2Event]) -> [HTTP2ErrorCode] {
    events.compactMap { if case .connectionError(let code, _) = $0 { code } else { nil } }
}

/// The attacks, sent as frames: each must end in a bounded refusal, never in unbounded work or memory.
@Suite("HTTP/2 defences")
struct HTTP2DefenceTests {
    @Test("CVE-2023-44487 (RFC 9113 §6.4, §10.5): rapid reset → GOAWAY ENHANCE_YOUR_CALM and close")
    func rapidReset() throws {
        var settings = HTTP2Settings()
        settings.maxResetsPerWindow = 50
        let clock = ManualClock()
        let server = try HTTP2ServerSession(settings: settings, clock: { clock.now })
        var bytes = H2.start()
        for i in 0..<200 {
            let id = Int32(2 * i + 1)
            bytes += H2.request(stream: id, H2.get) + H2.rst(stream: id, code: .cancel)
        }
        let events = server.receive(bytes)
        #expect(connectionErrors(events) == [.enhanceYourCalm])
        #expect(requestIDs(events).count == 51, "nothing is delivered after the threshold")
        let goaways = H2.goaways(H2.frames(server.pullOutput()))
        #expect(goaways.map(\.errorCode) == [.enhanceYourCalm])
        #expect(server.isFinished)
        #expect(server.receive(H2.request(stream: 1001, H2.get)).isEmpty)
    }

    @Test("CVE-2023-44487: cancellations spread over several windows are tolerated")
    func resetsSpreadOverTime() throws {
        var settings = HTTP2Settings()
        settings.maxResetsPerWindow = 50
        settings.resetWindowNanoseconds = 1_000_000_000
        let clock = ManualClock()
        let server = try HTTP2ServerSession(settings: settings, clock: { clock.now })
        server.receive(H2.start())
        var id: Int32 = 1
        for _ in 0..<4 {
            var bytes: [UInt8] = []
            for _ in 0..<40 {
                bytes += H2.request(stream: id, H2.get) + H2.rst(stream: id, code: .cancel)
                id += 2
            }
            let events = server.receive(bytes)
            #expect(connectionErrors(events).isEmpty)
            #expect(requestIDs(events).count == 40)
            clock.now += 1_000_000_000
        }
        #expect(H2.goaways(H2.frames(server.pullOutput())).isEmpty)
        #expect(!server.isFinished)
    }

    @Test("CVE-2025-8671 (MadeYouReset): streams the server must reset for client errors count as resets")
    func madeYouReset() throws {
        var settings = HTTP2Settings()
        settings.maxResetsPerWindow = 20
        let clock = ManualClock()
        let server = try HTTP2ServerSession(settings: settings, clock: { clock.now })
        var bytes = H2.start()
        for i in 0..<40 { bytes += H2.request(stream: Int32(2 * i + 1), H2.get + [("X-Upper", "1")]) }
        #expect(server.receive(bytes).isEmpty)
        let frames = H2.frames(server.pullOutput())
        #expect(H2.goaways(frames).map(\.errorCode) == [.enhanceYourCalm])
        #expect(connectionErrors(server.takeEvents()) == [.enhanceYourCalm])
        #expect(server.isFinished)
    }

    @Test("CVE-2024-27316 (RFC 9113 §6.10): a CONTINUATION flood is a connection error")
    func continuationFlood() throws {
        var settings = HTTP2Settings()
        settings.maxContinuations = 8
        let server = try HTTP2ServerSession(settings: settings)
        var bytes = H2.start() + H2.headers(stream: 1, HPACK.literals(H2.get), endStream: true, endHeaders: false)
        for i in 0..<20 { bytes += H2.frame(.continuation, stream: 1, HPACK.literal("x-\(i)", "v")) }
        let events = server.receive(bytes)
        #expect(requestIDs(events).isEmpty)
        #expect(connectionErrors(events) == [.enhanceYourCalm])
        #expect(H2.goaways(H2.frames(server.pullOutput())).map(\.errorCode) == [.enhanceYourCalm])
        #expect(server.isFinished)
        #expect(server.pullOutput().isEmpty)
        #expect(server.receive(H2.request(stream: 3, H2.get)).isEmpty)
    }

    @Test("RFC 9113 §6.10: a header block within the CONTINUATION limit is accepted")
    func continuationsWithinLimit() throws {
        let server = try HTTP2ServerSession()
        var bytes = H2.start() + H2.headers(stream: 1, HPACK.literals(H2.get), endStream: true, endHeaders: false)
        for i in 0..<3 { bytes += H2.frame(.continuation, flags: i == 2 ? H2.endHeaders : 0, stream: 1, HPACK.literal("x-\(i)", "v")) }
        let events = server.receive(bytes)
        guard case .request(1, let head)? = events.first else {
            Issue.record("not delivered: \(events)")
            return
        }
        #expect(head.headers["x-2"] == "v")
    }

    @Test(
        "RFC 7541 §4.1, RFC 9113 §6.5.2, §10.5.1: an HPACK bomb past the header list limit is handed on without its head, to be answered 431"
    )
    func hpackBomb() throws {
        let server = try HTTP2ServerSession()  // max header list size 16 KiB
        // One 4000-byte entry in the dynamic table, then 1000 one-byte references to it: ~4 MB decoded.
        var block = HPACK.literals(H2.get) + HPACK.indexing("x-bomb", String(repeating: "a", count: 4000))
        for _ in 0..<1000 { block += HPACK.indexed(62) }
        let events = server.receive(H2.start() + H2.headers(stream: 1, block))
        #expect(
            events == [.requestHeadTooLarge(streamID: 1, endStream: true), .requestEnd(streamID: 1)], "no head delivered, nothing kept")
        // The loop answers it (GatewayProxy: the JSON headers_too_large); the session can.
        try server.submitResponse(streamID: 1, status: 431, headers: HTTPFields([("content-length", "0")]), endStream: true)
        let frames = H2.frames(server.pullOutput())
        let heads = HeaderDecoder().decode(frames)
        #expect(heads[1]?.first { $0.0 == ":status" }?.1 == "431")
        #expect(H2.goaways(frames).isEmpty)
        // The HPACK state stayed in sync: the next request on the connection is fine.
        let next = server.receive(H2.request(stream: 3, H2.get))
        #expect(requestIDs(next) == [3])
    }

    @Test("RFC 9113 §6.5.2: a header list just under the limit is delivered")
    func headerListUnderLimit() throws {
        var settings = HTTP2Settings()
        settings.maxHeaderListSize = 8192
        let server = try HTTP2ServerSession(settings: settings)
        let events = server.receive(H2.start() + H2.request(stream: 1, H2.get + [("x-big", String(repeating: "b", count: 7000))]))
        #expect(requestIDs(events) == [1])
        let over = server.receive(H2.request(stream: 3, H2.get + [("x-big", String(repeating: "b", count: 9000))]))
        #expect(requestIDs(over).isEmpty)
        #expect(over.first == .requestHeadTooLarge(streamID: 3, endStream: true))
    }

    @Test("RFC 9113 §5.1.2: streams beyond SETTINGS_MAX_CONCURRENT_STREAMS are refused (REFUSED_STREAM) before the SETTINGS ack")
    func tooManyStreamsBeforeAck() throws {
        var settings = HTTP2Settings()
        settings.maxConcurrentStreams = 2
        let server = try HTTP2ServerSession(settings: settings)
        var bytes = H2.start(ackServerSettings: false)
        for id: Int32 in [1, 3, 5] { bytes += H2.request(stream: id, H2.get, endStream: false) }
        let events = server.receive(bytes)
        #expect(requestIDs(events) == [1, 3])
        let frames = H2.frames(server.pullOutput())
        #expect(H2.resets(frames) == [5: .refusedStream])
        #expect(H2.goaways(frames).isEmpty)
    }

    @Test("RFC 9113 §5.1.2: streams beyond an acknowledged SETTINGS_MAX_CONCURRENT_STREAMS are a connection error")
    func tooManyStreamsAfterAck() throws {
        var settings = HTTP2Settings()
        settings.maxConcurrentStreams = 2
        let server = try HTTP2ServerSession(settings: settings)
        var bytes = H2.start()
        for id: Int32 in [1, 3, 5] { bytes += H2.request(stream: id, H2.get, endStream: false) }
        let events = server.receive(bytes)
        #expect(requestIDs(events) == [1, 3])
        #expect(H2.goaways(H2.frames(server.pullOutput())).map(\.errorCode) == [.protocolError])
        let after = server.takeEvents()
        #expect(connectionErrors(after) == [.protocolError])
        #expect(after.contains(.streamClosed(streamID: 1, code: .protocolError)), "delivered streams are abandoned")
        #expect(after.contains(.streamClosed(streamID: 3, code: .protocolError)))
        #expect(server.isFinished)
    }

    @Test("RFC 9113 §6.5, §10.5: a SETTINGS frame with too many entries → GOAWAY ENHANCE_YOUR_CALM")
    func tooManySettingsEntries() throws {
        let server = try HTTP2ServerSession()
        let entries = (0..<40).map { (UInt16(0x100 + $0), UInt32($0)) }
        let events = server.receive(H2.start() + H2.settings(entries))
        #expect(H2.goaways(H2.frames(server.pullOutput())).map(\.errorCode) == [.enhanceYourCalm])
        #expect(connectionErrors(events + server.takeEvents()) == [.enhanceYourCalm], "reported once the GOAWAY is out")
        #expect(server.isFinished)
    }

    @Test("RFC 9113 §10.5: a PING flood whose ACKs are never read is a connection error")
    func pingFlood() throws {
        var settings = HTTP2Settings()
        settings.maxOutboundAck = 100
        let server = try HTTP2ServerSession(settings: settings)
        var bytes = H2.start()
        for _ in 0..<500 { bytes += H2.ping() }
        let events = server.receive(bytes)
        #expect(connectionErrors(events) == [.enhanceYourCalm])
        var out: [UInt8] = []
        server.pullOutput(into: &out)
        let pongs = H2.frames(out).filter { $0.type == H2.FrameType.ping.rawValue }.count
        #expect(pongs <= 101, "the ACK queue stayed bounded")
        #expect(server.isFinished)
    }

    @Test(
        "RFC 9113 §5.4.1, §10.5: a PING flood ends with GOAWAY ENHANCE_YOUR_CALM (last processed stream) on the wire, queued ACKs dropped")
    func pingFloodGoaway() throws {
        var settings = HTTP2Settings()
        settings.maxOutboundAck = 100
        let server = try HTTP2ServerSession(settings: settings)
        var bytes = H2.start() + H2.request(stream: 1, H2.get) + H2.request(stream: 3, H2.get)
        for _ in 0..<500 { bytes += H2.ping() }
        let events = server.receive(bytes)
        #expect(requestIDs(events) == [1, 3])
        #expect(connectionErrors(events) == [.enhanceYourCalm])
        let frames = H2.frames(server.pullOutput())
        let goaways = H2.goaways(frames)
        #expect(goaways.map(\.errorCode) == [.enhanceYourCalm], "\(frames.map(\.type))")
        #expect(goaways.first?.lastStreamID == 3)
        #expect(frames.last?.type == H2.FrameType.goaway.rawValue, "the GOAWAY is the last frame")
        #expect(frames.filter { $0.type == H2.FrameType.ping.rawValue }.isEmpty, "the unread ACKs are dropped")
        #expect(server.isFinished)
        #expect(server.pullOutput().isEmpty)
        #expect(server.receive(H2.request(stream: 5, H2.get)).isEmpty)
    }

    @Test("RFC 9113 §5.4.1, §10.5: a SETTINGS flood ends with GOAWAY ENHANCE_YOUR_CALM on the wire")
    func settingsFloodGoaway() throws {
        var settings = HTTP2Settings()
        settings.maxOutboundAck = 100
        let server = try HTTP2ServerSession(settings: settings)
        var bytes = H2.start() + H2.request(stream: 1, H2.get)
        for _ in 0..<500 { bytes += H2.settings([(0x4, 65535)]) }
        #expect(connectionErrors(server.receive(bytes)) == [.enhanceYourCalm])
        let goaways = H2.goaways(H2.frames(server.pullOutput()))
        #expect(goaways.map(\.errorCode) == [.enhanceYourCalm])
        #expect(goaways.first?.lastStreamID == 1)
        #expect(server.isFinished)
    }

    @Test("RFC 9113 §10.5: a SETTINGS flood whose ACKs are never read is a connection error")
    func settingsFlood() throws {
        var settings = HTTP2Settings()
        settings.maxOutboundAck = 100
        let server = try HTTP2ServerSession(settings: settings)
        var bytes = H2.start()
        for _ in 0..<500 { bytes += H2.settings([(0x4, 65535)]) }
        #expect(connectionErrors(server.receive(bytes)) == [.enhanceYourCalm])
    }

    @Test("RFC 9113 §10.5: PINGs whose ACKs are read as they come are answered")
    func pingsReadInTime() throws {
        var settings = HTTP2Settings()
        settings.maxOutboundAck = 100
        let server = try HTTP2ServerSession(settings: settings)
        server.receive(H2.start())
        var acks = 0
        for _ in 0..<10 {
            var bytes: [UInt8] = []
            for _ in 0..<50 { bytes += H2.ping() }
            #expect(connectionErrors(server.receive(bytes)).isEmpty)
            acks += H2.frames(server.pullOutput()).filter { $0.type == H2.FrameType.ping.rawValue && $0.flags == H2.ack }.count
        }
        #expect(acks == 500)
    }
}
