import GatewayWire
import Testing

private func h(_ hex: String) -> [UInt8] {
    guard let b = Hex.decode(hex) else { fatalError("bad hex in test: \(hex)") }
    return b
}

private func decode(_ bytes: [UInt8], limits: CBORDecoder.Limits = .default) throws(CBORError) -> CBORValue {
    try CBORDecoder(limits: limits).decode(bytes)
}

private func cborMap(_ entries: [(CBORValue, CBORValue)]) -> CBORValue {
    .map(CBORMap(entries.map { (key: $0.0, value: $0.1) }))
}

/// A hex string with a test-friendly description.
struct CBORCase: Sendable, CustomTestStringConvertible {
    let hex: String
    let value: CBORValue
    var testDescription: String { "0x\(hex) = \(value.debugSummary)" }
    init(_ hex: String, _ value: CBORValue) {
        self.hex = hex
        self.value = value
    }
}

struct CBORFloatCase: Sendable, CustomTestStringConvertible {
    let hex: String
    let value: Double
    var testDescription: String { "0x\(hex) = \(value)" }
    init(_ hex: String, _ value: Double) {
        self.hex = hex
        self.value = value
    }
}

@Suite("CBOR (RFC 8949)")
struct CBORTests {
    // MARK: Appendix A, in scope

    /// Appendix A examples whose preferred serialisation the encoder reproduces byte for byte.
    static let appendixA: [CBORCase] = [
        // integers
        CBORCase("00", .unsigned(0)), CBORCase("01", .unsigned(1)), CBORCase("0a", .unsigned(10)),
        CBORCase("17", .unsigned(23)), CBORCase("1818", .unsigned(24)), CBORCase("1819", .unsigned(25)),
        CBORCase("1864", .unsigned(100)), CBORCase("1903e8", .unsigned(1000)),
        CBORCase("1a000f4240", .unsigned(1_000_000)), CBORCase("1b000000e8d4a51000", .unsigned(1_000_000_000_000)),
        CBORCase("1bffffffffffffffff", .unsigned(UInt64.max)),
        CBORCase("3bffffffffffffffff", .negative(UInt64.max)),  // -2^64
        CBORCase("20", .negative(0)), CBORCase("29", .negative(9)), CBORCase("3863", .negative(99)),
        CBORCase("3903e7", .negative(999)),
        // simple values
        CBORCase("f4", .bool(false)), CBORCase("f5", .bool(true)), CBORCase("f6", .null), CBORCase("f7", .undefined),
        CBORCase("f0", .simple(16)), CBORCase("f8ff", .simple(255)),
        // byte strings
        CBORCase("40", .bytes([])), CBORCase("4401020304", .bytes([1, 2, 3, 4])),
        // text strings
        CBORCase("60", .text("")), CBORCase("6161", .text("a")), CBORCase("6449455446", .text("IETF")),
        CBORCase("62225c", .text("\"\\")), CBORCase("62c3bc", .text("\u{00fc}")), CBORCase("63e6b0b4", .text("\u{6c34}")),
        CBORCase("64f0908591", .text("\u{10151}")),
        // arrays
        CBORCase("80", .array([])), CBORCase("83010203", .array([.unsigned(1), .unsigned(2), .unsigned(3)])),
        CBORCase(
            "8301820203820405",
            .array([.unsigned(1), .array([.unsigned(2), .unsigned(3)]), .array([.unsigned(4), .unsigned(5)])])),
        CBORCase(
            "98190102030405060708090a0b0c0d0e0f101112131415161718181819",
            .array((1...25).map { .unsigned(UInt64($0)) })),
        // maps
        CBORCase("a0", cborMap([])),
        CBORCase("a201020304", cborMap([(.unsigned(1), .unsigned(2)), (.unsigned(3), .unsigned(4))])),
        CBORCase(
            "a26161016162820203",
            cborMap([(.text("a"), .unsigned(1)), (.text("b"), .array([.unsigned(2), .unsigned(3)]))])),
        CBORCase("826161a161626163", .array([.text("a"), cborMap([(.text("b"), .text("c"))])])),
        CBORCase(
            "a56161614161626142616361436164614461656145",
            cborMap(["a", "b", "c", "d", "e"].map { (.text($0), .text($0.uppercased())) })),
    ]

