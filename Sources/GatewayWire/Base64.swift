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

    private static let standardChars = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)
    private static let urlChars = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    /// Decodes `text` in the standard or the URL alphabet (auto-detected), padding optional.
    public static func decode(_ text: String) throws(DecodingError) -> [UInt8] {
        var copy = text
        let result: Result<[UInt8], DecodingError> = copy.withUTF8 { buf in Result { () throws(DecodingError) in try decode(utf8: buf) } }
        return try result.get()
    }

    public static func decode(utf8 input: UnsafeBufferPointer<UInt8>) throws(DecodingError) -> [UInt8] {
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
                throw DecodingError(offset: i, reason: "\(shown) is not a base64 character")
            }
        }
        if seen & 0xC0 == 0xC0 { throw DecodingError(offset: 0, reason: "mixes the standard and URL alphabets") }
        if tail != 0 { throw DecodingError(offset: end - 1, reason: "non-zero padding bits (non-canonical encoding)") }
        return out
    }

    /// Per input byte: its 6-bit value, | 0x40 for '+' and '/', | 0x80 for '-' and '_'; 0xFF when it
    /// is not a base64 character.
    private static let decodeTable: [UInt8] = {
        var t = [UInt8](repeating: 0xFF, count: 256)
        for (i, c) in standardChars.enumerated() { t[Int(c)] = UInt8(i) }
        t[Int(UInt8(ascii: "+"))] = 62 | 0x40
        t[Int(UInt8(ascii: "/"))] = 63 | 0x40
        t[Int(UInt8(ascii: "-"))] = 62 | 0x80
        t[Int(UInt8(ascii: "_"))] = 63 | 0x80
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
        return (alphabet == .standard ? standardChars : urlChars).withUnsafeBufferPointer { chars in
            String(unsafeUninitializedCapacity: length) { out in
                var i = 0
                var o = 0
                while i < whole {
                    let n = UInt32(bytes[i]) << 16 | UInt32(bytes[i + 1]) << 8 | UInt32(bytes[i + 2])
                    out[o] = chars[Int(n >> 18)]
                    out[o + 1] = chars[Int((n >> 12) & 63)]
                    out[o + 2] = chars[Int((n >> 6) & 63)]
                    out[o + 3] = chars[Int(n & 63)]
                    i += 3
                    o += 4
                }
                if rest > 0 {
                    let n = UInt32(bytes[i]) << 16 | (rest == 2 ? UInt32(bytes[i + 1]) << 8 : 0)
                    out[o] = chars[Int(n >> 18)]
                    out[o + 1] = chars[Int((n >> 12) & 63)]
                    o += 2
                    if rest == 2 {
                        out[o] = chars[Int((n >> 6) & 63)]
                        o += 1
                    } else if padding {
                        out[o] = UInt8(ascii: "=")
                        o += 1
                    }
                    if padding {
                        out[o] = UInt8(ascii: "=")
                        o += 1
                    }
                }
                return o
            }
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
