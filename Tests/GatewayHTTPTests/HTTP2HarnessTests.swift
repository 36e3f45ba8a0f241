import CGatewayNGHTTP2
import GatewayHTTP
import Testing

// The in-memory harness for the HTTP/2 tests: hand-built frames (with a literal-only HPACK encoder,
// so that any field, valid or not, can be sent), a frame reader and HPACK decoder for what the
// server writes, and a real client built on nghttp2's client session API.

enum H2 {
    static let preface: [UInt8] = Array("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".utf8)

    enum FrameType: UInt8 {
        case data = 0, headers = 1, priority = 2, rstStream = 3, settings = 4, pushPromise = 5, ping = 6, goaway = 7
        case windowUpdate = 8, continuation = 9
    }

    static let endStream: UInt8 = 0x1
    static let ack: UInt8 = 0x1
    static let endHeaders: UInt8 = 0x4

    static func frame(_ type: FrameType, flags: UInt8 = 0, stream: Int32 = 0, _ payload: [UInt8] = []) -> [UInt8] {
        let n = payload.count
        return [UInt8(n >> 16 & 0xff), UInt8(n >> 8 & 0xff), UInt8(n & 0xff), type.rawValue, flags] + be32(UInt32(stream)) + payload
    }

    static func be32(_ v: UInt32) -> [UInt8] { [UInt8(v >> 24), UInt8(v >> 16 & 0xff), UInt8(v >> 8 & 0xff), UInt8(v & 0xff)] }

    static func settings(_ entries: [(UInt16, UInt32)] = []) -> [UInt8] {
        frame(.settings, entries.flatMap { [UInt8($0.0 >> 8), UInt8($0.0 & 0xff)] + be32($0.1) })
    }

    static let settingsAck = frame(.settings, flags: ack)

    /// The client's side of the connection start: preface, empty SETTINGS, and (optionally) the
    /// acknowledgement of the server's SETTINGS.
    static func start(ackServerSettings: Bool = true) -> [UInt8] {
        preface + settings() + (ackServerSettings ? settingsAck : [])
    }

    static func headers(stream: Int32, _ block: [UInt8], endStream: Bool = true, endHeaders: Bool = true) -> [UInt8] {
        frame(.headers, flags: (endStream ? H2.endStream : 0) | (endHeaders ? H2.endHeaders : 0), stream: stream, block)
    }

    static func request(stream: Int32, _ fields: [(String, String)], endStream: Bool = true) -> [UInt8] {
        headers(stream: stream, HPACK.literals(fields), endStream: endStream)
    }

    static func data(stream: Int32, _ bytes: [UInt8], endStream: Bool = false) -> [UInt8] {
        frame(.data, flags: endStream ? H2.endStream : 0, stream: stream, bytes)
    }

    static func rst(stream: Int32, code: HTTP2ErrorCode) -> [UInt8] { frame(.rstStream, stream: stream, be32(code.rawValue)) }

    static func ping(_ opaque: [UInt8] = [1, 2, 3, 4, 5, 6, 7, 8], ack: Bool = false) -> [UInt8] {
        frame(.ping, flags: ack ? H2.ack : 0, opaque)
    }

    static let get: [(String, String)] = [(":method", "GET"), (":scheme", "https"), (":authority", "api.example"), (":path", "/")]

    struct Frame: Equatable {
        var type: UInt8
        var flags: UInt8
        var stream: Int32
        var payload: [UInt8]

        var errorCode: HTTP2ErrorCode? {
            switch type {
            case FrameType.rstStream.rawValue: HTTP2ErrorCode(u32(payload, 0))
            case FrameType.goaway.rawValue: HTTP2ErrorCode(u32(payload, 4))
            default: nil
            }
        }

        var lastStreamID: Int32 { Int32(bitPattern: u32(payload, 0) & 0x7fff_ffff) }
    }

    static func u32(_ b: [UInt8], _ at: Int) -> UInt32 {
        UInt32(b[at]) << 24 | UInt32(b[at + 1]) << 16 | UInt32(b[at + 2]) << 8 | UInt32(b[at + 3])
    }

    /// Splits what the server wrote into frames (the server never writes a preface).
    static func frames(_ bytes: [UInt8]) -> [Frame] {
        var out: [Frame] = []
        var i = 0
        while i + 9 <= bytes.count {
            let n = Int(bytes[i]) << 16 | Int(bytes[i + 1]) << 8 | Int(bytes[i + 2])
            guard i + 9 + n <= bytes.count else { break }
            out.append(
                Frame(
                    type: bytes[i + 3], flags: bytes[i + 4],
                    stream: Int32(bitPattern: u32(bytes, i + 5) & 0x7fff_ffff), payload: Array(bytes[i + 9..<i + 9 + n])))
            i += 9 + n
        }
        return out
    }

