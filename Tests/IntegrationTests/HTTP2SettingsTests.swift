import Foundation
import GatewayTestSupport
import Glibc
import Testing

/// HPACK "literal header field without indexing, new name" (RFC 7541 §6.2.2), short strings only.
private func literal(_ name: String, _ value: String) -> [UInt8] {
    [0x00, UInt8(name.utf8.count)] + Array(name.utf8) + [UInt8(value.utf8.count)] + Array(value.utf8)
}

private func frame(type: UInt8, flags: UInt8, stream: UInt32, _ payload: [UInt8] = []) -> [UInt8] {
    let n = payload.count
    return [
        UInt8(n >> 16 & 0xff), UInt8(n >> 8 & 0xff), UInt8(n & 0xff), type, flags,
        UInt8(stream >> 24 & 0x7f), UInt8(stream >> 16 & 0xff), UInt8(stream >> 8 & 0xff), UInt8(stream & 0xff),
    ] + payload
}

/// A HEADERS frame (END_HEADERS, and END_STREAM when `end`) for `method path`.
private func headers(stream: UInt32, method: String, path: String, fields: [(String, String)] = [], end: Bool) -> [UInt8] {
    let block =
        literal(":method", method) + literal(":scheme", "http") + literal(":path", path)
        + literal(":authority", "127.0.0.1") + fields.flatMap { literal($0.0, $0.1) }
    return frame(type: 0x1, flags: end ? 0x5 : 0x4, stream: stream, block)
}

private func data(stream: UInt32, _ bytes: String, end: Bool) -> [UInt8] {
    frame(type: 0x0, flags: end ? 0x1 : 0x0, stream: stream, Array(bytes.utf8))
}

private let settingsAck = frame(type: 0x4, flags: 0x1, stream: 0)

private func u32(_ p: [UInt8], _ at: Int) -> UInt32 {
    UInt32(p[at]) << 24 | UInt32(p[at + 1]) << 16 | UInt32(p[at + 2]) << 8 | UInt32(p[at + 3])
}

/// The entries of a SETTINGS frame's payload, by identifier.
private func settingsEntries(_ payload: [UInt8]) -> [UInt16: UInt32] {
    var out: [UInt16: UInt32] = [:]
    var i = 0
    while i + 6 <= payload.count {
        out[UInt16(payload[i]) << 8 | UInt16(payload[i + 1])] = u32(payload, i + 2)
        i += 6
    }
    return out
}

/// `listeners[].http2` reaches the wire: the SETTINGS frame of the real gatewayd carries the configured
/// values, `max_concurrent_streams` is enforced, and SIGHUP sends every HTTP/2 connection a graceful
/// GOAWAY while its in-flight stream completes.
@Suite("HTTP/2 settings from gateway.yaml, GOAWAY on reload (real gatewayd)", .serialized, .timeLimit(.minutes(2)))
struct HTTP2SettingsTests {
    static func config(maxStreams: Int) -> String {
        """
        workers: 1
        listeners:
          - name: public
            address: 127.0.0.1:0
            protocols: [http1, h2c]
            http2:
              max_concurrent_streams: \(maxStreams)
              max_header_list_size: 8KiB
              initial_window_size: 100000
              connection_window_size: 2MiB
              max_frame_size: 32KiB
          - {name: plain, address: 127.0.0.1:0, protocols: [h2c]}
        admin: {address: 127.0.0.1:0}
        upstreams:
          - {name: demo, url: demo}
        routes:
          - {name: default, match: {path_prefix: /}, upstream: demo}
        """
    }

    /// Reads the server's first frames: its SETTINGS entries and the stream-0 WINDOW_UPDATE increment
    /// (the client sent an empty SETTINGS; sending our ACK of theirs is the caller's choice).
    static func serverSettings(_ reader: inout HTTP2FrameReader) -> (settings: [UInt16: UInt32], windowIncrement: UInt32?) {
        guard let first = reader.next(), first.type == 0x4, first.flags & 1 == 0 else { return ([:], nil) }
        var increment: UInt32?
        // The WINDOW_UPDATE follows, possibly after the ACK of the client's SETTINGS.
        for _ in 0..<2 {
            guard let next = reader.next() else { break }
            if next.type == 0x8, next.stream == 0, next.payload.count == 4 {
                increment = u32(next.payload, 0) & 0x7fff_ffff
                break
            }
        }
        return (settingsEntries(first.payload), increment)
    }

