import GatewayTestSupport
import GatewayWire
import Testing

typealias WireTestRNG = SeededRandom

/// Decodes raw bytes (possibly not UTF-8) through the pointer entry point.
private func decodeRaw(_ bytes: [UInt8]) throws(Base64.DecodingError) -> [UInt8] {
    let result: Result<[UInt8], Base64.DecodingError> = bytes.withUnsafeBufferPointer { buf in
        Result { () throws(Base64.DecodingError) in try Base64.decode(utf8: buf) }
    }
    return try result.get()
}

@Suite("Base64 (RFC 4648)")
struct Base64Tests {
    // MARK: RFC 4648 §10 vectors

    static let rfc4648: [(plain: String, encoded: String)] = [
        ("", ""), ("f", "Zg=="), ("fo", "Zm8="), ("foo", "Zm9v"),
        ("foob", "Zm9vYg=="), ("fooba", "Zm9vYmE="), ("foobar", "Zm9vYmFy"),
    ]

    @Test("RFC 4648 §10 vectors encode to the padded standard form", arguments: rfc4648)
    func rfcVectorsEncodePadded(_ v: (plain: String, encoded: String)) {
        #expect(Base64.encode(Array(v.plain.utf8)) == v.encoded)
        // The §10 vectors contain no '+' or '/', so the URL alphabet gives the same text.
        #expect(Base64.encode(Array(v.plain.utf8), alphabet: .url, padding: true) == v.encoded)
    }

    @Test("RFC 4648 §10 vectors encode without padding by stripping '='", arguments: rfc4648)
    func rfcVectorsEncodeUnpadded(_ v: (plain: String, encoded: String)) {
        let unpadded = String(v.encoded.filter { $0 != "=" })
        #expect(Base64.encode(Array(v.plain.utf8), padding: false) == unpadded)
        #expect(Base64.encodeURL(Array(v.plain.utf8)) == unpadded)
    }

    @Test("RFC 4648 §10 vectors decode with and without padding", arguments: rfc4648)
    func rfcVectorsDecode(_ v: (plain: String, encoded: String)) throws {
        #expect(try Base64.decode(v.encoded) == Array(v.plain.utf8))
        let unpadded = String(v.encoded.filter { $0 != "=" })
        #expect(try Base64.decode(unpadded) == Array(v.plain.utf8))
    }

    /// Bytes whose encoding uses characters 62 and 63, where the two alphabets differ.
    static let alphabetSpecific: [(bytes: [UInt8], standard: String, url: String)] = [
        ([0xfb, 0xef, 0xbe], "++++", "----"),
        ([0xff, 0xff, 0xff], "////", "____"),
        ([0xfb, 0xff], "+/8=", "-_8="),
        ([0xff], "/w==", "_w=="),
        ([0x3e, 0x3f, 0xfe], "Pj/+", "Pj_-"),
        ([0x14, 0xfb, 0x9c, 0x03, 0xd9, 0x7e], "FPucA9l+", "FPucA9l-"),
    ]

    @Test("characters 62/63 encode as '+' '/' or '-' '_' depending on the alphabet", arguments: alphabetSpecific)
    func alphabetSpecificEncoding(_ v: (bytes: [UInt8], standard: String, url: String)) {
        #expect(Base64.encode(v.bytes, alphabet: .standard) == v.standard)
        #expect(Base64.encode(v.bytes, alphabet: .url) == v.url)
        #expect(Base64.encodeURL(v.bytes) == v.url.replacingAll("=", with: ""))
    }

    @Test("both alphabets decode, padded and unpadded", arguments: alphabetSpecific)
    func alphabetSpecificDecoding(_ v: (bytes: [UInt8], standard: String, url: String)) throws {
        for text in [v.standard, v.url] {
            #expect(try Base64.decode(text) == v.bytes)
            #expect(try Base64.decode(text.replacingAll("=", with: "")) == v.bytes)
        }
    }

