import GatewayWire
import Testing

private func h(_ hex: String) -> [UInt8] {
    guard let b = Hex.decode(hex) else { fatalError("bad hex in test: \(hex)") }
    return b
}

/// Reads one element from `bytes` (expecting nothing else) and returns it.
private func readOne(_ bytes: [UInt8]) throws(DERReader.Error) -> DERReader.Element {
    var r = DERReader(bytes)
    let el = try r.read()
    try r.finish()
    return el
}

@Suite("DER reader (X.690)")
struct DERTests {
    @Test("short-form lengths 0...127 read exactly their contents")
    func shortLengths() throws {
        for n in [0, 1, 2, 5, 0x7f] {
            let contents = (0..<n).map { UInt8(truncatingIfNeeded: $0 &* 7) }
            let el = try readOne([0x04, UInt8(n)] + contents)
            #expect(el.tag == DERReader.Tag.octetString)
            #expect(Array(el.contents) == contents)
            #expect(!el.isConstructed)
        }
        let null = try readOne(h("0500"))
        #expect(null.tag == 0x05 && null.contents.isEmpty)
    }

    @Test("long-form lengths with one, two and three length octets")
    func longLengths() throws {
        for (prefix, n) in [("048180", 0x80), ("0481ff", 0xff), ("04820100", 0x100), ("0482ffff", 0xffff), ("0483010000", 0x10000)] {
            let contents = (0..<n).map { UInt8(truncatingIfNeeded: $0) }
            let el = try readOne(h(prefix) + contents)
            #expect(el.contents.count == n, "\(prefix)")
            #expect(el.contents.elementsEqual(contents))
        }
    }

    @Test("a four-octet length is accepted when minimal")
    func fourOctetLength() throws {
        let n = 0x0100_0000
        let el = try readOne(h("0484") + h("01000000") + [UInt8](repeating: 0xab, count: n))
        #expect(el.contents.count == n)
    }

    @Test(
        "non-minimal length encodings are refused",
        arguments: [
            ("04810000", "long form for length 0"), ("0481050102030405", "long form for length 5"),
            ("04817f" + String(repeating: "00", count: 0x7f), "long form for 127"),
            ("0482008000", "leading zero octet before 0x80"), ("048200050102030405", "two octets for 5"),
            ("04830000ff", "leading zeros before 0xff"), ("0484000000050102030405", "four octets for 5"),
            ("0482000100", "two octets for 1"),
        ])
    func nonMinimalLengthRefused(_ c: (hex: String, why: String)) {
        #expect(throws: DERReader.Error.self, "\(c.why)") { try readOne(h(c.hex)) }
    }

    @Test("indefinite length (0x80) and lengths of five or more octets are refused")
    func unsupportedLengthForms() {
        #expect(throws: DERReader.Error.self) { try readOne(h("3080") + h("0000")) }
        #expect(throws: DERReader.Error.self) { try readOne(h("04850100000000") + [0]) }
        #expect(throws: DERReader.Error.self) { try readOne(h("0488ffffffffffffffff")) }
        #expect(throws: DERReader.Error.self) { try readOne(h("04ff")) }
    }

    @Test("truncated input is refused: no tag, no length, a cut length, a cut body")
    func truncation() {
        #expect(throws: DERReader.Error.self) { try readOne([]) }
        #expect(throws: DERReader.Error.self) { try readOne(h("04")) }
        #expect(throws: DERReader.Error.self) { try readOne(h("0482")) }
        #expect(throws: DERReader.Error.self) { try readOne(h("048201")) }
        #expect(throws: DERReader.Error.self) { try readOne(h("0403")) }
        #expect(throws: DERReader.Error.self) { try readOne(h("04030102")) }
    }

