// libFuzzer target: an HTTP/2 server session (HTTP2ServerSession over nghttp2) fed the client preface
// and then arbitrary bytes, driven as the gateway's HTTP/2 connection drives it: requests answered
// (heads, bodies in pieces, early or late), request bodies consumed (all, some, later), output pulled
// (or not: a slow client), streams reset, the connection drained; every delivered request head held
// to the gateway's checks and written upstream as HTTP/1.1 (HeadBytes + UpstreamRequestHead).
//
// Input: [split selector] [options] [bytes after the preface]. The selector picks up to 7 points where
// the bytes are cut; options: bit 0 small limits (4 streams, 1 KiB header lists, 1 KiB windows, 8
// resets per window, 2 CONTINUATIONs, 16 queued acks); the rest seeds the harness's choices.
//
// Properties checked (a violation traps):
//   1. Nothing crashes; client misbehaviour never throws (the session API throws only for a stream
//      that is gone or a session that is closing).
//   2. Events make sense: a request (or requestHeadTooLarge) once per stream id (odd, new), its data, end
//      and reset only after it and before its streamClosed, which comes once; nothing for a stream after
//      it closed.
//   3. A delivered head passes HTTP2RequestHead's rules again: method a token, target origin-form (or *
//      for OPTIONS), Host first, no connection-specific field, minor version 1.
//   4. Bounded: delivered and open streams never exceed SETTINGS_MAX_CONCURRENT_STREAMS and equal the
//      session's openStreamCount; output stays within 16 times the input plus what the harness
//      submitted (plus 64 KiB).
//   5. A head the gateway would forward (canonical method, valid Host, a normalisable path), written
//      upstream, parses as HTTP/1.1 with the same method, target and framing, one Host, and only the
//      client's fields or the gateway's.
import FuzzSupport
@_spi(Testing) import GatewayHTTP
@_spi(Fuzzing) import GatewayProxy

let preface = Array("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".utf8)
var clockNanos: UInt64 = 0
let connectionSpecific = ["connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade"]

func settings(small: Bool) -> HTTP2Settings {
    var s = HTTP2Settings()
    if small {
        s.maxConcurrentStreams = 4
        s.maxHeaderListSize = 1024
        s.initialWindowSize = 1024
        s.maxResetsPerWindow = 8
        s.maxContinuations = 2
        s.maxOutboundAck = 16
        s.responseHighWater = 512
    }
    return s
}

struct StreamModel {
    var ended = false
    var responded = false
    var bodyLeft = 0
    var unconsumed = 0
}

final class Harness {
    let session: HTTP2ServerSession
    let limits: HTTP2Settings
    var rng: FuzzRandom
    var open: [Int32: StreamModel] = [:]
    var closed: Set<Int32> = []
    var delivered: Set<Int32> = []
    var output = 0
    var submitted = 0

    init(limits: HTTP2Settings, rng: FuzzRandom) {
        self.limits = limits
        self.rng = rng
        do {
            session = try HTTP2ServerSession(settings: limits, clock: { clockNanos })
        } catch {
            fuzzFail("session: \(error)")
        }
    }

    func step(_ bytes: ArraySlice<UInt8>) {
        clockNanos &+= 50_000_000
        let events = bytes.withUnsafeBytes { session.receive($0) }
        handle(events)
        act()
        if !rng.chance(4) { pull(softLimit: [512, 16 * 1024, 256 * 1024][rng.below(3)]) }
        handle(session.takeEvents())
        check()
    }

    func finish() {
        for _ in 0..<4 {
            act()
            pull(softLimit: .max)
            handle(session.takeEvents())
        }
        session.terminate(code: .noError, detail: "done")
        pull(softLimit: .max)
        handle(session.takeEvents())
        check()
    }

    func pull(softLimit: Int) {
        var out: [UInt8] = []
        let n = session.pullOutput(into: &out, softLimit: softLimit)
        guard n == out.count else { fuzzFail("pullOutput said \(n) bytes, gave \(out.count)") }
        output += n
    }

