/// Strict base64 (RFC 4648 §4) and base64url (§5) decoding and encoding.
///
/// Decoding accepts either alphabet, but not both mixed in one string; padding is optional but, when
/// present, must be exactly what completes the last quantum. Whitespace, stray characters, a length of
/// 4n+1 and non-zero padding bits (a non-canonical encoding) are errors, never silently skipped.
public enum Base64 {
    public enum Alphabet: Sendable { case standard, url }

    public struct DecodingError: Error, Equatable, Sendable, CustomStringConvertible {
        public let offset: Int
        public let reason: String
        public var description: String { "invalid base64 at offset \(offset): \(reason)" }
    }

    /// The alphabets as constants in the binary (no lazy global to initialize and check per call).
    private static var standardChars: StaticString { "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/" }
    private static var urlChars: StaticString { "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_" }

    /// Decodes `text` in the standard or the URL alphabet (auto-detected), padding optional.
    public static func decode(_ text: String) throws(DecodingError) -> [UInt8] {
        // A native string's bytes in place (no copy of the string to call `withUTF8` on).
        if let result = text.utf8.withContiguousStorageIfAvailable({ buf in Result { () throws(DecodingError) in try decode(utf8: buf) } })
        {
            return try result.get()
        }
        var copy = text
        let result: Result<[UInt8], DecodingError> = copy.withUTF8 { buf in Result { () throws(DecodingError) in try decode(utf8: buf) } }
        return try result.get()
    }

    public static func decode(utf8 input: UnsafeBufferPointer<UInt8>) throws(DecodingError) -> [UInt8] {
        try decodeNotingAlphabet(utf8: input).bytes
    }

    /// `decode(utf8:)`, and whether the text used the URL alphabet's own characters (`-` or `_`;
    /// a text without `+`, `/`, `-` or `_` is both alphabets at once and says false): what the
    /// decoder saw anyway, so a caller that names the encoding reads the text once.
    public static func decodeNotingAlphabet(utf8 input: UnsafeBufferPointer<UInt8>) throws(DecodingError) -> (
        bytes: [UInt8], url: Bool
    ) {
        var end = input.count
        var padding = 0
        while end > 0 && input[end - 1] == UInt8(ascii: "=") {
            end -= 1
            padding += 1
        }
        if padding > 2 { throw DecodingError(offset: end, reason: "more than two padding characters") }
        if padding > 0 && input.count % 4 != 0 {
            throw DecodingError(offset: end, reason: "padding does not complete a 4-character group")
        }
        let remainder = end % 4
        if remainder == 1 { throw DecodingError(offset: end - 1, reason: "truncated: a lone final character") }
        if padding > 0 && (remainder == 0 || 4 - remainder != padding) {
            throw DecodingError(offset: end, reason: "wrong amount of padding")
        }
        let whole = end - remainder
        let count = whole / 4 * 3 + (remainder == 0 ? 0 : remainder - 1)
        guard count > 0, let s = input.baseAddress else { return ([], false) }  // only "" gets here with nothing to decode
        // Four characters at a time: one entry per character from the table of its position in
        // the group, already shifted into place, so a group is four loads and three ORs. Bits 24-31
        // of `seen` gather the entries' flags (0x01 '+' or '/', 0x02 '-' or '_', 0xFF a character
        // that is not base64), checked once at the end (on an error, a second, slow pass finds the
        // character). The output is made by `ByteArrays.make`; refused input makes no array.
        var seen: UInt32 = 0
        var tail: UInt32 = 0
        let out: [UInt8]
        do {
            out = try ByteArrays.make(capacity: count) { (buffer: UnsafeMutableBufferPointer<UInt8>) throws(Refused) -> Int in
                let o = UnsafeMutableRawPointer(buffer.baseAddress!)
                // Every group but the output's last three bytes is stored as four bytes (big-endian),
                // the fourth overwritten by the next group's.
                let wideEnd = remainder > 0 ? whole : whole - 4
                return try decodeTables.withUnsafeBufferPointer { table throws(Refused) -> Int in
                    let t = table.baseAddress!
                    var i = 0
                    var k = 0
                    while i < wideEnd {
                        let n = t[Int(s[i])] | t[256 + Int(s[i + 1])] | t[512 + Int(s[i + 2])] | t[768 + Int(s[i + 3])]
                        seen |= n
                        o.storeBytes(of: (n << 8).bigEndian, toByteOffset: k, as: UInt32.self)
                        i += 4
                        k += 3
                    }
                    if i < whole {
                        let n = t[Int(s[i])] | t[256 + Int(s[i + 1])] | t[512 + Int(s[i + 2])] | t[768 + Int(s[i + 3])]
                        seen |= n
                        o.storeBytes(of: UInt8(truncatingIfNeeded: n >> 16), toByteOffset: k, as: UInt8.self)
                        o.storeBytes(of: UInt8(truncatingIfNeeded: n >> 8), toByteOffset: k + 1, as: UInt8.self)
                        o.storeBytes(of: UInt8(truncatingIfNeeded: n), toByteOffset: k + 2, as: UInt8.self)
                        i += 4
                        k += 3
                    }
                    if remainder == 2 {
                        // 12 bits: one byte and 4 padding bits.
                        let n = t[Int(s[i])] | t[256 + Int(s[i + 1])]
                        seen |= n
                        tail = (n >> 12) & 0xF
                        o.storeBytes(of: UInt8(truncatingIfNeeded: n >> 16), toByteOffset: k, as: UInt8.self)
                    } else if remainder == 3 {
                        // 18 bits: two bytes and 2 padding bits.
                        let n = t[Int(s[i])] | t[256 + Int(s[i + 1])] | t[512 + Int(s[i + 2])]
                        seen |= n
                        tail = (n >> 6) & 0x3
                        o.storeBytes(of: UInt8(truncatingIfNeeded: n >> 16), toByteOffset: k, as: UInt8.self)
                        o.storeBytes(of: UInt8(truncatingIfNeeded: n >> 8), toByteOffset: k + 1, as: UInt8.self)
                    }
                    guard seen & 0x0300_0000 != 0x0300_0000 && tail == 0 else { throw Refused() }
                    return count
                }
            }
        } catch {
            if seen & 0x0300_0000 == 0x0300_0000 {
                for i in 0..<end where decodeTables[Int(input[i])] == notBase64 {
                    let c = input[i]
                    let shown = c >= 0x21 && c < 0x7f ? "'\(Character(Unicode.Scalar(c)))'" : "byte 0x\(String(c, radix: 16))"
                    throw DecodingError(offset: i, reason: "\(shown) is not a base64 character")
                }
                throw DecodingError(offset: 0, reason: "mixes the standard and URL alphabets")
            }
            throw DecodingError(offset: end - 1, reason: "non-zero padding bits (non-canonical encoding)")
        }
        return (out, seen & 0x0200_0000 != 0)
    }

