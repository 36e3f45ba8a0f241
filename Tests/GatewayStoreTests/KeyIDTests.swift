import GatewayStore
import Testing

@Suite("Store value types")
struct StoreValueTests {
    @Test func keyIDIsExactly32Bytes() {
        #expect(KeyID([UInt8](repeating: 1, count: 32)) != nil)
        #expect(KeyID([UInt8](repeating: 1, count: 31)) == nil)
        #expect(KeyID([UInt8](repeating: 1, count: 33)) == nil)
    }

    @Test func challengeTokenIsAtLeast16Bytes() {
        #expect(ChallengeToken([UInt8](repeating: 0, count: 15)) == nil)
        #expect(ChallengeToken([UInt8](repeating: 0, count: 16)) != nil)
    }

    @Test func keyIDPrintsStandardBase64() {
        #expect(KeyID([UInt8](repeating: 0xFF, count: 32))?.description == "//////////////////////////////////////////8=")
    }
}
