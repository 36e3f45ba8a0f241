import Foundation
import GatewayTestSupport
import Glibc
import Testing

/// An upstream that records every complete request it reads (head and body) and answers `200 ok`;
/// a request cut short (its connection closed before the declared body) is not recorded.
final class RecordingUpstream: @unchecked Sendable {
    private let lock = NSLock()
    private var received: [ScriptedRequest] = []
    private(set) var server: ScriptedServer!

    init() throws {
        server = try ScriptedServer { [unowned self] c in
            while let r = c.readRequest() {
                lock.withLock { received.append(r) }
                guard c.respond("ok") else { return }
            }
        }
    }

    var port: UInt16 { server.port }
    var requests: [ScriptedRequest] { lock.withLock { received } }
    /// Connections the gateway opened to it.
    var connections: Int { server.accepted }
    func stop() { server.stop() }
}

/// HTTP/2 frames by hand (HPACK literals without indexing), for the frame-level checks.
enum H2Frames {
    static func literal(_ name: String, _ value: String) -> [UInt8] {
        [0x00, UInt8(name.utf8.count)] + Array(name.utf8) + [UInt8(value.utf8.count)] + Array(value.utf8)
    }

    static func frame(type: UInt8, flags: UInt8, stream: UInt32, _ payload: [UInt8] = []) -> [UInt8] {
        let n = payload.count
        return [
            UInt8(n >> 16 & 0xff), UInt8(n >> 8 & 0xff), UInt8(n & 0xff), type, flags,
            UInt8(stream >> 24 & 0x7f), UInt8(stream >> 16 & 0xff), UInt8(stream >> 8 & 0xff), UInt8(stream & 0xff),
        ] + payload
    }

    static func headers(stream: UInt32, method: String, path: String, fields: [(String, String)] = [], end: Bool) -> [UInt8] {
        let block =
            literal(":method", method) + literal(":scheme", "http") + literal(":path", path)
            + literal(":authority", "127.0.0.1") + fields.flatMap { literal($0.0, $0.1) }
        return frame(type: 0x1, flags: end ? 0x5 : 0x4, stream: stream, block)
    }

    static func data(stream: UInt32, _ bytes: [UInt8], end: Bool) -> [UInt8] {
        frame(type: 0x0, flags: end ? 0x1 : 0x0, stream: stream, bytes)
    }

    /// The preface, an empty SETTINGS and the ACK of the server's.
    static let start = http2ClientPreface + frame(type: 0x4, flags: 0x1, stream: 0)

    static func code(_ f: HTTP2FrameReader.Frame) -> UInt32 {
        let p = f.payload
        let at = f.type == 0x7 ? 4 : 0
        return UInt32(p[at]) << 24 | UInt32(p[at + 1]) << 16 | UInt32(p[at + 2]) << 8 | UInt32(p[at + 3])
    }

    /// Reads frames (answering PINGs) until `done` says so for one of them; nil at EOF or timeout.
    static func read(
        _ reader: inout HTTP2FrameReader, into seen: inout [HTTP2FrameReader.Frame],
        until done: (HTTP2FrameReader.Frame) -> Bool
    ) -> HTTP2FrameReader.Frame? {
        while let f = reader.next() {
            seen.append(f)
            if f.type == 0x6 && f.flags & 1 == 0 { reader.client.send(frame(type: 0x6, flags: 0x1, stream: 0, f.payload)) }
            if done(f) { return f }
        }
        return nil
    }

    /// The end of a stream: its RST_STREAM, or a frame ending it.
    static func ends(_ stream: UInt32) -> (HTTP2FrameReader.Frame) -> Bool {
        { f in f.stream == stream && (f.type == 0x3 || (f.type <= 0x1 && f.flags & 0x1 != 0)) }
    }

    static func body(_ frames: [HTTP2FrameReader.Frame], stream: UInt32) -> String {
        String(decoding: frames.filter { $0.type == 0x0 && $0.stream == stream }.flatMap(\.payload), as: UTF8.self)
    }
}