    @Test("decodeNotingAlphabet: the bytes of decode, and url exactly when the text has '-' or '_'", arguments: 0...48)
    func notingAlphabet(_ length: Int) throws {
        var rng = WireTestRNG(seed: 0xA1FA &+ UInt64(length))
        for _ in 0..<16 {
            let bytes = (0..<length).map { _ in UInt8.random(in: 0...255, using: &rng) }
            for text in [Base64.encode(bytes), Base64.encodeURL(bytes), Base64.encode(bytes, alphabet: .url, padding: true)] {
                let noted: (bytes: [UInt8], url: Bool) = try Array(text.utf8).withUnsafeBufferPointer { buf in
                    try Base64.decodeNotingAlphabet(utf8: buf)
                }
                #expect(noted.bytes == bytes)
                #expect(noted.url == text.utf8.contains { $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: "_") }, "\(text)")
            }
        }
    }

    // MARK: Round trips

    @Test("random bytes of every length 0...64 round-trip in both alphabets, padded or not", arguments: 0...64)
    func roundTripRandomBytes(_ length: Int) throws {
        var rng = WireTestRNG(seed: 0xB64 &+ UInt64(length))
        for _ in 0..<8 {
            let bytes = (0..<length).map { _ in UInt8.random(in: 0...255, using: &rng) }
            for alphabet in [Base64.Alphabet.standard, .url] {
                for padding in [true, false] {
                    let text = Base64.encode(bytes, alphabet: alphabet, padding: padding)
                    let expectedLength = padding ? (length + 2) / 3 * 4 : (length * 4 + 2) / 3
                    #expect(text.utf8.count == expectedLength)
                    #expect(try Base64.decode(text) == bytes, "\(alphabet) padding=\(padding): \(text)")
                }
            }
        }
    }

    @Test("all 256 byte values round-trip")
    func roundTripAllByteValues() throws {
        let bytes = (0...255).map { UInt8($0) }
        #expect(try Base64.decode(Base64.encode(bytes)) == bytes)
        #expect(try Base64.decode(Base64.encodeURL(bytes)) == bytes)
    }

    // MARK: Errors

    static let invalidInputs: [(text: String, why: String)] = [
        // whitespace and line breaks are never skipped
        (" Zm9v", "leading space"), ("Zm9v ", "trailing space"), ("Zm 9v", "inner space"),
        ("Zm9v\n", "trailing newline"), ("Zm9v\r\n", "trailing CRLF"), ("Zm9v\nYmFy", "inner newline"),
        ("Zm9v\tYmFy", "tab"), ("Zg==\n", "newline after padding"),
        // characters outside both alphabets
        ("Zm9v!", "exclamation mark"), ("Zm.v", "dot"), ("Zm9v*AAA", "asterisk"), ("Zm9v#", "hash"),
        ("Zm\u{0}v", "NUL byte"), ("Zm9v~", "tilde"), ("Zm9v\\", "backslash"), ("Zm9v\"", "quote"),
        // alphabets mixed
        ("+-AA", "'+' and '-'"), ("ab+_", "'+' and '_'"), ("/-AA", "'/' and '-'"), ("__//", "'_' and '/'"),
        ("Pj/+FPucA9l-", "standard group then URL group"),
        // 4n+1 characters
        ("A", "one character"), ("AAAAA", "five characters"), ("Zm9vY", "4n+1 data characters"),
        ("Zm9vYmFyY", "nine characters"),
        // padding
        ("=", "lone '='"), ("==", "two '='"), ("===", "three '='"), ("====", "four '='"),
        ("Zg=", "one '=' where two are needed"), ("Zg===", "three '='"), ("Zm8==", "two '=' where one is needed"),
        ("Zm9v=", "padding after a full group"), ("Zm9v====", "a whole group of padding"),
        ("Zm9v==", "two '=' after a full group"), ("A===", "three '=' after one character"),
        // padding in the middle
        ("Zg==Zg==", "padded group followed by more data"), ("Zg=A", "'=' then data"), ("Z=g=", "'=' inside a group"),
        ("Zm9v=YmFy", "'=' between groups"), ("=Zm9", "leading '='"),
        // non-zero padding bits (non-canonical)
        ("QR==", "non-canonical QQ=="), ("QR", "non-canonical QQ, unpadded"), ("Zh==", "non-canonical Zg=="),
        ("Zm9=", "non-canonical Zm8="), ("Zm9", "non-canonical Zm8, unpadded"), ("AB==", "non-canonical AA=="),
        ("AAB=", "non-canonical AAA="), ("_x", "non-canonical _w, URL alphabet"),
        // non-ASCII
        ("Zm9v\u{e9}", "é"), ("Zm9v\u{ff}AAA", "ÿ"), ("\u{1F600}AAA", "emoji"), ("Zm９v", "fullwidth digit"),
    ]

