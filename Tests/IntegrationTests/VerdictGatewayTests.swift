import AppAttest
import AppAttestSimulator
import Foundation
import GatewayCrypto
import GatewayTestSupport
import GatewayWire
import Glibc
import Testing

/// Issue 27, part 1: the signed verdict reaches the upstream on opted-in routes (over HTTP/1.1 and
/// h2c), verified here with an independent verifier (the openssl binary, with the public key built
/// from the JWKS's `x` and `y`); a client's copy never does; the JWKS on the admin listener, on the
/// public one only when published, and the old key kept by a reload (a bad key refused).
@Suite("The signed verdict (real gatewayd, recording upstream, openssl verifies)", .serialized, .timeLimit(.minutes(3)))
struct VerdictGatewayTests {
    static let appID = "ABCDE12345.com.example.shop"
    let ca: TestCA
    let dir: URL

    init() throws {
        (ca, dir) = try makeTrustedTestCADirectory("gw-verdict")
    }

    /// Writes a fresh P-256 key at `name` (mode 0600, or `mode`); its path.
    func writeKey(_ name: String, mode: mode_t = 0o600) throws -> String {
        let path = dir.appendingPathComponent(name).path
        try ECPrivateKey(curve: .p256).pkcs8PEM.write(toFile: path, atomically: true, encoding: .utf8)
        #expect(chmod(path, mode) == 0)
        return path
    }

    func config(upstream: UInt16, key: String, publish: Bool) -> String {
        """
        workers: 2
        listeners:
          - {name: public, address: 127.0.0.1:0, protocols: [http1, h2c]}
        admin: {address: 127.0.0.1:0}
        limits: {drain_timeout: 2s}
        upstreams:
          - {name: rec, url: "http://127.0.0.1:\(upstream)", response_timeout: 10s}
        apps:
          - {team_id: ABCDE12345, bundle_ids: [com.example.shop], environments: [development]}
        trust: {extra_roots: [\(dir.appendingPathComponent("root.pem").path)], extra_receipt_roots: [\(dir.appendingPathComponent("receipt-root.pem").path)]}
        store: {kind: memory, shards: 4}
        verdict: {key: \(key), ttl: 45s, issuer: gw-it, publish: \(publish)}
        routes:
          - {name: purchase, match: {methods: [POST], path_prefix: /api/purchase}, upstream: rec, assertion: {mode: enforce, verdict_header: true}}
          - {name: shadowed, match: {path_prefix: /api/shadow}, upstream: rec, assertion: {mode: shadow, verdict_header: true}}
          - {name: unsigned, match: {path_prefix: /api/other}, upstream: rec, assertion: {mode: enforce}}
          - {name: rest, match: {path_prefix: /}, upstream: rec}
        """
    }

    /// A recording upstream: every request it received, answered `ok`.
    static func recorder() throws -> (ScriptedServer, RecordedRequests) {
        let recorded = RecordedRequests()
        let server = try ScriptedServer { c in
            while let r = c.readRequest() {
                recorded.append(r)
                c.respond("ok")
            }
        }
        return (server, recorded)
    }

    /// The single request the upstream received with `X-Case: id`.
    static func received(_ recorded: RecordedRequests, _ id: String) throws -> ScriptedRequest {
        let all = recorded.of(id)
        try #require(all.count == 1, "\(all.count) requests with X-Case \(id)")
        return all[0]
    }

    /// The JWKS at `url`: kid → (x, y).
    static func jwks(_ url: String) throws -> (keys: [String: (x: String, y: String)], order: [String]) {
        let (status, body) = try curl([url])
        try #require(status == 200, "\(url): \(status) \(body)")
        let doc = try #require(try JSONSerialization.jsonObject(with: Data(body.utf8)) as? [String: Any])
        var keys: [String: (String, String)] = [:]
        var order: [String] = []
        for k in try #require(doc["keys"] as? [[String: Any]]) {
            #expect(k["kty"] as? String == "EC" && k["crv"] as? String == "P-256" && k["alg"] as? String == "ES256")
            #expect(k["d"] == nil, "a private member in the JWKS")
            let kid = try #require(k["kid"] as? String)
            keys[kid] = (try #require(k["x"] as? String), try #require(k["y"] as? String))
            order.append(kid)
        }
        return (keys, order)
    }