/// Issue 18 §4, "cheap refusals first", against the real gatewayd on loopback sockets: the first
/// request's head is due within `limits.header_timeout` of the accept; a protected request whose
/// assertion headers already fail is refused from its head (no `100 Continue`, no body read); an
/// HTTP/2 stream whose DATA does not add up to its content-length never reaches the upstream as a
/// complete request.
@Suite(
    "Cheap refusals first: header timeout from accept, refusals from the head, HTTP/2 content-length (real gatewayd)",
    .serialized, .timeLimit(.minutes(3)))
struct EarlyRefusalTests {
    static func config(upstreamPort: UInt16, headerTimeout: String = "2s") -> String {
        """
        workers: 1
        listeners:
          - {name: h1, address: 127.0.0.1:0}
          - {name: h2, address: 127.0.0.1:0, protocols: [h2c]}
          - {name: both, address: 127.0.0.1:0, protocols: [http1, h2c]}
        admin: {address: 127.0.0.1:0}
        limits: {header_timeout: \(headerTimeout), idle_timeout: 30s}
        upstreams:
          - {name: rec, url: http://127.0.0.1:\(upstreamPort)}
        apps:
          - {team_id: ABCDE12345, bundle_ids: [com.example.shop], environments: [development]}
        store: {kind: memory, shards: 8}
        routes:
          - name: purchase
            match: {path_prefix: /api/purchase}
            upstream: rec
            max_body: 8MiB
            assertion: {mode: enforce}
          - name: profile
            match: {path_prefix: /api/profile}
            upstream: rec
            assertion: {mode: shadow}
          - name: partial
            match: {path_prefix: /api/partial}
            upstream: rec
            assertion: {mode: enforce, rollout: 0%}
          - {name: plain, match: {path_prefix: /}, upstream: rec}
        """
    }

    /// Reads until the text received contains `marker` (or EOF/timeout).
    static func readText(_ c: LoopbackClient, until marker: String) -> String {
        var got: [UInt8] = []
        while !String(decoding: got, as: UTF8.self).contains(marker) {
            let chunk = c.receiveSome()
            if chunk.isEmpty { break }
            got += chunk
        }
        return String(decoding: got, as: UTF8.self)
    }

    static func seconds(since start: ContinuousClock.Instant) -> Double {
        let d = ContinuousClock.now - start
        return Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18
    }

    // MARK: - The header timeout, from the accept

