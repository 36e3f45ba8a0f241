import AppAttest
import AppAttestSimulator
import Foundation
import GatewayCrypto
import GatewayTestSupport
import Testing

/// A refusal no longer costs the client its connection when the request's body is small or already
/// in hand (nginx's `discard_request_body`): the gateway refuses from the head as before, never sends
/// `100 Continue` for it, then reads and drops the body and serves the next request on the same
/// connection (`limits.discard_body`, 64 KiB by default). Larger bodies still close the connection.
@Suite("HTTP/1.1 refusals keep the connection when the body is small (real gatewayd)", .serialized, .timeLimit(.minutes(3)))
struct RefusalKeepAliveTests {
    let ca: TestCA
    let dir: URL

    init() throws {
        (ca, dir) = try makeTrustedTestCADirectory("gw-keepalive")
    }

    func config(discard: String = "64KiB") -> String {
        """
        \(TestGatewayYAML.base(caDir: dir, limits: "discard_body: \(discard), body_timeout: 2s"))
        attest: {challenge_rate: {per_client: off}}
        store: {kind: memory, shards: 8}
        routes:
          - name: purchase
            match: {methods: [POST], path_prefix: /api/purchase}
            upstream: demo
            max_body: 64KiB
            assertion: {mode: enforce}
          - {name: default, match: {path_prefix: /}, upstream: demo}
        """
    }

    /// Every response read from `c` until `count` arrived or the connection closed.
    static func responses(_ c: HTTPTestConnection, _ count: Int) -> [HTTPTestResponse] {
        var out: [HTTPTestResponse] = []
        while out.count < count, let r = try? c.readResponse() { out.append(r) }
        return out
    }

    @Test(
        "Pipelined: three refused POSTs with 2-byte bodies, a refused chunked one, then a GET — five answers, one connection, no Connection: close"
    )
    func pipelinedRefusals() throws {
        let gw = try GatewayProcess(config: config())
        defer { gw.stop() }
        let c = try HTTPTestConnection(port: HTTPCall.port(gw, "public"))
        defer { c.close() }
        let post = "POST /api/purchase HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nhi"
        let chunked = "POST /api/purchase HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n5\r\nthere\r\n0\r\n\r\n"
        c.send(post + post + post + chunked + "GET /after HTTP/1.1\r\nHost: a\r\n\r\n")
        let got = Self.responses(c, 5)
        #expect(got.map(\.status) == [401, 401, 401, 401, 200])
        #expect(got.allSatisfy { $0.header("Connection") == nil }, "\(got.map { $0.header("Connection") ?? "-" })")
        #expect(got.prefix(4).allSatisfy { $0.json?["error"] as? String == "assertion_missing" })
        // Still open: one more request on it is answered.
        c.send("GET /again HTTP/1.1\r\nHost: a\r\n\r\n")
        #expect(try c.readResponse().status == 200)
    }

    @Test("Keep-alive, one at a time: the body sent after the refusal arrived is dropped, the next request served")
    func bodyAfterTheAnswer() throws {
        let gw = try GatewayProcess(config: config())
        defer { gw.stop() }
        let c = try HTTPTestConnection(port: HTTPCall.port(gw, "public"))
        defer { c.close() }
        c.send("POST /api/purchase HTTP/1.1\r\nHost: a\r\nContent-Length: 40000\r\n\r\n")
        let refused = try c.readResponse()
        #expect(refused.status == 401)
        #expect(refused.header("Connection") == nil)
        c.send(String(repeating: "x", count: 40000))
        c.send("GET /next HTTP/1.1\r\nHost: a\r\n\r\n")
        let next = try c.readResponse()
        #expect(next.status == 200)
        #expect(next.text.contains("/next"), "\(next.text.prefix(200))")
    }

    @Test("Larger than discard_body, a client waiting for 100 Continue, a chunked body past the limit, a body that stops: closed as before")
    func stillCloses() throws {
        let gw = try GatewayProcess(config: config(discard: "1KiB"))
        defer { gw.stop() }
        let port = HTTPCall.port(gw, "public")
        // Declared above the limit, not sent: Connection: close, then closed.
        let big = try HTTPTestConnection(port: port)
        defer { big.close() }
        big.send("POST /api/purchase HTTP/1.1\r\nHost: a\r\nContent-Length: 2000\r\n\r\n")
        let r1 = try big.readResponse()
        #expect(r1.status == 401 && r1.header("Connection") == "close")
        #expect(big.isClosedByPeer())
        // Expect: 100-continue, nothing sent: the client will not send its body without a 100.
        let expect = try HTTPTestConnection(port: port)
        defer { expect.close() }
        expect.send("POST /api/purchase HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\nExpect: 100-continue\r\n\r\n")
        let r2 = try expect.readResponse()
        #expect(r2.status == 401 && r2.header("Connection") == "close")
        #expect(expect.isClosedByPeer())
        // Chunked, more than 1 KiB once it comes: the answer said keep-alive, but the body is not
        // worth reading to the end: the connection closes.
        let chunked = try HTTPTestConnection(port: port)
        defer { chunked.close() }
        chunked.send("POST /api/purchase HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n")
        #expect(try chunked.readResponse().status == 401)
        chunked.send("800\r\n" + String(repeating: "y", count: 2048) + "\r\n")
        #expect(chunked.isClosedByPeer())
        // A declared small body that never comes: closed after body_timeout (2 s), not kept forever.
        let stalled = try HTTPTestConnection(port: port)
        defer { stalled.close() }
        stalled.send("POST /api/purchase HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\nabc")
        #expect(try stalled.readResponse().status == 401)
        let start = Date()
        #expect(stalled.isClosedByPeer())
        #expect(Date().timeIntervalSince(start) < 5)
    }

    @Test(
        "A refusal after verification (bad_signature, body read): the connection is kept, the device's next valid request goes through on it"
    )
    func refusedAfterVerification() throws {
        let gw = try GatewayProcess(config: config())
        defer { gw.stop() }
        let port = HTTPCall.port(gw, "public")
        let device = try ContractDevice(ca: ca, appID: AttestGatewayTests.appID, port: port)
        #expect(try device.register().status == 201)
        let body = Array("{\"sku\":1}".utf8)
        let good = device.sign(target: "/api/purchase", body: body, challenge: try device.challenge())
        // The same signature over another body: bad_signature, decided after the body was read.
        let forged = ContractDevice.Signed(
            method: "POST", target: "/api/purchase", body: Array("{\"sku\":2}".utf8),
            headers: good.headers, authority: good.authority)
        let c = try HTTPTestConnection(port: port)
        defer { c.close() }
        func request(_ s: ContractDevice.Signed) -> String {
            "POST \(s.target) HTTP/1.1\r\nHost: \(s.authority)\r\nContent-Length: \(s.body.count)\r\n"
                + s.headers.map { "\($0.0): \($0.1)\r\n" }.joined() + "\r\n" + String(decoding: s.body, as: UTF8.self)
        }
        c.send(request(forged))
        let refused = try c.readResponse()
        #expect(refused.status == 401)
        #expect(refused.json?["error"] as? String == "bad_signature")
        #expect(refused.header("Connection") == nil)
        c.send(request(good))
        let accepted = try c.readResponse()
        #expect(accepted.status == 200, "\(accepted.text.prefix(300))")
    }
}