    @Test("Appendix A example decodes to the expected value", arguments: appendixA)
    func appendixADecodes(_ c: CBORCase) throws {
        #expect(try decode(h(c.hex)) == c.value)
    }

    @Test("Appendix A example re-encodes to the same bytes (deterministic encoder)", arguments: appendixA)
    func appendixAEncodes(_ c: CBORCase) throws {
        #expect(Hex.encode(CBOREncoder.encode(c.value)) == c.hex)
        #expect(Hex.encode(CBOREncoder.encode(try decode(h(c.hex)))) == c.hex)
    }

    @Test("integer accessors: 2^64-1 and -2^64 do not fit Int64, the small ones do")
    func integerAccessors() throws {
        #expect(try decode(h("1bffffffffffffffff")).int == nil)
        #expect(try decode(h("3bffffffffffffffff")).int == nil)
        #expect(try decode(h("3bffffffffffffffff")).debugSummary == "-18446744073709551616")
        #expect(try decode(h("3903e7")).int == -1000)
        #expect(try decode(h("1b7fffffffffffffff")).int == Int64.max)
        #expect(try decode(h("3b7fffffffffffffff")).int == Int64.min)
    }

    static let appendixAFloats: [CBORFloatCase] = [
        // half precision
        CBORFloatCase("f90000", 0.0), CBORFloatCase("f98000", -0.0), CBORFloatCase("f93c00", 1.0),
        CBORFloatCase("f93e00", 1.5), CBORFloatCase("f97bff", 65504.0), CBORFloatCase("f90001", 5.960464477539063e-8),
        CBORFloatCase("f90400", 0.00006103515625), CBORFloatCase("f9c400", -4.0),
        CBORFloatCase("f97c00", .infinity), CBORFloatCase("f9fc00", -.infinity),
        // single precision
        CBORFloatCase("fa47c35000", 100000.0), CBORFloatCase("fa7f7fffff", 3.4028234663852886e+38),
        CBORFloatCase("fa7f800000", .infinity), CBORFloatCase("faff800000", -.infinity),
        // double precision
        CBORFloatCase("fb3ff199999999999a", 1.1), CBORFloatCase("fb7e37e43c8800759c", 1.0e+300),
        CBORFloatCase("fbc010666666666666", -4.1), CBORFloatCase("fb7ff0000000000000", .infinity),
        CBORFloatCase("fbfff0000000000000", -.infinity),
    ]

    @Test("Appendix A float decodes to the exact value and sign, and survives a re-encode", arguments: appendixAFloats)
    func appendixAFloatsDecode(_ c: CBORFloatCase) throws {
        let v = try decode(h(c.hex))
        guard case .float(let d) = v else {
            Issue.record("0x\(c.hex) decoded to \(v.kindName)")
            return
        }
        #expect(d.bitPattern == c.value.bitPattern, "\(d) vs \(c.value)")
        // The encoder always writes doubles: 0xfb ‖ 8 bytes, which decode to the same bits.
        let reencoded = CBOREncoder.encode(v)
        #expect(reencoded.count == 9 && reencoded.first == 0xfb)
        guard case .float(let again) = try decode(reencoded) else {
            Issue.record("re-encoded float is not a float")
            return
        }
        #expect(again.bitPattern == c.value.bitPattern)
    }

    @Test("Appendix A NaNs (half, single, double) decode to NaN", arguments: ["f97e00", "fa7fc00000", "fb7ff8000000000000"])
    func appendixANaN(_ hex: String) throws {
        guard case .float(let d) = try decode(h(hex)) else {
            Issue.record("0x\(hex) is not a float")
            return
        }
        #expect(d.isNaN)
    }

    @Test("every one-byte simple value 0...19 and every two-byte simple value 32...255 decodes and re-encodes")
    func allSimpleValues() throws {
        for v in UInt8(0)...19 {
            let bytes = [0xe0 | v]
            #expect(try decode(bytes) == .simple(v))
            #expect(CBOREncoder.encode(.simple(v)) == bytes)
        }
        for v in UInt8(32)...255 {
            let bytes: [UInt8] = [0xf8, v]
            #expect(try decode(bytes) == .simple(v))
            #expect(CBOREncoder.encode(.simple(v)) == bytes)
        }
    }

