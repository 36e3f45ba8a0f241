import Testing

@testable import GatewayHTTP

/// The request syntax that keeps a backend from reading a request differently from the routes
/// (`RequestSyntax`): methods, hosts, request-targets; and the HTTP/1.1 parser's use of it, on the
/// string path and the byte path alike.
@Suite("Request syntax: methods, hosts, targets")
struct RequestSyntaxTests {
    @Test("the method and label tables give their rules' answers for every byte")
    func tables() {
        #expect(RequestSyntax.methodTable.utf8CodeUnitCount == 256 && RequestSyntax.labelTable.utf8CodeUnitCount == 256)
        for c in 0...255 {
            #expect(RequestSyntax.isMethodByte(UInt8(c)) == RequestSyntax.isMethodByteByRule(UInt8(c)), "byte \(c)")
            #expect(RequestSyntax.isLabelByte(UInt8(c)) == RequestSyntax.isLabelByteByRule(UInt8(c)), "byte \(c)")
        }
    }

    @Test("methods: A-Z, - and _ only (nginx's rule): lowercase, digits and other tchars are refused")
    func methods() {
        for m in ["GET", "POST", "HEAD", "PROPFIND", "VERSION-CONTROL", "M_SEARCH", "X"] {
            #expect(RequestSyntax.isCanonicalMethod(m), "\(m)")
        }
        for m in ["post", "Post", "pOST", "GET1", "P*ST", "POST!", "GET.", "G~T", "", "PO ST", "POST\u{17F}"] {
            #expect(!RequestSyntax.isCanonicalMethod(m), "\(m.debugDescription)")
        }
    }

    static let validHosts: [(String, String)] = [
        ("shop.example.com", "shop.example.com"), ("Shop.Example.COM", "shop.example.com"),
        ("shop.example.com.", "shop.example.com"), ("shop.example.com:80", "shop.example.com"),
        ("SHOP.example.com.:443", "shop.example.com"), ("shop.example.com:8080", "shop.example.com"),
        ("127.0.0.1", "127.0.0.1"), ("127.0.0.1:28090", "127.0.0.1"), ("[::1]", "::1"), ("[::1]:8443", "::1"),
        ("[2001:DB8::1]", "2001:db8::1"), ("[::ffff:192.0.2.1]", "::ffff:192.0.2.1"), ("my_service", "my_service"),
        ("a-b.c-d", "a-b.c-d"), ("localhost:0", "localhost"), ("x:00080", "x"), ("h:65535", "h"),
    ]

    static let invalidHosts: [String] = [
        "", ".", "..", ".shop.example.com", "shop..example.com", "shop.example.com..", "h/evil@x", "user@shop.example.com",
        "user:pw@shop.example.com", "shop.example.com:", "shop.example.com:http", "shop.example.com:80:80",
        "shop.example.com:65536", "shop.example.com:123456", "shop example.com", "shop.example.com,evil", "shop%2eexample.com",
        "shop.example.com;x", "shop\\example.com", "[::1", "[::1]x", "[::1]:", "[v1.x]", "[::1%25eth0]", "[]", "[:]",
        "sh\u{F6}p.example", "shop.example.com#x", "shop.example.com?x", "shop.example.com/", "*", "h\t", ":80",
    ]

    @Test("Host values: RFC 3986 host[:port] with a conservative reg-name; the match key folds case, port and one trailing dot")
    func hosts() {
        for (value, key) in Self.validHosts {
            #expect(RequestSyntax.isValidHost(value), "\(value)")
            #expect(RequestSyntax.hostMatchKey(value) == key, "\(value)")
        }
        for value in Self.invalidHosts {
            #expect(!RequestSyntax.isValidHost(value), "\(value.debugDescription)")
            #expect(RequestSyntax.hostMatchKey(value) == nil, "\(value.debugDescription)")
        }
    }

