import AppAttest
import AppAttestSimulator
import Foundation
import GatewayCrypto
import GatewayTestSupport
import GatewayWire
import Glibc
import Testing

/// Every request an upstream received, as it received it (names as sent, duplicates kept).
final class RecordedRequests: @unchecked Sendable {
    private let lock = NSLock()
    private var all: [ScriptedRequest] = []

    func append(_ r: ScriptedRequest) { lock.withLock { all.append(r) } }

    /// The requests that carried `X-Case: id` (every test request carries a unique one).
    func of(_ id: String) -> [ScriptedRequest] { lock.withLock { all.filter { $0.header("X-Case") == id } } }
}

/// A real gatewayd (HTTP/1.1 and h2c on two listeners: underscores dropped on `public`, allowed on
/// `allow`) in front of a recording upstream, with protected routes of every kind, and an upstream
/// that repeats its Content-Length.
final class HygieneGateway: @unchecked Sendable {
    let recorded = RecordedRequests()
    let upstream: ScriptedServer
    let repeating: ScriptedServer
    let gateway: GatewayProcess

    init(trustRoot: String, receiptRoot: String) throws {
        let recorded = self.recorded
        upstream = try ScriptedServer { c in
            while let r = c.readRequest() {
                recorded.append(r)
                c.respond("ok")
            }
        }
        repeating = try ScriptedServer { c in
            while c.readRequest() != nil { c.write("HTTP/1.1 200 OK\r\nContent-Length: 4\r\nContent-Length: 4\r\nX-Up: 1\r\n\r\nfour") }
        }
        do {
            gateway = try GatewayProcess(
                config: """
                    workers: 1
                    listeners:
                      - {name: public, address: 127.0.0.1:0, protocols: [http1, h2c]}
                      - {name: allow, address: 127.0.0.1:0, protocols: [http1, h2c], underscores_in_headers: allow}
                    admin: {address: 127.0.0.1:0}
                    limits: {drain_timeout: 2s}
                    upstreams:
                      - {name: rec, url: "http://127.0.0.1:\(upstream.port)", response_timeout: 10s}
                      - {name: repeating, url: "http://127.0.0.1:\(repeating.port)", response_timeout: 10s}
                    apps:
                      - {team_id: ABCDE12345, bundle_ids: [com.example.shop], environments: [development]}
                    trust: {extra_roots: [\(trustRoot)], extra_receipt_roots: [\(receiptRoot)]}
                    store: {kind: memory, shards: 4}
                    routes:
                      - name: purchase
                        match: {methods: [POST], path_prefix: /api/purchase}
                        upstream: rec
                        assertion: {mode: enforce}
                      - name: account
                        match: {methods: [GET], path: /api/account}
                        upstream: rec
                        assertion: {mode: enforce}
                      - name: shop
                        match: {path_prefix: /shop, host: shop.example.com}
                        upstream: rec
                        assertion: {mode: enforce}
                      - {name: repeating, match: {path_prefix: /repeating}, upstream: repeating}
                      - {name: rest, match: {path_prefix: /}, upstream: rec}
                    """)
        } catch {
            upstream.stop()
            repeating.stop()
            throw error
        }
    }

    func port(_ listener: String = "public") -> UInt16 { HTTPCall.port(gateway, listener) }

    func stop() {
        gateway.stop()
        upstream.stop()
        repeating.stop()
    }

    /// One raw HTTP/1.1 request on its own connection; the response (a refusal closes the connection).
    func raw(_ request: String, listener: String = "public", method: String? = nil) throws -> HTTPTestResponse {
        let c = try HTTPTestConnection(port: port(listener))
        defer { c.close() }
        return try c.request(request, method: method)
    }

    /// curl over h2c: status, field lines (lowercase names), body.
    func h2(_ args: [String], path: String, listener: String = "public") throws -> (status: Int, lines: [String], body: String) {
        let r = try runProcess(
            URL(fileURLWithPath: "/usr/bin/curl"),
            ["-sS", "-i", "--max-time", "20", "--http2-prior-knowledge", "--path-as-is"] + args
                + ["http://127.0.0.1:\(port(listener))\(path)"], timeout: 30)
        guard let split = r.stdout.range(of: "\r\n\r\n") else { return (0, ["curl exit \(r.status): \(r.stderr)"], "") }
        var lines = r.stdout[..<split.lowerBound].components(separatedBy: "\r\n")
        let status = lines.removeFirst().split(separator: " ")
        return (status.count > 1 ? Int(status[1]) ?? 0 : 0, lines, String(r.stdout[split.upperBound...]))
    }
}

