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

    /// 0...63 for a data character, 64 for '+' '/', 65 for '-' '_' (alphabet-specific, resolved below), 255 invalid.
    private static let table: [UInt8] = {
        var t = [UInt8](repeating: 255, count: 256)
        for (i, c) in standardChars.enumerated() { t[Int(c)] = UInt8(i) }
        t[Int(UInt8(ascii: "-"))] = 62
        t[Int(UInt8(ascii: "_"))] = 63
        return t
    }()

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
        var sawStandard = false
        var sawURL = false
        var out = [UInt8]()
        out.reserveCapacity(end / 4 * 3 + 2)
        var acc: UInt32 = 0
        var bits = 0
        for i in 0..<end {
            let c = input[i]
            let v = table[Int(c)]
            if v == 255 {
                let shown = c >= 0x21 && c < 0x7f ? "'\(Character(Unicode.Scalar(c)))'" : "byte 0x\(String(c, radix: 16))"
                throw DecodingError(offset: i, reason: "\(shown) is not a base64 character")
            }
            if c == UInt8(ascii: "+") || c == UInt8(ascii: "/") { sawStandard = true }
            if c == UInt8(ascii: "-") || c == UInt8(ascii: "_") { sawURL = true }
            acc = (acc << 6) | UInt32(v)
            bits += 6
            if bits >= 8 {
                bits -= 8
                out.append(UInt8(truncatingIfNeeded: acc >> UInt32(bits)))
                acc &= (1 << UInt32(bits)) - 1
            }
        }
        if sawStandard && sawURL { throw DecodingError(offset: 0, reason: "mixes the standard and URL alphabets") }
        if acc != 0 { throw DecodingError(offset: end - 1, reason: "non-zero padding bits (non-canonical encoding)") }
        return out
    }

    public static func encode(_ bytes: some Collection<UInt8>, alphabet: Alphabet = .standard, padding: Bool = true) -> String {
        let chars = alphabet == .standard ? standardChars : urlChars
        var out = [UInt8]()
        out.reserveCapacity((bytes.count + 2) / 3 * 4)
        var it = bytes.makeIterator()
        while let b0 = it.next() {
            let b1 = it.next()
            let b2 = it.next()
            let n = (UInt32(b0) << 16) | (UInt32(b1 ?? 0) << 8) | UInt32(b2 ?? 0)
            out.append(chars[Int((n >> 18) & 63)])
            out.append(chars[Int((n >> 12) & 63)])
            if b1 != nil { out.append(chars[Int((n >> 6) & 63)]) } else if padding { out.append(UInt8(ascii: "=")) }
            if b2 != nil { out.append(chars[Int(n & 63)]) } else if padding { out.append(UInt8(ascii: "=")) }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// base64url without padding, the form challenges and ids take in URLs and headers.
    public static func encodeURL(_ bytes: some Collection<UInt8>) -> String {
        encode(bytes, alphabet: .url, padding: false)
    }
}
