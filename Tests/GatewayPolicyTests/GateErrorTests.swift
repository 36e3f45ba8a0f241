import AppAttest
import GatewayPolicy
import Testing

/// The App Attest refusals (`GateError`): the verifier's codes wrapped, not copied; one table.
@Suite("App Attest errors: the verifier's codes wrapped")
struct GateErrorTests {
    @Test("every verifier code is its own refusal, with its own spelling: no fallback")
    func wrapped() {
        for code in AppAttestError.Code.allCases {
            let e = GateError(AppAttestError(code, "detail"))
            #expect(e == .verification(code))
            #expect(e.code == code.rawValue)
            #expect(GateError.allCases.contains(e))
        }
        #expect(GateError.malformed == .verification(.malformed) && GateError.malformed.code == "malformed")
    }

    @Test("codes are unique and read back (rawValue), statuses and actions from the table")
    func table() {
        let codes = GateError.allCases.map(\.code)
        #expect(Set(codes).count == codes.count)
        for e in GateError.allCases { #expect(GateError(rawValue: e.code) == e) }
        #expect(GateError(rawValue: "no_such_code") == nil)
        #expect(GateError.verification(.malformed).status == 400 && GateError.verification(.malformed).routeStatus == 401)
        #expect(GateError.verification(.badSignature).status == 401 && GateError.verification(.badSignature).action == ClientAction.none)
        #expect(GateError.verification(.certificateExpired).action == .reattest)
        #expect(GateError.verification(.invalidPublicKey).action == .reattest)
        #expect(GateError.rateLimited.status == 429 && GateError.rateLimited.action == .retryLater)
    }
}