private func error(_ body: String) -> String? {
    ((try? JSONSerialization.jsonObject(with: Data(body.utf8))) as? [String: Any])?["error"] as? String
}

/// Skips without curl, except under CI=true.
private func haveCurl() -> Bool {
    if FileManager.default.isExecutableFile(atPath: "/usr/bin/curl") { return true }
    if ProcessInfo.processInfo.environment["CI"] == "true" { Issue.record("curl is required under CI=true") }
    return false
}

/// Issue 18, sections 1 and 2, each example on HTTP/1.1 and on h2c where HTTP/2 can spell it: a
/// request that could sidestep a protected route is refused, or matched by that route (and then,
/// without an assertion, refused with 401); none reaches the upstream. No forged gateway field reaches
/// an upstream.
@Suite(
    "Protected routes cannot be sidestepped; the upstream can trust the gateway (real gatewayd)",
    .serialized, .timeLimit(.minutes(3)))
struct RequestHygieneTests {
    let ca: TestCA
    let dir: URL

    init() throws {
        (ca, dir) = try makeTrustedTestCADirectory("gw-hygiene")
    }

    func gateway() throws -> HygieneGateway {
        try HygieneGateway(
            trustRoot: dir.appendingPathComponent("root.pem").path,
            receiptRoot: dir.appendingPathComponent("receipt-root.pem").path)
    }

    @Test("method case: post, Post, pOST and odd methods are 400 bad_method on HTTP/1.1 and h2c; none reaches the upstream")
    func methodCase() throws {
        let g = try gateway()
        defer { g.stop() }
        for (i, m) in ["post", "Post", "pOST", "POST1", "P.ST"].enumerated() {
            let id = "m1-\(i)"
            let r = try g.raw("\(m) /api/purchase HTTP/1.1\r\nHost: x\r\nX-Case: \(id)\r\nContent-Length: 2\r\n\r\n{}")
            #expect(r.status == 400 && error(r.text) == "bad_method", "\(m): \(r.status) \(r.text)")
            #expect(g.recorded.of(id).isEmpty)
        }
        guard haveCurl() else { return }
        for (i, m) in ["post", "Post"].enumerated() {
            let id = "m2-\(i)"
            let r = try g.h2(["-X", m, "-H", "X-Case: \(id)", "--data-binary", "{}"], path: "/api/purchase")
            #expect(r.status == 400 && error(r.body) == "bad_method", "h2 \(m): \(r)")
            #expect(g.recorded.of(id).isEmpty)
        }
    }