    func allowed(_ e: HTTP2SessionError) {
        guard e.kind == .sessionClosed || e.kind == .unknownStream else { fuzzFail("the session threw \(e)") }
    }

    func handle(_ events: [HTTP2Event]) {
        for e in events {
            switch e {
            case .request(let id, let head):
                guard id > 0, id % 2 == 1, !delivered.contains(id) else {
                    fuzzFail("request on stream \(id) (delivered before: \(delivered.contains(id)))")
                }
                delivered.insert(id)
                open[id] = StreamModel()
                checkHead(head)
                forward(head)
                if rng.chance(2) { respond(id) }
            case .requestHeadTooLarge(let id, _):
                // Delivered without a head (the loop answers 431): a stream like any other.
                guard id > 0, id % 2 == 1, !delivered.contains(id) else { fuzzFail("oversized request on stream \(id)") }
                delivered.insert(id)
                open[id] = StreamModel()
                if rng.chance(2) { respond(id) }
            case .requestData(let id, let bytes):
                guard var s = open[id], !s.ended else { fuzzFail("data on stream \(id), not open or ended") }
                s.unconsumed += bytes.count
                switch rng.below(3) {
                case 0:
                    session.consume(streamID: id, count: s.unconsumed)
                    s.unconsumed = 0
                case 1:
                    session.consume(streamID: id, count: s.unconsumed / 2)
                    s.unconsumed -= s.unconsumed / 2
                default: break
                }
                open[id] = s
            case .requestEnd(let id):
                guard open[id] != nil, open[id]!.ended == false else { fuzzFail("requestEnd on stream \(id), not open or ended twice") }
                open[id]!.ended = true
            case .streamReset(let id, _):
                guard open[id] != nil else { fuzzFail("streamReset on stream \(id), not open") }
            case .streamClosed(let id, _):
                guard open.removeValue(forKey: id) != nil else { fuzzFail("streamClosed on stream \(id), not open") }
                closed.insert(id)
            case .responseWritable(let id):
                guard open[id] != nil else { fuzzFail("responseWritable on stream \(id), not open") }
            case .goaway, .connectionError:
                break
            }
        }
    }

    /// The harness's own moves: answer, send body, consume late, reset, drain.
    func act() {
        for id in open.keys.sorted() {
            guard var s = open[id] else { continue }
            if !s.responded {
                if rng.chance(3) { respond(id) }
                continue
            }
            if s.bodyLeft > 0, !session.shouldPauseUpstream(streamID: id), rng.chance(2) {
                let n = min(s.bodyLeft, 1 + rng.below(1500))
                s.bodyLeft -= n
                do {
                    try session.sendResponseBody(streamID: id, [UInt8](repeating: 0x61, count: n), endStream: s.bodyLeft == 0)
                    submitted += n
                } catch { allowed(error) }
            }
            if s.unconsumed > 0, rng.chance(2) {
                session.consume(streamID: id, count: s.unconsumed)
                s.unconsumed = 0
            }
            open[id] = s
            if rng.chance(40) { session.resetStream(streamID: id, code: rng.chance(2) ? .cancel : .internalError) }
        }
        if rng.chance(200) { session.beginDrain() }
        if rng.chance(400) { session.finishDrain() }
    }

    func respond(_ id: Int32) {
        guard var s = open[id], !s.responded else { return }
        let status = [200, 204, 404, 500, 302][rng.below(5)]
        var headers = HTTPFields([("Content-Type", "text/plain"), ("X-A", "1")])
        if rng.chance(3) { headers.append("Connection", "close, X-A") }
        if rng.chance(3) { headers.append("Transfer-Encoding", "chunked") }
        let end = status == 204 || rng.chance(3)
        do {
            if rng.chance(5) { try session.submitInterimResponse(streamID: id, status: 103, headers: HTTPFields([("Link", "</a>")])) }
            try session.submitResponse(streamID: id, status: status, headers: headers, endStream: end)
            submitted += 64
            s.responded = true
            s.bodyLeft = end ? 0 : rng.below(3000) + 1
            if !s.ended && rng.chance(3) { session.stopRequestAfterResponse(streamID: id) }
        } catch {
            allowed(error)
        }
        open[id] = s
    }

