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

    @Test("isASCII (eight bytes at a time) agrees with the byte-by-byte definition at every length and position")
    func isASCIIAgreesWithDefinition() {
        for n in 0..<40 {
            let ascii = [UInt8]((0..<n).map { UInt8(0x20 + $0 % 90) })
            ascii.withUnsafeBufferPointer { #expect(isASCII($0.baseAddress ?? UnsafePointer(bitPattern: 1)!, n)) }
            for i in 0..<n {
                for high: UInt8 in [0x80, 0xC3, 0xFF] {
                    var b = ascii
                    b[i] = high
                    b.withUnsafeBufferPointer { #expect(!isASCII($0.baseAddress!, n), "length \(n), byte \(i) = \(high)") }
                }
            }
        }
        // Unaligned starts: a slice's base one to seven bytes into an array.
        let bytes = [UInt8](repeating: 0x41, count: 32) + [0x80] + [UInt8](repeating: 0x41, count: 7)
        bytes.withUnsafeBufferPointer { p in
            for start in 0..<8 {
                #expect(isASCII(p.baseAddress! + start, 32 - start))
                #expect(!isASCII(p.baseAddress! + start, 33 - start))
            }
        }
    }
}