    static func target(_ t: String, options: Bool = false) -> Result<RequestSyntax.AbsoluteForm?, RequestSyntax.TargetProblemError> {
        var t = t
        return t.withUTF8 { u in
            Result { () throws(RequestSyntax.TargetProblemError) in try RequestSyntax.nonOriginTarget(u, methodIsOptions: options) }
        }
    }

    @Test("request-targets: * for OPTIONS only; absolute-form http(s) without userinfo, with a valid authority")
    func targets() throws {
        #expect(try Self.target("*", options: true).get() == nil)
        #expect(Self.target("*") == .failure(.init(.asteriskNotOptions)))
        let form = try #require(try Self.target("http://Shop.Example:80/api/x?q").get())
        #expect(form.authority == 7..<22 && form.pathStart == 22)
        #expect(try Self.target("HTTPS://h").get() == RequestSyntax.AbsoluteForm(authority: 8..<9, pathStart: 9))
        #expect(try Self.target("http://h?q").get() == RequestSyntax.AbsoluteForm(authority: 7..<8, pathStart: 8))
        let refused: [(String, RequestSyntax.TargetProblem)] = [
            ("ftp://h/x", .scheme), ("httpx://h/", .scheme), ("http://u@h/x", .userinfo), ("http://u:p@h/x", .userinfo),
            ("http:///x", .authority), ("http://h:x/", .authority),
            ("http://h..x/", .authority), ("h:80", .notAbsoluteForm), ("api/purchase", .notAbsoluteForm), ("**", .notAbsoluteForm),
            ("http:/h/x", .notAbsoluteForm), ("1http://h/", .notAbsoluteForm),
        ]
        for (t, problem) in refused {
            #expect(Self.target(t, options: true) == .failure(.init(problem)), "\(t)")
        }
    }

    @Test("a body's _method: any letter case anywhere, or a form key PHP reads as _method; not other keys")
    func bodyMethodOverride() {
        for b in [
            "_method=DELETE", "a=1&_METHOD=PUT", "{\"_Method\":\"DELETE\"}", "x=1&%5Fmethod=DELETE", "x&.method=PUT", "+method=PUT",
            "name=\"_method\"",
        ] {
            #expect(RequestSyntax.bodyHasMethodOverride(Array(b.utf8)), "\(b)")
        }
        for b in [
            "", "method=DELETE", "a=1&b=2", "{\"method\":\"DELETE\"}", "_metho", "x_methodx".replacingOccurrences(of: "_", with: "-"),
        ] {
            #expect(!RequestSyntax.bodyHasMethodOverride(Array(b.utf8)), "\(b)")
        }
    }

    @Test("a POST's _method query parameter, in every spelling PHP reads as _method; not other methods, keys or values")
    func methodOverrideQuery() {
        for t in [
            "/api/item?_method=DELETE", "/x?a=1&_method=PUT", "/x?_method", "/x?%5Fmethod=DELETE", "/x?%5fmethod=DELETE",
            "/x?.method=DELETE", "/x?+method=DELETE", "/x?%20method=DELETE", "/x?[method=DELETE", "/x?_%6Dethod=DELETE",
            "/x?a&_method=&b",
        ] {
            #expect(RequestSyntax.hasMethodOverride(method: "POST", target: t), "\(t)")
        }
        for t in [
            "/api/item", "/x?method=DELETE", "/x?_methods=DELETE", "/x?a_method=1", "/x?q=_method", "/x?_METHOD=DELETE",
            "/x#?_method=DELETE", "/x?a=1#&_method=DELETE", "/_method?x=1", "/x?_metho=1",
        ] {
            #expect(!RequestSyntax.hasMethodOverride(method: "POST", target: t), "\(t)")
        }
        #expect(!RequestSyntax.hasMethodOverride(method: "GET", target: "/x?_method=DELETE"))
        #expect(!RequestSyntax.hasMethodOverride(method: "PUT", target: "/x?_method=DELETE"))
    }

    enum Outcome: Equatable {
        case head(HTTPRequestHeadLines)
        case error(HTTPParseError.Kind)
        case disagreement