    @Test("host: a trailing dot, :80, any case and port still select the host-matched protected route; invalid hosts are 400")
    func hostMatching() throws {
        let g = try gateway()
        defer { g.stop() }
        let spellings = ["shop.example.com", "shop.example.com.", "shop.example.com:80", "SHOP.Example.com.:80", "shop.example.com:8443"]
        for (i, host) in spellings.enumerated() {
            let id = "h1-\(i)"
            let r = try g.raw("POST /shop/order HTTP/1.1\r\nHost: \(host)\r\nX-Case: \(id)\r\nContent-Length: 2\r\n\r\n{}")
            #expect(r.status == 401 && error(r.text) == "assertion_missing", "\(host): \(r.status) \(r.text)")
            #expect(g.recorded.of(id).isEmpty, "\(host) reached the upstream")
        }
        let invalid = [
            "h/evil@x", "shop.example.com@evil", "user@shop.example.com", "shop.example.com:http", "shop.example.com..",
            "shop example.com", "shop.example.com,evil", "",
        ]
        for (i, host) in invalid.enumerated() {
            let id = "h2-\(i)"
            let r = try g.raw("GET /shop/order HTTP/1.1\r\nHost: \(host)\r\nX-Case: \(id)\r\n\r\n")
            #expect(r.status == 400 && error(r.text) == "bad_host", "\(host.debugDescription): \(r.status) \(r.text)")
            #expect(g.recorded.of(id).isEmpty)
        }
        let two = try g.raw("GET /shop/order HTTP/1.0\r\nHost: other.example\r\nHost: shop.example.com\r\nX-Case: h3\r\n\r\n")
        #expect(two.status == 400 && error(two.text) == "bad_host")
        #expect(g.recorded.of("h3").isEmpty)
        guard haveCurl() else { return }
        for (i, host) in spellings.enumerated() {
            let id = "h4-\(i)"
            let r = try g.h2(["-H", "Host: \(host)", "-H", "X-Case: \(id)", "--data-binary", "{}"], path: "/shop/order")
            #expect(r.status == 401 && error(r.body) == "assertion_missing", "h2 \(host): \(r)")
            #expect(g.recorded.of(id).isEmpty, "h2 \(host) reached the upstream")
        }
        for (i, host) in ["h/evil@x", "user@shop.example.com", "shop.example.com:http", "shop.example.com.."].enumerated() {
            let id = "h5-\(i)"
            let r = try g.h2(["-H", "Host: \(host)", "-H", "X-Case: \(id)"], path: "/shop/order")
            // nghttp2 itself resets a stream whose :authority has characters no authority has (`/`).
            let reset = r.status == 0 && r.lines.first?.contains("PROTOCOL_ERROR") == true
            #expect((r.status == 400 && error(r.body) == "bad_host") || (host.contains("/") && reset), "h2 \(host): \(r)")
            #expect(g.recorded.of(id).isEmpty)
        }
    }

    @Test("h2c: :authority and a different host field are refused (stream reset); the route is chosen by :authority")
    func authorityAndHost() throws {
        let g = try gateway()
        defer { g.stop() }
        guard let nghttp = ["/usr/bin/nghttp", "/usr/local/bin/nghttp"].first(where: { FileManager.default.isExecutableFile(atPath: $0) })
        else {
            if ProcessInfo.processInfo.environment["CI"] == "true" { Issue.record("nghttp is required under CI=true") }
            return
        }
        let url = "http://127.0.0.1:\(g.port())/shop/order"
        let mismatch = try runProcess(
            URL(fileURLWithPath: nghttp),
            ["-v", "-H", ":authority: other.example", "-H", "host: shop.example.com", "-H", "x-case: a1", url])
        #expect(mismatch.stdout.contains("RST_STREAM") && mismatch.stdout.contains("PROTOCOL_ERROR"), "\(mismatch.stdout)")
        #expect(g.recorded.of("a1").isEmpty)
        let same = try runProcess(
            URL(fileURLWithPath: nghttp),
            ["-v", "-H", ":authority: shop.example.com", "-H", "host: SHOP.example.com", "-H", "x-case: a2", url])
        #expect(same.stdout.contains(":status: 401"), "\(same.stdout)")
        #expect(g.recorded.of("a2").isEmpty)
    }

