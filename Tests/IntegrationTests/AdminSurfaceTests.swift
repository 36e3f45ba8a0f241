import AppAttest
import AppAttestSimulator
import Foundation
import GatewayTestSupport
import Testing

/// Issue 19, section 5: the admin surface leaks nothing. `/explain` redacts query values and agrees
/// with the response on the status; `admin.token_file` guards it (and, optionally, `/metrics`); the
/// token is read again on reload and never logged; `gatewayd check` validates the file.
@Suite("The admin surface: explain redaction and status, the admin token (real gatewayd)", .serialized, .timeLimit(.minutes(3)))
struct AdminSurfaceTests {
    static let appID = "ABCDE12345.com.example.shop"
    static let token = "tok-7f3a9c1e5b2d4f6a8c0e2b4d6f8a0c2e"
    let ca: TestCA
    let dir: URL

    init() throws {
        (ca, dir) = try makeTrustedTestCADirectory("gw-admin")
    }

    /// Writes `content` to `name` in the suite's directory with `mode`; returns the path.
    func writeToken(_ content: String, name: String = "admin-token", mode: Int = 0o600) throws -> String {
        let path = dir.appendingPathComponent(name).path
        try? FileManager.default.removeItem(atPath: path)
        #expect(FileManager.default.createFile(atPath: path, contents: Data(content.utf8)))
        #expect(chmod(path, mode_t(mode)) == 0)
        return path
    }

    func config(admin: String = "{address: 127.0.0.1:0}") -> String {
        """
        workers: 2
        listeners:
          - {name: public, address: 127.0.0.1:0}
        admin: \(admin)
        limits: {drain_timeout: 5s}
        upstreams:
          - {name: demo, url: demo}
        apps:
          - {team_id: ABCDE12345, bundle_ids: [com.example.shop], environments: [development]}
        trust: {extra_roots: [\(dir.appendingPathComponent("root.pem").path)], extra_receipt_roots: [\(dir.appendingPathComponent("receipt-root.pem").path)]}
        store: {kind: memory, shards: 8}
        routes:
          - {name: purchase, match: {methods: [POST], path_prefix: /api/purchase}, upstream: demo, assertion: {mode: enforce}}
          - {name: profile, match: {path_prefix: /api/profile}, upstream: demo, assertion: {mode: shadow}}
          - {name: default, match: {path_prefix: /}, upstream: demo}
        """
    }

    /// GET on the admin listener, with the token when given: (status, body, lowercased headers).
    func admin(_ gw: GatewayProcess, _ path: String, token: String? = nil) throws -> (status: Int, body: String, headers: [String: String])
    {
        let r = try HTTPCall.send(
            port: HTTPCall.port(gw, "admin"), method: "GET", target: path,
            headers: token.map { [("Authorization", "Bearer \($0)")] } ?? [])
        return (r.status, r.body, r.headers)
    }

    func json(_ text: String) -> [String: Any]? { (try? JSONSerialization.jsonObject(with: Data(text.utf8))) as? [String: Any] }

