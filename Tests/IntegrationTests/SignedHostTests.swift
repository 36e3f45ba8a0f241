import AppAttest
import AppAttestSimulator
import Foundation
import GatewayTestSupport
import Testing

/// Issue 19, section 3: with client data version 2 (the default) the signature covers the host, so
/// a request signed for one tenant's host is refused on another's, over HTTP/1.1 and h2c; a route
/// that opted into version 1 still takes version 1.
@Suite("The request signature covers the host (real gatewayd, HTTP/1.1 and h2c)", .serialized, .timeLimit(.minutes(3)))
struct SignedHostTests {
    static let appID = "ABCDE12345.com.example.shop"
    let ca: TestCA
    let dir: URL

    init() throws {
        (ca, dir) = try makeTrustedTestCADirectory("gw-host")
    }

    func config() -> String {
        """
        workers: 2
        listeners:
          - {name: public, address: 127.0.0.1:0, protocols: [http1, h2c]}
        admin: {address: 127.0.0.1:0}
        limits: {drain_timeout: 5s}
        upstreams:
          - {name: demo, url: demo}
        apps:
          - {team_id: ABCDE12345, bundle_ids: [com.example.shop], environments: [development]}
        trust: {extra_roots: [\(dir.appendingPathComponent("root.pem").path)], extra_receipt_roots: [\(dir.appendingPathComponent("receipt-root.pem").path)]}
        store: {kind: memory, shards: 8}
        routes:
          - {name: tenant-a, match: {host: a.example, path_prefix: /api}, upstream: demo, assertion: {mode: enforce}}
          - {name: tenant-b, match: {host: b.example, path_prefix: /api}, upstream: demo, assertion: {mode: enforce}}
          - {name: legacy, match: {path_prefix: /legacy}, upstream: demo, assertion: {mode: enforce, bind: request, client_data: v1}}
          - {name: default, match: {path_prefix: /}, upstream: demo}
        """
    }

    func explain(_ gw: GatewayProcess, _ r: HTTPCall) throws -> [String: Any] {
        let id = try #require(r.json?["requestId"] as? String)
        let (status, body) = try curl([gw.url("admin", "/explain/\(id)")])
        #expect(status == 200)
        return try #require((try? JSONSerialization.jsonObject(with: Data(body.utf8))) as? [String: Any])
    }

