import AttestSim
import Foundation
import Testing

/// `attest-sim run --show-verdict`: the token the demo upstream echoed, decoded; none when absent.
@Suite("attest-sim: the upstream's signed verdict, decoded")
struct UpstreamVerdictTests {
    static func b64url(_ s: String) -> String {
        Data(s.utf8).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    @Test("from the demo upstream's answer: header and claims with sorted keys; nil without the field or for a non-token")
    func decode() throws {
        let token =
            Self.b64url("{\"typ\":\"JWT\",\"alg\":\"ES256\",\"kid\":\"k1\"}") + "."
            + Self.b64url("{\"verdict\":\"accepted\",\"aud\":\"purchase\"}") + ".c2ln"
        let answer = "{\"route\":\"purchase\",\"headers\":{\"Via\":\"1.1 attest-gateway\",\"X-App-Attest-Verdict\":\"\(token)\"}}"
        let v = try #require(UpstreamVerdict(demoAnswer: Array(answer.utf8)))
        #expect(v.header == "{\"alg\":\"ES256\",\"kid\":\"k1\",\"typ\":\"JWT\"}")
        #expect(v.claims == "{\"aud\":\"purchase\",\"verdict\":\"accepted\"}")
        #expect(UpstreamVerdict(demoAnswer: Array("{\"headers\":{\"Via\":\"1.1 attest-gateway\"}}".utf8)) == nil)
        #expect(UpstreamVerdict(demoAnswer: Array("ok".utf8)) == nil)
        #expect(UpstreamVerdict(token: "forged") == nil)
    }
}