    @Test("explain: the status recorded is the status sent, for every refusal reachable over HTTP, on routes and endpoints")
    func statusAgrees() throws {
        let gw = try GatewayProcess(config: config())
        defer { gw.stop() }
        let port = HTTPCall.port(gw, "public")
        let phone = try ContractDevice(ca: ca, appID: Self.appID, port: port)
        #expect(try phone.register().status == 201)
        let stranger = try ContractDevice(ca: ca, appID: Self.appID, port: port)
        let body = Array("{\"sku\":1}".utf8)
        let key = phone.keyID
        let c = "AAAAAAAAAAAAAAAAAAAAAA"
        func post(_ target: String, _ headers: [(String, String)] = [], _ text: String = "") throws -> HTTPCall {
            try HTTPCall.send(port: port, method: "POST", target: target, headers: headers, body: Array(text.utf8))
        }
        let signed = phone.sign(target: "/api/purchase", body: body, challenge: try phone.challenge())
        let calls: [(String, HTTPCall, Int, String)] = [
            ("route: no headers", try post("/api/purchase"), 401, "assertion_missing"),
            (
                "route: key id not base64",
                try post("/api/purchase", [("X-App-Attest-Key-Id", "%%"), ("X-App-Assertion", "AAAA"), ("X-App-Attest-Challenge", c)]), 401,
                "malformed"
            ),
            (
                "route: assertion not CBOR",
                try post("/api/purchase", [("X-App-Attest-Key-Id", key), ("X-App-Assertion", "AAAA"), ("X-App-Attest-Challenge", c)]), 401,
                "malformed"
            ),
            (
                "route: challenge not ours",
                try post("/api/purchase", [("X-App-Attest-Key-Id", key), ("X-App-Assertion", "AAAA"), ("X-App-Attest-Challenge", "%%")]),
                401, "challenge_unknown"
            ),
            (
                "route: tampered body",
                try HTTPCall.send(port: port, method: "POST", target: "/api/purchase", headers: signed.headers, body: [1]), 401,
                "bad_signature"
            ),
            (
                "route: unknown key",
                try stranger.send(stranger.sign(target: "/api/purchase", body: body, challenge: try stranger.challenge())), 401,
                "key_unknown"
            ),
            (
                "endpoint: register, bad key id",
                try post("/v1/attest/register", [], "{\"keyId\":\"***\",\"attestation\":\"AAAA\",\"challenge\":\"\(c)\"}"), 400, "malformed"
            ),
            ("endpoint: register, not JSON", try post("/v1/attest/register", [], "{not json"), 400, "bad_json"),
            ("endpoint: register, missing field", try post("/v1/attest/register", [], "{\"keyId\":\"AAAA\"}"), 400, "missing_field"),
            ("endpoint: challenge, bad key id", try post("/v1/attest/challenge", [], "{\"keyId\":\"AAAA\"}"), 400, "malformed"),
        ]
        for (what, r, status, code) in calls {
            #expect(r.status == status, "\(what): \(r.body)")
            #expect(r.error == code, "\(what): \(r.body)")
            let id = try #require(r.json?["requestId"] as? String, "\(what)")
            let explained = try admin(gw, "/explain/\(id)")
            #expect(explained.status == 200)
            let entry = try #require(json(explained.body))
            #expect(entry["status"] as? Int == r.status, "\(what): explain says \(entry["status"] ?? "-"), the response was \(r.status)")
            #expect(entry["error"] as? String == code)
        }
        // Shadow: forwarded; recorded with the status the client was sent and, in its own field, the
        // one enforcement would have sent.
        let shadow = try HTTPCall.send(
            port: port, method: "GET", target: "/api/profile",
            headers: [("X-App-Attest-Key-Id", "%%"), ("X-App-Assertion", "AAAA"), ("X-App-Attest-Challenge", c)])
        #expect(shadow.status == 200)
        let list = try #require(json(try admin(gw, "/explain").body)?["refusals"] as? [[String: Any]])
        let shadowEntry = try #require(list.first)
        #expect(shadowEntry["mode"] as? String == "shadow" && shadowEntry["error"] as? String == "malformed")
        #expect(shadowEntry["status"] as? Int == 200)
        #expect(shadowEntry["refusalStatus"] as? Int == 401)
    }

    @Test("explain keeps query names, not values; never bodies, header values or assertion bytes")
    func redaction() throws {
        let gw = try GatewayProcess(config: config())
        defer { gw.stop() }
        let port = HTTPCall.port(gw, "public")
        let phone = try ContractDevice(ca: ca, appID: Self.appID, port: port)
        #expect(try phone.register().status == 201)
        let secretBody = "{\"pan\":\"5555444433331111\"}"
        let refused = try HTTPCall.send(
            port: port, method: "POST", target: "/api/purchase?session=s3ss10n-abc&card=4111111111111111&flag",
            headers: [("Cookie", "sid=c00k1e-value")], body: Array(secretBody.utf8))
        #expect(refused.status == 401 && refused.error == "assertion_missing")
        // A bad signature: the gate's details name the version and authority, not the target's query.
        let signed = phone.sign(target: "/api/purchase?token=t0k3n-xyz", body: Array(secretBody.utf8), challenge: try phone.challenge())
        let tampered = try HTTPCall.send(
            port: port, method: "POST", target: "/api/purchase?token=t0k3n-xyz", headers: signed.headers, body: Array("{}".utf8))
        #expect(tampered.error == "bad_signature")
        let assertion = try #require(signed.headers.first { $0.0 == "X-App-Assertion" }?.1)

        for r in [refused, tampered] {
            let id = try #require(r.json?["requestId"] as? String)
            let text = try admin(gw, "/explain/\(id)").body
            for secret in [
                "s3ss10n-abc", "4111111111111111", "5555444433331111", "c00k1e-value", "t0k3n-xyz", assertion, String(assertion.prefix(24)),
            ] {
                #expect(!text.contains(secret), "explain shows \(secret.prefix(30)): \(text)")
            }
        }
        let refusedID = try #require(refused.json?["requestId"] as? String)
        let first = try #require(json(try admin(gw, "/explain/\(refusedID)").body))
        #expect(first["target"] as? String == "/api/purchase?session=<redacted>&card=<redacted>&<redacted>")
        #expect(first["client"] as? String == "127.0.0.1")
        let list = try admin(gw, "/explain").body
        #expect(!list.contains("4111111111111111") && !list.contains("t0k3n-xyz") && list.contains("token=<redacted>"))
        #expect(!gw.stderr.contains(assertion) && !gw.stdout.contains(assertion))
    }

