// libFuzzer target: an HTTP/1.1 request as a client sends it, through everything the proxy does with
// its bytes: HTTP1Parser (both head APIs), HeadBytes (absolute-form taken to Host), PathNormalizer,
// UpstreamRequestHead (the head sent upstream) and ChunkedDecoder / BodyReader (the body).
//
// Input: [split selector] [options] [request bytes]. The selector picks up to 7 points where the bytes
// are cut (FuzzInput.cuts); options: bit 0 small head limits, bits 1-2 the route's HeaderEdit, bit 3 a
// trusted peer, bit 4 foldable names dropped, bit 5 small chunked limits, bit 7 the bytes are a
// chunked body when they are no head.
//
// Properties checked (a violation traps):
//   1. Nothing crashes. parseRequestHeadLines and parseRequestHead agree: the same head (materialized),
//      keep-alive and 100-continue, or the same error kind and offset, or both incomplete. Parsing again
//      with the connection's HostMemo changes nothing.
//   2. Incremental: a head is incomplete at every cut point before its end; an incomplete input is
//      incomplete at every prefix; an error at a prefix is the error of the whole input.
//   3. An accepted head ends with CRLF CRLF; after HeadBytes.takeAuthority its target is origin-form.
//   4. PathNormalizer: a normalised path is "*" or starts with "/", holds no "//", "." or ".." segment,
//      "?", "#" or "\"; normalising it again changes nothing; folding it (params, trim) twice is folding
//      it once (not with suffix, see checkPath).
//   5. What UpstreamRequestHead writes parses again (as HTTP/1.1): the same method, target and framing,
//      exactly the field lines written, one Host, every field either the client's own (name and value
//      byte for byte) or one the gateway writes; no hop-by-hop field, no Expect.
//   6. ChunkedDecoder: the same body bytes, end, trailers and error (kind and offset) whether the body
//      arrives in one piece or cut at the chosen points; BodyReader agrees. A Content-Length body is
//      taken exactly.
import FuzzSupport
@_spi(Testing) import GatewayHTTP
@_spi(Fuzzing) import GatewayProxy

let defaultParser = HTTP1Parser()
let smallParser = HTTP1Parser(limits: .init(maxRequestLine: 64, maxHeaderBytes: 512, maxHeaderCount: 8))
/// Route edits that keep Host (a route that removes Host sends HTTP/1.1 without one: a configuration
/// choice, not the writer's).
let edits: [HeaderEdit] = [
    HeaderEdit(),
    HeaderEdit(remove: ["X-Verified"], add: [("X-Verified", "key")]),
    HeaderEdit(remove: ["Cookie", "via", "X-App-Attest-Key-Id"], add: [("X-App-Attest-Verified-Key-Id", "k1"), ("X-A", "1")]),
    HeaderEdit(add: [("X-Device-Check-Bits", "0,1")]),
]
let neverForwarded = [
    "Connection", "Keep-Alive", "Upgrade", "Proxy-Connection", "Trailer", "Proxy-Authenticate",
    "Proxy-Authorization", "Expect",
]
let folds: [PathFold] = [.params, .trim, .suffix, [.params, .trim], .all]

enum HeadOutcome: Equatable {
    case incomplete
    case head(end: Int)
    case error(HTTPParseError.Kind, Int)
}

func parseLines(_ parser: HTTP1Parser, _ buf: UnsafeRawBufferPointer, _ memo: inout HTTP1Parser.HostMemo)
    -> (HeadOutcome, HTTPRequestHeadLines?)
{
    var fields: [HTTPFieldRange] = []
    do {
        guard let (lines, end) = try parser.parseRequestHeadLines(buf, reusing: &fields, hostMemo: &memo) else { return (.incomplete, nil) }
        return (.head(end: end), lines)
    } catch {
        return (.error(error.kind, error.offset), nil)
    }
}

