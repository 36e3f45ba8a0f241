import Testing

@testable import GatewayHTTP

@Suite("HTTPFields lookups")
struct HTTPFieldsTests {
    @Test("firstValues answers as five subscripts do: first field of each name, any case, nil when absent")
    func firstValuesMatchesSubscripts() {
        let fields = HTTPFields([
            ("host", "api.example"), ("X-App-Attest-Key-Id", "k1"), ("x-app-assertion", "a1"), ("X-APP-ATTEST-KEY-ID", "k2"),
            ("Content-Length", "3"), ("X-App-Assertion", "a2"), ("X-Other", "o"),
        ])
        let names = ["X-App-Attest-Key-Id", "X-App-Attest-Unsupported", "X-App-Attest-Challenge", "X-App-Assertion", "Host"]
        let found = fields.firstValues(names[0], names[1], names[2], names[3], names[4])
        #expect(found.0 == "k1" && found.1 == nil && found.2 == nil && found.3 == "a1" && found.4 == "api.example")
        #expect([found.0, found.1, found.2, found.3, found.4] == names.map { fields[$0] })
        // A field matching two of the names (the same name given twice) fills the first only.
        let twice = fields.firstValues("Host", "Host", "X-Other", "x-other", "Content-Length")
        #expect(twice.0 == "api.example" && twice.1 == nil && twice.2 == "o" && twice.3 == nil && twice.4 == "3")
        let none = HTTPFields().firstValues("a", "b", "c", "d", "e")
        #expect(none.0 == nil && none.1 == nil && none.2 == nil && none.3 == nil && none.4 == nil)
    }
}