    @Test("malformed base64 throws DecodingError", arguments: invalidInputs)
    func malformedThrows(_ v: (text: String, why: String)) {
        #expect(throws: Base64.DecodingError.self, "\(v.why)") { try Base64.decode(v.text) }
    }

    @Test("the canonical counterparts of the non-canonical inputs decode")
    func canonicalCounterpartsDecode() throws {
        #expect(try Base64.decode("QQ==") == [0x41])
        #expect(try Base64.decode("QQ") == [0x41])
        #expect(try Base64.decode("Zg==") == [0x66])
        #expect(try Base64.decode("Zm8=") == [0x66, 0x6f])
        #expect(try Base64.decode("AA==") == [0])
        #expect(try Base64.decode("AAA=") == [0, 0])
        #expect(try Base64.decode("_w") == [0xff])
    }

    @Test("every non-alphabet byte value is refused in every position of a group")
    func everyInvalidByteRefused() {
        let valid = Set(Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/-_".utf8))
        for b in 0...255 where !valid.contains(UInt8(b)) {
            for position in 0..<4 {
                var input = Array("Zm9vYmFy".utf8)
                input[4 + position] = UInt8(b)
                let threw: Bool
                do {
                    _ = try decodeRaw(input)
                    threw = false
                } catch {
                    threw = true
                }
                #expect(threw, "byte 0x\(String(b, radix: 16)) at \(4 + position)")
            }
        }
    }

    @Test("raw non-ASCII and invalid UTF-8 bytes are refused through the pointer entry point")
    func rawNonASCIIRefused() {
        for bad: [UInt8] in [[0x80, 0x41, 0x41, 0x41], [0x41, 0x41, 0xff, 0x41], [0x41, 0x41, 0x41, 0xc3], [0xc3, 0xa9, 0x41, 0x41]] {
            #expect(throws: Base64.DecodingError.self) { try decodeRaw(bad) }
        }
    }

    @Test("the error offset points at the offending character")
    func errorOffsets() {
        let bang = #expect(throws: Base64.DecodingError.self) { try Base64.decode("Zm9v!AAA") }
        #expect(bang?.offset == 4)
        let space = #expect(throws: Base64.DecodingError.self) { try Base64.decode("Zm 9") }
        #expect(space?.offset == 2)
        let middle = #expect(throws: Base64.DecodingError.self) { try Base64.decode("Zg=AZm9v") }
        #expect(middle?.offset == 2)
    }

    @Test("a padded empty group and a lone padding character give errors, not empty output")
    func paddingOnlyIsAnError() {
        for text in ["=", "==", "===", "====", "========"] {
            #expect(throws: Base64.DecodingError.self, "\(text)") { try Base64.decode(text) }
        }
    }
}

extension String {
    fileprivate func replacingAll(_ target: Character, with replacement: String) -> String {
        var out = ""
        for c in self { if c == target { out += replacement } else { out.append(c) } }
        return out
    }

    // MARK: The four-characters-at-a-time decoder against the definition

    /// RFC 4648 decoding one character at a time, with this decoder's rules and messages: what the
    /// fast decoder (four characters per step, errors found after the loop) must answer exactly.
    struct Refusal: Error, Equatable {
        let offset: Int
        let reason: String
    }