    static func resets(_ frames: [Frame]) -> [Int32: HTTP2ErrorCode] {
        var out: [Int32: HTTP2ErrorCode] = [:]
        for f in frames where f.type == FrameType.rstStream.rawValue { out[f.stream] = f.errorCode }
        return out
    }

    static func goaways(_ frames: [Frame]) -> [Frame] { frames.filter { $0.type == FrameType.goaway.rawValue } }
}

/// HPACK (RFC 7541) encoding by hand: literals without Huffman, indexed and incrementally indexed.
enum HPACK {
    static func integer(_ v: Int, prefixBits: Int, first: UInt8) -> [UInt8] {
        let max = (1 << prefixBits) - 1
        if v < max { return [first | UInt8(v)] }
        var out = [first | UInt8(max)]
        var r = v - max
        while r >= 128 {
            out.append(UInt8(r % 128 + 128))
            r /= 128
        }
        out.append(UInt8(r))
        return out
    }

    static func string(_ s: String) -> [UInt8] { integer(s.utf8.count, prefixBits: 7, first: 0) + Array(s.utf8) }

    /// Literal header field without indexing, new name (RFC 7541 §6.2.2).
    static func literal(_ name: String, _ value: String) -> [UInt8] { [0x00] + string(name) + string(value) }

    /// Literal header field with incremental indexing, new name (RFC 7541 §6.2.1).
    static func indexing(_ name: String, _ value: String) -> [UInt8] { [0x40] + string(name) + string(value) }

    /// Indexed header field (RFC 7541 §6.1); 62 is the newest dynamic table entry.
    static func indexed(_ index: Int) -> [UInt8] { integer(index, prefixBits: 7, first: 0x80) }

    static func literals(_ fields: [(String, String)]) -> [UInt8] { fields.flatMap { literal($0.0, $0.1) } }
}

/// Decodes the server's header blocks with nghttp2's HPACK inflater (one per connection).
final class HeaderDecoder {
    private var inflater: OpaquePointer?

    init() { nghttp2_hd_inflate_new(&inflater) }
    deinit { nghttp2_hd_inflate_del(inflater) }

    /// Decodes every HEADERS frame (with END_HEADERS; the server sends no CONTINUATION for small heads).
    func decode(_ frames: [H2.Frame]) -> [Int32: [(String, String)]] {
        var out: [Int32: [(String, String)]] = [:]
        for f in frames where f.type == H2.FrameType.headers.rawValue {
            var fields: [(String, String)] = []
            var block = f.payload
            if f.flags & 0x8 != 0 {  // PADDED
                let pad = Int(block[0])
                block = Array(block[1..<block.count - pad])
            }
            if f.flags & 0x20 != 0 { block = Array(block.dropFirst(5)) }  // PRIORITY
            block.withUnsafeBufferPointer { buf in
                var offset = 0
                while true {
                    var nv = nghttp2_nv()
                    var flags: Int32 = 0
                    let rv = nghttp2_hd_inflate_hd2(inflater, &nv, &flags, buf.baseAddress! + offset, buf.count - offset, 1)
                    if rv < 0 { return }
                    offset += rv
                    if flags & Int32(NGHTTP2_HD_INFLATE_EMIT.rawValue) != 0 {
                        fields.append(
                            (
                                String(decoding: UnsafeBufferPointer(start: nv.name, count: nv.namelen), as: UTF8.self),
                                String(decoding: UnsafeBufferPointer(start: nv.value, count: nv.valuelen), as: UTF8.self)
                            ))
                    }
                    if flags & Int32(NGHTTP2_HD_INFLATE_FINAL.rawValue) != 0 {
                        nghttp2_hd_inflate_end_headers(inflater)
                        return
                    }
                    if rv == 0 && flags & Int32(NGHTTP2_HD_INFLATE_EMIT.rawValue) == 0 { return }
                }
            }
            out[f.stream, default: []] += fields
        }
        return out
    }
}

