import GatewayTestSupport
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

    /// The definition the word-at-a-time comparison is held to: byte by byte, letters folded.
    static func foldedEqual(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        guard a.count == b.count else { return false }
        for (x, y) in zip(a, b) where x != y {
            guard (0x41...0x5A).contains(x) ? x + 0x20 == y : (0x41...0x5A).contains(y) && y + 0x20 == x else { return false }
        }
        return true
    }

    @Test("name comparisons (eight bytes at a time, then byte by byte) agree with the folded definition")
    func caseInsensitiveComparisonAgreesWithDefinition() {
        var rng = SeededRandom(seed: 0xF1E1D)
        // Letters, and the non-letters that differ from a letter or from each other by 0x20.
        let pool = Array("aAzZmM-_@`[{]}^~09 ".utf8)
        for _ in 0..<20_000 {
            let n = Int.random(in: 0...40, using: &rng)
            let a = (0..<n).map { _ in pool.randomElement(using: &rng)! }
            var b = a
            for _ in 0..<Int.random(in: 0...3, using: &rng) where n > 0 {
                let i = Int.random(in: 0..<n, using: &rng)
                b[i] = Int.random(in: 0..<2, using: &rng) == 0 ? b[i] ^ 0x20 : pool.randomElement(using: &rng)!
            }
            if Int.random(in: 0..<20, using: &rng) == 0 { b.append(0x61) }
            let expected = Self.foldedEqual(a, b)
            let sa = String(decoding: a, as: UTF8.self)
            let sb = String(decoding: b, as: UTF8.self)
            #expect(sa.equalsIgnoringASCIICase(sb) == expected, "\(sa) \(sb)")
            #expect(b.withUnsafeBytes { sa.equalsIgnoringASCIICase($0) } == expected, "\(sa) \(sb)")
            #expect(HTTPFields([("X", "1"), (sa, "v")]).contains(sb) == expected)
            #expect(b.withUnsafeBytes { HTTPFields([("X", "1"), (sa, "v")]).contains(name: $0) } == expected)
        }
    }

    @Test("contains(name:) answers as a scan of every field does")
    func containsNameMatchesScan() {
        let fields = HTTPFields([
            ("X-App-Attest-Next-Challenge", "c"), ("Cache-Control", "no-store"), ("x-b", "1"), ("Set-Cookie", "a=b"),
        ])
        for name in [
            "x-app-attest-next-challenge", "X-APP-ATTEST-NEXT-CHALLENGE", "X-App-Attest-Next-Challengf", "cache-control", "X-B",
            "x-c", "Set-Cookie", "Set-Cookies", "", "Date",
        ] {
            let scan = fields.fields.contains { $0.name.equalsIgnoringASCIICase(name) }
            #expect(Array(name.utf8).withUnsafeBytes { fields.contains(name: $0) } == scan, "\(name)")
        }
        #expect(!Array("a".utf8).withUnsafeBytes { HTTPFields().contains(name: $0) })
    }

    @Test("latin1String gives one scalar per byte at every length, small strings and stored ones alike")
    func latin1StringOneScalarPerByte() {
        var rng = SeededRandom(seed: 0x1A71)
        for n in 0..<48 {
            for round in 0..<40 {
                // Mostly ASCII, sometimes one or more bytes of 0x80-0xFF (obs-text), and NUL.
                let bytes: [UInt8] = (0..<n).map { _ in
                    round % 4 == 0 ? UInt8.random(in: 0...255, using: &rng) : UInt8.random(in: 0...0x7F, using: &rng)
                }
                let s = bytes.withUnsafeBufferPointer { latin1String($0.baseAddress ?? UnsafePointer(bitPattern: 1)!, n) }
                #expect(s.unicodeScalars.map { UInt8($0.value) } == bytes, "length \(n)")
                #expect(s.unicodeScalars.count == n)
            }
        }
    }

    @Test("field names become the literal of their exact spelling, any other spelling as received")
    func fieldNameStrings() {
        let names = [
            "Host", "host", "HOST", "Accept", "User-Agent", "user-agent", "Connection", "Content-Type", "Content-type",
            "Authorization", "Content-Length", "X-App-Assertion", "x-app-assertion", "Accept-Encoding", "Transfer-Encoding",
            "X-App-Attest-Key-Id", "X-App-Attest-Key-ID", "x-app-attest-key-id", "X-App-Attest-Challenge", "X-App-Attest-Challengf",
            "X-Forwarded-For", "Hosu", "Hos", "Hostt", "X", "X-App-Attest-Unsupported", "Caf\u{E9}",
        ]
        for name in names {
            let bytes = name.unicodeScalars.map { UInt8($0.value) }
            // Within a larger buffer, at an offset.
            let buf = Array("xx".utf8) + bytes + Array(": v".utf8)
            let s = buf.withUnsafeBytes { fieldNameString($0, 2..<(2 + bytes.count)) }
            #expect(s == name)
            #expect(s.unicodeScalars.map { UInt8($0.value) } == bytes)
        }
        #expect(Array("Host".utf8).withUnsafeBytes { fieldNameString($0, 0..<0) } == "")
    }
}