    static func referenceDecode(_ input: [UInt8]) -> Result<[UInt8], Refusal> {
        let standard = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)
        var end = input.count
        var padding = 0
        while end > 0 && input[end - 1] == UInt8(ascii: "=") { end -= 1; padding += 1 }
        if padding > 2 { return .failure(Refusal(offset: end, reason: "more than two padding characters")) }
        if padding > 0 && input.count % 4 != 0 {
            return .failure(Refusal(offset: end, reason: "padding does not complete a 4-character group"))
        }
        let remainder = end % 4
        if remainder == 1 { return .failure(Refusal(offset: end - 1, reason: "truncated: a lone final character")) }
        if padding > 0 && (remainder == 0 || 4 - remainder != padding) {
            return .failure(Refusal(offset: end, reason: "wrong amount of padding"))
        }
        var sawStandard = false, sawURL = false
        var out: [UInt8] = []
        var acc: UInt32 = 0, bits = 0
        for i in 0..<end {
            let c = input[i]
            var v: Int
            switch c {
            case UInt8(ascii: "-"): v = 62; sawURL = true
            case UInt8(ascii: "_"): v = 63; sawURL = true
            default: v = standard.firstIndex(of: c) ?? -1
            }
            if c == UInt8(ascii: "+") || c == UInt8(ascii: "/") { sawStandard = true }
            if v < 0 {
                let shown = c >= 0x21 && c < 0x7f ? "'\(Character(Unicode.Scalar(c)))'" : "byte 0x\(String(c, radix: 16))"
                return .failure(Refusal(offset: i, reason: "\(shown) is not a base64 character"))
            }
            acc = acc << 6 | UInt32(v)
            bits += 6
            if bits >= 8 {
                bits -= 8
                out.append(UInt8(truncatingIfNeeded: acc >> UInt32(bits)))
                acc &= (1 << UInt32(bits)) - 1
            }
        }
        if sawStandard && sawURL { return .failure(Refusal(offset: 0, reason: "mixes the standard and URL alphabets")) }
        if acc != 0 { return .failure(Refusal(offset: end - 1, reason: "non-zero padding bits (non-canonical encoding)")) }
        return .success(out)
    }

    @Test("random strings over both alphabets, '=', and stray bytes decode exactly as the definition says")
    func fastDecoderMatchesTheDefinition() {
        var rng = WireTestRNG(seed: 0xB64)
        let pool = Array("ABCZaz09+/-_=".utf8) + [0x20, 0x00, 0xFF, 0x2E]
        var errors = 0
        for _ in 0..<20_000 {
            let length = Int.random(in: 0...48, using: &rng)
            // Mostly valid characters, so that many inputs get past the first checks.
            let text: [UInt8] = (0..<length).map { _ in
                Int.random(in: 0..<10, using: &rng) < 8
                    ? Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789".utf8).randomElement(using: &rng)!
                    : pool.randomElement(using: &rng)!
            }
            let fast: Result<[UInt8], Refusal> = Result { () throws(Base64.DecodingError) in try decodeRaw(text) }
                .mapError { Refusal(offset: $0.offset, reason: $0.reason) }
            let expected = Self.referenceDecode(text)
            #expect(fast == expected, "\(text)")
            if case .failure = expected { errors += 1 }
        }
        // Both outcomes were exercised in quantity.
        #expect(errors > 2_000 && errors < 18_000)
    }

    @Test("a collection without contiguous storage encodes like its array")
    func nonContiguousCollectionsEncode() {
        var rng = WireTestRNG(seed: 7)
        for n in 0...40 {
            let bytes = (0..<n).map { _ in UInt8.random(in: 0...255, using: &rng) }
            let lazy = bytes.lazy.map { $0 }
            #expect(Base64.encode(lazy) == Base64.encode(bytes))
            #expect(Base64.encodeURL(lazy) == Base64.encodeURL(bytes))
            #expect(Base64.encode(lazy, alphabet: .url, padding: true) == Base64.encode(bytes, alphabet: .url, padding: true))
        }
    }
}

