import Foundation
import GatewayHTTP
import GatewayIO
import GatewayProxy
import GatewayTestSupport
import Glibc
import Synchronization
import Testing

/// Forwards everything to one pool and keeps the exchange records (loop-confined writes, read after).
final class RecordingProxyRouter: RequestRouter, @unchecked Sendable {
    let pool: UpstreamPool
    let maxBody: Int
    /// What the tests read of each `ExchangeRecord` (whose `fields` point into the connection's
    /// buffers and are valid only during the call).
    struct Kept: Sendable {
        let route: String, target: String, status: Int, requestBytes: Int, protocolName: String, error: String?, requestID: String
        let userAgent: String?
    }
    let records = Mutex<[Kept]>([])
    init(pool: UpstreamPool, maxBody: Int) {
        self.pool = pool
        self.maxBody = maxBody
    }
    func route(_ head: HTTPRequestHead, path: String, peer: SocketAddress?, requestID: RequestID) -> RouteDecision {
        if path == "/local" { return .respond(routeName: "local", LocalResponse.json(418, "{\"local\":true}")) }
        return .forward(
            Forward(
                routeName: "default", pool: pool, maxBody: maxBody,
                editHeaders: HeaderEdit(add: [("X-Edited", "yes")]), responseHeaders: HTTPFields([("X-Route", "default")])))
    }
    func exchangeDidFinish(_ record: ExchangeRecord) {
        let ua: String? =
            switch record.fields.userAgent {
            case .none: nil
            case .string(let s): s
            case .bytes(let b): String(decoding: b, as: UTF8.self)
            }
        let kept = Kept(
            route: record.route, target: record.target, status: record.status, requestBytes: record.requestBytes,
            protocolName: record.protocolName, error: record.error, requestID: record.requestID.text, userAgent: ua)
        records.withLock { $0.append(kept) }
    }
}

/// The echo upstream (HTTP/1.1) + a proxy serving `protocols`, each on its own loop.
final class H2ProxyFixture: @unchecked Sendable {
    let upstreamLoop = EventLoop(index: 20)
    let proxyLoop = EventLoop(index: 21)
    let upstream: HTTPServer
    let proxy: HTTPServer
    let router: RecordingProxyRouter

    let resets = Mutex<[String]>([])
    let goaways = Mutex<[String]>([])

    init(
        protocols: ServedProtocols, upstreamAddress: SocketAddress? = nil, maxBody: Int = 64 << 20,
        limits: DownstreamLimits = DownstreamLimits()
    ) throws {
        Socket.ignoreSIGPIPE()
        upstream = try HTTPServer(address: try SocketAddress("127.0.0.1:0"), loops: [upstreamLoop], limits: DownstreamLimits()) { _ in
            EchoUpstreamRouter()
        }
        let target = UpstreamTarget(
            name: "legacy", address: upstreamAddress ?? upstream.address, maxConnections: 16, connectTimeoutMillis: 1000,
            responseTimeoutMillis: 5000)
        let box = RouterBox()
        proxy = try HTTPServer(
            address: try SocketAddress("127.0.0.1:0"), loops: [proxyLoop], limits: limits,
            protocols: protocols
        ) { loop in
            let r = RecordingProxyRouter(pool: UpstreamPool(target: target, loop: loop), maxBody: maxBody)
            box.router = r
            return r
        }
        router = box.router!
        proxy.onHTTP2StreamReset = { [weak self] reason in self?.resets.withLock { $0.append(reason) } }
        proxy.onHTTP2Goaway = { [weak self] reason in self?.goaways.withLock { $0.append(reason) } }
    }

    final class RouterBox: @unchecked Sendable { var router: RecordingProxyRouter? }

    var port: UInt16 { proxy.address.port }
    func url(_ path: String) -> String { "http://127.0.0.1:\(port)\(path)" }
    var records: [RecordingProxyRouter.Kept] { router.records.withLock { $0 } }

    func stop() {
        proxy.drain(deadlineMillis: 0)
        upstream.drain(deadlineMillis: 0)
        proxyLoop.queue.sync { router.pool.closeIdle() }
        proxyLoop.shutdownAndWait()
        upstreamLoop.shutdownAndWait()
    }
}

