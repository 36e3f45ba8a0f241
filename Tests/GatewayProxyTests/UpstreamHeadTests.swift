import Foundation
import GatewayIO
import GatewayTestSupport
import Testing

@_spi(Testing) @testable import GatewayHTTP
@_spi(Fuzzing) @testable import GatewayProxy

/// The one writer of upstream request heads (`UpstreamRequestHead`, Forwarding/) against a readable
/// model of its rules (`ForwardingModel` below: field lists, one rule per step), byte for byte, over
/// random heads: from an HTTP/1.1 head's bytes, from a head of strings laid out as bytes (HTTP/2
/// streams), and as the demo upstream reads it back.
@Suite("Upstream request heads: the one writer against the rules")
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
        // Underscores (dropped, or with `allow` dropped when they fold into a field the gateway
        // interprets or owns) and the gateway-owned names and families.
        ("X_App_Attest_Verified_Key_Id", "forged"), ("x_verified", "forged"), ("X_Custom", "kept with allow"),
        ("Content_Length", "9"), ("Transfer_Encoding", "chunked"), ("X_Forwarded_For", "6.6.6.6"), ("Host_", "h"),
        ("X-HTTP-Method-Override", "POST"), ("x-original-url", "/admin"), ("X-Rewrite-URL", "/admin"), ("X-Forwarded-Port", "1"),
        ("x-forwarded-prefix", "/p"), ("X-App-Attest-Risk-Metric", "1"), ("X-Request-Id", "r"), ("X-Device-Check-Bits", "1"),
        ("Connection", "X_Custom"), ("Via_", "x"), ("X-Forwarded", "not a family member"),
        ("X.App.Attest.Verified.Key.Id", "forged"), ("Content.Length", "7"), ("x~forwarded~host", "h"), ("X.Custom", "kept with allow"),
    ]
    static let edits: [HeaderEdit] = [
        HeaderEdit(),
        HeaderEdit(remove: ["X-Verified"]),
        HeaderEdit(remove: ["X-App-Attest-Key-Id", "X-App-Assertion", "X-Verified"], add: [("X-Verified", "key")]),
        HeaderEdit(remove: ["host", "via", "Cookie"], add: [("Content-Length", "9"), ("X-A", "1")]),
        HeaderEdit(add: [("Expect", "x"), ("Transfer-Encoding", "gzip")]),
    ]
    static let framings: [BodyFraming] = [.none, .contentLength(0), .contentLength(12_345_678_901), .chunked, .untilClose]

    @Test("adding two fields at once is adding them one after the other")
    func addingTwoIsAddingEach() {
        let base = HeaderEdit(remove: ["X-App-Attest-Key-Id", "X-Verified"], add: [("X-Existing", "1")])
        let both = base.adding(("X-Verified", "key"), ("X-App-Attest-Risk-Metric", "7"))
        let each = base.adding("X-Verified", "key").adding("X-App-Attest-Risk-Metric", "7")
        #expect(both.remove == each.remove)
        #expect(both.add.map { "\($0.0)=\($0.1)" } == each.add.map { "\($0.0)=\($0.1)" })
        #expect(both.add.map(\.0) == ["X-Existing", "X-Verified", "X-App-Attest-Risk-Metric"])
        #expect(base.add.count == 1)
    }

    @Test("random client fields, route edits and framings: the same bytes as the rules")
    func sameBytes() throws {
        let upstream = try UpstreamTarget(name: "u", address: SocketAddress(host: "127.0.0.1", port: 8081))
        let loop = EventLoop(index: 0)
        defer { loop.shutdownAndWait() }
        let upstreamPool = UpstreamPool(target: upstream, loop: loop)
        var rng = SeededRandom(seed: 0xfeed)
        for i in 0..<4000 {
            var fields = HTTPFields()
            for _ in 0..<Int(rng.next() % 8) {
                let (n, v) = Self.pool[Int(rng.next() % UInt64(Self.pool.count))]
                fields.append(n, v)
            }
            let head = HTTPRequestHead(
                method: i % 3 == 0 ? "POST" : "GET", target: "/a?b=\(i)", minorVersion: i % 5 == 0 ? 0 : 1,
                headers: fields, framing: .none)
            let edit = Self.edits[Int(rng.next() % UInt64(Self.edits.count))]
            let framing = Self.framings[Int(rng.next() % UInt64(Self.framings.count))]
            let proto = i % 2 == 0 ? "http" : "https"
            let drop = i % 4 < 2
            let trusted = i % 3 == 1
            let f = Forward(routeName: "r", pool: upstreamPool, maxBody: 1, editHeaders: edit)
            let id = i % 6 == 0 ? "" : "req-\(i)"
            let requestID = RequestID(id)
            let model = ForwardingModel.fields(
                head, client: "192.0.2.1", proto: proto, trustedPeer: trusted, requestID: id, framing: framing, edit: edit,
                dropFoldableNames: drop, defaultHost: "127.0.0.1:8081")
            var expected: [UInt8] = [7]
            HTTP1Serializer.appendRequestHead(method: head.method, target: head.target, headers: model, to: &expected)
            let context =
                "\(fields.map { "\($0.name): \($0.value)" }) edit=\(edit.remove)+\(edit.add.map { $0.0 }) \(framing) drop=\(drop) trusted=\(trusted)"
            // An HTTP/1.1 head: ranges of the bytes it arrived in.
            let (raw, lines) = Self.rawHead(head, junk: i % 7)
            var fromBytes: [UInt8] = [7]
            HeadWriter.appendHead(to: &fromBytes) { w in
                raw.withUnsafeBytes {
                    f.writeUpstreamHead(
                        lines, $0, client: "192.0.2.1", proto: proto, trustedPeer: trusted, requestID: requestID, framing: framing,
                        dropFoldableNames: drop, to: &w)
                }
            }
            #expect(fromBytes == expected, "bytes: \(context)")
            if fromBytes != expected { return }
            // A head of strings (an HTTP/2 stream's), laid out as bytes for the same writer.
            let laidOut = HeadBytes()
            let h2Lines = laidOut.set(head, reusing: [])
            var fromStrings: [UInt8] = [7]
            HeadWriter.appendHead(to: &fromStrings) { w in
                laidOut.with {
                    f.writeUpstreamHead(
                        h2Lines, $0, client: "192.0.2.1", proto: proto, trustedPeer: trusted, requestID: requestID, framing: framing,
                        dropFoldableNames: drop, to: &w)
                }
            }
            #expect(fromStrings == expected, "strings: \(context)")
            if fromStrings != expected { return }
            // The demo upstream shows the same fields (its body framed by length).
            if i % 10 == 0 {
                let body = [UInt8](repeating: 0x61, count: i % 3)
                // With a trusted peer, `peer` is the client it named; the peer goes last in X-Forwarded-For.
                let request = BufferedRequest(
                    head: head, path: "/", body: body, peer: try SocketAddress(host: trusted ? "203.0.113.50" : "192.0.2.1", port: 1),
                    scheme: proto, dropFoldableNames: drop,
                    forwardingPeer: trusted ? ForwardingPeer(address: "192.0.2.1", trusted: true) : nil, requestID: requestID)
                let demo = request.upstreamFields(edit: edit, upstream: "127.0.0.1:8081")
                let wanted = ForwardingModel.fields(
                    head, client: "192.0.2.1", proto: proto, trustedPeer: trusted, requestID: id,
                    framing: .whole(.none, count: body.count),
                    edit: edit, dropFoldableNames: drop, defaultHost: "127.0.0.1:8081")
                #expect(demo == wanted, "demo: \(context)")
            }
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
        return (
            raw,
            HTTPRequestHeadLines(
                method: method, target: target, minorVersion: head.minorVersion, fields: fields,
                framing: head.framing, keepAlive: head.keepAlive, expectsContinue: head.expectsContinue,
                foldableNames: head.headers.contains { FoldedNames.isFoldable($0.name) }, host: host)
        )
    }

    @Test("no spelling of a gateway-owned field reaches the upstream; underscore names only with allow, never folding into one")
    func ownedAndUnderscores() throws {
        let upstream = try UpstreamTarget(name: "u", address: SocketAddress(host: "127.0.0.1", port: 8081))
        let loop = EventLoop(index: 0)
        defer { loop.shutdownAndWait() }
        let f = Forward(
            routeName: "r", pool: UpstreamPool(target: upstream, loop: loop), maxBody: 1,
            editHeaders: HeaderEdit(remove: ["X-App-Attest-Verified-Key-Id"], add: [("X-App-Attest-Verified-Key-Id", "real")]))
        let client: [(String, String)] = [
            ("Host", "h"), ("X_App_Attest_Verified_Key_Id", "forged"), ("x-app-attest-verified-key-id", "forged"),
            ("X-HTTP-Method-Override", "POST"), ("X_HTTP_Method_Override", "POST"), ("X-HTTP-Method", "POST"),
            ("X-Method-Override", "POST"), ("X-Original-URL", "/api/purchase"), ("X-Rewrite-URL", "/api/purchase"),
            ("X-Original-URI", "/x"), ("X-Original-Method", "POST"), ("X-Forwarded-Port", "443"), ("X-Forwarded-Prefix", "/"),
            ("X-App-Attest-Risk-Metric", "0"), ("X-Device-Check", "x"), ("X-Request-Id", "mine"), ("X-Url-Scheme", "https"),
            ("Front-End-Https", "on"), ("X-App-Attest-Next-Challenge", "c"), ("X-App-Assertion", "a"), ("X-Real-IP", "6.6.6.6"),
            ("True-Client-IP", "6.6.6.6"), ("client-ip", "6.6.6.6"), ("X-Scheme", "https"), ("X-Original-Host", "h"),
            ("X-Override-URL", "/x"), ("X-Envoy-Original-Path", "/x"),
            ("X_Custom", "1"), ("Content_Length", "5"), ("X.App.Attest.Verified.Key.Id", "forged"), ("Transfer.Encoding", "chunked"),
            ("X-Kept", "yes"),
        ]
        let head = HTTPRequestHead(method: "GET", target: "/", minorVersion: 1, headers: HTTPFields(client), framing: .none)
        for drop in [true, false] {
            var out: [UInt8] = []
            let laidOut = HeadBytes()
            let h2Lines = laidOut.set(head, reusing: [])
            HeadWriter.appendHead(to: &out) { w in
                laidOut.with {
                    f.writeUpstreamHead(
                        h2Lines, $0, client: "192.0.2.1", proto: "http", requestID: RequestID("gw-id"), framing: .none,
                        dropFoldableNames: drop, to: &w)
                }
            }
            let (raw, lines) = Self.rawHead(head, junk: 0)
            var fromBytes: [UInt8] = []
            HeadWriter.appendHead(to: &fromBytes) { w in
                raw.withUnsafeBytes {
                    f.writeUpstreamHead(
                        lines, $0, client: "192.0.2.1", proto: "http", requestID: RequestID("gw-id"), framing: .none,
                        dropFoldableNames: drop, to: &w)
                }
            }
            #expect(fromBytes == out)
            let text = String(decoding: out, as: UTF8.self)
            let names = text.split(separator: "\r\n").dropFirst().compactMap { $0.split(separator: ":").first.map(String.init) }
            let expected =
                ["Host"] + (drop ? [] : ["X_Custom"]) + [
                    "X-Kept", "X-Forwarded-For", "X-Forwarded-Proto", "X-Forwarded-Host", "Via",
                    "X-Request-Id", "X-App-Attest-Verified-Key-Id",
                ]
            #expect(names == expected, "\(text)")
            // The client's own X-Request-Id never goes as sent: the writer sends the id it is given.
            #expect(text.contains("X-Request-Id: gw-id\r\n") && !text.contains("mine"))
            #expect(text.contains("X-App-Attest-Verified-Key-Id: real\r\n") && !text.contains("forged"))
        }
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

/// The forwarding rules of `UpstreamRequestHead`, one step at a time over a field list of strings:
/// the reference the writer is held to.
enum ForwardingModel {
    /// `client`: the peer's address; `trustedPeer`: it is a trusted proxy, whose X-Forwarded-For
    /// list, -Proto and -Host are kept (from any other peer they are replaced).
    static func fields(
        _ head: HTTPRequestHead, client: String, proto: String, trustedPeer: Bool = false, requestID: String = "", framing: BodyFraming,
        edit: HeaderEdit, dropFoldableNames: Bool, defaultHost: String
    ) -> HTTPFields {
        let client_ = head.headers.fields
        func lower(_ s: String) -> String { s.lowercased() }
        /// A name as CGI-style backends read it: ASCII lowercase, anything but letters, digits and `-` as `-`.
        func folded(_ s: String) -> String {
            String(
                s.unicodeScalars.map { c -> Character in
                    let v = c.value
                    if (0x41...0x5a).contains(v) { return Character(Unicode.Scalar(v + 0x20)!) }
                    if (0x61...0x7a).contains(v) || (0x30...0x39).contains(v) || v == 0x2d { return Character(c) }
                    return "-"
                })
        }
        func inList(_ names: [String], prefixes: [String] = [], _ name: String) -> Bool {
            let n = folded(name)
            return names.contains { folded($0) == n } || prefixes.contains { n.count > $0.count && n.hasPrefix(folded($0)) }
        }
        let foldable = { (n: String) in
            n.unicodeScalars.contains {
                !(0x30...0x39).contains($0.value) && !(0x41...0x5a).contains($0.value) && !(0x61...0x7a).contains($0.value) && $0 != "-"
            }
        }
        let hopByHop = [
            "connection", "proxy-connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te",
            "trailer", "transfer-encoding", "upgrade",
        ]
        let interpretedWhenFolded = hopByHop + ["host", "content-length", "expect", "via", "forwarded"]
        let forwarding = ["x-forwarded-for", "x-forwarded-proto", "x-forwarded-host", "forwarded", "via"]
        let connectionLists = client_.filter { lower($0.name) == "connection" }.map(\.value)
        func tokens(_ list: String) -> [String] {
            list.split(separator: ",").map { lower($0.trimmingCharacters(in: .init(charactersIn: " \t"))) }.filter { !$0.isEmpty }
        }
        func namedInConnection(_ n: String) -> Bool { lower(n) != "host" && connectionLists.contains { tokens($0).contains(lower(n)) } }
        let removedByRoute = { (n: String) in inList(edit.remove, n) }
        let ownedOrRemoved = { (n: String) in
            inList(GatewayOwnedFields.names + edit.remove, prefixes: GatewayOwnedFields.prefixes, n)
        }
        let dropLength: Bool =
            switch framing {
            case .chunked, .contentLength: true;
            case .none, .untilClose: false
            }
        let dropCoding: Bool = if case .contentLength = framing { true } else { false }
        func framingKeeps(_ n: String) -> Bool {
            !(dropLength && lower(n) == "content-length") && !(dropCoding && lower(n) == "transfer-encoding")
        }

        var out = HTTPFields()
        // 2. The client's fields that go on, in order.
        for f in client_ {
            let n = f.name
            if foldable(n) && (dropFoldableNames || interpretedWhenFolded.contains(folded(n))) { continue }
            if hopByHop.contains(lower(n)) || namedInConnection(n) { continue }
            if forwarding.contains(lower(n)) || lower(n) == "expect" { continue }
            if ownedOrRemoved(n) || !framingKeeps(n) { continue }
            out.append(n, f.value)
        }
        // 3. The gateway's fields (each unless the route removes it).
        func add(_ n: String, _ v: String) { if !removedByRoute(n) && framingKeeps(n) { out.append(n, v) } }
        if client_.contains(where: { lower($0.name) == "te" && tokens($0.value).contains("trailers") }) { add("TE", "trailers") }
        func prior(_ name: String) -> String {
            client_.filter { lower($0.name) == name && !namedInConnection($0.name) }.map(\.value).joined(separator: ", ")
        }
        let priorFor = trustedPeer ? prior("x-forwarded-for") : ""
        add("X-Forwarded-For", priorFor.isEmpty ? client : priorFor + ", " + client)
        let priorProto = trustedPeer ? prior("x-forwarded-proto") : ""
        add("X-Forwarded-Proto", priorProto.isEmpty ? proto : priorProto)
        let host = client_.first { lower($0.name) == "host" }?.value
        let priorHost = trustedPeer ? prior("x-forwarded-host") : ""
        if !priorHost.isEmpty { add("X-Forwarded-Host", priorHost) } else if let host { add("X-Forwarded-Host", host) }
        let priorVia = prior("via")
        add("Via", priorVia.isEmpty ? "1.1 attest-gateway" : priorVia + ", 1.1 attest-gateway")
        if !requestID.isEmpty { add("X-Request-Id", requestID) }
        if host == nil { add("Host", defaultHost) }
        // 4. The route's fields, then the framing.
        for (n, v) in edit.add where framingKeeps(n) { out.append(n, v) }
        switch framing {
        case .chunked: out.append("Transfer-Encoding", "chunked")
        case .contentLength(let n): out.append("Content-Length", String(n))
        case .none, .untilClose: break
        }
        return out
    }
}