/// The decoder as it was before its tables were pre-shifted per position (one byte table, masked
/// and shifted per character), kept to hold the current one to the same answers: bytes, or the
/// same error offset and reason.
enum LegacyBase64 {
    static func decode(utf8 input: UnsafeBufferPointer<UInt8>) throws(String.Refusal) -> [UInt8] {
        var end = input.count
        var padding = 0
        while end > 0 && input[end - 1] == UInt8(ascii: "=") {
            end -= 1
            padding += 1
        }
        if padding > 2 { throw String.Refusal(offset: end, reason: "more than two padding characters") }
        if padding > 0 && input.count % 4 != 0 {
            throw String.Refusal(offset: end, reason: "padding does not complete a 4-character group")
        }
        let remainder = end % 4
        if remainder == 1 { throw String.Refusal(offset: end - 1, reason: "truncated: a lone final character") }
        if padding > 0 && (remainder == 0 || 4 - remainder != padding) {
            throw String.Refusal(offset: end, reason: "wrong amount of padding")
        }
        let whole = end - remainder
        let count = whole / 4 * 3 + (remainder == 0 ? 0 : remainder - 1)
        // Four characters at a time into the output's storage; `seen` gathers each character's
        // table entry (its top bits: 0x40 '+' or '/', 0x80 '-' or '_', both for a character that is
        // not base64), checked once at the end (on an error, a second, slow pass finds the character).
        var seen: UInt8 = 0
        var tail: UInt32 = 0
        let out = [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
            // The table as a pointer: 256 entries, indexed by a byte, never out of bounds.
            decodeTable.withUnsafeBufferPointer { t in
                var i = 0
                var o = 0
                while i < whole {
                    let a = t[Int(input[i])], b = t[Int(input[i + 1])], c = t[Int(input[i + 2])], d = t[Int(input[i + 3])]
                    seen |= a | b | c | d
                    let n = UInt32(a & 63) << 18 | UInt32(b & 63) << 12 | UInt32(c & 63) << 6 | UInt32(d & 63)
                    buffer[o] = UInt8(truncatingIfNeeded: n >> 16)
                    buffer[o + 1] = UInt8(truncatingIfNeeded: n >> 8)
                    buffer[o + 2] = UInt8(truncatingIfNeeded: n)
                    i += 4
                    o += 3
                }
                if remainder > 0 {
                    var n: UInt32 = 0
                    for k in 0..<remainder {
                        let v = t[Int(input[whole + k])]
                        seen |= v
                        n = n << 6 | UInt32(v & 63)
                    }
                    // 2 characters: 12 bits, one byte and 4 padding bits; 3 characters: 18 bits, two bytes and 2.
                    let padBits = UInt32(remainder == 2 ? 4 : 2)
                    tail = n & ((1 << padBits) - 1)
                    n >>= padBits
                    if remainder == 3 {
                        buffer[o] = UInt8(truncatingIfNeeded: n >> 8)
                        buffer[o + 1] = UInt8(truncatingIfNeeded: n)
                        o += 2
                    } else {
                        buffer[o] = UInt8(truncatingIfNeeded: n)
                        o += 1
                    }
                }
                initialized = o
            }
        }
        if seen & 0xC0 == 0xC0 {
            for i in 0..<end where decodeTable[Int(input[i])] == 0xFF {
                let c = input[i]
                let shown = c >= 0x21 && c < 0x7f ? "'\(Character(Unicode.Scalar(c)))'" : "byte 0x\(String(c, radix: 16))"
                throw String.Refusal(offset: i, reason: "\(shown) is not a base64 character")
            }
        }
        if seen & 0xC0 == 0xC0 { throw String.Refusal(offset: 0, reason: "mixes the standard and URL alphabets") }
        if tail != 0 { throw String.Refusal(offset: end - 1, reason: "non-zero padding bits (non-canonical encoding)") }
        return out
    }

    /// Per input byte: its 6-bit value, | 0x40 for '+' and '/', | 0x80 for '-' and '_'; 0xFF when it
    /// is not a base64 character.
    static let decodeTable: [UInt8] = {
        var t = [UInt8](repeating: 0xFF, count: 256)
        for (i, c) in Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8).enumerated() { t[Int(c)] = UInt8(i) }
        t[Int(UInt8(ascii: "+"))] = 62 | 0x40
        t[Int(UInt8(ascii: "/"))] = 63 | 0x40
        t[Int(UInt8(ascii: "-"))] = 62 | 0x80
        t[Int(UInt8(ascii: "_"))] = 63 | 0x80
        return t
    }()

}

/// The current decoder's answer and the legacy one's, as comparable values.
private func bothDecoders(_ input: [UInt8]) -> (Result<[UInt8], String.Refusal>, Result<[UInt8], String.Refusal>) {
    let now = Result { () throws(Base64.DecodingError) in try decodeRaw(input) }.mapError {
        String.Refusal(offset: $0.offset, reason: $0.reason)
    }
    let then = input.withUnsafeBufferPointer { buf in
        Result { () throws(String.Refusal) in try LegacyBase64.decode(utf8: buf) }
    }
    return (now, then)
}