    @Test("absolute-form: routed by the target's authority, forwarded in origin-form with Host set to it; userinfo and GET * are 400")
    func absoluteForm() throws {
        let g = try gateway()
        defer { g.stop() }
        let protected = [
            ("POST http://other/api/purchase HTTP/1.1\r\nHost: x", "a1"),
            ("POST http://shop.example.com/shop/order HTTP/1.1\r\nHost: other.example", "a2"),
            ("POST HTTP://SHOP.example.com.:80/shop/order HTTP/1.1\r\nHost: other.example", "a3"),
            ("POST http://other/API/purchase.json HTTP/1.1\r\nHost: x", "a4"),
        ]
        for (line, id) in protected {
            let r = try g.raw("\(line)\r\nX-Case: \(id)\r\nContent-Length: 2\r\n\r\n{}")
            #expect(r.status == 401 && error(r.text) == "assertion_missing", "\(line): \(r.status) \(r.text)")
            #expect(g.recorded.of(id).isEmpty)
        }
        let plain = try g.raw("GET http://legacy.example:8080/hello?q=1 HTTP/1.1\r\nHost: shop.example.com\r\nX-Case: a5\r\n\r\n")
        #expect(plain.status == 200)
        let seen = try #require(g.recorded.of("a5").first)
        #expect(seen.target == "/hello?q=1")
        #expect(seen.headers.filter { $0.name.lowercased() == "host" }.map(\.value) == ["legacy.example:8080"])
        #expect(seen.header("X-Forwarded-Host") == "legacy.example:8080")
        for (line, code, id) in [
            ("POST http://user@shop.example.com/api/purchase HTTP/1.1", "bad_target", "a6"),
            ("POST http://user:pw@other/api/purchase HTTP/1.1", "bad_target", "a7"),
            ("GET ftp://other/api/purchase HTTP/1.1", "bad_target", "a8"), ("GET * HTTP/1.1", "bad_target", "a9"),
            ("POST * HTTP/1.1", "bad_target", "a10"),
        ] {
            let r = try g.raw("\(line)\r\nHost: shop.example.com\r\nX-Case: \(id)\r\nContent-Length: 0\r\n\r\n")
            #expect(r.status == 400 && error(r.text) == code, "\(line): \(r.status) \(r.text)")
            #expect(g.recorded.of(id).isEmpty)
        }
        let options = try g.raw("OPTIONS * HTTP/1.1\r\nHost: x\r\nX-Case: a11\r\n\r\n")
        #expect(options.status == 200)
        #expect(g.recorded.of("a11").first?.target == "*")
    }

    static let variants = [
        "/API/purchase", "/Api/Purchase", "/api/purchase;x", "/api;jsessionid=1/purchase", "/api/purchase.json",
        "/api/purchase.", "/api/purchase%20", "/api/purchase%09", "/api/purchase/", "/api/x/..;/purchase",
        "/api/PURCHASE.JSON;v=1", "/api/%70urchase", "/api//purchase", "/api/./purchase", "/api/purchase%3bx",
    ]

    @Test("path variants a backend folds are matched by the protected route (401 without assertion), on HTTP/1.1 and h2c")
    func pathVariants() throws {
        let g = try gateway()
        defer { g.stop() }
        for (i, target) in Self.variants.enumerated() {
            let id = "p1-\(i)"
            let r = try g.raw("POST \(target) HTTP/1.1\r\nHost: x\r\nX-Case: \(id)\r\nContent-Length: 2\r\n\r\n{}")
            #expect(r.status == 401 && error(r.text) == "assertion_missing", "\(target): \(r.status) \(r.text)")
            #expect(g.recorded.of(id).isEmpty, "\(target) reached the upstream")
        }
        // An exact-path route for GET: its variants, and HEAD (which backends run as GET).
        for (i, (method, target)) in [
            ("GET", "/api/account/"), ("GET", "/API/Account"), ("GET", "/api/account.json"),
            ("HEAD", "/api/account"), ("HEAD", "/api/account;x"),
        ].enumerated() {
            let id = "p2-\(i)"
            let r = try g.raw("\(method) \(target) HTTP/1.1\r\nHost: x\r\nX-Case: \(id)\r\n\r\n", method: method)
            #expect(r.status == 401, "\(method) \(target): \(r.status)")
            #expect(g.recorded.of(id).isEmpty)
        }
        guard haveCurl() else { return }
        for (i, target) in Self.variants.enumerated() {
            let id = "p3-\(i)"
            let r = try g.h2(["-H", "X-Case: \(id)", "--data-binary", "{}"], path: target)
            #expect(r.status == 401 && error(r.body) == "assertion_missing", "h2 \(target): \(r)")
            #expect(g.recorded.of(id).isEmpty, "h2 \(target) reached the upstream")
        }
        let head = try g.h2(["-I", "-H", "X-Case: p4"], path: "/API/account/")
        #expect(head.status == 401)
        #expect(g.recorded.of("p4").isEmpty)
        // A leading `//` is a network-path reference to URL splitters (`//x/api/purchase` → path
        // `/api/purchase`) and `/x/api/purchase` to slash mergers: refused.
        for (i, target) in ["//x/api/purchase", "//api/purchase", "///api/purchase"].enumerated() {
            let r = try g.raw("POST \(target) HTTP/1.1\r\nHost: x\r\nX-Case: p5-\(i)\r\nContent-Length: 0\r\n\r\n")
            #expect(r.status == 400 && error(r.text) == "ambiguous_path", "\(target): \(r.status)")
            let r2 = try g.h2(["-X", "POST", "-H", "X-Case: p6-\(i)"], path: target)
            #expect(r2.status == 400 && error(r2.body) == "ambiguous_path", "h2 \(target): \(r2)")
            #expect(g.recorded.of("p5-\(i)").isEmpty && g.recorded.of("p6-\(i)").isEmpty)
        }
    }