    /// Property 3.
    func checkHead(_ head: HTTPRequestHead) {
        guard head.minorVersion == 1, !head.method.isEmpty else { fuzzFail("head \(head.method) minor \(head.minorVersion)") }
        guard head.target.hasPrefix("/") || (head.target == "*" && head.method == "OPTIONS") else { fuzzFail("target \(head.target)") }
        guard head.headers.fields.first?.name == "Host" else { fuzzFail("Host is not the first field") }
        for f in head.headers.fields.dropFirst() {
            if connectionSpecific.contains(f.name) { fuzzFail("connection-specific field \(f.name) delivered") }
            if f.name.hasPrefix(":") { fuzzFail("pseudo-header \(f.name) delivered as a field") }
        }
    }

    /// Property 5: what HTTP2Stream.start checks before it forwards, then the upstream head.
    func forward(_ head: HTTPRequestHead) {
        guard RequestSyntax.isCanonicalMethod(head.method), let host = head.headers.fields.first?.value, RequestSyntax.isValidHost(host),
            PathNormalizer.normalize(head.target) != nil
        else { return }
        let bytes = HeadBytes()
        let lines = bytes.set(head, reusing: [])
        let out = bytes.with { Upstream.write(lines, $0, client: "2001:db8::7", framing: head.framing) }
        out.withUnsafeBytes { ob in
            let u = Upstream.parse(out, ob)
            let read = u.materialize(ob)
            guard read.method == head.method, read.target == head.target else { fuzzFail("method or target changed upstream") }
            // Content-Length: 0 is written as such and read back as no body: the same framing.
            let sent: BodyFraming = head.framing == .contentLength(0) ? .none : head.framing
            guard u.framing == sent else { fuzzFail("framing \(head.framing) went upstream as \(u.framing)") }
            guard read.headers.count(of: "Host") == 1 else { fuzzFail("\(read.headers.count(of: "Host")) Host fields upstream") }
            for f in read.headers where !Upstream.isGatewayName(f.name) {
                if !head.headers.contains(where: { $0.name == f.name && $0.value == f.value }) {
                    fuzzFail("field \(f.name) went upstream, neither the client's nor the gateway's")
                }
            }
        }
    }

    /// Properties 2 and 4.
    func check() {
        guard open.count == session.openStreamCount else {
            fuzzFail("\(open.count) streams open here, \(session.openStreamCount) in the session")
        }
        guard open.count <= Int(limits.maxConcurrentStreams) else {
            fuzzFail("\(open.count) streams open, limit \(limits.maxConcurrentStreams)")
        }
        guard open.keys.allSatisfy({ !closed.contains($0) }) else { fuzzFail("a closed stream is open again") }
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let input = FuzzInput.bytes(data, size)
    guard input.count >= 2 else { return 0 }
    let bytes = input[2...]
    let h = Harness(limits: settings(small: input[1] & 1 != 0), rng: FuzzRandom(seed: UInt64(input[0]) << 8 | UInt64(input[1])))
    h.step(preface[...])
    for piece in FuzzInput.pieces(bytes, cuts: FuzzInput.cuts(selector: input[0], count: bytes.count)) { h.step(piece) }
    h.finish()
    let bound = 16 * (bytes.count + preface.count) + 2 * h.submitted + 64 * 1024
    guard h.output <= bound else { fuzzFail("\(h.output) bytes of output for \(bytes.count) bytes of input (\(h.submitted) submitted)") }
    return 0
}