func outcome(_ parser: HTTP1Parser, _ buf: UnsafeRawBufferPointer) -> HeadOutcome {
    var memo = HTTP1Parser.HostMemo()
    return parseLines(parser, buf, &memo).0
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let input = FuzzInput.bytes(data, size)
    guard input.count >= 2 else { return 0 }
    let options = input[1]
    let request = Array(input[2...])
    let cuts = FuzzInput.cuts(selector: input[0], count: request.count)
    let parser = options & 1 != 0 ? smallParser : defaultParser
    request.withUnsafeBytes { buf in
        var memo = HTTP1Parser.HostMemo()
        let (result, lines) = parseLines(parser, buf, &memo)
        checkStringParser(parser, buf, result, lines)
        // The connection's next request with the same Host: its memo must not change the answer.
        var again = memo
        guard parseLines(parser, buf, &again).0 == result else { fuzzFail("a HostMemo changed the outcome") }
        checkPrefixes(parser, buf, result, cuts)
        switch result {
        case .head(let end):
            guard let lines else { fuzzFail("unreachable") }
            forwarded(lines, buf, end: end, options: options)
            let body = request[end...]
            switch lines.framing {
            case .chunked: checkChunked(body, cuts: FuzzInput.cuts(selector: input[0] &+ 1, count: body.count), options: options)
            case .contentLength(let n): checkContentLength(body, n, cuts: FuzzInput.cuts(selector: input[0], count: body.count))
            case .none, .untilClose: break
            }
        case .incomplete, .error:
            if options & 0x80 != 0 { checkChunked(request[...], cuts: cuts, options: options) }
        }
    }
    return 0
}

// MARK: - Heads

/// Property 1: the string API gives the same answer.
func checkStringParser(_ parser: HTTP1Parser, _ buf: UnsafeRawBufferPointer, _ result: HeadOutcome, _ lines: HTTPRequestHeadLines?) {
    let strings: HeadOutcome
    var head: HTTPRequestHead?
    do {
        if let (h, end) = try parser.parseRequestHead(buf) {
            strings = .head(end: end)
            head = h
        } else {
            strings = .incomplete
        }
    } catch {
        strings = .error(error.kind, error.offset)
    }
    guard strings == result else { fuzzFail("parseRequestHeadLines: \(result), parseRequestHead: \(strings)") }
    if let head, let lines {
        guard lines.materialize(buf) == head else { fuzzFail("the two head APIs read different heads") }
        guard lines.keepAlive == head.keepAlive else { fuzzFail("keep-alive differs between the head APIs") }
        guard lines.expectsContinue == head.expectsContinue else { fuzzFail("100-continue differs between the head APIs") }
    }
}

/// Property 2: what a connection sees as the bytes arrive.
func checkPrefixes(_ parser: HTTP1Parser, _ buf: UnsafeRawBufferPointer, _ result: HeadOutcome, _ cuts: [Int]) {
    for c in cuts where c < buf.count {
        let prefix = outcome(parser, UnsafeRawBufferPointer(rebasing: buf[0..<c]))
        switch (result, prefix) {
        case (.head(let end), .head(let e)) where c >= end && e == end: continue
        case (.head(let end), .incomplete) where c < end: continue
        case (.incomplete, .incomplete): continue
        case (.error, .incomplete): continue
        case (.error, .error) where prefix == result: continue
        default: fuzzFail("\(c)-byte prefix: \(prefix), whole input: \(result)")
        }
    }
}

/// Properties 3 to 5: the head as the proxy takes it on and writes it upstream.
func forwarded(_ parsed: HTTPRequestHeadLines, _ buf: UnsafeRawBufferPointer, end: Int, options: UInt8) {
    guard end >= 4, buf[end - 4] == 0x0d, buf[end - 3] == 0x0a, buf[end - 2] == 0x0d, buf[end - 1] == 0x0a else {
        fuzzFail("a head that does not end with CRLF CRLF")
    }
    let bytes = HeadBytes()
    bytes.set(UnsafeRawBufferPointer(rebasing: buf[0..<end]))
    var h = parsed
    if h.absoluteForm { bytes.takeAuthority(&h) }
    let target = bytes.with { h.targetString($0) }
    guard target == "*" || target.hasPrefix("/") else { fuzzFail("target \(target) after takeAuthority") }
    checkPath(target)

    let edit = edits[Int(options >> 1) & 3]
    let out = bytes.with { b in
        Upstream.write(
            h, b, client: "203.0.113.7", trustedPeer: options & 8 != 0, framing: h.framing, edit: edit, dropFoldableNames: options & 16 != 0
        )
    }
    bytes.with { b in checkUpstream(out, client: h, b, edit: edit) }
}

