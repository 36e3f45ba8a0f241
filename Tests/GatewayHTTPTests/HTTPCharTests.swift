@testable import GatewayHTTP
import Testing

@Suite("HTTP character classes")
struct HTTPCharTests {
    @Test("the tchar bit masks give RFC 9110 §5.6.2's answer for every byte")
    func tcharMasksMatchRule() {
        for c in 0...255 {
            #expect(HTTPChar.isTchar(UInt8(c)) == HTTPChar.isTcharByRule(UInt8(c)), "byte \(c)")
        }
    }
}