    @Test("the encoder uses the shortest argument at every boundary")
    func encoderPreferredSerialisation() throws {
        let cases: [(UInt64, String)] = [
            (23, "17"), (24, "1818"), (255, "18ff"), (256, "190100"), (65535, "19ffff"), (65536, "1a00010000"),
            (0xffff_ffff, "1affffffff"), (0x1_0000_0000, "1b0000000100000000"),
        ]
        for (n, hex) in cases {
            #expect(Hex.encode(CBOREncoder.encode(.unsigned(n))) == hex)
            #expect(try decode(h(hex)) == .unsigned(n))
        }
        // Non-preferred (longer) arguments are still accepted by the decoder.
        #expect(try decode(h("1800")) == .unsigned(0))
        #expect(try decode(h("1b0000000000000001")) == .unsigned(1))
    }

    @Test("a nested structure of every kind round-trips through encoder and decoder")
    func nestedRoundTrip() throws {
        let value = cborMap([
            (.text("fmt"), .text("apple-appattest")),
            (.unsigned(1), .array([.bytes(Array(0..<200)), .negative(6), .bool(true), .null, .undefined, .simple(99)])),
            (.negative(2), cborMap([(.bytes([1]), .array([])), (.text("ü"), .float(1.5))])),
            (.bytes([0xff]), .text(String(repeating: "x", count: 300))),
        ])
        let bytes = CBOREncoder.encode(value)
        #expect(try decode(bytes) == value)
        #expect(CBOREncoder.encode(try decode(bytes)) == bytes)
    }

    @Test("decodePrefix returns the offset just past the item and leaves the rest")
    func decodePrefixReturnsEnd() throws {
        let bytes = h("ff") + h("83010203") + h("6161")
        let (v, end) = try CBORDecoder().decodePrefix(bytes, from: 1)
        #expect(v == .array([.unsigned(1), .unsigned(2), .unsigned(3)]))
        #expect(end == 5)
        let (t, end2) = try CBORDecoder().decodePrefix(bytes, from: end)
        #expect(t == .text("a"))
        #expect(end2 == bytes.count)
        #expect(throws: CBORError.self) { try CBORDecoder().decodePrefix(bytes, from: bytes.count) }
        #expect(throws: CBORError.self) { try CBORDecoder().decodePrefix(bytes, from: bytes.count + 1) }
        #expect(throws: CBORError.self) { try CBORDecoder().decodePrefix(bytes, from: -1) }
    }

    // MARK: Refused