func checkUpstream(_ out: [UInt8], client h: HTTPRequestHeadLines, _ cb: UnsafeRawBufferPointer, edit: HeaderEdit) {
    out.withUnsafeBytes { ob in
        let u = Upstream.parse(out, ob)
        func slice(_ b: UnsafeRawBufferPointer, _ r: Range<Int>) -> [UInt8] { Array(b[r]) }
        guard slice(ob, u.method) == slice(cb, h.method) else { fuzzFail("the method changed upstream") }
        guard slice(ob, u.target) == slice(cb, h.target) else { fuzzFail("the target changed upstream") }
        guard u.framing == h.framing else { fuzzFail("framing \(h.framing) went upstream as \(u.framing)") }
        // Exactly the field lines written (the writer's lines are "name: value" CRLF).
        let written = writtenFields(out)
        let read = u.fields.map { (slice(ob, $0.name), slice(ob, $0.value)) }
        guard written.count == read.count, zip(written, read).allSatisfy({ $0.0 == $1.0 && $0.1 == $1.1 }) else {
            fuzzFail("the field lines read back are not the ones written")
        }
        let clientFields = h.fields.map { (slice(cb, $0.name), slice(cb, $0.value)) }
        let added = edit.add.map(\.0)
        var hosts = 0
        for (name, value) in read {
            let n = String(decoding: name, as: UTF8.self)
            if n.equalsIgnoringASCIICase("Host") { hosts += 1 }
            if neverForwarded.contains(where: { n.equalsIgnoringASCIICase($0) }) { fuzzFail("\(n) went upstream") }
            if n.equalsIgnoringASCIICase("TE"), value != Array("trailers".utf8) { fuzzFail("TE other than trailers went upstream") }
            let own = Upstream.isGatewayName(n) || added.contains(n)
            if !own && !clientFields.contains(where: { $0.0 == name && $0.1 == value }) {
                fuzzFail("field \(n) went upstream, neither the client's nor the gateway's")
            }
        }
        guard hosts == 1 else { fuzzFail("\(hosts) Host fields upstream") }
    }
}

/// The (name, value) of each field line of a head as the writer lays it out.
func writtenFields(_ out: [UInt8]) -> [([UInt8], [UInt8])] {
    var lines: [ArraySlice<UInt8>] = []
    var start = 0
    var i = 0
    while i + 1 < out.count {
        if out[i] == 0x0d && out[i + 1] == 0x0a {
            lines.append(out[start..<i])
            start = i + 2
            i += 2
        } else {
            i += 1
        }
    }
    return lines.dropFirst().filter { !$0.isEmpty }.map { line in
        let colon = line.firstIndex(of: 0x3a)!
        var v = line[(colon + 1)...]
        while let f = v.first, f == 0x20 || f == 0x09 { v = v.dropFirst() }
        while let l = v.last, l == 0x20 || l == 0x09 { v = v.dropLast() }
        return (Array(line[..<colon]), Array(v))
    }
}

// MARK: - Paths

/// Property 4.
func checkPath(_ target: String) {
    guard let n = PathNormalizer.normalize(target) else { return }
    guard n == "*" || n.hasPrefix("/") else { fuzzFail("normalize(\(target)) = \(n)") }
    if n != "*" {
        guard !n.contains("//"), !n.contains("?"), !n.contains("#"), !n.contains("\\") else { fuzzFail("normalize(\(target)) = \(n)") }
        for seg in n.split(separator: "/") where seg == "." || seg == ".." { fuzzFail("normalize(\(target)) = \(n) keeps a dot segment") }
    }
    guard PathNormalizer.normalize(n) == n else {
        fuzzFail("normalize is not idempotent: \(target) → \(n) → \(PathNormalizer.normalize(n) ?? "nil")")
    }
    for f in folds {
        let once = PathNormalizer.fold(n, f)
        guard once == "*" || once.hasPrefix("/") else { fuzzFail("fold(\(f.rawValue)) of \(n) is \(once)") }
        // `suffix` is not idempotent by design: when it empties the last segment (`/a/b.c/.d`), the
        // segment before becomes the last one, whose suffix a second fold would take too.
        guard !f.contains(.suffix) else { continue }
        let twice = PathNormalizer.fold(once, f)
        guard twice == once else { fuzzFail("fold(\(f.rawValue)) is not idempotent: \(n) → \(once) → \(twice)") }
    }
}

// MARK: - Bodies

struct ChunkedOutcome: Equatable {
    var body: [UInt8] = []
    var end: Int?
    var error: HeadOutcome?
    var trailers = HTTPFields()
}

func decoder(_ options: UInt8) -> ChunkedDecoder {
    options & 0x20 != 0 ? ChunkedDecoder(maxLineBytes: 16, maxTrailerBytes: 64) : ChunkedDecoder()
}