/// A curl answer: protocol version, status, lowercased header fields, body bytes.
struct CurlAnswer {
    var version = ""
    var status = 0
    var headers: [String: String] = [:]
    var body: [UInt8] = []
    var text: String { String(decoding: body, as: UTF8.self) }
}

let curlPath = "/usr/bin/curl"
var curlInstalled: Bool { FileManager.default.isExecutableFile(atPath: curlPath) }

/// Runs curl (h2c prior knowledge unless `args` say otherwise) with a deadline; body to a file.
func curlCall(_ args: [String]) throws -> CurlAnswer {
    let dir = FileManager.default.temporaryDirectory.appendingPathComponent("h2-curl-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: dir) }
    let headFile = dir.appendingPathComponent("head").path
    let bodyFile = dir.appendingPathComponent("body").path
    let r = try runProcess(URL(fileURLWithPath: curlPath), ["-sS", "--max-time", "20", "-D", headFile, "-o", bodyFile] + args, timeout: 30)
    var a = CurlAnswer()
    let head = (try? String(contentsOfFile: headFile, encoding: .isoLatin1)) ?? ""
    for line in head.split(separator: "\r\n") {
        if line.hasPrefix("HTTP/") {
            let parts = line.split(separator: " ")
            a.version = String(parts[0])
            a.status = parts.count > 1 ? Int(parts[1]) ?? 0 : 0
            a.headers = [:]
        } else if let colon = line.firstIndex(of: ":") {
            a.headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
    }
    a.body = Array((try? Data(contentsOf: URL(fileURLWithPath: bodyFile))) ?? Data())
    if r.status != 0 && a.status == 0 { a.version = "curl exit \(r.status): \(r.stderr)" }
    return a
}

/// Skips (returns false) without curl, except under CI=true, where a missing curl fails.
func requireCurl() -> Bool {
    if curlInstalled { return true }
    if ProcessInfo.processInfo.environment["CI"] == "true" { Issue.record("curl is required under CI=true") }
    return false
}

/// A HEADERS frame (END_STREAM | END_HEADERS) for a GET, fields as HPACK literals without indexing
/// and without Huffman coding (RFC 7541 §6.2.2): enough for a raw-socket client.
func http2GetFrame(streamID: UInt32, path: String, authority: String) -> [UInt8] {
    var block: [UInt8] = []
    for (n, v) in [(":method", "GET"), (":scheme", "http"), (":path", path), (":authority", authority)] {
        block.append(0x00)
        block.append(UInt8(n.utf8.count))
        block += Array(n.utf8)
        block.append(UInt8(v.utf8.count))
        block += Array(v.utf8)
    }
    let len = block.count
    return [
        UInt8(len >> 16 & 0xff), UInt8(len >> 8 & 0xff), UInt8(len & 0xff), 0x1, 0x5,
        UInt8(streamID >> 24 & 0x7f), UInt8(streamID >> 16 & 0xff), UInt8(streamID >> 8 & 0xff), UInt8(streamID & 0xff),
    ] + block
}

/// The checksum EchoUpstreamRouter reports for a body.
func echoSum(_ body: [UInt8]) -> String { String(body.reduce(0) { ($0 &+ Int($1)) & 0xffffff }) }

@Suite("HTTP/2 (h2c) downstream through the proxy (in process)", .timeLimit(.minutes(2)), .serialized)
struct HTTP2ProxyTests {
    @Test("the connection preface is told from HTTP/1.1 on its first bytes (RFC 9113 §3.4)") func prefaceSniffing() {
        func verdict(_ s: String) -> HTTP2Preface.Verdict { Array(s.utf8).withUnsafeBytes { HTTP2Preface.classify($0) } }
        #expect(verdict("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n") == .http2)
        #expect(verdict("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\u{0}\u{0}") == .http2)
        #expect(verdict("PRI * HTTP/2") == .needMore)
        #expect(verdict("") == .needMore)
        #expect(verdict("GET / HTTP/1.1\r\n") == .http1)
        #expect(verdict("PRI * HTTP/1.1\r\n\r\n") == .http1)
    }

    @Test("GET over h2c: forwarded upstream over HTTP/1.1 with the same header rewriting; record says h2") func get() throws {
        guard requireCurl() else { return }
        let f = try H2ProxyFixture(protocols: .h2c)
        defer { f.stop() }
        let a = try curlCall(["--http2-prior-knowledge", "-H", "X-App: 1", "-H", "X-Forwarded-For: 10.0.0.1", f.url("/a/b?x=1")])
        #expect(a.version == "HTTP/2")
        #expect(a.status == 200)
        #expect(a.text == "echo")
        #expect(a.headers["x-seen-method"] == "GET")
        #expect(a.headers["x-seen-target"] == "/a/b?x=1")
        #expect(a.headers["x-seen-host"] == "127.0.0.1:\(f.port)")
        #expect(a.headers["x-seen-x-forwarded-for"] == "127.0.0.1")  // from no trusted proxy: replaced
        #expect(a.headers["x-seen-x-forwarded-proto"] == "http")
        #expect(a.headers["x-seen-via"] == "1.1 attest-gateway")
        #expect(a.headers["x-seen-x-app"] == "1")
        #expect(a.headers["x-seen-x-edited"] == "yes")  // Forward.editHeaders
        #expect(a.headers["x-route"] == "default")  // Forward.responseHeaders
        #expect(a.headers["via"] == "1.1 attest-gateway")
        #expect(a.headers["connection"] == nil)
        let r = try #require(f.records.last)
        #expect(r.protocolName == "h2")
        #expect(r.status == 200)
        #expect(r.route == "default")
        #expect(r.error == nil)
    }

    @Test("POST bodies larger than the stream window reach the upstream whole (RFC 9113 §5.2)", arguments: [0, 1, 70_000, 1_500_000])
    func post(size: Int) throws {
        guard requireCurl() else { return }
        let f = try H2ProxyFixture(protocols: .h2c)
        defer { f.stop() }
        var body = [UInt8](repeating: 0, count: size)
        for i in body.indices { body[i] = UInt8(truncatingIfNeeded: i &* 13 &+ i >> 9) }
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("h2-post-\(UUID().uuidString)")
        try Data(body).write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        let a = try curlCall(["--http2-prior-knowledge", "--data-binary", "@" + file.path, f.url("/upload")])
        #expect(a.status == 200)
        #expect(a.headers["x-seen-method"] == "POST")
        #expect(a.headers["x-seen-body-length"] == String(size))
        #expect(a.headers["x-seen-body-sum"] == echoSum(body))
        #expect(f.records.last?.requestBytes == size)
    }

    @Test("expect: 100-continue gets an interim 100 (RFC 9110 §10.1.1), then the body is forwarded") func expectContinue() throws {
        guard requireCurl() else { return }
        let f = try H2ProxyFixture(protocols: .h2c)
        defer { f.stop() }
        // A long wait for 100 would be a failure to send it: curl falls back to sending after 30 s,
        // past the test's --max-time.
        let a = try curlCall([
            "--http2-prior-knowledge", "--expect100-timeout", "60", "-H", "Expect: 100-continue",
            "--data-binary", String(repeating: "e", count: 3000), f.url("/ec"),
        ])
        #expect(a.status == 200)
        #expect(a.headers["x-seen-body-length"] == "3000")
        #expect(a.headers["x-seen-expect"] == nil)
    }

    @Test("a body without content-length is sent upstream chunked") func unknownLength() throws {
        guard requireCurl() else { return }
        let f = try H2ProxyFixture(protocols: .h2c)
        defer { f.stop() }
        let body = [UInt8](repeating: 0x61, count: 100_000)
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("h2-chunk-\(UUID().uuidString)")
        try Data(body).write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        // -T with a content-length removed: curl streams it as DATA without content-length.
        let a = try curlCall([
            "--http2-prior-knowledge", "-X", "POST", "-H", "Content-Length:", "-H", "Transfer-Encoding: chunked",
            "--data-binary", "@" + file.path, f.url("/stream"),
        ])
        #expect(a.status == 200)
        #expect(a.headers["x-seen-body-length"] == "100000")
        #expect(a.headers["x-seen-transfer-encoding"] == "chunked")
    }

    @Test("a large response streams back through the client's windows with back-pressure") func largeDownload() throws {
        guard requireCurl() else { return }
        let f = try H2ProxyFixture(protocols: .h2c)
        defer { f.stop() }
        let n = 3_000_000
        let a = try curlCall(["--http2-prior-knowledge", f.url("/big/\(n)")])
        #expect(a.status == 200)
        #expect(a.body.count == n)
        var same = a.body.count == n
        for i in 0..<min(n, a.body.count) where a.body[i] != UInt8(truncatingIfNeeded: i &* 7) {
            same = false
            break
        }
        #expect(same)
    }

    @Test("concurrent streams on one connection, each on its own upstream connection") func parallel() throws {
        guard requireCurl() else { return }
        let f = try H2ProxyFixture(protocols: .h2c)
        defer { f.stop() }
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("h2-par-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        var args = ["-sS", "--max-time", "20", "--http2-prior-knowledge", "--parallel", "--parallel-immediate", "--parallel-max", "8"]
        for i in 0..<8 { args += ["-o", dir.appendingPathComponent("\(i)").path, f.url("/big/\(200_000 + i)")] }
        let r = try runProcess(URL(fileURLWithPath: curlPath), args, timeout: 30)
        #expect(r.status == 0, "\(r.stderr)")
        for i in 0..<8 {
            let d = try Data(contentsOf: dir.appendingPathComponent("\(i)"))
            #expect(d.count == 200_000 + i)
        }
        let recs = f.records
        #expect(recs.count == 8)
        #expect(recs.allSatisfy { $0.protocolName == "h2" && $0.status == 200 && $0.error == nil })
    }

    @Test("local answers and JSON errors on h2: 418 local, 400 ambiguous path") func localAndErrors() throws {
        guard requireCurl() else { return }
        let f = try H2ProxyFixture(protocols: .h2c)
        defer { f.stop() }
        let local = try curlCall(["--http2-prior-knowledge", f.url("/local")])
        #expect(local.status == 418)
        #expect(local.text == "{\"local\":true}\n")
        let bad = try curlCall(["--http2-prior-knowledge", "--path-as-is", f.url("/a/%2e%2e/%2e%2e/x")])
        #expect(bad.status == 400)
        #expect(bad.headers["content-type"] == "application/json")
        let badID = try #require(bad.headers["x-request-id"])
        #expect(bad.text == "{\"error\":\"ambiguous_path\",\"requestId\":\"\(badID)\"}\n")
    }

    @Test("a header list above the limit → 431 JSON headers_too_large, as on HTTP/1.1, recorded; the connection lives on")
    func headersTooLarge() throws {
        guard requireCurl() else { return }
        let f = try H2ProxyFixture(protocols: .h2c)
        defer { f.stop() }
        // 40 KB of one field: past the 16 KiB SETTINGS_MAX_HEADER_LIST_SIZE (curl sends it anyway).
        let big = try curlCall(["--http2-prior-knowledge", "-H", "X-Big: " + String(repeating: "b", count: 40_000), f.url("/u")])
        #expect(big.status == 431)
        #expect(big.headers["content-type"] == "application/json")
        let id = try #require(big.headers["x-request-id"])
        #expect(big.text == "{\"error\":\"headers_too_large\",\"requestId\":\"\(id)\"}\n")
        #expect(f.records.contains { $0.status == 431 && $0.error == "headers_too_large" && $0.target == "-" && $0.protocolName == "h2" })
        #expect(try curlCall(["--http2-prior-knowledge", f.url("/u")]).status == 200)
    }

    @Test("a declared body above the route's limit → 413 JSON before reading it") func tooLarge() throws {
        guard requireCurl() else { return }
        let f = try H2ProxyFixture(protocols: .h2c, maxBody: 1000)
        defer { f.stop() }
        let a = try curlCall(["--http2-prior-knowledge", "--data-binary", String(repeating: "x", count: 5000), f.url("/u")])
        #expect(a.status == 413)
        let id = try #require(a.headers["x-request-id"])
        #expect(a.text == "{\"error\":\"body_too_large\",\"requestId\":\"\(id)\"}\n")
    }

    @Test("upstream down → 502 JSON on h2, connection still usable") func upstreamDown() throws {
        guard requireCurl() else { return }
        // A port nobody listens on: bind, read the port, close.
        let probe = try HTTPServer(address: try SocketAddress("127.0.0.1:0"), loops: [EventLoop(index: 29)], limits: DownstreamLimits()) {
            _ in
            EchoUpstreamRouter()
        }
        let dead = probe.address
        probe.stopAccepting()
        probe.loops[0].shutdownAndWait()
        let f = try H2ProxyFixture(protocols: .h2c, upstreamAddress: dead)
        defer { f.stop() }
        let a = try curlCall(["--http2-prior-knowledge", f.url("/x")])
        #expect(a.version == "HTTP/2")
        #expect(a.status == 502)
        #expect(f.records.first?.status == 502)
        #expect(f.records.first?.protocolName == "h2")
        let again = try curlCall(["--http2-prior-knowledge", f.url("/y")])
        #expect(again.status == 502)
        #expect(again.headers["content-type"] == "application/json")
        #expect(again.text.hasPrefix("{\"error\":\"upstream_"))
    }

    @Test("a listener with http1 and h2c serves both on one port; an http1-only one refuses the preface") func bothProtocols() throws {
        guard requireCurl() else { return }
        let f = try H2ProxyFixture(protocols: [.http1, .h2c])
        defer { f.stop() }
        let h2 = try curlCall(["--http2-prior-knowledge", f.url("/two")])
        #expect(h2.version == "HTTP/2")
        #expect(h2.headers["x-seen-target"] == "/two")
        let h1 = try curlCall(["--http1.1", f.url("/one")])
        #expect(h1.version == "HTTP/1.1")
        #expect(h1.headers["x-seen-target"] == "/one")
        #expect(f.records.map(\.protocolName).sorted() == ["h2", "http1"])

        let g = try H2ProxyFixture(protocols: .http1)
        defer { g.stop() }
        let refused = try curlCall(["--http2-prior-knowledge", g.url("/two")])
        #expect(refused.version != "HTTP/2")
        #expect(g.records.allSatisfy { $0.protocolName == "http1" })
    }

    @Test("drain: GOAWAY, then the final GOAWAY after the PING ack, then close (RFC 9113 §6.8)") func drain() throws {
        let f = try H2ProxyFixture(protocols: .h2c)
        defer { f.stop() }
        let c = try LoopbackClient(port: f.port)
        c.send(HTTP2Preface.bytes + [0, 0, 0, 0x4, 0, 0, 0, 0, 0])  // preface + empty SETTINGS
        var reader = HTTP2FrameReader(client: c)
        // Our SETTINGS first.
        let first = reader.next()
        #expect(first?.type == 0x4)
        let drained = DispatchSemaphore(value: 0)
        let cut = Mutex(-1)
        DispatchQueue.global().async {
            let n = f.proxy.drain(deadlineMillis: 5000)
            cut.withLock { $0 = n }
            drained.signal()
        }
        let goaways = http2CollectGoaways(&reader)
        #expect(drained.wait(timeout: .now() + 10) == .success)
        #expect(goaways.count == 2)
        #expect(goaways.first == 0x7fff_ffff)
        #expect(goaways.last == 0)
        #expect(cut.withLock { $0 } == 0)
    }
    @Test("the upstream dies mid-response: the stream is reset (RST_STREAM), counted, and the connection lives on")
    func upstreamCutMidResponse() throws {
        let cut = try ScriptedServer { c in
            guard let req = c.readRequest() else { return }
            if req.target == "/cut" {
                _ = c.write("HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + String(repeating: "x", count: 1000))
                c.close()
            } else {
                _ = c.respond("fine")
            }
        }
        defer { cut.stop() }
        let f = try H2ProxyFixture(protocols: .h2c, upstreamAddress: try SocketAddress("127.0.0.1:\(cut.port)"))
        defer { f.stop() }
        // Two streams on one raw connection: /cut, then /after once /cut was reset.
        let c = try LoopbackClient(port: f.port)
        c.send(http2ClientPreface + http2GetFrame(streamID: 1, path: "/cut", authority: "127.0.0.1"))
        var reader = HTTP2FrameReader(client: c)
        var reset: UInt32?
        var afterStatus: String?
        var afterEnded = false
        while let fr = reader.next() {
            if fr.type == 0x3 && fr.stream == 1 {
                reset = UInt32(fr.payload[0]) << 24 | UInt32(fr.payload[1]) << 16 | UInt32(fr.payload[2]) << 8 | UInt32(fr.payload[3])
                c.send(http2GetFrame(streamID: 3, path: "/after", authority: "127.0.0.1"))
            }
            // The response HEADERS start with an indexed :status (0x88 = 200) from the static table.
            if fr.type == 0x1 && fr.stream == 3 { afterStatus = fr.payload.first == 0x88 ? "200" : "other" }
            if fr.type == 0x0 && fr.stream == 3 && fr.flags & 1 == 1 {
                afterEnded = true
                break
            }
        }
        #expect(reset == 2)  // INTERNAL_ERROR
        #expect(afterStatus == "200")
        #expect(afterEnded)
        #expect(f.resets.withLock { $0 } == ["upstream_closed"])
        let recs = f.records
        #expect(recs.contains { $0.target == "/cut" && $0.error == "upstream_closed" && $0.protocolName == "h2" })
        #expect(recs.contains { $0.target == "/after" && $0.status == 200 && $0.error == nil })
    }

    @Test("idle timeout: a connection without streams after its first request gets GOAWAY(NO_ERROR) and is closed")
    func idleTimeout() throws {
        let f = try H2ProxyFixture(protocols: .h2c, limits: DownstreamLimits(idleTimeoutMillis: 300))
        defer { f.stop() }
        let c = try LoopbackClient(port: f.port)
        c.send(http2ClientPreface + http2GetFrame(streamID: 1, path: "/local", authority: "127.0.0.1"))
        var reader = HTTP2FrameReader(client: c)
        let goaways = http2CollectGoaways(&reader)  // returns at EOF
        #expect(goaways == [1])
        #expect(f.goaways.withLock { $0 } == ["idle_timeout"])
    }

    @Test("header timeout: a connection that sends no request within it (from the accept) gets GOAWAY(NO_ERROR) and is closed")
    func headerTimeout() throws {
        let f = try H2ProxyFixture(protocols: .h2c, limits: DownstreamLimits(idleTimeoutMillis: 60_000, headerTimeoutMillis: 300))
        defer { f.stop() }
        let c = try LoopbackClient(port: f.port)
        let start = ContinuousClock.now
        c.send(http2ClientPreface)
        var reader = HTTP2FrameReader(client: c)
        let goaways = http2CollectGoaways(&reader)  // returns at EOF
        #expect(ContinuousClock.now - start < .seconds(5), "closed at the header timeout, not the idle timeout")
        #expect(goaways == [0])
        #expect(f.goaways.withLock { $0 } == ["header_timeout"])
    }

    @Test(
        "a sniffed connection whose HTTP/2 session cannot start is closed and releases its slot (http1 + h2c listener)",
        arguments: [ServedProtocols.h2c, [.http1, .h2c]])
    func failedStartReleasesSlot(_ protocols: ServedProtocols) throws {
        let f = try H2ProxyFixture(protocols: protocols)
        defer { f.stop() }
        var broken = HTTP2Settings()
        broken.maxFrameSize = 1  // refused by HTTP2Settings.validate(): no session can be made with it
        f.proxy.replaceHTTP2Settings(broken)
        for _ in 0..<3 {
            let c = try LoopbackClient(port: f.port)
            c.send(HTTP2Preface.bytes)
            // Closed: an end of stream, or a reset (the preface was left unread).
            var byte: UInt8 = 0
            let n = recv(c.fd, &byte, 1, 0)
            #expect(n == 0 || (n < 0 && errno == ECONNRESET), "recv \(n), errno \(errno)")
        }
        var open = f.proxy.connectionCount
        for _ in 0..<100 where open != 0 {
            usleep(20_000)
            open = f.proxy.connectionCount
        }
        #expect(open == 0, "connections still counted after failed HTTP/2 starts: \(open)")
    }
}