    static let refused: [(hex: String, why: String)] = [
        // indefinite lengths
        ("5f42010243030405ff", "indefinite byte string"), ("7f657374726561646d696e67ff", "indefinite text string"),
        ("9fff", "indefinite empty array"), ("9f018202039f0405ffff", "indefinite nested arrays"),
        ("bf61610161629f0203ffff", "indefinite map"), ("5f", "bare 0x5f"), ("7f", "bare 0x7f"), ("9f", "bare 0x9f"),
        ("bf", "bare 0xbf"), ("1f", "unsigned with additional information 31"), ("3f", "negative with additional information 31"),
        ("8201bf", "indefinite map inside an array"),
        // tags (Appendix A tagged examples and bare tag heads)
        ("c074323031332d30332d32315432303a30343a30305a", "tag 0 date/time"), ("c11a514b67b0", "tag 1 epoch"),
        ("c249010000000000000000", "tag 2 bignum 2^64"), ("c349010000000000000000", "tag 3 bignum -2^64-1"),
        ("d74401020304", "tag 23"), ("d818456449455446", "tag 24"), ("d82076687474703a2f2f7777772e6578616d706c652e636f6d", "tag 32"),
        ("c0", "bare tag 0"), ("d9d9f700", "self-described CBOR tag 55799"), ("8201c000", "tag inside an array"),
        // reserved additional information 28...30 in every major type
        ("1c", "uint ai 28"), ("1d", "uint ai 29"), ("1e", "uint ai 30"), ("3c", "nint ai 28"), ("5d", "bytes ai 29"),
        ("7e", "text ai 30"), ("9c", "array ai 28"), ("bd", "map ai 29"), ("dc", "tag ai 28"), ("fc", "simple ai 28"),
        ("fd", "simple ai 29"), ("fe", "simple ai 30"),
        // break code out of place
        ("ff", "break code alone"), ("81ff", "break code as an array element"), ("a1ff01", "break code as a map key"),
        // simple values below 32 in two bytes
        ("f800", "f8 00"), ("f813", "f8 13"), ("f814", "f8 14 (false in two bytes)"), ("f817", "f8 17"),
        ("f818", "f8 18"), ("f81f", "f8 1f"),
        // duplicate map keys
        ("a2616101616102", "duplicate text key \"a\""), ("a201020103", "duplicate integer key 1"),
        ("a220012002", "duplicate negative key -1"), ("a2420102f5420102f4", "duplicate byte string key"),
        ("a20100180100", "duplicate integer key 1 in a longer encoding"), ("a3010203040105", "duplicate key after another"),
        ("a1616181a2f4f4f4f5", "duplicate key in a nested map"),
        // invalid UTF-8
        ("62c328", "invalid continuation"), ("61ff", "0xff"), ("61c3", "truncated two-byte sequence"),
        ("63eda080", "UTF-16 surrogate encoded in UTF-8"), ("62c080", "overlong NUL"), ("63e08080", "overlong three-byte"),
        ("64f4908080", "code point above U+10FFFF"), ("6180", "lone continuation byte"),
        // trailing bytes
        ("0000", "two items"), ("80ff", "break after an item"), ("a000", "byte after an empty map"), ("f600", "byte after null"),
        // truncated items
        ("18", "missing one-byte argument"), ("19ff", "half a two-byte argument"), ("1a000000", "three of four argument bytes"),
        ("1b00000000000000", "seven of eight argument bytes"), ("f9", "half float without bytes"), ("fa0000", "short single"),
        ("fb00", "short double"), ("f8", "two-byte simple without its byte"), ("4201", "byte string shorter than declared"),
        ("62c3", "text string shorter than declared"), ("82", "array without elements"), ("8201", "array missing an element"),
        ("a1", "map without entries"), ("a101", "map key without value"),
    ]

    @Test("refused with CBORError", arguments: refused)
    func refusedInput(_ c: (hex: String, why: String)) {
        #expect(throws: CBORError.self, "\(c.why)") { try decode(h(c.hex)) }
    }

    @Test("a tag inside a valid structure is refused at the tag's offset")
    func tagOffset() {
        let e = #expect(throws: CBORError.self) { try decode(h("a26161016162c11a514b67b0")) }
        #expect(e?.offset == 6)
    }

    @Test("a duplicate map key is reported at the second key's offset")
    func duplicateKeyOffset() {
        let text = #expect(throws: CBORError.self) { try decode(h("a2616101616102")) }
        #expect(text?.offset == 4)
        let int = #expect(throws: CBORError.self) { try decode(h("a201020103")) }
        #expect(int?.offset == 3)
    }

    @Test("trailing bytes are reported at the end of the item")
    func trailingBytesOffset() {
        let e = #expect(throws: CBORError.self) { try decode(h("83010203") + [0x00, 0x00]) }
        #expect(e?.offset == 4)
    }

    @Test("invalid UTF-8 and a two-byte simple value are reported at their item's start")
    func itemStartOffsets() {
        let utf8 = #expect(throws: CBORError.self) { try decode(h("8201") + h("62c328")) }
        #expect(utf8?.offset == 2)
        let simple = #expect(throws: CBORError.self) { try decode(h("830102f810")) }
        #expect(simple?.offset == 3)
    }

