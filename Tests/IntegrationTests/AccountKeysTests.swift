import AppAttest
import AppAttestSimulator
import Foundation
import GatewayCrypto
import GatewayTestSupport
import GatewayWire
import Synchronization
import Testing

/// Keys per account end to end (issue 27): a real `gatewayd` in front of an upstream that names
/// each verified request's account (`X-App-Attest-Account`, here taken from the request's
/// `X-Test-Account`), software devices registering keys of one account; and two gateways on one
/// real `redis-server` sharing what they learn.
@Suite("Keys per account (real gatewayd, scripted upstream, real redis-server)", .serialized, .timeLimit(.minutes(5)))
struct AccountKeysTests {
    static let appID = "ABCDE12345.com.example.shop"
    let ca: TestCA
    let dir: URL

    init() throws {
        (ca, dir) = try makeTrustedTestCADirectory("gw-accounts")
    }

    /// The upstream: answers every request (a 404 under `/plain`) with `X-App-Attest-Account` set
    /// to the request's `X-Test-Account` when it has one, and a body naming the
    /// `X-App-Attest-Account-Keys` it was sent (`keys=-` without one).
    static func upstream() throws -> ScriptedServer {
        try ScriptedServer { conn in
            while let r = conn.readRequest() {
                let keys = r.header("X-App-Attest-Account-Keys") ?? "-"
                let account = r.header("X-Test-Account").map { "X-App-Attest-Account: \($0)\r\n" } ?? ""
                conn.respond(status: r.target.hasPrefix("/plain") ? 404 : 200, "keys=\(keys)", headers: account)
            }
        }
    }

    func config(upstream: UInt16, store: String = "{kind: memory, shards: 8}") -> String {
        """
        \(TestGatewayYAML.base(caDir: dir, drain: "2s", upstreams: ["{name: app, url: \"http://127.0.0.1:\(upstream)\"}"]))
        attest: {challenge_ttl: 5m, challenge_rate: {per_client: off}}    # one address plays every device
        store: \(store)
        accounts: {window: 24h}
        routes:
          - name: flag
            match: {methods: [POST], path_prefix: /api/flag}
            upstream: app
            assertion: {mode: enforce, max_keys_per_account: 2}
          - name: refuse
            match: {methods: [POST], path_prefix: /api/refuse}
            upstream: app
            assertion: {mode: enforce, max_keys_per_account: 2, on_keys: refuse}
          - {name: plain, match: {path_prefix: /plain}, upstream: app}
        """
    }

    /// A verified request of `phone` on `target`, claiming `account` (as the upstream will name it).
    static func call(_ phone: ContractDevice, _ target: String, account: String?, port: UInt16? = nil) throws -> HTTPCall {
        let c = try phone.challenge(purpose: "assert", keyID: phone.keyID)
        let s = phone.sign(target: target, body: Array("{}".utf8), challenge: c)
        let extra = account.map { [("X-Test-Account", $0)] } ?? []
        return try HTTPCall.send(
            port: port ?? phone.port, method: s.method, target: s.target, headers: s.headers + extra, body: s.body, host: s.authority)
    }

    static func explainKey(_ gw: GatewayProcess, _ phone: ContractDevice) throws -> [String: Any]? {
        let (status, body) = try curl([gw.url("admin", "/explain/key/" + Hex.encode(phone.device.keyID))])
        guard status == 200 else { return nil }
        return (try? JSONSerialization.jsonObject(with: Data(body.utf8))) as? [String: Any]
    }

    static func metric(_ text: String, _ prefix: String) -> Double? {
        for line in text.split(separator: "\n") where line.hasPrefix(prefix) {
            return Double(line.split(separator: " ").last ?? "")
        }
        return nil
    }