    @Test("a silent connection is closed at limits.header_timeout (HTTP/1.1, h2c, sniffing); keep-alive waits idle_timeout")
    func silentConnectionsClose() throws {
        let up = try RecordingUpstream()
        defer { up.stop() }
        let gw = try GatewayProcess(config: Self.config(upstreamPort: up.port))
        defer { gw.stop() }

        // Connects and says nothing: closed without an answer after 2 s, not the 30 s idle timeout
        // (the client's receive timeout is 10 s).
        for listener in ["h1", "both"] {
            let silent = try LoopbackClient(port: HTTPCall.port(gw, listener))
            let start = ContinuousClock.now
            #expect(silent.receiveSome().isEmpty && silent.lastErrno == 0, "\(listener): closed (EOF), not timed out")
            let took = Self.seconds(since: start)
            #expect(took > 1.5 && took < 5, "\(listener): closed after \(took) s")
            silent.close()
        }
        // HTTP/2: the preface and SETTINGS, then no request: GOAWAY NO_ERROR and close at the same deadline.
        let h2 = try LoopbackClient(port: HTTPCall.port(gw, "h2"))
        let start = ContinuousClock.now
        h2.send(H2Frames.start)
        var reader = HTTP2FrameReader(client: h2)
        var seen: [HTTP2FrameReader.Frame] = []
        _ = H2Frames.read(&reader, into: &seen) { _ in false }
        let took = Self.seconds(since: start)
        #expect(h2.lastErrno == 0, "closed, not timed out")
        #expect(took > 1.5 && took < 5, "h2c closed after \(took) s")
        #expect(seen.contains { $0.type == 0x7 && H2Frames.code($0) == 0 }, "GOAWAY NO_ERROR")
        h2.close()
        let metrics = try curl([gw.url("admin", "/metrics")]).1
        #expect(metrics.contains("attest_gateway_h2_goaway_total{reason=\"header_timeout\"} 1"))

        // A keep-alive connection after its first request waits longer than the header timeout.
        let keep = try HTTPTestConnection(port: HTTPCall.port(gw, "h1"))
        defer { keep.close() }
        keep.send("GET /first HTTP/1.1\r\nHost: a\r\n\r\n")
        #expect(try keep.readResponse().status == 200)
        let keep2 = try LoopbackClient(port: HTTPCall.port(gw, "h2"))
        defer { keep2.close() }
        keep2.send(H2Frames.start + H2Frames.headers(stream: 1, method: "GET", path: "/first", end: true))
        var reader2 = HTTP2FrameReader(client: keep2)
        var seen2: [HTTP2FrameReader.Frame] = []
        #expect(H2Frames.read(&reader2, into: &seen2, until: H2Frames.ends(1)) != nil)
        #expect(H2Frames.body(seen2, stream: 1) == "ok")
        usleep(3_000_000)
        keep.send("GET /second HTTP/1.1\r\nHost: a\r\n\r\n")
        #expect(try keep.readResponse().status == 200)
        keep2.send(H2Frames.headers(stream: 3, method: "GET", path: "/second", end: true))
        #expect(H2Frames.read(&reader2, into: &seen2, until: H2Frames.ends(3)) != nil)
        #expect(H2Frames.body(seen2, stream: 3) == "ok")
        #expect(!seen2.contains { $0.type == 0x7 }, "no GOAWAY on the idle HTTP/2 connection")
        #expect(up.requests.map(\.target).sorted() == ["/first", "/first", "/second", "/second"])
    }

    @Test("the first head's deadline counts from the accept: a first byte late in it does not restart it (408)")
    func deadlineFromAccept() throws {
        let up = try RecordingUpstream()
        defer { up.stop() }
        let gw = try GatewayProcess(config: Self.config(upstreamPort: up.port))
        defer { gw.stop() }
        for listener in ["h1", "both"] {
            let c = try HTTPTestConnection(port: HTTPCall.port(gw, listener))
            let start = ContinuousClock.now
            usleep(1_200_000)
            c.send("GET /slow HTTP/1.1\r\n")
            let r = try c.readResponse()
            let took = Self.seconds(since: start)
            #expect(r.status == 408)
            #expect(r.json?["error"] as? String == "header_timeout")
            // 2 s from the accept; restarting at the first byte would answer at 3.2 s.
            #expect(took > 1.5 && took < 2.9, "\(listener): 408 after \(took) s")
            #expect(c.isClosedByPeer())
            c.close()
        }
        #expect(up.connections == 0)
    }

    @Test("TLS: a handshake, then nothing: closed at the header timeout counted from the accept")
    func silentAfterTLSHandshake() throws {
        let pki = try TLSTests.pki()
        defer { pki.remove() }
        let gw = try TLSTests.gateway(pki)  // limits.header_timeout: 2s
        defer { gw.stop() }
        let start = ContinuousClock.now
        let client = try TLSTestClient(port: HTTPCall.port(gw, "secure"), serverName: "a.test", caFile: pki.path("ca.pem"))
        defer { client.close() }
        #expect(client.socket.isClosedByPeer(), "closed (EOF) within the client's 10 s receive timeout")
        let took = Self.seconds(since: start)
        #expect(took > 1.5 && took < 5, "closed after \(took) s")
    }

    // MARK: - Protected requests refused from the head (HTTP/1.1)