    @Test("HTTP/1.1: signed for a.example, refused with Host: b.example (bad_signature), accepted on a.example; a v1 route takes v1")
    func http1() throws {
        let gw = try GatewayProcess(config: config())
        defer { gw.stop() }
        let port = HTTPCall.port(gw, "public")
        let phone = try ContractDevice(ca: ca, appID: Self.appID, port: port)
        #expect(try phone.register().status == 201)
        let body = Array("{\"sku\":1}".utf8)

        let signed = phone.sign(target: "/api/purchase?order=1", body: body, challenge: try phone.challenge(), authority: "a.example")
        let elsewhere = try phone.send(signed, host: "b.example")
        #expect(elsewhere.status == 401, "\(elsewhere.body)")
        #expect(elsewhere.error == "bad_signature")
        let why = try explain(gw, elsewhere)
        #expect(why["route"] as? String == "tenant-b")
        #expect(why["status"] as? Int == 401)
        let details = try #require(why["details"] as? [String: String])
        #expect(details["authority"] == "b.example")
        #expect(details["client_data"] == "v2")
        // The refusal consumed nothing: the same request on its own host (spelled otherwise) passes.
        let home = try phone.send(signed, host: "A.Example:80")
        #expect(home.status == 200, "\(home.body)")
        #expect(home.json?["route"] as? String == "tenant-a")
        #expect((home.json?["headers"] as? [String: String])?["X-App-Attest-Verified-Key-Id"] == phone.keyID)
        // And once accepted it is not accepted again, on either host.
        #expect(try phone.send(signed, host: "a.example").status == 401)
        #expect(try phone.send(signed, host: "b.example").status == 401)

        // Signed for b.example, sent to b.example: accepted by tenant-b.
        let forB = phone.sign(target: "/api/purchase", body: body, challenge: try phone.challenge(), authority: "b.example")
        let onB = try phone.send(forB)
        #expect(onB.status == 200 && onB.json?["route"] as? String == "tenant-b", "\(onB.body)")

        // Absolute-form naming a.example with Host b.example: the target's authority replaces Host
        // (RFC 9112 §3.2.2), so it is routed to tenant-a and verified as signed for a.example over
        // its origin-form target; once accepted, not again.
        let origin = phone.sign(target: "/api/purchase", body: body, challenge: try phone.challenge(), authority: "a.example")
        let split = ContractDevice.Signed(
            method: origin.method, target: "http://a.example/api/purchase", body: body, headers: origin.headers, authority: "a.example")
        let splitCall = try phone.send(split, host: "b.example")
        #expect(splitCall.status == 200 && splitCall.json?["route"] as? String == "tenant-a", "\(splitCall.body)")
        #expect(try phone.send(split, host: "a.example").status == 401)
        // Signed over the absolute-form text itself: not what the gateway verifies.
        let absolute = phone.sign(
            target: "http://a.example/api/purchase", body: body, challenge: try phone.challenge(), authority: "a.example")
        let absoluteCall = try phone.send(absolute, host: "a.example")
        #expect(absoluteCall.status == 401 && absoluteCall.error == "bad_signature", "\(absoluteCall.body)")
        #expect(try explain(gw, absoluteCall)["status"] as? Int == 401)

        // The v1 route: version 1 client data (no authority) is accepted whatever the Host;
        // version 2 client data is not (the route, not the client, chooses the version).
        let v1 = phone.sign(target: "/legacy/order", body: body, challenge: try phone.challenge(), version: "v1", authority: "a.example")
        let legacy = try phone.send(v1, host: "b.example")
        #expect(legacy.status == 200 && legacy.json?["route"] as? String == "legacy", "\(legacy.body)")
        let v2OnLegacy = try phone.send(phone.sign(target: "/legacy/order", body: body, challenge: try phone.challenge()))
        #expect(v2OnLegacy.error == "bad_signature")
        // And a v2 route refuses version 1 client data even for its own host.
        let downgrade = try phone.send(
            phone.sign(target: "/api/purchase", body: body, challenge: try phone.challenge(), version: "v1", authority: "a.example"),
            host: "a.example")
        #expect(downgrade.error == "bad_signature")

        let metrics = try curl([gw.url("admin", "/metrics")]).1
        // On b.example: the first try and the resend after acceptance (the signature is checked before the counter).
        #expect(metrics.contains("route=\"tenant-b\",mode=\"enforce\",verdict=\"refused\",reason=\"bad_signature\"} 2"))
        #expect(metrics.contains("route=\"tenant-a\",mode=\"enforce\",verdict=\"accepted\",reason=\"ok\"} 2"))
    }

    @Test("h2c: :authority is what is signed; another :authority is refused, its own accepted")
    func h2c() throws {
        let gw = try GatewayProcess(config: config())
        defer { gw.stop() }
        let port = HTTPCall.port(gw, "public")
        let phone = try ContractDevice(ca: ca, appID: Self.appID, port: port)
        #expect(try phone.register().status == 201)
        let body = "{\"sku\":7}"
        let signed = phone.sign(
            target: "/api/purchase?order=7", body: Array(body.utf8), challenge: try phone.challenge(), authority: "a.example")
        // curl sends a Host given with -H as the HTTP/2 :authority.
        func send(authority: String) throws -> (status: Int, body: String) {
            var args = [
                "-sS", "-i", "--max-time", "20", "--http2-prior-knowledge", "-X", "POST", "--data-binary", body,
                "-H", "Host: \(authority)",
            ]
            for (k, v) in signed.headers { args += ["-H", "\(k): \(v)"] }
            let r = try runProcess(URL(fileURLWithPath: "/usr/bin/curl"), args + [gw.url("public", "/api/purchase?order=7")], timeout: 30)
            #expect(r.stdout.hasPrefix("HTTP/2 "), "\(r.stdout.prefix(200)) \(r.stderr)")
            let status = Int(r.stdout.split(separator: " ").dropFirst().first ?? "") ?? 0
            let payload = r.stdout.range(of: "\r\n\r\n").map { String(r.stdout[$0.upperBound...]) } ?? ""
            return (status, payload)
        }
        let elsewhere = try send(authority: "b.example")
        #expect(elsewhere.status == 401)
        #expect(elsewhere.body.contains("\"error\":\"bad_signature\""), "\(elsewhere.body)")
        let home = try send(authority: "a.example")
        #expect(home.status == 200, "\(home.body)")
        #expect(home.body.contains("\"route\":\"tenant-a\""))
        #expect(home.body.contains("\"X-App-Attest-Verified-Key-Id\":\"\(phone.keyID)\""))
        #expect(try send(authority: "a.example").status == 401)  // accepted once only
    }
}