/// The body in one piece.
func chunkedWhole(_ body: ArraySlice<UInt8>, options: UInt8) -> ChunkedOutcome {
    var d = decoder(options)
    var o = ChunkedOutcome()
    let bytes = Array(body)
    bytes.withUnsafeBytes { buf in
        var p = 0
        do throws(HTTPParseError) {
            loop: while true {
                switch try d.next(buf, from: p) {
                case .data(let r):
                    guard r.lowerBound >= p, r.upperBound <= buf.count, !r.isEmpty else { fuzzFail("data range \(r) from \(p)") }
                    o.body += buf[r]
                    p = r.upperBound
                case .needMore(let c):
                    guard c >= p, c <= buf.count else { fuzzFail("needMore(consumedTo: \(c)) from \(p)") }
                    break loop
                case .end(let e):
                    guard e >= p, e <= buf.count else { fuzzFail("end \(e) from \(p)") }
                    o.end = e
                    break loop
                }
            }
        } catch {
            o.error = .error(error.kind, error.offset)
        }
    }
    o.trailers = d.trailers
    if (o.end != nil) != d.isDone { fuzzFail("isDone disagrees with the end") }
    return o
}

/// The body as a connection reads it: pieces appended to what was not consumed yet.
func chunkedPieces(_ body: ArraySlice<UInt8>, cuts: [Int], options: UInt8) -> ChunkedOutcome {
    var d = decoder(options)
    var o = ChunkedOutcome()
    var pending: [UInt8] = []
    var consumed = 0
    pieces: for piece in FuzzInput.pieces(body, cuts: cuts) {
        pending += piece
        let step: Bool = pending.withUnsafeBytes { buf in
            var p = 0
            do throws(HTTPParseError) {
                while true {
                    switch try d.next(buf, from: p) {
                    case .data(let r):
                        o.body += buf[r]
                        p = r.upperBound
                    case .needMore(let c):
                        pending.removeFirst(c)
                        consumed += c
                        return true
                    case .end(let e):
                        o.end = consumed + e
                        return false
                    }
                }
            } catch {
                o.error = .error(error.kind, consumed + error.offset)
                return false
            }
        }
        if !step { break pieces }
    }
    o.trailers = d.trailers
    return o
}

/// The body through BodyReader, in the same pieces.
func bodyReaderPieces(_ body: ArraySlice<UInt8>, cuts: [Int]) -> ChunkedOutcome {
    var reader = BodyReader(.chunked)
    var o = ChunkedOutcome()
    var pending: [UInt8] = []
    var consumed = 0
    for piece in FuzzInput.pieces(body, cuts: cuts) {
        pending += piece
        let go: Bool = pending.withUnsafeBytes { buf in
            do throws(HTTPParseError) {
                let (used, done) = try reader.read(buf) { o.body += $0 }
                if done {
                    o.end = consumed + used
                    return false
                }
                pending.removeFirst(used)
                consumed += used
                return true
            } catch {
                o.error = .error(error.kind, consumed + error.offset)
                return false
            }
        }
        if !go { break }
    }
    return o
}

/// Property 6.
func checkChunked(_ body: ArraySlice<UInt8>, cuts: [Int], options: UInt8) {
    let whole = chunkedWhole(body, options: options)
    let pieces = chunkedPieces(body, cuts: cuts, options: options)
    guard pieces == whole else { fuzzFail("chunked body in pieces \(cuts): \(pieces), in one: \(whole)") }
    if options & 0x20 == 0 {
        var reader = bodyReaderPieces(body, cuts: cuts)
        reader.trailers = whole.trailers  // BodyReader does not pass them on
        guard reader == whole else { fuzzFail("BodyReader in pieces \(cuts): \(reader), ChunkedDecoder: \(whole)") }
    }
}

func checkContentLength(_ body: ArraySlice<UInt8>, _ n: UInt64, cuts: [Int]) {
    var reader = BodyReader(.contentLength(n))
    var taken = 0
    var finished = false
    for piece in FuzzInput.pieces(body, cuts: cuts) where !finished {
        let (used, done) = Array(piece).withUnsafeBytes { buf in
            do { return try reader.read(buf) { taken += $0.count } } catch { fuzzFail("a Content-Length body threw \(error)") }
        }
        guard used <= piece.count else { fuzzFail("used \(used) of \(piece.count)") }
        finished = done
    }
    let expected = Int(min(UInt64(body.count), n))
    guard taken == expected, finished == (UInt64(body.count) >= n) else {
        fuzzFail("Content-Length \(n) over \(body.count) bytes: took \(taken), done \(finished)")
    }
}
