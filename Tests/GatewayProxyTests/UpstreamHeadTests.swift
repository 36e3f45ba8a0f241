@testable import GatewayHTTP
import GatewayIO
@testable import GatewayProxy
import GatewayTestSupport
import Testing

/// The proxy writes the upstream request head in one pass (`Forward.appendUpstreamHead`); these tests
/// hold it to the field-list path it replaces (`upstreamFields` then `HTTP1Serializer`), byte for byte.
@Suite("Upstream request heads written in one pass")
struct UpstreamHeadTests {
    static let pool: [(String, String)] = [
        ("Host", "example.com"), ("host", "other"), ("Accept", "*/*"), ("User-Agent", "t/1"),
        ("Connection", "keep-alive"), ("Connection", "close, X-Drop"), ("connection", "x-drop, host, te"),
        ("X-Drop", "1"), ("x-drop", "2"), ("Keep-Alive", "timeout=5"), ("TE", "trailers"), ("TE", "gzip"),
        ("te", "deflate, Trailers"), ("Upgrade", "h2c"), ("Proxy-Connection", "x"), ("Trailer", "X"),
        ("Proxy-Authorization", "Basic x"), ("X-Forwarded-For", "10.0.0.1"), ("x-forwarded-for", "10.0.0.2, 10.0.0.3"),
        ("X-Forwarded-For", ""), ("X-Forwarded-Proto", "https"), ("X-Forwarded-Host", "spoof"), ("Forwarded", "for=1"),
        ("Via", "1.0 a"), ("via", ""), ("Expect", "100-continue"), ("Content-Length", "5"), ("content-length", "5"),
        ("Transfer-Encoding", "chunked"), ("X-App-Attest-Key-Id", "k"), ("x-app-assertion", "a"), ("X-Verified", "spoof"),
        ("X-Latin", "caf\u{E9}"), ("Cookie", "a=b"), ("Connection", "x-forwarded-for, via"), ("connection", "VIA"),
    ]
    static let edits: [HeaderEdit] = [
        HeaderEdit(),
        HeaderEdit(remove: ["X-Verified"]),
        HeaderEdit(remove: ["X-App-Attest-Key-Id", "X-App-Assertion", "X-Verified"], add: [("X-Verified", "key")]),
        HeaderEdit(remove: ["host", "via", "Cookie"], add: [("Content-Length", "9"), ("X-A", "1")]),
        HeaderEdit(add: [("Expect", "x"), ("Transfer-Encoding", "gzip")]),
    ]
    static let framings: [BodyFraming] = [.none, .contentLength(0), .contentLength(12_345_678_901), .chunked, .untilClose]

    @Test("random client fields, route edits and framings: the same bytes as the field-list path")
    func sameBytes() throws {
        let upstream = try UpstreamTarget(name: "u", address: SocketAddress(host: "127.0.0.1", port: 8081))
        let loop = EventLoop(index: 0)
        defer { loop.shutdown() }
        let upstreamPool = UpstreamPool(target: upstream, loop: loop)
        var rng = SeededRandom(seed: 0xfeed)
        for i in 0..<4000 {
            var fields = HTTPFields()
            for _ in 0..<Int(rng.next() % 8) {
                let (n, v) = Self.pool[Int(rng.next() % UInt64(Self.pool.count))]
                fields.append(n, v)
            }
            let head = HTTPRequestHead(method: i % 3 == 0 ? "POST" : "GET", target: "/a?b=\(i)", minorVersion: i % 5 == 0 ? 0 : 1,
                                       headers: fields, framing: .none)
            let edit = Self.edits[Int(rng.next() % UInt64(Self.edits.count))]
            let framing = Self.framings[Int(rng.next() % UInt64(Self.framings.count))]
            let proto = i % 2 == 0 ? "http" : "https"
            let f = Forward(routeName: "r", pool: upstreamPool, maxBody: 1, editHeaders: edit)
            var expected: [UInt8] = [7]
            HTTP1Serializer.appendRequestHead(
                method: head.method, target: head.target,
                headers: f.upstreamFields(head, client: "192.0.2.1", proto: proto, framing: framing), to: &expected)
            var got: [UInt8] = [7]
            HeadWriter.appendHead(to: &got) { f.writeUpstreamHead(head, client: "192.0.2.1", proto: proto, framing: framing, to: &$0) }
            #expect(got == expected, "\(fields.map { "\($0.name): \($0.value)" }) edit=\(edit.remove)+\(edit.add.map { $0.0 }) \(framing)")
            if got != expected { return }
            // The byte path (the HTTP/1.1 proxy's): the same head as ranges of its bytes.
            let (raw, lines) = Self.rawHead(head, junk: i % 7)
            var fromBytes: [UInt8] = [7]
            HeadWriter.appendHead(to: &fromBytes) { w in
                raw.withUnsafeBytes { f.writeUpstreamHead(lines, $0, client: "192.0.2.1", proto: proto, framing: framing, to: &w) }
            }
            #expect(fromBytes == expected, "bytes: \(fields.map { "\($0.name): \($0.value)" }) edit=\(edit.remove)+\(edit.add.map { $0.0 }) \(framing)")
            if fromBytes != expected { return }
        }
    }