    static let overrides: [(String, String)] = [
        ("X-HTTP-Method-Override", "POST"), ("X-HTTP-Method", "POST"), ("X-Method-Override", "POST"), ("X-Original-Method", "POST"),
        ("X-Original-URL", "/api/purchase"), ("X-Original-URI", "/api/purchase"), ("X-Rewrite-URL", "/api/purchase"),
        ("X_HTTP_Method_Override", "POST"), ("x-http-method-override", "POST"), ("X_Original_URL", "/api/purchase"),
        ("X-Override-URL", "/api/purchase"), ("X-HTTP-DestinationURL", "/api/purchase"), ("X.Original.URL", "/api/purchase"),
    ]

    @Test("method and URL override headers never reach the upstream, through unprotected routes too (HTTP/1.1, h2c, both listeners)")
    func overrideHeaders() throws {
        let g = try gateway()
        defer { g.stop() }
        let fields = Self.overrides.map { "\($0.0): \($0.1)\r\n" }.joined()
        var cases: [(String, String, String)] = []  // id, listener, protocol
        for listener in ["public", "allow"] {
            for (k, target) in ["/api/purchase", "/hello"].enumerated() {
                let id = "o1-\(listener)-\(k)"
                let r = try g.raw("GET \(target) HTTP/1.1\r\nHost: x\r\nX-Case: \(id)\r\n\(fields)\r\n", listener: listener)
                #expect(r.status == 200)
                cases.append((id, listener, "http1"))
                if haveCurl() {
                    let id2 = "o2-\(listener)-\(k)"
                    let r2 = try g.h2(
                        ["-H", "X-Case: \(id2)"] + Self.overrides.flatMap { ["-H", "\($0.0): \($0.1)"] }, path: target,
                        listener: listener)
                    #expect(r2.status == 200)
                    cases.append((id2, listener, "h2"))
                }
            }
        }
        for (id, listener, proto) in cases {
            let seen = try #require(g.recorded.of(id).first, "\(id)")
            #expect(seen.method == "GET")
            for (name, _) in Self.overrides {
                #expect(
                    seen.header(name) == nil && seen.header(name.replacingOccurrences(of: "_", with: "-")) == nil,
                    "\(proto) on \(listener): \(name) reached the upstream")
            }
            let folded = seen.headers.map { String($0.name.lowercased().map { $0.isLetter || $0.isNumber ? $0 : "-" }) }
            #expect(
                !folded.contains {
                    $0.hasPrefix("x-http-") || $0.hasPrefix("x-original") || $0 == "x-rewrite-url" || $0 == "x-override-url"
                },
                "\(proto) on \(listener): \(folded)")
        }
    }

    @Test("a POST carrying a _method query parameter is 400 method_override on HTTP/1.1 and h2c; other methods pass")
    func methodOverrideQuery() throws {
        let g = try gateway()
        defer { g.stop() }
        for (i, target) in ["/api/item?_method=DELETE", "/api/purchase?x=1&_method=GET", "/hello?%5Fmethod=PUT", "/hello?.method=PUT"]
            .enumerated()
        {
            let r = try g.raw("POST \(target) HTTP/1.1\r\nHost: x\r\nX-Case: q1-\(i)\r\nContent-Length: 0\r\n\r\n")
            #expect(r.status == 400 && error(r.text) == "method_override", "\(target): \(r.status) \(r.text)")
            #expect(g.recorded.of("q1-\(i)").isEmpty)
            if haveCurl() {
                let r2 = try g.h2(["-X", "POST", "-H", "X-Case: q2-\(i)"], path: target)
                #expect(r2.status == 400 && error(r2.body) == "method_override", "h2 \(target): \(r2)")
                #expect(g.recorded.of("q2-\(i)").isEmpty)
            }
        }
        let get = try g.raw("GET /hello?_method=DELETE HTTP/1.1\r\nHost: x\r\nX-Case: q3\r\n\r\n")
        #expect(get.status == 200 && g.recorded.of("q3").first?.target == "/hello?_method=DELETE")
    }

    @Test(
        "a POST to a plain route on a path protected for other methods: a _method in its body is 400 method_override; other bodies pass whole"
    )
    func methodOverrideBody() throws {
        let g = try gateway()
        defer { g.stop() }
        // /api/account is protected for GET only: POST /api/account goes to `rest`, and Laravel,
        // Symfony or Rails would run GET's handler for `_method=GET`.
        let overriding = [
            "_method=GET", "a=1&%5Fmethod=GET", "a=1&.method=GET", "{\"_method\":\"GET\"}",
            "--b\r\nContent-Disposition: form-data; name=\"_METHOD\"\r\n\r\nGET\r\n--b--\r\n",
        ]
        for (i, body) in overriding.enumerated() {
            let r = try g.raw(
                "POST /api/account HTTP/1.1\r\nHost: x\r\nX-Case: b1-\(i)\r\nContent-Length: \(body.utf8.count)\r\n\r\n\(body)")
            #expect(r.status == 400 && error(r.text) == "method_override", "\(body): \(r.status) \(r.text)")
            #expect(g.recorded.of("b1-\(i)").isEmpty)
            if haveCurl() {
                let r2 = try g.h2(["-X", "POST", "-H", "X-Case: b2-\(i)", "--data-binary", body], path: "/api/account")
                #expect(r2.status == 400 && error(r2.body) == "method_override", "h2 \(body): \(r2)")
                #expect(g.recorded.of("b2-\(i)").isEmpty)
            }
        }
        // Without an override the body reaches the upstream whole (read first, then forwarded).
        let plain = "a=1&method=GET"
        let ok = try g.raw("POST /api/account HTTP/1.1\r\nHost: x\r\nX-Case: b3\r\nContent-Length: \(plain.utf8.count)\r\n\r\n\(plain)")
        #expect(ok.status == 200)
        #expect(g.recorded.of("b3").first.map { String(decoding: $0.body, as: UTF8.self) } == plain)
        // Paths no route protects for another method are not looked at.
        let hello = try g.raw("POST /hello HTTP/1.1\r\nHost: x\r\nX-Case: b4\r\nContent-Length: 11\r\n\r\n_method=PUT")
        #expect(hello.status == 200 && g.recorded.of("b4").count == 1)
    }

    @Test("a forged verified key id never reaches the upstream, in any spelling, beside the real one on verified requests")
    func forgedVerifiedKey() throws {
        let g = try gateway()
        defer { g.stop() }
        let forged: [(String, String)] = [
            ("X_App_Attest_Verified_Key_Id", "forged"), ("x-app-attest-verified-key-id", "forged"),
            ("X-App-Attest_Verified-Key-Id", "forged"),
            ("X.App.Attest.Verified.Key.Id", "forged"), ("x~app~attest~verified~key~id", "forged"),
            ("X_FORWARDED_FOR", "6.6.6.6"), ("X-Forwarded-Port", "1"), ("X-App-Attest-Risk-Metric", "0"), ("X-Device-Check", "x"),
            ("X-Device-Check-Bits", "11"), ("X-Request-Id", "mine one"), ("X_Custom", "c"), ("X-Real-IP", "6.6.6.6"),
            ("True-Client-IP", "6.6.6.6"), ("Client-IP", "6.6.6.6"), ("X-Original-Host", "forged"),
        ]
        let fields = forged.map { "\($0.0): \($0.1)\r\n" }.joined()
        func check(_ id: String, _ what: String, allowUnderscores: Bool, verified: String? = nil) throws {
            let seen = try #require(g.recorded.of(id).first, "\(what)")
            let names = seen.headers.map { String($0.name.lowercased().map { $0.isLetter || $0.isNumber ? $0 : "-" }) }
            #expect(names.filter { $0 == "x-app-attest-verified-key-id" }.count == (verified == nil ? 0 : 1), "\(what): \(seen.headers)")
            #expect(seen.header("X-App-Attest-Verified-Key-Id") == verified, "\(what)")
            #expect(
                !seen.headers.contains { $0.value == "forged" || $0.value == "6.6.6.6" || $0.value == "mine one" },
                "\(what): \(seen.headers)")
            #expect(
                !names.contains("x-forwarded-port") && !names.contains("x-app-attest-risk-metric") && !names.contains("x-device-check")
                    && !names.contains("x-device-check-bits"), "\(what): \(names)")
            // An invalid client id ("mine one": a space) is replaced by the gateway's, sent once.
            #expect(
                names.filter { $0 == "x-request-id" }.count == 1 && seen.header("X-Request-Id")?.count == 15, "\(what): \(seen.headers)")
            #expect(seen.header("X_Custom") == (allowUnderscores ? "c" : nil), "\(what)")
            #expect(seen.header("X-Forwarded-For") == "127.0.0.1", "\(what)")
        }
        for listener in ["public", "allow"] {
            let id = "f1-\(listener)"
            let r = try g.raw("GET /hello HTTP/1.1\r\nHost: x\r\nX-Case: \(id)\r\n\(fields)\r\n", listener: listener)
            #expect(r.status == 200)
            try check(id, "http1 \(listener)", allowUnderscores: listener == "allow")
            if haveCurl() {
                let id2 = "f2-\(listener)"
                let r2 = try g.h2(
                    ["-H", "X-Case: \(id2)"] + forged.flatMap { ["-H", "\($0.0): \($0.1)"] }, path: "/hello", listener: listener)
                #expect(r2.status == 200)
                try check(id2, "h2 \(listener)", allowUnderscores: listener == "allow")
            }
        }
        // A verified request: the upstream gets the real key id once, the forged ones never.
        let phone = try ContractDevice(ca: ca, appID: "ABCDE12345.com.example.shop", port: g.port())
        #expect(try phone.register().status == 201)
        for listener in ["public", "allow"] {
            let challenge = try phone.challenge(purpose: "assert", keyID: phone.keyID)
            let body = Array("{\"sku\":1}".utf8)
            // Client data v2 signs the authority: the Host (or :authority) this listener is reached by.
            let authority = "127.0.0.1:\(try g.port(listener))"
            let signed = phone.sign(target: "/api/purchase", body: body, challenge: challenge, authority: authority)
            let id = "f3-\(listener)"
            let r = try HTTPCall.send(
                port: g.port(listener), method: "POST", target: "/api/purchase",
                headers: signed.headers + [("X-Case", id)] + forged, body: body, host: authority)
            #expect(r.status == 200, "\(r.status) \(r.body)")
            try check(id, "verified http1 \(listener)", allowUnderscores: listener == "allow", verified: phone.keyID)
            guard haveCurl() else { continue }
            let challenge2 = try phone.challenge(purpose: "assert", keyID: phone.keyID)
            let signed2 = phone.sign(target: "/api/purchase", body: body, challenge: challenge2, authority: authority)
            let id2 = "f4-\(listener)"
            let r2 = try g.h2(
                (signed2.headers + [("X-Case", id2)] + forged).flatMap { ["-H", "\($0.0): \($0.1)"] }
                    + ["--data-binary", "{\"sku\":1}"], path: "/api/purchase", listener: listener)
            #expect(r2.status == 200, "\(r2)")
            try check(id2, "verified h2 \(listener)", allowUnderscores: listener == "allow", verified: phone.keyID)
        }
    }

    @Test("an upstream's repeated Content-Length reaches the client once, on HTTP/1.1 and h2c")
    func repeatedContentLength() throws {
        let g = try gateway()
        defer { g.stop() }
        let r = try g.raw("GET /repeating HTTP/1.1\r\nHost: x\r\n\r\n")
        #expect(r.status == 200 && r.text == "four")
        #expect(r.values("Content-Length") == ["4"])
        guard haveCurl() else { return }
        let h2 = try g.h2([], path: "/repeating")
        #expect(h2.status == 200 && h2.body == "four", "\(h2)")
        #expect(h2.lines.filter { $0.lowercased().hasPrefix("content-length:") } == ["content-length: 4"], "\(h2.lines)")
    }
}