    @Test("HTTP/1.1: a protected POST without assertion headers, Expect: 100-continue: 401 at once, no 100, no body read, closed")
    func http1RefusedFromTheHead() throws {
        let up = try RecordingUpstream()
        defer { up.stop() }
        let gw = try GatewayProcess(config: Self.config(upstreamPort: up.port))
        defer { gw.stop() }
        let c = try LoopbackClient(port: HTTPCall.port(gw, "h1"))
        defer { c.close() }
        // Only the head: the answer cannot depend on a body that never comes.
        c.send("POST /api/purchase HTTP/1.1\r\nHost: a\r\nContent-Length: 5000000\r\nExpect: 100-continue\r\n\r\n")
        let text = Self.readText(c, until: "}\n")
        #expect(text.hasPrefix("HTTP/1.1 401 "), "the first answer is the refusal, not 100 Continue: \(text.prefix(40))")
        #expect(text.contains("\r\nConnection: close\r\n"))
        let json = text.split(separator: "\r\n\r\n", maxSplits: 1).last.flatMap {
            (try? JSONSerialization.jsonObject(with: Data($0.utf8))) as? [String: Any]
        }
        #expect(json?["error"] as? String == "assertion_missing")
        #expect(json?["action"] as? String == "rechallenge")
        let id = try #require(json?["requestId"] as? String)
        #expect(text.contains("X-Request-Id: \(id)\r\n"))
        #expect(c.isClosedByPeer())
        // A malformed header is refused from the head too (401 malformed), before its body.
        let m = try HTTPTestConnection(port: HTTPCall.port(gw, "h1"))
        defer { m.close() }
        m.send(
            "POST /api/purchase HTTP/1.1\r\nHost: a\r\nContent-Length: 100000\r\nX-App-Attest-Key-Id: AAAA\r\n"
                + "X-App-Attest-Challenge: x\r\nX-App-Assertion: AAAA\r\n\r\n")
        let mr = try m.readResponse()
        #expect(mr.status == 401)
        #expect(mr.json?["error"] as? String == "malformed")
        #expect(m.isClosedByPeer())

        let explained = try curl([gw.url("admin", "/explain/\(id)")])
        #expect(explained.0 == 200)
        #expect(explained.1.contains("\"step\":\"headers\""))
        #expect(explained.1.contains("X-App-Attest-Key-Id,X-App-Assertion"))
        let metrics = try curl([gw.url("admin", "/metrics")]).1
        #expect(metrics.contains("route=\"purchase\",mode=\"enforce\",verdict=\"refused\",reason=\"assertion_missing\"} 1"))
        #expect(metrics.contains("route=\"purchase\",mode=\"enforce\",verdict=\"refused\",reason=\"malformed\"} 1"))
        #expect(up.connections == 0 && up.requests.isEmpty)
    }