/// A real HTTP/2 client: nghttp2's client session, in memory.
final class H2TestClient {
    struct Response {
        var headers: [(String, String)] = []
        var body: [UInt8] = []
        var closed: HTTP2ErrorCode?
        var status: String? { headers.first { $0.0 == ":status" }?.1 }
        func header(_ name: String) -> String? { headers.first { $0.0 == name }?.1 }
    }

    private var session: OpaquePointer!
    var responses: [Int32: Response] = [:]
    var goaways: [(lastStreamID: Int32, code: HTTP2ErrorCode)] = []
    var pingAcksSent = 0
    /// Request bodies still to send, per stream.
    private var bodies: [Int32: (bytes: [UInt8], offset: Int)] = [:]
    /// When false, received DATA is acknowledged only by `consume` (a slow reader).
    let autoConsume: Bool
    private(set) var unconsumed: [Int32: Int] = [:]

    init(settings: [(nghttp2_settings_id, UInt32)] = [], autoConsume: Bool = true) {
        self.autoConsume = autoConsume
        var cbs: OpaquePointer?
        nghttp2_session_callbacks_new(&cbs)
        defer { nghttp2_session_callbacks_del(cbs) }
        nghttp2_session_callbacks_set_on_header_callback(cbs) { _, frame, name, nameLen, value, valueLen, _, ud in
            let me = Unmanaged<H2TestClient>.fromOpaque(ud!).takeUnretainedValue()
            let n = String(decoding: UnsafeBufferPointer(start: name, count: nameLen), as: UTF8.self)
            let v = String(decoding: UnsafeBufferPointer(start: value, count: valueLen), as: UTF8.self)
            me.responses[frame!.pointee.hd.stream_id, default: Response()].headers.append((n, v))
            return 0
        }
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs) { session, _, stream, data, len, ud in
            let me = Unmanaged<H2TestClient>.fromOpaque(ud!).takeUnretainedValue()
            me.responses[stream, default: Response()].body += UnsafeBufferPointer(start: data, count: len)
            if me.autoConsume {
                nghttp2_session_consume(session, stream, len)
            } else {
                me.unconsumed[stream, default: 0] += len
            }
            return 0
        }
        nghttp2_session_callbacks_set_on_stream_close_callback(cbs) { _, stream, code, ud in
            let me = Unmanaged<H2TestClient>.fromOpaque(ud!).takeUnretainedValue()
            me.responses[stream, default: Response()].closed = HTTP2ErrorCode(code)
            return 0
        }
        nghttp2_session_callbacks_set_on_frame_recv_callback(cbs) { _, frame, ud in
            let me = Unmanaged<H2TestClient>.fromOpaque(ud!).takeUnretainedValue()
            if frame!.pointee.hd.type == UInt8(NGHTTP2_GOAWAY.rawValue) {
                me.goaways.append((frame!.pointee.goaway.last_stream_id, HTTP2ErrorCode(frame!.pointee.goaway.error_code)))
            }
            return 0
        }
        nghttp2_session_callbacks_set_on_frame_send_callback(cbs) { _, frame, ud in
            let me = Unmanaged<H2TestClient>.fromOpaque(ud!).takeUnretainedValue()
            let hd = frame!.pointee.hd
            if hd.type == UInt8(NGHTTP2_PING.rawValue), hd.flags & UInt8(NGHTTP2_FLAG_ACK.rawValue) != 0 { me.pingAcksSent += 1 }
            return 0
        }
        var opt: OpaquePointer?
        nghttp2_option_new(&opt)
        defer { nghttp2_option_del(opt) }
        nghttp2_option_set_no_auto_window_update(opt, 1)
        nghttp2_session_client_new2(&session, cbs, Unmanaged.passUnretained(self).toOpaque(), opt)
        let iv = settings.map { nghttp2_settings_entry(settings_id: Int32($0.0.rawValue), value: $0.1) }
        nghttp2_submit_settings(session, 0, iv, iv.count)
    }

    deinit { nghttp2_session_del(session) }

    @discardableResult
    func request(
        method: String = "GET", path: String = "/", authority: String = "api.example",
        headers: [(String, String)] = [], body: [UInt8]? = nil
    ) -> Int32 {
        let fields = [(":method", method), (":scheme", "https"), (":authority", authority), (":path", path)] + headers
        var storage: [UInt8] = []
        var spans: [(Int, Int, Int, Int)] = []
        for (n, v) in fields {
            let a = storage.count
            storage += Array(n.utf8)
            let b = storage.count
            storage += Array(v.utf8)
            spans.append((a, b - a, b, storage.count - b))
        }
        storage.append(0)
        // nghttp2 copies the fields during the call.
        let id: Int32 = storage.withUnsafeMutableBufferPointer { buf in
            let base = buf.baseAddress!
            let nva = spans.map { nghttp2_nv(name: base + $0.0, value: base + $0.2, namelen: $0.1, valuelen: $0.3, flags: 0) }
            if body == nil { return nghttp2_submit_request(session, nil, nva, nva.count, nil, nil) }
            var provider = nghttp2_data_provider()
            provider.read_callback = { _, stream, buf, length, flags, _, ud in
                let me = Unmanaged<H2TestClient>.fromOpaque(ud!).takeUnretainedValue()
                guard let (bytes, offset) = me.bodies[stream] else { return Int(NGHTTP2_ERR_DEFERRED.rawValue) }
                let n = min(length, bytes.count - offset)
                bytes.withUnsafeBufferPointer { buf!.update(from: $0.baseAddress! + offset, count: n) }
                me.bodies[stream]!.offset += n
                if offset + n == bytes.count { flags!.pointee |= NGHTTP2_DATA_FLAG_EOF.rawValue }
                return n
            }
            return nghttp2_submit_request(session, nil, nva, nva.count, &provider, nil)
        }
        if let body {
            bodies[id] = (body, 0)
            nghttp2_session_resume_data(session, id)
        }
        return id
    }

    func receive(_ bytes: [UInt8]) {
        let rv = bytes.withUnsafeBufferPointer { nghttp2_session_mem_recv(session, $0.baseAddress, $0.count) }
        precondition(rv == bytes.count, "client rejected server bytes: \(String(cString: nghttp2_strerror(Int32(rv))))")
    }

    func output() -> [UInt8] {
        var out: [UInt8] = []
        while true {
            var p: UnsafePointer<UInt8>?
            let n = nghttp2_session_mem_send(session, &p)
            guard n > 0, let p else { break }
            out += UnsafeBufferPointer(start: p, count: n)
        }
        return out
    }

    /// The application read `count` bytes of `stream`: WINDOW_UPDATE follows.
    func consume(stream: Int32, count: Int) {
        unconsumed[stream, default: 0] -= count
        nghttp2_session_consume(session, stream, count)
    }

    func consumeAll() { for (s, n) in unconsumed where n > 0 { consume(stream: s, count: n) } }

    func submitPing() { nghttp2_submit_ping(session, 0, nil) }
}