    /// Frames until one on `stream` of `type` (answering PINGs), or nil at EOF/timeout.
    static func await(
        _ reader: inout HTTP2FrameReader, type: UInt8, stream: UInt32? = nil,
        seen: inout [HTTP2FrameReader.Frame]
    ) -> HTTP2FrameReader.Frame? {
        while let f = reader.next() {
            seen.append(f)
            if f.type == 0x6 && f.flags & 1 == 0 { reader.client.send(frame(type: 0x6, flags: 0x1, stream: 0, f.payload)) }
            if f.type == type && (stream == nil || f.stream == stream) { return f }
        }
        return nil
    }

    @Test("the SETTINGS frame carries the configured values; an unconfigured listener the defaults")
    func settingsOnTheWire() throws {
        let gw = try GatewayProcess(config: Self.config(maxStreams: 2))
        defer { gw.stop() }
        let c = try LoopbackClient(port: HTTPCall.port(gw, "public"))
        defer { c.close() }
        c.send(http2ClientPreface)
        var reader = HTTP2FrameReader(client: c)
        let configured = Self.serverSettings(&reader)
        #expect(configured.settings[0x3] == 2)  // MAX_CONCURRENT_STREAMS
        #expect(configured.settings[0x6] == 8192)  // MAX_HEADER_LIST_SIZE
        #expect(configured.settings[0x4] == 100_000)  // INITIAL_WINDOW_SIZE
        #expect(configured.settings[0x5] == 32768)  // MAX_FRAME_SIZE
        #expect(configured.windowIncrement == UInt32(2 << 20) - 65535)  // connection window 2MiB
        let p = try LoopbackClient(port: HTTPCall.port(gw, "plain"))
        defer { p.close() }
        p.send(http2ClientPreface)
        var plainReader = HTTP2FrameReader(client: p)
        let defaults = Self.serverSettings(&plainReader)
        #expect(defaults.settings[0x3] == 128)
        #expect(defaults.settings[0x6] == 16384)
        #expect(defaults.settings[0x4] == 65536)
        #expect(defaults.settings[0x5] == nil || defaults.settings[0x5] == 16384)  // the protocol default may be omitted
        #expect(defaults.windowIncrement == UInt32(1 << 20) - 65535)
    }

    @Test("streams beyond max_concurrent_streams are refused (REFUSED_STREAM); the others complete")
    func maxConcurrentStreams() throws {
        let gw = try GatewayProcess(config: Self.config(maxStreams: 2))
        defer { gw.stop() }
        let c = try LoopbackClient(port: HTTPCall.port(gw, "public"))
        defer { c.close() }
        c.send(http2ClientPreface)
        var reader = HTTP2FrameReader(client: c)
        #expect(Self.serverSettings(&reader).settings[0x3] == 2)
        // Our SETTINGS not acknowledged yet: RFC 9113 §5.1.2 lets the server refuse the third stream.
        let body = [("content-length", "4")]
        for stream: UInt32 in [1, 3, 5] { c.send(headers(stream: stream, method: "POST", path: "/s\(stream)", fields: body, end: false)) }
        var seen: [HTTP2FrameReader.Frame] = []
        let reset = try #require(Self.await(&reader, type: 0x3, seen: &seen))
        #expect(reset.stream == 5)
        #expect(reset.payload.count == 4 && u32(reset.payload, 0) == 0x7)  // REFUSED_STREAM
        c.send(settingsAck)
        for stream: UInt32 in [1, 3] { c.send(data(stream: stream, "body", end: true)) }
        for stream: UInt32 in [1, 3] {
            let head = try #require(Self.await(&reader, type: 0x1, stream: stream, seen: &seen))
            #expect(head.payload.first == 0x88)  // :status 200 (HPACK static index 8)
        }
        #expect(!seen.contains { $0.type == 0x7 })  // no GOAWAY: the connection stays usable
        // Now the SETTINGS are acknowledged and both streams closed: a new stream is served.
        c.send(headers(stream: 7, method: "GET", path: "/after", end: true))
        let after = try #require(Self.await(&reader, type: 0x1, stream: 7, seen: &seen))
        #expect(after.payload.first == 0x88)
    }

