import Testing

@testable import GatewayHTTP

@Suite("HTTP character classes")
struct HTTPCharTests {
    @Test("the tchar table gives RFC 9110 §5.6.2's answer for every byte")
    func tcharTableMatchesRule() {
        #expect(HTTPChar.tcharTable.utf8CodeUnitCount == 256)
        for c in 0...255 {
            #expect(HTTPChar.isTchar(UInt8(c)) == HTTPChar.isTcharByRule(UInt8(c)), "byte \(c)")
            let plain = (0x30...0x39).contains(c) || (0x41...0x5a).contains(c) || (0x61...0x7a).contains(c) || c == 0x2d
            #expect(
                (HTTPChar.tcharClass(UInt8(c)) == UInt8(ascii: "2")) == (HTTPChar.isTcharByRule(UInt8(c)) && !plain),
                "byte \(c): class 2 is a tchar other than letters, digits and -")
        }
    }
}

@Suite("Word-at-a-time byte tests")
struct SWARTests {
    static func word(_ b: [UInt8]) -> UInt64 { b.withUnsafeBytes { $0.loadUnaligned(as: UInt64.self) } }

    @Test("hasByteBelow and hasByte agree with a byte loop, for every byte in every position and random words")
    func agreeWithLoop() {
        var seed: UInt64 = 7
        var words: [[UInt8]] = []
        for v in 0...255 {
            for pos in 0..<8 {
                var b = [UInt8](repeating: 0x41, count: 8)
                b[pos] = UInt8(v)
                words.append(b)
                var h = [UInt8](repeating: 0xff, count: 8)
                h[pos] = UInt8(v)
                words.append(h)
            }
        }
        for _ in 0..<20000 {
            seed = seed &* 6364136223846793005 &+ 1442695040888963407
            words.append(withUnsafeBytes(of: seed) { Array($0) })
        }
        for b in words {
            let w = Self.word(b)
            for n: UInt8 in [0x0e, 0x20] {
                #expect(SWAR.hasByteBelow(w, n) == b.contains { $0 < n }, "\(b) < \(n)")
                // The head scan jumps to the first such byte: its index must be exact.
                if let first = b.firstIndex(where: { $0 < n }) {
                    #expect(SWAR.firstFlaggedByte(SWAR.bytesBelow(w, n)) == first, "\(b): first byte < \(n)")
                }
            }
            for x: UInt8 in [0x7f, 0x0d, 0x0a] { #expect(SWAR.hasByte(w, x) == b.contains(x), "\(b) has \(x)") }
        }
    }
}