        func get() throws -> HTTPRequestHeadLines {
            guard case .head(let h) = self else { throw HTTPParseError(.badRequestLine, at: 0, "\(self)") }
            return h
        }
    }

    /// Both parsers, which must agree: the kind of error, or the byte path's head.
    static func parse(_ text: String) -> Outcome {
        let raw = RequestHeadLinesTests.bytes(text)
        var storage: [HTTPFieldRange] = []
        let a = RequestHeadLinesTests.lines(raw, HTTP1Parser(), &storage)
        let b = RequestHeadLinesTests.strings(raw, HTTP1Parser())
        switch (a, b) {
        case (.failure(let e1), .failure(let e2)):
            #expect(e1 == e2)
            return .error(e1.kind)
        case (.success(let x?), .success(_?)):
            return .head(x.0)
        default:
            Issue.record("the parsers disagree on \(text.debugDescription): \(a) vs \(b)")
            return .disagreement
        }
    }

    @Test("the parser: bad_method, bad_target and bad_host (400), on both paths, before any routing")
    func parserRefusals() {
        let cases: [(String, HTTPParseError.Kind)] = [
            ("post /api/purchase HTTP/1.1\r\nHost: h\r\n\r\n", .badMethod),
            ("Post /api/purchase HTTP/1.1\r\nHost: h\r\n\r\n", .badMethod),
            ("POST1 /api/purchase HTTP/1.1\r\nHost: h\r\n\r\n", .badMethod),
            ("P.ST /api/purchase HTTP/1.1\r\nHost: h\r\n\r\n", .badMethod),
            ("GET * HTTP/1.1\r\nHost: h\r\n\r\n", .badTarget),
            ("POST http://u@shop/api/purchase HTTP/1.1\r\nHost: shop\r\n\r\n", .badTarget),
            ("POST ftp://shop/api/purchase HTTP/1.1\r\nHost: shop\r\n\r\n", .badTarget),
            ("CONNECT shop:443 HTTP/1.1\r\nHost: shop\r\n\r\n", .badTarget),
            ("GET / HTTP/1.1\r\nHost: h/evil@x\r\n\r\n", .badHost),
            ("GET / HTTP/1.1\r\nHost: u@h\r\n\r\n", .badHost),
            ("GET / HTTP/1.1\r\nHost: \r\n\r\n", .badHost),
            ("GET / HTTP/1.1\r\nHost: a b\r\n\r\n", .badHost),
            ("GET / HTTP/1.1\r\nHost: h:x\r\n\r\n", .badHost),
            ("GET / HTTP/1.1\r\nHost: h\r\nhost: h\r\n\r\n", .badHost),
            ("GET / HTTP/1.0\r\nHost: a\r\nHost: b\r\n\r\n", .badHost),
            ("GET / HTTP/1.1\r\n\r\n", .badHost),
        ]
        for (text, kind) in cases {
            #expect(Self.parse(text) == .error(kind), "\(text.debugDescription)")
        }
        // The error codes clients see.
        #expect(HTTPParseError.Kind.badMethod.rawValue == "bad_method")
        #expect(HTTPParseError.Kind.badTarget.rawValue == "bad_target")
        #expect(HTTPParseError.Kind.badHost.rawValue == "bad_host")
    }

    @Test("the byte path: an absolute-form target's authority, and whether a field name has a _")
    func parserRanges() throws {
        let text = "POST http://Shop.Example:80/api/x HTTP/1.1\r\nHost: other\r\nX_Key: 1\r\n\r\n"
        let h = try Self.parse(text).get()
        let raw = RequestHeadLinesTests.bytes(text)
        #expect(h.absoluteForm)
        #expect(raw.withUnsafeBytes { h.authority($0) }.map { String(decoding: raw[$0], as: UTF8.self) } == "Shop.Example:80")
        #expect(h.foldableNames)
        let plain = try Self.parse("OPTIONS * HTTP/1.1\r\nHost: h.\r\nX-Key-09azAZ: 1\r\n\r\n").get()
        #expect(!plain.absoluteForm && !plain.foldableNames)
        for name in ["Abcdefghijklmno_", "X.Key", "X~Key", "X!", "a*b", "x|y", "x^", "x`", "x'", "x+y", "x&y", "x%y", "x$", "#x"] {
            #expect(try Self.parse("GET /x HTTP/1.1\r\nHost: h\r\n\(name): 1\r\n\r\n").get().foldableNames, "\(name)")
        }
    }