/// Moves bytes both ways until neither side has anything to say; `handle` plays the gateway's part
/// for each server event (it may submit responses). Bounded: a livelock fails the test.
@discardableResult
func pump(
    _ client: H2TestClient, _ server: HTTP2ServerSession, rounds: Int = 10_000,
    handle: (HTTP2Event) throws -> Void = { _ in }
) rethrows -> [HTTP2Event] {
    var all: [HTTP2Event] = []
    for _ in 0..<rounds {
        let c = client.output()
        var evs = server.receive(c)
        for e in evs { try handle(e) }
        all += evs
        let s = server.pullOutput()
        evs = server.takeEvents()
        for e in evs { try handle(e) }
        all += evs
        if !s.isEmpty { client.receive(s) }
        if c.isEmpty && s.isEmpty && evs.isEmpty { return all }
    }
    Issue.record("pump did not settle in \(rounds) rounds")
    return all
}

/// A clock the test moves by hand (rapid reset windows).
final class ManualClock {
    var now: UInt64 = 1_000_000_000
}

@Suite("HTTP/2 test harness")
struct HTTP2HarnessTests {
    @Test("RFC 7541 §5.1, §6.2.2: the hand-built literal encoder is read back by nghttp2's decoder")
    func hpackRoundTrip() {
        let long = String(repeating: "v", count: 300)
        let block = HPACK.literals([(":path", "/x"), ("x-long", long)])
        let frames = H2.frames(H2.headers(stream: 1, block))
        let decoded = HeaderDecoder().decode(frames)
        #expect(decoded[1]?.map(\.0) == [":path", "x-long"])
        #expect(decoded[1]?.last?.1 == long)
    }

    @Test("RFC 9113 §4.1: frames are split back at their 9-byte headers")
    func frameReader() {
        let bytes = H2.settings([(3, 100)]) + H2.rst(stream: 5, code: .cancel) + H2.ping()
        let frames = H2.frames(bytes)
        #expect(frames.map(\.type) == [4, 3, 6])
        #expect(H2.resets(frames) == [5: .cancel])
    }
}