    @Test("admin.token_file: /explain needs the bearer token; health and metrics stay open; the token is reloaded and never logged")
    func bearerToken() throws {
        let tokenPath = try writeToken(Self.token + "\n")
        let gw = try GatewayProcess(config: config(admin: "{address: 127.0.0.1:0, token_file: \(tokenPath)}"))
        defer { gw.stop() }
        let refusal = try HTTPCall.send(port: HTTPCall.port(gw, "public"), method: "POST", target: "/api/purchase")
        let id = try #require(refusal.json?["requestId"] as? String)

        for path in ["/explain", "/explain/\(id)", "/explain/0000000000000000", "/nothing-here"] {
            for token in [nil, "wrong-token-wrong-token", String(Self.token.dropLast()), Self.token + "x"] as [String?] {
                let r = try admin(gw, path, token: token)
                #expect(r.status == 401, "\(path) with \(token ?? "no token")")
                #expect(json(r.body)?["error"] as? String == "unauthorized")
                #expect(r.headers["www-authenticate"]?.hasPrefix("Bearer") == true)
                #expect(!r.body.contains("refusals") && !r.body.contains(id))
            }
        }
        // Also a non-GET method (any mutating endpoint added later sits behind the token too).
        let post = try HTTPCall.send(port: HTTPCall.port(gw, "admin"), method: "POST", target: "/explain", body: [1])
        #expect(post.status == 401)
        #expect(try admin(gw, "/explain", token: Self.token).status == 200)
        #expect(try admin(gw, "/explain/\(id)", token: Self.token).status == 200)
        #expect(try admin(gw, "/nothing-here", token: Self.token).status == 404)
        let raw = try curl(["-H", "Authorization: bearer \(Self.token)", gw.url("admin", "/explain/\(id)")])
        #expect(raw.0 == 200 && raw.1.contains("\"status\":401"))
        for open in ["/healthz", "/readyz", "/metrics"] { #expect(try admin(gw, open).status == 200, "\(open)") }

        // Rotation: a new token in the file, SIGHUP: the old one stops working, the new one works.
        let next = "next-token-0123456789abcdef0123456789"
        _ = try writeToken(next)
        gw.signal(SIGHUP)
        try waitFor { (try? admin(gw, "/explain", token: next).status) == 200 }
        #expect(try admin(gw, "/explain", token: Self.token).status == 401)
        // A world-readable token file is refused at reload: the running token stays in force.
        _ = try writeToken("third-token-0123456789abcdef01234", mode: 0o644)
        gw.signal(SIGHUP)
        try waitFor { gw.stderr.contains("reload refused") }
        #expect(gw.stderr.contains("lets other users read or change the token"))
        #expect(try admin(gw, "/explain", token: next).status == 200)
        #expect(try admin(gw, "/explain", token: "third-token-0123456789abcdef01234").status == 401)
        // protect_metrics, by reload: /metrics needs the token now; health does not.
        _ = try writeToken(next)
        try config(admin: "{address: 127.0.0.1:0, token_file: \(tokenPath), protect_metrics: true}")
            .write(to: gw.configURL, atomically: true, encoding: .utf8)
        gw.signal(SIGHUP)
        try waitFor { (try? admin(gw, "/metrics").status) == 401 }
        #expect(try admin(gw, "/metrics", token: next).status == 200)
        #expect(try admin(gw, "/healthz").status == 200 && admin(gw, "/readyz").status == 200)
        // Never logged: not the token, not a presented one.
        for secret in [Self.token, next, "third-token-0123456789abcdef01234", "wrong-token-wrong-token"] {
            #expect(!gw.stderr.contains(secret) && !gw.stdout.contains(secret), "\(secret) was logged")
        }
    }

    @Test(
        "gatewayd check reads the token file: missing, empty, short or world-readable fail (exit 2); a loopback-less admin without a token warns"
    )
    func check() throws {
        func check(_ admin: String) throws -> ProcessResult {
            let file = dir.appendingPathComponent("check-\(UUID().uuidString).yaml")
            try config(admin: admin).write(to: file, atomically: true, encoding: .utf8)
            defer { try? FileManager.default.removeItem(at: file) }
            return try runProcess(gatewaydBinary, ["check", "--config", file.path], timeout: 60)
        }
        let good = try writeToken(Self.token, name: "good")
        #expect(try check("{token_file: \(good)}").status == 0)
        let cases: [(String, String)] = [
            (dir.appendingPathComponent("missing").path, "does not exist"),
            (try writeToken("", name: "empty"), "is empty"),
            (try writeToken("short", name: "short"), "shorter than 16 characters"),
            (try writeToken(Self.token, name: "open", mode: 0o644), "lets other users read or change the token"),
        ]
        for (path, message) in cases {
            let r = try check("{token_file: \(path)}")
            #expect(r.status == 2, "\(path): \(r.stdout)\(r.stderr)")
            #expect(r.stderr.contains("admin.token_file \(path): ") && r.stderr.contains(message), "\(r.stderr)")
            #expect(!r.stderr.contains(Self.token))
        }
        let exposed = try check("{address: 0.0.0.0:0}")
        #expect(exposed.status == 0)
        #expect(exposed.stderr.contains("warning: admin.address 0.0.0.0:0 is not a loopback address and admin.token_file is not set"))
        #expect(try check("{address: 0.0.0.0:0, token_file: \(good)}").stderr.isEmpty)
    }
}