    @Test("a valid nested item truncated at every offset is refused, never crashes")
    func truncationAtEveryOffset() throws {
        let value = cborMap([
            (.text("fmt"), .text("apple-appattest")),
            (
                .text("attStmt"),
                cborMap([
                    (.text("x5c"), .array([.bytes(Array(repeating: 0xaa, count: 300)), .bytes([1, 2, 3])])),
                    (.text("receipt"), .bytes(Array(repeating: 0x55, count: 70_000))),
                ])
            ),
            (.text("n"), .array([.negative(UInt64.max), .unsigned(65536), .float(1.5), .simple(200), .null])),
            (.unsigned(1), .text("é\u{6c34}\u{10151}")),
        ])
        let bytes = CBOREncoder.encode(value)
        #expect(try decode(bytes) == value)
        for cut in 0..<bytes.count {
            // Skip most offsets inside the 70,000-byte string: they all fail the same way.
            if cut > 400 && cut < bytes.count - 200 && cut % 997 != 0 { continue }
            let prefix = Array(bytes[0..<cut])
            let e = #expect(throws: CBORError.self, "cut at \(cut)") { try decode(prefix) }
            if let e { #expect(e.offset <= cut, "cut at \(cut): \(e)") }
        }
    }

    @Test("every truncation of a small deep item is refused with an offset inside the prefix")
    func truncationOfSmallItemEveryOffset() throws {
        let bytes = h("a3") + h("6161") + h("8301820203820405") + h("20") + h("a1f5f93e00") + h("4401020304") + h("1bffffffffffffffff")
        _ = try decode(bytes)
        for cut in 0..<bytes.count {
            let e = #expect(throws: CBORError.self, "cut at \(cut)") { try decode(Array(bytes[0..<cut])) }
            if let e { #expect(e.offset <= cut) }
        }
    }

    // MARK: Resource bounds

    @Test(
        "a declared length far beyond the input is refused before allocating",
        arguments: [
            "5bffffffffffffffff", "7bffffffffffffffff", "9bffffffffffffffff", "bbffffffffffffffff",
            "5b7fffffffffffffff", "9b7fffffffffffffff", "bb7fffffffffffffff", "5affffffff", "9affffffff",
            "baffffffff", "5a7fffffff00", "9a0010000001", "b9ffff0000", "5901000000",
        ])
    func hugeDeclaredLength(_ hex: String) {
        let start = ContinuousClock.now
        let e = #expect(throws: CBORError.self) { try decode(h(hex)) }
        #expect(e?.offset == 0)
        #expect(ContinuousClock.now - start < .seconds(1))
    }

    @Test("a map declaring more entries than half the remaining bytes is refused up front")
    func mapCountBeyondHalfRemaining() {
        // Three entries need at least six bytes; five remain.
        let e = #expect(throws: CBORError.self) { try decode(h("a30102030405")) }
        #expect(e?.offset == 0)
    }

    @Test("an array count within the remaining bytes whose last element is cut short fails at the cut")
    func arrayCountPlausibleButShort() {
        // 65,536 elements declared and 65,536 bytes follow, but the last element is a truncated 0x18.
        var bytes = h("9a00010000")
        bytes += Array(repeating: 0x00, count: 65535) + [0x18]
        let e = #expect(throws: CBORError.self) { try decode(bytes, limits: .init(maxItems: 1_000_000)) }
        #expect(e?.offset == bytes.count)
    }

    @Test("10,000 nested arrays are refused by the depth limit without exhausting the stack")
    func deepNestingRefused() {
        let bytes = [UInt8](repeating: 0x81, count: 10_000) + [0x00]
        let e = #expect(throws: CBORError.self) { try decode(bytes) }
        #expect(e?.offset == CBORDecoder.Limits.default.maxDepth)
        let maps: [UInt8] = Array(repeating: h("a100"), count: 10_000).flatMap { $0 } + [0x00]
        #expect(throws: CBORError.self) { try decode(maps) }
    }

    @Test("nesting exactly maxDepth containers deep is accepted; one more is refused")
    func depthLimitBoundary() throws {
        let maxDepth = CBORDecoder.Limits.default.maxDepth
        let ok = [UInt8](repeating: 0x81, count: maxDepth) + [0x00]
        _ = try decode(ok)
        let tooDeep = [UInt8](repeating: 0x81, count: maxDepth + 1) + [0x00]
        #expect(throws: CBORError.self) { try decode(tooDeep) }
        // Custom limit.
        let three = CBORDecoder.Limits(maxDepth: 3)
        _ = try decode(h("81a10080"), limits: three)
        #expect(throws: CBORError.self) { try decode(h("8181a10080"), limits: three) }
    }

    @Test("more items than Limits.maxItems are refused; exactly maxItems are accepted")
    func itemLimit() throws {
        let limits = CBORDecoder.Limits(maxItems: 10)
        // An array of 9 integers is 10 items.
        _ = try decode(h("89") + Array(repeating: 0x00, count: 9), limits: limits)
        let e = #expect(throws: CBORError.self) { try decode(h("8a") + Array(repeating: 0x00, count: 10), limits: limits) }
        #expect(e?.offset == 10)
        // Map keys count too: {0:0, 1:1, 2:2, 3:3, 4:4} is 11 items.
        #expect(throws: CBORError.self) { try decode(h("a5") + h("00000101020203030404"), limits: limits) }
        // The default limit.
        let defaultMax = CBORDecoder.Limits.default.maxItems
        _ = try decode(CBOREncoder.encode(.array(Array(repeating: .null, count: defaultMax - 1))))
        #expect(throws: CBORError.self) {
            try decode(CBOREncoder.encode(.array(Array(repeating: .null, count: defaultMax))))
        }
    }

    @Test("strings longer than Limits.maxStringLength are refused; exactly the limit is accepted")
    func stringLengthLimit() throws {
        let limits = CBORDecoder.Limits(maxStringLength: 4)
        #expect(try decode(h("4401020304"), limits: limits) == .bytes([1, 2, 3, 4]))
        #expect(try decode(h("6461626364"), limits: limits) == .text("abcd"))
        #expect(throws: CBORError.self) { try decode(h("450102030405"), limits: limits) }
        #expect(throws: CBORError.self) { try decode(h("656162636465"), limits: limits) }
        let nested = #expect(throws: CBORError.self) { try decode(h("8201450102030405"), limits: limits) }
        #expect(nested?.offset == 2)
        // The default limit (1 MiB).
        let max = CBORDecoder.Limits.default.maxStringLength
        _ = try decode(CBOREncoder.encode(.bytes(Array(repeating: 7, count: max))))
        #expect(throws: CBORError.self) { try decode(CBOREncoder.encode(.bytes(Array(repeating: 7, count: max + 1)))) }
    }

    @Test("random byte strings never crash the decoder")
    func randomBytesNeverCrash() {
        var rng = WireTestRNG(seed: 0xC0B0)
        var accepted = 0
        for _ in 0..<5000 {
            let n = Int.random(in: 0...24, using: &rng)
            let bytes = (0..<n).map { _ in UInt8.random(in: 0...255, using: &rng) }
            if (try? decode(bytes)) != nil { accepted += 1 }
        }
        #expect(accepted < 5000)
    }

    @Test("random single-byte changes of a valid structure either decode or throw CBORError")
    func randomFlipsNeverCrash() throws {
        let value = cborMap([
            (.text("fmt"), .text("apple-appattest")),
            (
                .text("attStmt"),
                cborMap([(.text("x5c"), .array([.bytes(Array(0..<40)), .bytes([9])])), (.text("receipt"), .bytes([1, 2]))])
            ),
            (.text("authData"), .bytes(Array(repeating: 3, count: 37))),
        ])
        let bytes = CBOREncoder.encode(value)
        var rng = WireTestRNG(seed: 0xF11B)
        for _ in 0..<3000 {
            var m = bytes
            let i = Int.random(in: 0..<m.count, using: &rng)
            m[i] = UInt8.random(in: 0...255, using: &rng)
            switch Result(catching: { () throws(CBORError) in try decode(m) }) {
            case .success(let v):
                // Whatever decodes must re-encode to something that decodes and re-encodes identically
                // (compared as bytes, so a NaN produced by the change compares equal to itself).
                let encoded = CBOREncoder.encode(v)
                #expect(try CBOREncoder.encode(decode(encoded)) == encoded)
            case .failure(let error):
                #expect(error.offset >= 0 && error.offset <= m.count)
            }
        }
    }
}