@Suite("Base64 decoder against its previous implementation")
struct Base64LegacyTests {
    @Test("every byte value in every position of 1 to 5 groups and of each tail length: the same answer as before")
    func everyByteEveryPosition() {
        // Lengths 4n (last group narrow, the others wide), 4n+2 and 4n+3 (every group wide, then a tail).
        for text in [
            "Zm9v", "Zm9vYmFy", "Zm9vYmFyYmF6", "QUJDREVGR0hJSktMTU5PUFFSU1RV", "Zg", "Zm8", "Zm9vYg", "Zm9vYmE", "Zm9vYmFyYmF6Zm9vYg",
        ] {
            let base = Array(text.utf8)
            for i in base.indices {
                for b in 0...255 {
                    var input = base
                    input[i] = UInt8(b)
                    let (now, then) = bothDecoders(input)
                    #expect(now == then, "\(text) byte \(i) = 0x\(String(b, radix: 16))")
                    #expect(now == String.referenceDecode(input))
                }
            }
        }
    }

    @Test("encodings of random bytes, mutated (bytes changed, inserted, removed, padding added or cut): the same answer as before")
    func mutatedEncodings() {
        var rng = WireTestRNG(seed: 0xB64_01D)
        let pool =
            Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/-_=".utf8) + [0x00, 0x20, 0x0A, 0x7F, 0x80, 0xC3, 0xFF]
        var failures = 0
        for round in 0..<30_000 {
            let n = Int.random(in: 0...200, using: &rng)
            let bytes = (0..<n).map { _ in UInt8.random(in: 0...255, using: &rng) }
            let alphabet: Base64.Alphabet = round % 2 == 0 ? .standard : .url
            var text = Array(Base64.encode(bytes, alphabet: alphabet, padding: round % 3 != 0).utf8)
            for _ in 0..<Int.random(in: 0...3, using: &rng) {
                switch Int.random(in: 0..<6, using: &rng) {
                case 0 where !text.isEmpty: text[Int.random(in: 0..<text.count, using: &rng)] = pool.randomElement(using: &rng)!
                case 1: text.insert(pool.randomElement(using: &rng)!, at: Int.random(in: 0...text.count, using: &rng))
                case 2 where !text.isEmpty: text.remove(at: Int.random(in: 0..<text.count, using: &rng))
                case 3: text.append(UInt8(ascii: "="))
                case 4 where !text.isEmpty: text.removeLast()
                default: break
                }
            }
            let (now, then) = bothDecoders(text)
            #expect(now == then, "\(text)")
            if case .success(let out) = now, text == Array(Base64.encode(bytes, alphabet: alphabet, padding: round % 3 != 0).utf8) {
                #expect(out == bytes)
            }
            if case .failure = now { failures += 1 }
        }
        // Both outcomes in quantity.
        #expect(failures > 5_000 && failures < 25_000)
    }

    @Test("encoding: the same text as the definition, both alphabets, padded or not, every length to 64")
    func encodingMatchesDefinition() {
        var rng = WireTestRNG(seed: 0xE4C)
        let std = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)
        for n in 0...64 {
            let bytes = (0..<n).map { _ in UInt8.random(in: 0...255, using: &rng) }
            var bits = ""
            for b in bytes { bits += String(repeating: "0", count: 8 - String(b, radix: 2).count) + String(b, radix: 2) }
            while bits.count % 6 != 0 { bits += "0" }
            var chars: [UInt8] = []
            var k = bits.startIndex
            while k < bits.endIndex {
                let e = bits.index(k, offsetBy: 6)
                chars.append(std[Int(bits[k..<e], radix: 2)!])
                k = e
            }
            let unpadded = String(decoding: chars, as: UTF8.self)
            let padded = unpadded + String(repeating: "=", count: (4 - chars.count % 4) % 4)
            #expect(Base64.encode(bytes) == padded)
            #expect(Base64.encode(bytes, padding: false) == unpadded)
            let url = String(
                decoding: chars.map { $0 == UInt8(ascii: "+") ? UInt8(ascii: "-") : $0 == UInt8(ascii: "/") ? UInt8(ascii: "_") : $0 },
                as: UTF8.self)
            #expect(Base64.encodeURL(bytes) == url)
            #expect(Base64.encode(bytes, alphabet: .url, padding: true) == url + String(repeating: "=", count: (4 - chars.count % 4) % 4))
        }
    }
}