    @Test("HTTP/1.1 without Expect: a client that sends its body before reading still reads the refusal; the close is bounded")
    func http1RefusedWhileSending() throws {
        let up = try RecordingUpstream()
        defer { up.stop() }
        let gw = try GatewayProcess(config: Self.config(upstreamPort: up.port))
        defer { gw.stop() }
        let c = try LoopbackClient(port: HTTPCall.port(gw, "h1"))
        defer { c.close() }
        // Head and 1 MiB of body before reading anything: the gateway answers from the head, then
        // reads and drops what comes; closing at once, with bytes unread, would reset the connection
        // and could destroy the answer before the client reads it.
        let chunk = [UInt8](repeating: 0x61, count: 64 * 1024)
        c.send(Array("POST /api/purchase HTTP/1.1\r\nHost: a\r\nContent-Length: 5000000\r\n\r\n".utf8))
        for _ in 0..<16 { c.send(chunk) }
        let text = Self.readText(c, until: "}\n")
        #expect(text.hasPrefix("HTTP/1.1 401 "), "errno \(c.lastErrno): \(text.prefix(60))")
        #expect(text.contains("assertion_missing"))
        // More body after the answer: the gateway still reads (and drops) it, so every send
        // succeeds (a socket closed under these bytes would answer with a reset, and the sends
        // after it fail); once the client is quiet the gateway closes cleanly (EOF).
        var failedSends: [Int32] = []
        for _ in 0..<6 {
            let n = chunk.withUnsafeBytes { Glibc.send(c.fd, $0.baseAddress, 16 * 1024, Int32(MSG_NOSIGNAL)) }
            if n < 0 { failedSends.append(errno) }
            usleep(50_000)
        }
        #expect(failedSends.isEmpty, "errno \(failedSends)")
        let start = ContinuousClock.now
        #expect(c.isClosedByPeer(), "a clean close, errno \(c.lastErrno)")
        #expect(Self.seconds(since: start) < 2)
        // A client that never stops sending is closed anyway, 2 s after the answer at the latest.
        let endless = try LoopbackClient(port: HTTPCall.port(gw, "h1"))
        defer { endless.close() }
        endless.send(Array("POST /api/purchase HTTP/1.1\r\nHost: a\r\nContent-Length: 50000000\r\n\r\n".utf8) + chunk)
        #expect(Self.readText(endless, until: "}\n").hasPrefix("HTTP/1.1 401 "))
        let answered = ContinuousClock.now
        let sending = DispatchGroup()
        DispatchQueue.global().async(group: sending) { for _ in 0..<60 { endless.send(chunk); usleep(50_000) } }
        while !endless.receiveSome().isEmpty {}  // until EOF or reset
        let took = Self.seconds(since: answered)
        #expect(endless.lastErrno != EAGAIN && took < 3.5, "ended \(took) s after the answer (errno \(endless.lastErrno))")
        sending.wait()
        #expect(up.connections == 0)
    }