    @Test("a nested structure truncated at every offset is refused at the outer read")
    func truncationAtEveryOffset() throws {
        // SEQUENCE { [1] { OCTET STRING (200 bytes) }, INTEGER 5 }: long forms at two levels.
        let octets = h("0481c8") + [UInt8](repeating: 0x5a, count: 200)
        let tagged = [0xa1, 0x81, UInt8(octets.count)] + octets
        let body = tagged + h("020105")
        let full = [0x30, 0x81, UInt8(body.count)] + body
        _ = try readOne(full)
        for cut in 0..<full.count {
            var r = DERReader(Array(full[0..<cut]))
            #expect(throws: DERReader.Error.self, "cut at \(cut)") { try r.read() }
        }
    }

    @Test("lengths past the end are refused without reading or allocating")
    func lengthsPastTheEnd() {
        for hex in ["0401", "0481ff00", "048401000000", "04847fffffff00", "3084ffffffff", "0482ffff" + "00"] {
            let e = #expect(throws: DERReader.Error.self, "\(hex)") { try readOne(h(hex)) }
            #expect(e.map { $0.offset <= h(hex).count } ?? false)
        }
    }

    @Test(
        "high tag numbers (low five bits all set) are refused", arguments: ["1f0100", "3f810000", "9f0100", "bf1f0100", "df0100", "ff0100"])
    func highTagNumbersRefused(_ hex: String) {
        let e = #expect(throws: DERReader.Error.self) { try readOne(h(hex)) }
        #expect(e?.offset == 0)
    }

    @Test("finish() throws when bytes follow, at their offset, and passes at the end")
    func finishWithTrailingBytes() throws {
        var r = DERReader(h("0401aa") + h("0500"))
        let first = try r.read()
        #expect(Array(first.contents) == [0xaa])
        #expect(!r.isAtEnd)
        let e = #expect(throws: DERReader.Error.self) { try r.finish() }
        #expect(e?.offset == 3)
        _ = try r.read()
        #expect(r.isAtEnd)
        try r.finish()

        // One trailing zero byte after a complete element.
        #expect(throws: DERReader.Error.self) { try readOne(h("040100") + [0]) }
    }

    @Test("read(tag:) refuses another tag, at the element's offset")
    func readExpectedTag() throws {
        var r = DERReader(h("0500") + h("0401aa"))
        _ = try r.read(tag: 0x05)
        let e = #expect(throws: DERReader.Error.self) { try r.read(tag: DERReader.Tag.sequence) }
        #expect(e?.offset == 2)
    }

    @Test("nested readers over contents slices report offsets in the parent buffer and stop at the slice end")
    func nestedSlices() throws {
        // SEQUENCE { [1] { OCTET STRING 'hi' } } followed by a byte that belongs to nobody.
        let bytes = h("3006a1040402") + Array("hi".utf8) + [0xee]
        var outer = DERReader(bytes)
        let seq = try outer.read(tag: DERReader.Tag.sequence)
        #expect(seq.isConstructed)
        var inner = DERReader(seq.contents)
        let tagged = try inner.read(tag: DERReader.Tag.contextConstructed(1))
        #expect(tagged.tag == 0xa1)
        try inner.finish()
        var explicit = DERReader(tagged.contents)
        let octets = try explicit.read(tag: DERReader.Tag.octetString)
        #expect(Array(octets.contents) == Array("hi".utf8))
        #expect(octets.contents.startIndex == 6)
        try explicit.finish()
        let trailing = #expect(throws: DERReader.Error.self) { try outer.finish() }
        #expect(trailing?.offset == 8)

        // A child claiming more than its parent holds is refused even though the parent buffer continues.
        var parent = DERReader(h("3003040501") + h("02030405"))
        let shortSeq = try parent.read()
        var child = DERReader(shortSeq.contents)
        #expect(throws: DERReader.Error.self) { try child.read() }
    }

    @Test("random bytes never crash the reader")
    func randomBytes() {
        var rng = WireTestRNG(seed: 0xDE2)
        for _ in 0..<5000 {
            let bytes = (0..<Int.random(in: 0...12, using: &rng)).map { _ in UInt8.random(in: 0...255, using: &rng) }
            var r = DERReader(bytes)
            while !r.isAtEnd {
                guard (try? r.read()) != nil else { break }
            }
        }
    }
}
