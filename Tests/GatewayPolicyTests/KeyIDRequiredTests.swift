import GatewayPolicy
import GatewayStore
import GatewayWire
import Testing

@Suite("Policy: challenges on a store that binds every challenge to a key (Redis Cluster)")
struct KeyIDRequiredTests {
    @Test func unboundChallengeRequestsAreRefusedWith400() {
        #expect(GateError.keyIDRequired.code == "key_id_required")
        #expect(GateError.keyIDRequired.status == 400)
        #expect(GateError.keyIDRequired.action == ClientAction.none)
        for body in ["", "  \n", "{}", "{\"purpose\":\"register\"}", "{\"purpose\":\"assert\"}"] {
            guard case .failure(let e) = ChallengeEndpoint.request(body: Array(body.utf8), ttlMillis: 5, requireKeyID: true) else {
                Issue.record("\(body) accepted without keyId")
                continue
            }
            #expect(e.error == .keyIDRequired, "\(body)")
            // Without the requirement (one Redis server, memory store) the same bodies are accepted.
            #expect((try? ChallengeEndpoint.request(body: Array(body.utf8), ttlMillis: 5).get()) != nil, "\(body)")
        }
        let key = Base64.encode([UInt8](repeating: 2, count: 32))
        let bound = try? ChallengeEndpoint.request(
            body: Array("{\"purpose\":\"register\",\"keyId\":\"\(key)\"}".utf8), ttlMillis: 5, requireKeyID: true
        ).get()
        #expect(bound == ChallengeRequest(purpose: .register, keyID: KeyID([UInt8](repeating: 2, count: 32)), ttlMillis: 5))
        // A malformed key id is still `malformed`, not `key_id_required`.
        guard case .failure(let e) = ChallengeEndpoint.request(body: Array("{\"keyId\":\"AAAA\"}".utf8), ttlMillis: 5, requireKeyID: true)
        else {
            Issue.record("a 3-byte key id accepted")
            return
        }
        #expect(e.error == .malformed)
    }
}