    /// The decoding loop's refusal (the reason is found afterwards, outside it).
    private struct Refused: Error {}

    /// A `decodeTables` entry for a byte that is not a base64 character (both alphabets' flags).
    static let notBase64: UInt32 = 0xFF00_0000

    /// Per position in a 4-character group (256 entries each, indexed by the byte): the character's
    /// 6-bit value shifted to where it goes in the group's 24 bits (<< 18, 12, 6, 0), | 0x0100_0000
    /// for '+' and '/', | 0x0200_0000 for '-' and '_'; `notBase64` for any other byte. Made from the
    /// alphabets once.
    private static let decodeTables: [UInt32] = {
        var t = [UInt32](repeating: notBase64, count: 4 * 256)
        for (alphabet, flag) in [(standardChars, UInt32(0x0100_0000)), (urlChars, UInt32(0x0200_0000))] {
            for value in 0..<64 {
                let c = Int(alphabet.utf8Start[value])
                // Letters and digits are in both alphabets: no flag.
                let mark: UInt32 = value < 62 ? 0 : flag
                for position in 0..<4 { t[position * 256 + c] = UInt32(value) << (18 - 6 * UInt32(position)) | mark }
            }
        }
        return t
    }()

    /// The same for an array (no generic dispatch: key ids and challenges on every verified request).
    public static func encode(_ bytes: [UInt8], alphabet: Alphabet = .standard, padding: Bool = true) -> String {
        bytes.withUnsafeBytes { encode($0, alphabet: alphabet, padding: padding) }
    }

    public static func encode(_ bytes: some Collection<UInt8>, alphabet: Alphabet = .standard, padding: Bool = true) -> String {
        if let done = bytes.withContiguousStorageIfAvailable({ encode(UnsafeRawBufferPointer($0), alphabet: alphabet, padding: padding) }) {
            return done
        }
        return Array(bytes).withUnsafeBytes { encode($0, alphabet: alphabet, padding: padding) }
    }

    /// The same over contiguous bytes: written straight into the string's storage.
    public static func encode(_ bytes: UnsafeRawBufferPointer, alphabet: Alphabet = .standard, padding: Bool = true) -> String {
        let whole = bytes.count / 3 * 3
        let rest = bytes.count - whole
        let length = whole / 3 * 4 + (rest == 0 ? 0 : padding ? 4 : rest + 1)
        guard length > 0 else { return "" }
        let chars = (alphabet == .standard ? standardChars : urlChars).utf8Start
        let b = bytes.baseAddress!.assumingMemoryBound(to: UInt8.self)
        return String(unsafeUninitializedCapacity: length) { out in
            let p = out.baseAddress!
            var i = 0
            var o = 0
            while i < whole {
                let n = UInt32(b[i]) << 16 | UInt32(b[i + 1]) << 8 | UInt32(b[i + 2])
                p[o] = chars[Int(n >> 18)]
                p[o + 1] = chars[Int((n >> 12) & 63)]
                p[o + 2] = chars[Int((n >> 6) & 63)]
                p[o + 3] = chars[Int(n & 63)]
                i += 3
                o += 4
            }
            if rest > 0 {
                let n = UInt32(b[i]) << 16 | (rest == 2 ? UInt32(b[i + 1]) << 8 : 0)
                p[o] = chars[Int(n >> 18)]
                p[o + 1] = chars[Int((n >> 12) & 63)]
                o += 2
                if rest == 2 {
                    p[o] = chars[Int((n >> 6) & 63)]
                    o += 1
                } else if padding {
                    p[o] = UInt8(ascii: "=")
                    o += 1
                }
                if padding {
                    p[o] = UInt8(ascii: "=")
                    o += 1
                }
            }
            return o
        }
    }

    /// base64url without padding, the form challenges and ids take in URLs and headers.
    public static func encodeURL(_ bytes: [UInt8]) -> String {
        bytes.withUnsafeBytes { encode($0, alphabet: .url, padding: false) }
    }

    public static func encodeURL(_ bytes: some Collection<UInt8>) -> String {
        encode(bytes, alphabet: .url, padding: false)
    }
}
