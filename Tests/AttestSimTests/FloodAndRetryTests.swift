import AttestSim
import Foundation
import Testing

@Suite("attest-sim: 429 and Retry-After, the flood runner, the source address", .timeLimit(.minutes(3)))
struct FloodAndRetryTests {
    static func endpoint(_ server: LoopbackServer) -> HTTPEndpoint { HTTPEndpoint(host: "127.0.0.1", port: server.port) }

    @Test("a 429 is waited out (Retry-After plus jitter) and the same request sent again")
    func retryAfter() throws {
        let seen = Locked<[ServerRequest]>([])
        let server = try LoopbackServer { r in
            seen.mutate { $0.append(r) }
            return seen.value.count == 1
                ? .bytes(
                    httpResponse(429, "Too Many Requests", headers: [("Retry-After", "1")], body: "{\"error\":\"rate_limited\"}"),
                    close: false)
                : .bytes(httpResponse(201, "Created", body: "{\"challenge\":\"c\"}"), close: false)
        }
        defer { server.stop() }
        let session = GatewaySession(client: HTTPClient(endpoint: Self.endpoint(server), timeout: 5), paths: GatewayPaths())
        defer { session.client.close() }
        var waited = 0
        let started = Date()
        let r = try session.sendHonouringRetryAfter(
            GatewayRequests.challenge(paths: GatewayPaths(), purpose: .register, keyID: nil), waited: &waited)
        let elapsed = Date().timeIntervalSince(started)
        #expect(r.status == 201)
        #expect(waited == 1)
        #expect(elapsed >= 1 && elapsed < 2.5, "\(elapsed)")
        #expect(seen.value.count == 2 && seen.value[0].raw == seen.value[1].raw)
        // Without retries left, the 429 is the answer.
        var none = 0
        let server429 = try LoopbackServer { _ in
            .bytes(httpResponse(429, "Too Many Requests", headers: [("Retry-After", "1")]), close: false)
        }
        defer { server429.stop() }
        let other = GatewaySession(client: HTTPClient(endpoint: Self.endpoint(server429), timeout: 5), paths: GatewayPaths())
        defer { other.client.close() }
        #expect(try other.sendHonouringRetryAfter(HTTPRequest(method: "POST", target: "/c"), retries: 0, waited: &none).status == 429)
        #expect(none == 0)
    }

    @Test("flood: challenge requests back to back on keep-alive connections, answers counted; random key ids when asked")
    func flood() throws {
        let seen = Locked<(count: Int, withKey: Int)>((0, 0))
        let server = try LoopbackServer { r in
            let n = seen.mutate { s -> Int in
                s.count += 1
                if String(decoding: r.body, as: UTF8.self).contains("\"keyId\"") { s.withKey += 1 }
                return s.count
            }
            return n % 2 == 0
                ? .bytes(
                    httpResponse(
                        429, "Too Many Requests", headers: [("Retry-After", "1")],
                        body: "{\"error\":\"rate_limited\",\"action\":\"retry_later\"}"), close: false)
                : .bytes(httpResponse(201, "Created", body: "{\"challenge\":\"c\"}"), close: false)
        }
        defer { server.stop() }
        let report = FloodRunner(options: try FloodOptions(endpoint: Self.endpoint(server), seconds: 0.3, connections: 2, keyIDs: .random))
            .run()
        #expect(report.sent == seen.value.count)
        #expect(report.sent > 10)
        #expect(seen.value.withKey == seen.value.count)
        #expect(report.issued + report.answers.counts["429 rate_limited", default: 0] == report.sent)
        #expect(server.connectionCount == 2)
        #expect(report.json.contains("\"issued\":\(report.issued)"))
    }

    @Test("--source: the client connects from the given local address")
    func source() throws {
        let server = try LoopbackServer { _ in .bytes(httpResponse(200), close: false) }
        defer { server.stop() }
        let c = HTTPClient(endpoint: Self.endpoint(server), timeout: 5, source: "127.0.0.9")
        defer { c.close() }
        #expect(try c.send(HTTPRequest(method: "GET", target: "/")).status == 200)
        #expect(server.peers == ["127.0.0.9"])
    }
}