    /// `head` as request bytes (Latin-1, after `junk` bytes that are not part of it) and its ranges,
    /// without the parser's checks: the random field lists break framing and Host rules on purpose.
    static func rawHead(_ head: HTTPRequestHead, junk: Int) -> ([UInt8], HTTPRequestHeadLines) {
        var raw = [UInt8](repeating: 0x78, count: junk)
        func latin1(_ s: String) -> Range<Int> {
            let start = raw.count
            for u in s.unicodeScalars { raw.append(UInt8(u.value)) }
            return start..<raw.count
        }
        let method = latin1(head.method)
        raw.append(0x20)
        let target = latin1(head.target)
        raw.append(contentsOf: Array(" HTTP/1.\(head.minorVersion)\r\n".utf8))
        var fields: [HTTPFieldRange] = []
        var host: Range<Int>? = nil
        for f in head.headers {
            let n = latin1(f.name)
            raw.append(contentsOf: [0x3a, 0x20])
            let v = latin1(f.value)
            raw.append(contentsOf: [0x0d, 0x0a])
            fields.append(HTTPFieldRange(name: n, value: v))
            if host == nil && f.name.lowercased() == "host" { host = v }
        }
        raw.append(contentsOf: [0x0d, 0x0a])
        return (raw, HTTPRequestHeadLines(method: method, target: target, minorVersion: head.minorVersion, fields: fields,
                                          framing: head.framing, keepAlive: head.keepAlive, expectsContinue: head.expectsContinue,
                                          host: host))
    }

    @Test("Content-Length written without a string, every digit count")
    func contentLengthDigits() {
        for n: UInt64 in [0, 1, 9, 10, 99, 100, 65_536, 999_999_999_999, UInt64.max] {
            var out: [UInt8] = []
            HeadWriter.appendHead(to: &out) { w in
                w.append("Content-Length: ")
                w.appendDecimal(n)
                w.crlf()
            }
            #expect(out == Array("Content-Length: \(n)\r\n".utf8))
        }
    }
}

extension Forward {
    // The reference: the rewrite as a field list (what the proxy did before writing heads in one
    // pass), for the byte-for-byte comparison above.
    /// The fields of the request sent upstream: the client's, rewritten (hop-by-hop fields removed,
    /// X-Forwarded-*, Via), without `Expect`, with a `Host` (HTTP/1.0 clients may omit it; the upstream
    /// request is HTTP/1.1, which requires one), edited by the route, then framed as `framing` says.
    func upstreamFields(_ head: HTTPRequestHead, client: String, proto: String, framing: BodyFraming) -> HTTPFields {
        var fields = head.headers
        fields.reserveCapacity(fields.count + 6)  // X-Forwarded-*, Via, Host, framing: one allocation
        ForwardedHeaders.rewriteRequest(&fields, client: client, proto: proto, host: head.headers["Host"])
        fields.remove("Expect")
        if !fields.contains("Host") { fields.append("Host", pool.target.address.description) }
        editHeaders.apply(&fields)
        switch framing {
        case .chunked:
            fields.remove("Content-Length")
            fields.append("Transfer-Encoding", "chunked")
        case .contentLength(let n):
            fields.remove("Transfer-Encoding")
            fields.set("Content-Length", String(n))
        case .none, .untilClose:
            break
        }
        return fields
    }
}

