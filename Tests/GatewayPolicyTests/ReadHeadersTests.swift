import AppAttest
import GatewayConfig
import GatewayPolicy
import GatewayStore
import GatewayWire
import Testing

/// `AssertionGate.readHeaders`: step 1 of the gate decided from the head alone, which the router
/// uses to refuse a protected request before reading its body.
@Suite("Policy: the assertion headers read from the head (early refusal)")
struct ReadHeadersTests {
    static let keyID = Base64.encode((0..<32).map { UInt8($0) })
    static let challenge = ChallengeText.encode(ChallengeToken((0..<16).map { UInt8($0 + 100) })!)
    /// A CBOR assertion object that parses (its signature is not checked here).
    static let assertion = Base64.encode(
        CBOREncoder.encode(
            .map(
                CBORMap([
                    (.text("signature"), .bytes([0x30, 0x06, 0x02, 0x01, 0x01, 0x02, 0x01, 0x01])),
                    (.text("authenticatorData"), .bytes([UInt8](repeating: 7, count: 32) + [0x00, 0, 0, 0, 5])),
                ]))))

    static func read(
        keyID: String? = keyID, challenge: String? = challenge, assertion: String? = assertion,
        _ route: RoutePolicy = RoutePolicy(mode: .enforce)
    ) -> Result<AssertionHeaders, Explanation> {
        AssertionGate.readHeaders(keyID: keyID, challenge: challenge, assertion: assertion, route: route)
    }

    static func refusal(_ r: Result<AssertionHeaders, Explanation>) -> Explanation? {
        if case .failure(let e) = r { e } else { nil }
    }

    static func missing(_ r: Result<AssertionHeaders, Explanation>) -> String? {
        refusal(r)?.fields.first { $0.0 == "missing" }?.1
    }

    @Test("missing key id or assertion: assertion_missing (401, rechallenge), naming what is missing")
    func missingHeaders() {
        let none = Self.read(keyID: nil, challenge: nil, assertion: nil)
        #expect(Self.refusal(none)?.error == .assertionMissing)
        #expect(Self.refusal(none)?.step == "headers")
        #expect(Self.missing(none) == "X-App-Attest-Key-Id,X-App-Assertion")
        #expect(Self.refusal(none)?.error.routeStatus == 401)
        #expect(Self.refusal(none)?.error.action == .rechallenge)
        #expect(Self.missing(Self.read(assertion: nil)) == "X-App-Assertion")
        #expect(Self.missing(Self.read(keyID: nil)) == "X-App-Attest-Key-Id")
    }

    @Test("the challenge is required where the binding uses it: bind request always, bind body unless optional or off")
    func challengeByBinding() {
        let request = Self.read(challenge: nil)
        #expect(Self.refusal(request)?.error == .assertionMissing)
        #expect(Self.missing(request) == "X-App-Attest-Challenge")
        let bodyRequired = Self.read(challenge: nil, RoutePolicy(mode: .enforce, bind: .body, challenge: .required))
        #expect(Self.refusal(bodyRequired)?.error == .challengeMissing)
        // Optional and off: no challenge is fine; off ignores even a bad one.
        guard case .success(let optional) = Self.read(challenge: nil, RoutePolicy(mode: .enforce, bind: .body, challenge: .optional)),
            case .success(let off) = Self.read(challenge: "not a challenge", RoutePolicy(mode: .shadow, bind: .body, challenge: .off))
        else {
            Issue.record("bind: body without a required challenge must read")
            return
        }
        #expect(optional.token == nil && off.token == nil && off.challengeText.isEmpty)
        // Optional but presented: it must be well formed.
        let badOptional = Self.read(challenge: "!!", RoutePolicy(mode: .enforce, bind: .body, challenge: .optional))
        #expect(Self.refusal(badOptional)?.error == .challengeUnknown)
    }

    @Test("malformed values are decided from the head too: key id, challenge text, assertion bytes")
    func malformedValues() {
        let shortKey = Self.read(keyID: Base64.encode([1, 2, 3]))
        #expect(Self.refusal(shortKey)?.error == .malformed)
        #expect(Self.refusal(shortKey)?.fields.first { $0.0 == "key_id_bytes" }?.1 == "3")
        #expect(Self.refusal(Self.read(challenge: "short"))?.error == .challengeUnknown)
        #expect(Self.refusal(Self.read(assertion: "%%%"))?.error == .malformed)
        #expect(Self.refusal(Self.read(assertion: Base64.encode([0xa0])))?.error == .malformed)  // an empty CBOR map
        #expect(Self.refusal(Self.read(assertion: String(repeating: "A", count: 8200)))?.error == .malformed)
        // 400-class codes are answered 401 on protected routes.
        #expect(GateError.malformed.routeStatus == 401)
    }

    @Test("well-formed headers are read once: key id, challenge token and the parsed assertion go on to the gate")
    func wellFormed() throws {
        guard case .success(let h) = Self.read() else {
            Issue.record("valid headers must read")
            return
        }
        #expect(h.keyID.bytes == (0..<32).map { UInt8($0) })
        #expect(h.keyEncoding == .base64Standard)
        #expect(h.challengeText == Self.challenge)
        #expect(h.token == ChallengeText.decode(Self.challenge))
        guard case .appAttest(let object) = h.assertion else {
            Issue.record("an App Attest assertion must read as one")
            return
        }
        #expect(object.authenticatorData.signCount == 5)
    }
}