    @Test("HTTP/1.1: a refused bodiless request keeps the connection; shadow and a rollout that does not enforce still forward")
    func http1KeepAliveAndShadow() throws {
        let up = try RecordingUpstream()
        defer { up.stop() }
        let gw = try GatewayProcess(config: Self.config(upstreamPort: up.port))
        defer { gw.stop() }
        let c = try HTTPTestConnection(port: HTTPCall.port(gw, "h1"))
        defer { c.close() }
        c.send("GET /api/purchase HTTP/1.1\r\nHost: a\r\n\r\n")
        let refused = try c.readResponse()
        #expect(refused.status == 401)
        #expect(refused.header("Connection") == nil, "nothing left unread: the connection is kept")
        c.send("POST /api/partial HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc")
        #expect(try c.readResponse().status == 200)
        // Shadow: the body is wanted (100 Continue first), read and forwarded as before.
        let shadow = try LoopbackClient(port: HTTPCall.port(gw, "h1"))
        defer { shadow.close() }
        shadow.send("POST /api/profile HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
        #expect(Self.readText(shadow, until: "\r\n\r\n") == "HTTP/1.1 100 Continue\r\n\r\n")
        shadow.send("hello")
        #expect(Self.readText(shadow, until: "ok").hasPrefix("HTTP/1.1 200 "))
        let got = up.requests
        #expect(got.map(\.target) == ["/api/partial", "/api/profile"])
        #expect(got.map { String(decoding: $0.body, as: UTF8.self) } == ["abc", "hello"])
    }

    // MARK: - HTTP/2

    @Test(
        "HTTP/2: a protected POST without assertion headers: 401 from the head, no 100; a large rest reset (NO_ERROR), a small one dropped")
    func http2RefusedFromTheHead() throws {
        let up = try RecordingUpstream()
        defer { up.stop() }
        let gw = try GatewayProcess(config: Self.config(upstreamPort: up.port))
        defer { gw.stop() }
        let c = try LoopbackClient(port: HTTPCall.port(gw, "h2"))
        defer { c.close() }
        c.send(
            H2Frames.start
                + H2Frames.headers(
                    stream: 1, method: "POST", path: "/api/purchase", fields: [("content-length", "5000000"), ("expect", "100-continue")],
                    end: false))
        var reader = HTTP2FrameReader(client: c)
        var seen: [HTTP2FrameReader.Frame] = []
        let rst = H2Frames.read(&reader, into: &seen) { $0.stream == 1 && $0.type == 0x3 }
        #expect(rst.map(H2Frames.code) == 0, "RST_STREAM NO_ERROR")
        let onStream = seen.filter { $0.stream == 1 }
        #expect(onStream.map(\.type) == [0x1, 0x0, 0x3], "one HEADERS (no interim 100), the JSON body, then the reset")
        #expect(onStream.count == 3 && onStream[1].flags & 0x1 != 0, "the body ends the response before the reset")
        let json = (try? JSONSerialization.jsonObject(with: Data(H2Frames.body(seen, stream: 1).utf8))) as? [String: Any]
        #expect(json?["error"] as? String == "assertion_missing")
        #expect(json?["action"] as? String == "rechallenge")
        #expect(json?["requestId"] is String)
        // The body the client still sends is dropped; the connection serves the next stream.
        c.send(H2Frames.data(stream: 1, [UInt8](repeating: 0x61, count: 16_000), end: false))
        c.send(H2Frames.headers(stream: 3, method: "GET", path: "/next", end: true))
        #expect(H2Frames.read(&reader, into: &seen, until: H2Frames.ends(3)) != nil)
        #expect(H2Frames.body(seen, stream: 3) == "ok")
        // A small rest (within the stream window) is not cut: the client may finish sending it.
        c.send(H2Frames.headers(stream: 5, method: "POST", path: "/api/purchase", fields: [("content-length", "9")], end: false))
        #expect(H2Frames.read(&reader, into: &seen, until: H2Frames.ends(5)) != nil)
        #expect(H2Frames.body(seen, stream: 5).contains("assertion_missing"))
        c.send(
            H2Frames.data(stream: 5, Array("{\"sku\":7}".utf8), end: true)
                + H2Frames.headers(stream: 7, method: "GET", path: "/last", end: true))
        #expect(H2Frames.read(&reader, into: &seen, until: H2Frames.ends(7)) != nil)
        #expect(!seen.contains { $0.stream == 5 && $0.type == 0x3 }, "no RST_STREAM for a 9-byte body")
        #expect(!seen.contains { $0.type == 0x7 }, "no GOAWAY")
        #expect(up.requests.map(\.target) == ["/next", "/last"])
        let metrics = try curl([gw.url("admin", "/metrics")]).1
        #expect(metrics.contains("route=\"purchase\",mode=\"enforce\",verdict=\"refused\",reason=\"assertion_missing\"} 2"))
    }

    /// A stream on a new h2c connection: its frames are sent, then the frames until its end.
    static func h2Exchange(_ gw: GatewayProcess, _ frames: [[UInt8]], pauseAfterFirst: (() -> Void)? = nil) throws
        -> [HTTP2FrameReader.Frame]
    {
        let c = try LoopbackClient(port: HTTPCall.port(gw, "h2"))
        defer { c.close() }
        c.send(H2Frames.start + frames[0])
        pauseAfterFirst?()
        for f in frames.dropFirst() { c.send(f) }
        var reader = HTTP2FrameReader(client: c)
        var seen: [HTTP2FrameReader.Frame] = []
        _ = H2Frames.read(&reader, into: &seen, until: H2Frames.ends(1))
        return seen.filter { $0.stream == 1 }
    }

    static func resetCode(_ frames: [HTTP2FrameReader.Frame]) -> UInt32? { frames.first { $0.type == 0x3 }.map(H2Frames.code) }

    @Test("HTTP/2 content-length 0 then DATA: RST_STREAM PROTOCOL_ERROR and nothing reaches the upstream (streamed and buffered)")
    func http2ContentLengthZeroWithData() throws {
        let up = try RecordingUpstream()
        defer { up.stop() }
        let gw = try GatewayProcess(config: Self.config(upstreamPort: up.port))
        defer { gw.stop() }
        for path in ["/plain", "/api/profile"] {  // forwarded as it comes; buffered for a (shadow) verification
            let frames = try Self.h2Exchange(
                gw,
                [
                    H2Frames.headers(stream: 1, method: "POST", path: path, fields: [("content-length", "0")], end: false),
                    H2Frames.data(stream: 1, Array("smuggled".utf8), end: true),
                ], pauseAfterFirst: { usleep(300_000) })  // time for an upstream request to go out
            #expect(Self.resetCode(frames) == 1, "\(path): RST_STREAM PROTOCOL_ERROR")
        }
        usleep(300_000)
        #expect(up.requests.isEmpty, "\(up.requests.map(\.target))")
        // A content-length 0 that the client ends (an empty DATA with END_STREAM) is a valid request.
        let valid = try Self.h2Exchange(
            gw,
            [
                H2Frames.headers(stream: 1, method: "POST", path: "/plain/ok", fields: [("content-length", "0")], end: false),
                H2Frames.data(stream: 1, [], end: true),
            ])
        #expect(H2Frames.body(valid, stream: 1) == "ok")
        #expect(up.requests.map(\.target) == ["/plain/ok"])
        #expect(up.requests.first?.header("Content-Length") == "0")
    }

    @Test("HTTP/2 DATA beyond content-length, or short of it: reset, and the upstream never holds a complete request")
    func http2ContentLengthMismatch() throws {
        let up = try RecordingUpstream()
        defer { up.stop() }
        let gw = try GatewayProcess(config: Self.config(upstreamPort: up.port))
        defer { gw.stop() }
        // "hello" (the whole declared length), then more once the upstream request is under way.
        let over = try Self.h2Exchange(
            gw,
            [
                H2Frames.headers(stream: 1, method: "POST", path: "/over", fields: [("content-length", "5")], end: false)
                    + H2Frames.data(stream: 1, Array("hello".utf8), end: false),
                H2Frames.data(stream: 1, Array(" world".utf8), end: true),
            ],
            pauseAfterFirst: {
                for _ in 0..<100 where up.connections == 0 { usleep(20_000) }
                usleep(300_000)  // the upstream has read what the gateway wrote so far
            })
        #expect(Self.resetCode(over) == 1, "RST_STREAM PROTOCOL_ERROR")
        #expect(up.connections == 1, "the upstream request had started")
        // Fewer bytes than declared, then END_STREAM.
        let short = try Self.h2Exchange(
            gw,
            [
                H2Frames.headers(stream: 1, method: "POST", path: "/short", fields: [("content-length", "10")], end: false)
                    + H2Frames.data(stream: 1, Array("12345".utf8), end: false),
                H2Frames.data(stream: 1, Array("6".utf8), end: true),
            ], pauseAfterFirst: { usleep(300_000) })
        #expect(Self.resetCode(short) == 1)
        usleep(300_000)
        #expect(up.requests.isEmpty, "aborted, never complete: \(up.requests.map(\.target))")
        // The declared length in two frames, the last byte last: delivered whole.
        let exact = try Self.h2Exchange(
            gw,
            [
                H2Frames.headers(stream: 1, method: "POST", path: "/exact", fields: [("content-length", "5")], end: false)
                    + H2Frames.data(stream: 1, Array("hel".utf8), end: false),
                H2Frames.data(stream: 1, Array("lo".utf8), end: true),
            ], pauseAfterFirst: { usleep(200_000) })
        #expect(H2Frames.body(exact, stream: 1) == "ok")
        #expect(up.requests.map(\.target) == ["/exact"])
        #expect(up.requests.first.map { String(decoding: $0.body, as: UTF8.self) } == "hello")
    }
}