    static func base64URL(_ text: Substring) throws -> [UInt8] {
        var s = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while s.count % 4 != 0 { s += "=" }
        return try #require(Data(base64Encoded: s).map { [UInt8]($0) })
    }

    /// The token checked by the openssl binary with the public key the JWKS gives for its `kid`
    /// (the JOSE `r ‖ s` signature made DER here, the key a SubjectPublicKeyInfo PEM): its header
    /// and claims.
    func verifyWithOpenSSL(_ token: String, jwks: [String: (x: String, y: String)]) throws -> (
        header: [String: Any], claims: [String: Any]
    ) {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        try #require(parts.count == 3)
        let header = try #require(try JSONSerialization.jsonObject(with: Data(try Self.base64URL(parts[0]))) as? [String: Any])
        let claims = try #require(try JSONSerialization.jsonObject(with: Data(try Self.base64URL(parts[1]))) as? [String: Any])
        let kid = try #require(header["kid"] as? String)
        let key = try #require(jwks[kid], "kid \(kid) not in the JWKS")
        let point = [0x04] + (try Self.base64URL(Substring(key.x))) + (try Self.base64URL(Substring(key.y)))
        // SubjectPublicKeyInfo { id-ecPublicKey, prime256v1 } ‖ BIT STRING (the point).
        let spki = Hex.decode("3059301306072a8648ce3d020106082a8648ce3d030107034200")! + point
        let pem =
            "-----BEGIN PUBLIC KEY-----\n" + Data(spki).base64EncodedString(options: .lineLength64Characters)
            + "\n-----END PUBLIC KEY-----\n"
        let raw = try Self.base64URL(parts[2])
        try #require(raw.count == 64)
        func integer(_ v: ArraySlice<UInt8>) -> [UInt8] {
            var b = Array(v.drop { $0 == 0 })
            if b.isEmpty || b[0] >= 0x80 { b.insert(0, at: 0) }
            return [0x02, UInt8(b.count)] + b
        }
        let seq = integer(raw[0..<32]) + integer(raw[32...])
        let der = [0x30, UInt8(seq.count)] + seq
        let work = dir.appendingPathComponent("verify-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: work, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: work) }
        try pem.write(to: work.appendingPathComponent("pub.pem"), atomically: true, encoding: .utf8)
        try Data(der).write(to: work.appendingPathComponent("sig.der"))
        try Data((parts[0] + "." + parts[1]).utf8).write(to: work.appendingPathComponent("input"))
        let r = try runProcess(
            URL(fileURLWithPath: "/usr/bin/openssl"),
            [
                "dgst", "-sha256", "-verify", work.appendingPathComponent("pub.pem").path, "-signature",
                work.appendingPathComponent("sig.der").path, work.appendingPathComponent("input").path,
            ], timeout: 20)
        #expect(r.stdout.contains("Verified OK"), "openssl: \(r.stdout) \(r.stderr)")
        // Tampered claims do not verify.
        try Data((parts[0] + "." + parts[1] + "x").utf8).write(to: work.appendingPathComponent("input"))
        let bad = try runProcess(
            URL(fileURLWithPath: "/usr/bin/openssl"),
            [
                "dgst", "-sha256", "-verify", work.appendingPathComponent("pub.pem").path, "-signature",
                work.appendingPathComponent("sig.der").path, work.appendingPathComponent("input").path,
            ], timeout: 20)
        #expect(!bad.stdout.contains("Verified OK"))
        return (header, claims)
    }

    @Test(
        "HTTP/1.1 and h2c: an opted-in route's upstream gets one verdict that openssl verifies, with the request's claims; a client's copy never arrives; JWKS on admin only"
    )
    func verdictReachesUpstream() throws {
        let (upstream, recorded) = try Self.recorder()
        defer { upstream.stop() }
        let key = try writeKey("verdict.pem")
        let gw = try GatewayProcess(config: config(upstream: upstream.port, key: key, publish: false))
        defer { gw.stop() }
        let port = HTTPCall.port(gw, "public")
        let jwks = try Self.jwks(gw.url("admin", "/.well-known/jwks.json")).keys
        #expect(jwks.count == 1)
        let phone = try ContractDevice(ca: ca, appID: Self.appID, port: port)
        #expect(try phone.register().status == 201)
        let forged = [("X-App-Attest-Verdict", "forged"), ("x_app_attest_verdict", "forged"), ("X-APP-ATTEST-VERDICT", "forged")]

        // HTTP/1.1, accepted.
        let body = Array("{\"sku\":42}".utf8)
        let signed = phone.sign(target: "/api/purchase?order=7", body: body, challenge: try phone.challenge())
        let before = Int64(Date().timeIntervalSince1970)
        let call = try phone.send(signed, extraHeaders: forged + [("X-Case", "h1")])
        #expect(call.status == 200, "\(call.body)")
        let got = try Self.received(recorded, "h1")
        let tokens = got.headers.filter { $0.name.lowercased().replacingOccurrences(of: "_", with: "-") == "x-app-attest-verdict" }
        try #require(tokens.count == 1, "\(got.headers)")
        #expect(tokens[0].name == "X-App-Attest-Verdict" && tokens[0].value != "forged")
        let (header, claims) = try verifyWithOpenSSL(tokens[0].value, jwks: jwks)
        #expect(header["alg"] as? String == "ES256" && header["typ"] as? String == "JWT")
        #expect(claims["iss"] as? String == "gw-it" && claims["aud"] as? String == "purchase")
        let iat = try #require(claims["iat"] as? Int)
        let exp = try #require(claims["exp"] as? Int)
        #expect(exp - iat == 45 && Int64(iat) >= before - 1 && Int64(iat) <= Int64(Date().timeIntervalSince1970) + 1)
        #expect(claims["jti"] as? String == got.header("X-Request-Id") && got.header("X-Request-Id") != nil)
        let keyBytes = try #require(Data(base64Encoded: phone.keyID).map { [UInt8]($0) })
        #expect(claims["sub"] as? String == Base64.encodeURL(keyBytes))
        #expect(claims["app_id"] as? String == Self.appID && claims["environment"] as? String == "development")
        #expect(claims["verdict"] as? String == "accepted" && claims["mode"] as? String == "enforce")
        #expect(claims["method"] as? String == "POST" && claims["target"] as? String == "/api/purchase?order=7")
        #expect(claims["body_sha256"] as? String == Hex.encode(SHA256.hash(body)))
        #expect(claims["risk_metric"] == nil && claims["device_check"] == nil)

        // h2c, accepted: the same claims from an HTTP/2 stream.
        let h2Signed = phone.sign(target: "/api/purchase?order=8", body: body, challenge: try phone.challenge())
        var args = [
            "-sS", "-o", "/dev/null", "-w", "%{http_code} %{http_version}", "--max-time", "20", "--http2-prior-knowledge", "-X", "POST",
            "--data-binary", "{\"sku\":42}", "-H", "X-Case: h2", "-H", "X-App-Attest-Verdict: forged",
        ]
        for (k, v) in h2Signed.headers { args += ["-H", "\(k): \(v)"] }
        let h2 = try runProcess(URL(fileURLWithPath: "/usr/bin/curl"), args + [gw.url("public", "/api/purchase?order=8")], timeout: 30)
        #expect(h2.stdout == "200 2", "\(h2.stdout) \(h2.stderr)")
        let got2 = try Self.received(recorded, "h2")
        let h2Tokens = got2.headers.filter { $0.name.lowercased() == "x-app-attest-verdict" }
        try #require(h2Tokens.count == 1, "\(got2.headers)")
        let (_, claims2) = try verifyWithOpenSSL(h2Tokens[0].value, jwks: jwks)
        #expect(claims2["target"] as? String == "/api/purchase?order=8" && claims2["verdict"] as? String == "accepted")
        #expect(claims2["jti"] as? String == got2.header("X-Request-Id"))

        // Shadowed and unverified: forwarded with would_refuse, no subject.
        let shadow = try HTTPCall.send(
            port: port, method: "GET", target: "/api/shadow/x", headers: forged + [("X-Case", "shadow")])
        #expect(shadow.status == 200)
        let got3 = try Self.received(recorded, "shadow")
        let shadowTokens = got3.headers.filter { $0.name.lowercased() == "x-app-attest-verdict" }
        try #require(shadowTokens.count == 1)
        let (_, claims3) = try verifyWithOpenSSL(shadowTokens[0].value, jwks: jwks)
        #expect(claims3["verdict"] as? String == "would_refuse" && claims3["mode"] as? String == "shadow")
        #expect(claims3["aud"] as? String == "shadowed" && claims3["sub"] == nil && claims3["app_id"] == nil)
        #expect(claims3["method"] as? String == "GET" && claims3["body_sha256"] as? String == Hex.encode(SHA256.hash([])))

        // A protected route without verdict_header, and a plain route: no token, and no client's copy.
        let other = phone.sign(target: "/api/other", body: body, challenge: try phone.challenge())
        #expect(try phone.send(other, extraHeaders: forged + [("X-Case", "unsigned")]).status == 200)
        #expect(try HTTPCall.send(port: port, method: "GET", target: "/plain", headers: forged + [("X-Case", "plain")]).status == 200)
        for id in ["unsigned", "plain"] {
            let r = try Self.received(recorded, id)
            #expect(!r.headers.contains { $0.name.lowercased().replacingOccurrences(of: "_", with: "-") == "x-app-attest-verdict" })
        }

        // The JWKS: on the admin listener; on the public one it is just a path of the plain route.
        let adminJWKS = try runProcess(
            URL(fileURLWithPath: "/usr/bin/curl"), ["-sS", "-i", gw.url("admin", "/.well-known/jwks.json")], timeout: 20)
        #expect(adminJWKS.stdout.lowercased().contains("content-type: application/jwk-set+json"))
        #expect(adminJWKS.stdout.lowercased().contains("cache-control: public, max-age=60"))
        let publicJWKS = try HTTPCall.send(port: port, method: "GET", target: "/.well-known/jwks.json", headers: [("X-Case", "jwks")])
        #expect(publicJWKS.body == "ok")
        #expect(recorded.of("jwks").count == 1)
    }

    @Test(
        "published: the JWKS on the public listener; a reload with a new key keeps the old kid, a bad key is refused and the running key kept"
    )
    func publishedAndReloaded() throws {
        let (upstream, recorded) = try Self.recorder()
        defer { upstream.stop() }
        let first = try writeKey("first.pem")
        let gw = try GatewayProcess(config: config(upstream: upstream.port, key: first, publish: true))
        defer { gw.stop() }
        let port = HTTPCall.port(gw, "public")
        let initial = try Self.jwks(gw.url("public", "/.well-known/jwks.json"))
        #expect(initial.order.count == 1)
        #expect(try Self.jwks(gw.url("admin", "/.well-known/jwks.json")).order == initial.order)
        #expect(recorded.of("jwks").isEmpty)
        let post = try HTTPCall.send(port: port, method: "POST", target: "/.well-known/jwks.json")
        #expect(post.status == 405)

        let shadowToken = { (id: String) throws -> String in
            #expect(try HTTPCall.send(port: port, method: "GET", target: "/api/shadow", headers: [("X-Case", id)]).status == 200)
            let r = try Self.received(recorded, id)
            return try #require(r.header("X-App-Attest-Verdict"))
        }
        let oldToken = try shadowToken("before")
        let (oldHeader, _) = try verifyWithOpenSSL(oldToken, jwks: initial.keys)
        #expect(oldHeader["kid"] as? String == initial.order[0])

        // A new key: signs from now on; the old public key stays listed (its tokens still verify).
        let second = try writeKey("second.pem")
        let line = try ReloadTests.reload(gw, config(upstream: upstream.port, key: second, publish: true))
        #expect(ReloadTests.field(line, "msg") == "configuration reloaded", "\(gw.stderr)")
        let rotated = try Self.jwks(gw.url("public", "/.well-known/jwks.json"))
        #expect(rotated.order.count == 2 && rotated.order[1] == initial.order[0])
        #expect(line?.contains("verdict") == true, "\(line ?? "")")  // the reload's `changed`
        let replaced = try #require(gw.stderrLines.first { $0.contains("\"msg\":\"verdict key replaced") }, "\(gw.stderr)")
        #expect(ReloadTests.field(replaced, "kid") == rotated.order[0])
        #expect(ReloadTests.field(replaced, "previous_kid") == initial.order[0])
        #expect(ReloadTests.field(replaced, "previous_kept_until") != nil)
        let newToken = try shadowToken("after")
        let (newHeader, _) = try verifyWithOpenSSL(newToken, jwks: rotated.keys)
        #expect(newHeader["kid"] as? String == rotated.order[0])
        _ = try verifyWithOpenSSL(oldToken, jwks: rotated.keys)

        // A key file others may read: the reload is refused, the running keys kept.
        let open = try writeKey("open.pem", mode: 0o644)
        let refused = try ReloadTests.reload(gw, config(upstream: upstream.port, key: open, publish: true))
        #expect(ReloadTests.field(refused, "msg")?.hasPrefix("reload refused") == true, "\(gw.stderr)")
        #expect(refused?.contains("verdict.key") == true, "\(refused ?? "")")
        #expect(try Self.jwks(gw.url("admin", "/.well-known/jwks.json")).order == rotated.order)
        let (keptHeader, _) = try verifyWithOpenSSL(try shadowToken("kept"), jwks: rotated.keys)
        #expect(keptHeader["kid"] as? String == rotated.order[0])
    }

    @Test("the DeviceCheck fallback: an accepted device's verdict says device_check valid and its bits, no key; openssl verifies it")
    func deviceCheckFallback() throws {
        let team = try AppleTeamFixture("gw-verdict-dc")
        let apple = try team.standIn()
        defer { apple.stop() }
        let key = try writeKey("dc.pem")
        let gw = try GatewayProcess(
            config: """
                \(TestGatewayYAML.base(caDir: team.dir, environments: false))
                attest: {challenge_rate: {per_client: off}}
                \(team.appleSection(apple, service: "devicecheck_url"))
                risk: {refresh: off}
                verdict: {key: \(key)}
                routes:
                  - name: shop
                    match: {methods: [POST], path_prefix: /api/shop}
                    upstream: demo
                    assertion: {mode: enforce, verdict_header: true, fallback: {devicecheck: {bits: read}, max_share: 100%}}
                  - {name: default, match: {path_prefix: /}, upstream: demo}
                """)
        defer { gw.stop() }
        let jwks = try Self.jwks(gw.url("admin", "/.well-known/jwks.json")).keys
        let body = Array("{}".utf8)
        let call = try HTTPCall.send(
            port: HTTPCall.port(gw, "public"), method: "POST", target: "/api/shop/buy",
            headers: [("X-Apple-Device-Token", SimulatedDeviceCheck(ca: team.ca).tokenHeader()), ("X-App-Attest-Verdict", "forged")],
            body: body)
        #expect(call.status == 200, "\(call.body)")
        // The demo upstream answers with the fields it was sent.
        let headers = try #require(call.json?["headers"] as? [String: String])
        #expect(headers["X-Device-Check"] == "valid")
        let token = try #require(headers["X-App-Attest-Verdict"])
        #expect(token != "forged")
        let (_, claims) = try verifyWithOpenSSL(token, jwks: jwks)
        #expect(claims["aud"] as? String == "shop" && claims["verdict"] as? String == "accepted" && claims["mode"] as? String == "enforce")
        #expect(claims["device_check"] as? String == "valid")
        #expect(claims["device_check_bits"] as? String == headers["X-Device-Check-Bits"] && headers["X-Device-Check-Bits"] != nil)
        #expect(claims["sub"] == nil && claims["app_id"] == nil)
        #expect(claims["body_sha256"] as? String == Hex.encode(SHA256.hash(body)))
        #expect(claims["jti"] as? String == headers["X-Request-Id"])
    }
}