    @Test("a connection's HostMemo: the same Host again is accepted, any other value is checked (lengths 1 to 40)")
    func hostMemo() throws {
        var memo = HTTP1Parser.HostMemo()
        var storage: [HTTPFieldRange] = []
        func parse(_ host: String) -> Bool {
            let raw = Array("GET / HTTP/1.1\r\nHost: \(host)\r\n\r\n".utf8)
            return (try? raw.withUnsafeBytes { try HTTP1Parser().parseRequestHeadLines($0, reusing: &storage, hostMemo: &memo) }) != nil
        }
        for n in 1...40 {
            let valid = String(repeating: "a", count: n)
            #expect(parse(valid) && parse(valid), "\(n)")
            for at in [0, n / 2, n - 1] {
                var bad = Array(valid.utf8)
                bad[at] = UInt8(ascii: "/")
                #expect(!parse(String(decoding: bad, as: UTF8.self)), "\(n), / at \(at)")
            }
            #expect(parse(valid))
        }
    }

    @Test("a _ is found in a name of any length at any position, and never past the name")
    func underscoreInName() {
        for length in 1...20 {
            for at in [-1] + Array(0..<length) {
                var bytes = [UInt8](repeating: UInt8(ascii: "a"), count: length)
                if at >= 0 { bytes[at] = UInt8(ascii: "_") }
                let raw = [UInt8(ascii: "x")] + bytes + Array(":_\r\n".utf8)
                let found = raw.withUnsafeBytes { HTTPChar.containsInName($0, 1..<(1 + length), UInt8(ascii: "_")) }
                #expect(found == (at >= 0), "length \(length), _ at \(at)")
            }
        }
    }

    @Test("Content-Length collapsed to one value: repeated fields or a list keep the first field's first member")
    func collapseContentLength() {
        func collapsed(_ pairs: [(String, String)]) -> [String] {
            var f = HTTPFields(pairs)
            f.collapseContentLength()
            return f.map { "\($0.name): \($0.value)" }
        }
        #expect(
            collapsed([("A", "1"), ("Content-Length", "5"), ("B", "2"), ("content-length", "5")])
                == ["A: 1", "Content-Length: 5", "B: 2"])
        #expect(collapsed([("Content-Length", "5, 5"), ("X", "y")]) == ["Content-Length: 5", "X: y"])
        #expect(collapsed([("Content-Length", "7")]) == ["Content-Length: 7"])
        #expect(collapsed([("X", "y")]) == ["X: y"])
        #expect(collapsed([("Content-Length", ", 5")]) == ["Content-Length: , 5"])
    }

    @Test("foldable names (_ . ~ …) that fold into a field the gateway interprets")
    func interpretedWhenFolded() {
        for n in [
            "Content_Length", "Content.Length", "transfer_encoding", "Transfer~Encoding", "HOST", "Proxy_Authorization",
            "Proxy.Connection", "Keep_Alive", "Expect", "via", "Forwarded", "Connection",
        ] {
            #expect(FoldedNames.isInterpretedWhenFolded(n), "\(n)")
        }
        for n in ["X_Custom", "X_Forwarded_Port", "Content_Type", "Host_", String(repeating: "_", count: 40)] {
            #expect(!FoldedNames.isInterpretedWhenFolded(n), "\(n)")
        }
        for n in ["X_A", "x.a", "a~", "A!b", "a|b", "x'y"] { #expect(FoldedNames.isFoldable(n), "\(n)") }
        for n in ["X-A", "abc", "A0-9z", ""] { #expect(!FoldedNames.isFoldable(n), "\(n)") }
    }
}