    @Test(
        "SIGHUP: open h2 connections get a graceful GOAWAY, the in-flight stream completes, new connections see the new settings; HTTP/1.1 keep-alive is untouched"
    )
    func goawayOnReload() throws {
        guard let curl = ["/usr/bin/curl", "/usr/local/bin/curl"].first(where: FileManager.default.isExecutableFile) else { return }
        let gw = try GatewayProcess(config: Self.config(maxStreams: 2))
        defer { gw.stop() }
        let port = HTTPCall.port(gw, "public")
        // An HTTP/1.1 keep-alive connection on the same listener.
        let h1 = try LoopbackClient(port: port)
        defer { h1.close() }
        h1.send("GET /one HTTP/1.1\r\nHost: a\r\n\r\n")
        #expect(String(decoding: h1.receiveSome(), as: UTF8.self).hasPrefix("HTTP/1.1 200"))
        // An h2c connection with a POST whose body is half sent.
        let c = try LoopbackClient(port: port)
        defer { c.close() }
        c.send(http2ClientPreface)
        var reader = HTTP2FrameReader(client: c)
        #expect(Self.serverSettings(&reader).settings[0x3] == 2)
        c.send(settingsAck)
        c.send(headers(stream: 1, method: "POST", path: "/slow", fields: [("content-length", "10")], end: false))
        c.send(data(stream: 1, "01234", end: false))
        try Self.config(maxStreams: 5).write(to: gw.configURL, atomically: true, encoding: .utf8)
        gw.signal(SIGHUP)
        var seen: [HTTP2FrameReader.Frame] = []
        let notice = try #require(Self.await(&reader, type: 0x7, seen: &seen))
        #expect(u32(notice.payload, 0) == 0x7fff_ffff)  // the first, graceful GOAWAY
        #expect(u32(notice.payload, 4) == 0)  // NO_ERROR
        #expect(!seen.contains { $0.type == 0x1 || $0.type == 0x3 })  // stream 1 neither answered nor reset yet
        c.send(data(stream: 1, "56789", end: true))
        let head = try #require(Self.await(&reader, type: 0x1, stream: 1, seen: &seen))
        #expect(head.payload.first == 0x88)  // :status 200
        var bodyEnded = head.flags & 0x1 != 0
        while let f = reader.next() {  // until the server closes
            seen.append(f)
            if f.type == 0x6 && f.flags & 1 == 0 { c.send(frame(type: 0x6, flags: 0x1, stream: 0, f.payload)) }
            if f.type == 0x0, f.stream == 1, f.flags & 0x1 != 0 { bodyEnded = true }
        }
        #expect(bodyEnded)
        #expect(!seen.contains { $0.type == 0x3 })  // no stream was reset
        // Two-step: GOAWAY(2^31-1), then (after our PING ACK) the final GOAWAY naming stream 1.
        let goaways = seen.filter { $0.type == 0x7 }.map { u32($0.payload, 0) }
        #expect(goaways == [0x7fff_ffff, 1])
        // The HTTP/1.1 connection was left open, and serves the next request.
        h1.send("GET /two HTTP/1.1\r\nHost: a\r\n\r\n")
        #expect(String(decoding: h1.receiveSome(), as: UTF8.self).hasPrefix("HTTP/1.1 200"))
        // A new h2 connection advertises the reloaded settings and is served.
        let n = try LoopbackClient(port: port)
        defer { n.close() }
        n.send(http2ClientPreface)
        var newReader = HTTP2FrameReader(client: n)
        #expect(Self.serverSettings(&newReader).settings[0x3] == 5)
        n.send(settingsAck)
        n.send(headers(stream: 1, method: "GET", path: "/new", end: true))
        var newSeen: [HTTP2FrameReader.Frame] = []
        #expect(Self.await(&newReader, type: 0x1, stream: 1, seen: &newSeen)?.payload.first == 0x88)
        let metrics = try runProcess(URL(fileURLWithPath: curl), ["-sS", gw.url("admin", "/metrics")]).stdout
        #expect(metrics.contains("attest_gateway_h2_goaway_total{reason=\"reload\"} 1"))
        #expect(gw.stderr.contains("configuration reloaded"))
        #expect(!gw.stderr.contains("listener changes take effect after a restart"))
    }
}