    @Test(
        "keys 1 and 2 of an account pass; key 3's requests are flagged (X-App-Attest-Account-Keys) or refused 403 account_key_limit; X-App-Attest-Account never reaches the client"
    )
    func flagAndRefuse() throws {
        let up = try Self.upstream()
        defer { up.stop() }
        let gw = try GatewayProcess(config: config(upstream: up.port))
        defer { gw.stop() }
        let port = HTTPCall.port(gw, "public")

        // Any route, any status: the upstream's account field is the gateway's alone.
        let plain = try HTTPCall.send(port: port, method: "GET", target: "/plain/x", headers: [("X-Test-Account", "acct-1")])
        #expect(plain.status == 404)
        #expect(plain.headers["x-app-attest-account"] == nil)

        let phones = try (0..<3).map { _ in try ContractDevice(ca: ca, appID: Self.appID, port: port) }
        for p in phones { #expect(try p.register().status == 201) }
        // Each key's first request: no account known yet; the upstream names acct-1 for it.
        for (i, p) in phones.enumerated() {
            let r = try Self.call(p, "/api/flag", account: "acct-1")
            #expect(r.status == 200 && r.body == "keys=-", "key \(i + 1): \(r.status) \(r.body)")
            #expect(r.headers["x-app-attest-account"] == nil)
        }
        // The stored counts: key 1 saw one key of the account, key 2 two, key 3 three.
        for (i, p) in phones.enumerated() {
            let r = try Self.call(p, "/api/flag", account: "acct-1")
            #expect(r.status == 200 && r.body == "keys=\(i + 1)", "key \(i + 1): \(r.status) \(r.body)")
            #expect(r.headers["x-app-attest-account"] == nil)
        }
        // On the refusing route: keys 1 and 2 pass, key 3 is refused.
        #expect(try Self.call(phones[0], "/api/refuse", account: "acct-1").status == 200)
        #expect(try Self.call(phones[1], "/api/refuse", account: "acct-1").status == 200)
        let refused = try Self.call(phones[2], "/api/refuse", account: "acct-1")
        #expect(refused.status == 403, "\(refused.body)")
        #expect(refused.error == "account_key_limit")
        #expect(refused.json?["action"] as? String == "none")
        #expect(refused.headers["x-app-attest-account"] == nil)
        // The refusal's explain entry: the account's SHA-256 and count, the route's maximum.
        let requestID = try #require(refused.json?["requestId"] as? String)
        let entry = try curl([gw.url("admin", "/explain/\(requestID)")]).1
        #expect(entry.contains(Hex.encode(SHA256.hash(Array("acct-1".utf8)))), "\(entry)")
        #expect(entry.contains("account_key_limit") && entry.contains("max_keys_per_account"), "\(entry)")

        // explain: the account's SHA-256 (never the id) and its keys.
        let explained = try #require(try Self.explainKey(gw, phones[2]))
        let account = try #require(explained["account"] as? [String: Any])
        #expect(account["sha256"] as? String == Hex.encode(SHA256.hash(Array("acct-1".utf8))))
        #expect(account["keys"] as? Int == 3)
        #expect(account["keysInWindow"] as? Int == 3)
        #expect(!(try curl([gw.url("admin", "/explain/key/" + Hex.encode(phones[2].device.keyID))]).1.contains("acct-1")))

        // An invalid account id (over 128 bytes) is ignored and counted.
        let long = String(repeating: "x", count: 129)
        #expect(try Self.call(phones[0], "/api/flag", account: long).status == 200)
        let metrics = try curl([gw.url("admin", "/metrics")]).1
        #expect(Self.metric(metrics, "attest_gateway_account_header_invalid_total") == 1)
        #expect(Self.metric(metrics, "attest_gateway_account_associations_total{result=\"recorded\"}") == 3)
        #expect(Self.metric(metrics, "attest_gateway_account_keys_count") == 3)
        #expect(
            Self.metric(
                metrics,
                "attest_gateway_assertion_verdicts_total{route=\"flag\",mode=\"enforce\",verdict=\"flagged\",reason=\"account_key_limit\"}"
            ) == 1)
        #expect(
            Self.metric(
                metrics,
                "attest_gateway_assertion_verdicts_total{route=\"refuse\",mode=\"enforce\",verdict=\"refused\",reason=\"account_key_limit\"}"
            ) == 1)
        #expect(!metrics.contains("acct-1"))
    }

    @Test("HTTP/2 (h2c): the account field is read from a verified response and stripped from every response")
    func overHTTP2() throws {
        let up = try Self.upstream()
        defer { up.stop() }
        let yaml = config(upstream: up.port).replacingOccurrences(
            of: "- {name: public, address: 127.0.0.1:0}", with: "- {name: public, address: 127.0.0.1:0, protocols: [http1, h2c]}")
        let gw = try GatewayProcess(config: yaml)
        defer { gw.stop() }
        let port = HTTPCall.port(gw, "public")
        func h2(_ args: [String]) throws -> (status: Int, head: String, body: String) {
            let r = try runProcess(
                URL(fileURLWithPath: "/usr/bin/curl"), ["-sS", "-i", "--max-time", "20", "--http2-prior-knowledge"] + args, timeout: 30)
            let parts = r.stdout.components(separatedBy: "\r\n\r\n")
            let status = Int(parts[0].split(separator: " ").dropFirst().first ?? "") ?? 0
            #expect(parts[0].hasPrefix("HTTP/2"), "\(r.stdout) \(r.stderr)")
            return (status, parts[0].lowercased(), parts.dropFirst().joined(separator: "\r\n\r\n"))
        }
        let plain = try h2(["-H", "X-Test-Account: acct-h2", "http://127.0.0.1:\(port)/plain/x"])
        #expect(plain.status == 404)
        #expect(!plain.head.contains("x-app-attest-account"))

        let phone = try ContractDevice(ca: ca, appID: Self.appID, port: port)
        #expect(try phone.register().status == 201)
        for expected in ["keys=-", "keys=1"] {
            let s = phone.sign(
                target: "/api/flag", body: Array("{}".utf8), challenge: try phone.challenge(purpose: "assert", keyID: phone.keyID))
            let headers = (s.headers + [("X-Test-Account", "acct-h2")]).flatMap { ["-H", "\($0.0): \($0.1)"] }
            let r = try h2(headers + ["-X", "POST", "--data-binary", "{}", "http://\(s.authority)/api/flag"])
            #expect(r.status == 200 && r.body == expected, "\(r)")
            #expect(!r.head.contains("x-app-attest-account:"))
        }
        let account = try #require(try Self.explainKey(gw, phone)?["account"] as? [String: Any])
        #expect(account["sha256"] as? String == Hex.encode(SHA256.hash(Array("acct-h2".utf8))))
    }

    @Test("two gatewayd on one redis-server: associations recorded through gateway A count on gateway B")
    func fleetOnRedis() throws {
        guard RedisProcess.testsEnabled else { return }
        let redis = try RedisProcess()
        defer { redis.stop() }
        let up = try Self.upstream()
        defer { up.stop() }
        let store = "{kind: redis, url: \(redis.url), timeout: 1s}"
        let a = try GatewayProcess(config: config(upstream: up.port, store: store))
        defer { a.stop() }
        let b = try GatewayProcess(config: config(upstream: up.port, store: store))
        defer { b.stop() }
        let (portA, portB) = (HTTPCall.port(a, "public"), HTTPCall.port(b, "public"))
        let phones = try (0..<3).map { _ in try ContractDevice(ca: ca, appID: Self.appID, port: portA) }
        for p in phones { #expect(try p.register().status == 201) }
        // Through A only: each key's first request names the account.
        for p in phones { #expect(try Self.call(p, "/api/flag", account: "acct-r", port: portA).status == 200) }
        // The associations are written after the responses: wait (bounded) until Redis has key 3's.
        let deadline = Date().addingTimeInterval(5)
        while Date() < deadline, ((try? Self.explainKey(b, phones[2]))??["account"] as? [String: Any])?["keys"] as? Int != 3 {
            usleep(50_000)
        }
        // On B, which never saw these keys' responses: key 3 is over the limit, key 1 is not.
        let flagged = try Self.call(phones[2], "/api/flag", account: "acct-r", port: portB)
        #expect(flagged.status == 200 && flagged.body == "keys=3", "\(flagged.body)")
        let refused = try Self.call(phones[2], "/api/refuse", account: "acct-r", port: portB)
        #expect(refused.status == 403 && refused.error == "account_key_limit", "\(refused.body)")
        #expect(try Self.call(phones[0], "/api/refuse", account: "acct-r", port: portB).status == 200)
        let explained = try #require(try Self.explainKey(b, phones[2]))
        #expect((explained["account"] as? [String: Any])?["keysInWindow"] as? Int == 3)
    }
}
