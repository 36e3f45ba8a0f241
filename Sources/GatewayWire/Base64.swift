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
        // Four characters at a time: one entry per character from the
        // table of its position in the group, already shifted into place, so a group is four loads
        // and three ORs. Bits 24-31 of `seen` gather the entries' flags (0x01 '+' or '/', 0x02 '-'
        // or '_', 0xFF a character that is not base64), checked once at the end (on an error, a
        // second, slow pass finds the character).
        var seen: UInt32 = 0
        var tail: UInt32 = 0
        // Decoded on the stack, then one array of exactly `count` bytes made from it (the array's
        // own uninitialized-capacity entry costs a generic metadata lookup in the standard library
        // per call, more than this copy).
        let out: [UInt8]? = withUnsafeTemporaryAllocation(of: UInt8.self, capacity: count) { buffer in
            let o = UnsafeMutableRawPointer(buffer.baseAddress!)
            // Every group but the output's last three bytes is stored as four bytes (big-endian),
            // the fourth overwritten by the next group's.
            let wideEnd = remainder > 0 ? whole : whole - 4
            return decodeTables.withUnsafeBufferPointer { table -> [UInt8]? in
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
                // No array for input that is refused below.
                guard seen & 0x0300_0000 != 0x0300_0000 && tail == 0 else { return nil }
                return Array(UnsafeBufferPointer(start: buffer.baseAddress!, count: count))
            }
        }
        if let out { return (out, seen & 0x0200_0000 != 0) }
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

    /// A `decodeTables` entry for a byte that is not a base64 character (both alphabets' flags).
    static let notBase64: UInt32 = 0xFF00_0000

    /// Per position in a 4-character group (256 entries each, indexed by the byte): the character's
    /// 6-bit value shifted to where it goes in the group's 24 bits (<< 18, 12, 6, 0), | 0x0100_0000
    /// for '+' and '/', | 0x0200_0000 for '-' and '_'; `notBase64` for any other byte. A literal, so
    /// that the table is a constant in the binary (no lazy global per call); held to the alphabets
    /// by `Base64Tests`.
    private static let decodeTables: [UInt32] = [
        // position 0: value << 18
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0x01F80000, 0xFF000000, 0x02F80000, 0xFF000000, 0x01FC0000,
        0x00D00000, 0x00D40000, 0x00D80000, 0x00DC0000, 0x00E00000, 0x00E40000, 0x00E80000, 0x00EC0000,
        0x00F00000, 0x00F40000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0x00000000, 0x00040000, 0x00080000, 0x000C0000, 0x00100000, 0x00140000, 0x00180000,
        0x001C0000, 0x00200000, 0x00240000, 0x00280000, 0x002C0000, 0x00300000, 0x00340000, 0x00380000,
        0x003C0000, 0x00400000, 0x00440000, 0x00480000, 0x004C0000, 0x00500000, 0x00540000, 0x00580000,
        0x005C0000, 0x00600000, 0x00640000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0x02FC0000,
        0xFF000000, 0x00680000, 0x006C0000, 0x00700000, 0x00740000, 0x00780000, 0x007C0000, 0x00800000,
        0x00840000, 0x00880000, 0x008C0000, 0x00900000, 0x00940000, 0x00980000, 0x009C0000, 0x00A00000,
        0x00A40000, 0x00A80000, 0x00AC0000, 0x00B00000, 0x00B40000, 0x00B80000, 0x00BC0000, 0x00C00000,
        0x00C40000, 0x00C80000, 0x00CC0000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        // position 1: value << 12
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0x0103E000, 0xFF000000, 0x0203E000, 0xFF000000, 0x0103F000,
        0x00034000, 0x00035000, 0x00036000, 0x00037000, 0x00038000, 0x00039000, 0x0003A000, 0x0003B000,
        0x0003C000, 0x0003D000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0x00000000, 0x00001000, 0x00002000, 0x00003000, 0x00004000, 0x00005000, 0x00006000,
        0x00007000, 0x00008000, 0x00009000, 0x0000A000, 0x0000B000, 0x0000C000, 0x0000D000, 0x0000E000,
        0x0000F000, 0x00010000, 0x00011000, 0x00012000, 0x00013000, 0x00014000, 0x00015000, 0x00016000,
        0x00017000, 0x00018000, 0x00019000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0x0203F000,
        0xFF000000, 0x0001A000, 0x0001B000, 0x0001C000, 0x0001D000, 0x0001E000, 0x0001F000, 0x00020000,
        0x00021000, 0x00022000, 0x00023000, 0x00024000, 0x00025000, 0x00026000, 0x00027000, 0x00028000,
        0x00029000, 0x0002A000, 0x0002B000, 0x0002C000, 0x0002D000, 0x0002E000, 0x0002F000, 0x00030000,
        0x00031000, 0x00032000, 0x00033000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        // position 2: value << 6
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0x01000F80, 0xFF000000, 0x02000F80, 0xFF000000, 0x01000FC0,
        0x00000D00, 0x00000D40, 0x00000D80, 0x00000DC0, 0x00000E00, 0x00000E40, 0x00000E80, 0x00000EC0,
        0x00000F00, 0x00000F40, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0x00000000, 0x00000040, 0x00000080, 0x000000C0, 0x00000100, 0x00000140, 0x00000180,
        0x000001C0, 0x00000200, 0x00000240, 0x00000280, 0x000002C0, 0x00000300, 0x00000340, 0x00000380,
        0x000003C0, 0x00000400, 0x00000440, 0x00000480, 0x000004C0, 0x00000500, 0x00000540, 0x00000580,
        0x000005C0, 0x00000600, 0x00000640, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0x02000FC0,
        0xFF000000, 0x00000680, 0x000006C0, 0x00000700, 0x00000740, 0x00000780, 0x000007C0, 0x00000800,
        0x00000840, 0x00000880, 0x000008C0, 0x00000900, 0x00000940, 0x00000980, 0x000009C0, 0x00000A00,
        0x00000A40, 0x00000A80, 0x00000AC0, 0x00000B00, 0x00000B40, 0x00000B80, 0x00000BC0, 0x00000C00,
        0x00000C40, 0x00000C80, 0x00000CC0, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        // position 3: value << 0
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0x0100003E, 0xFF000000, 0x0200003E, 0xFF000000, 0x0100003F,
        0x00000034, 0x00000035, 0x00000036, 0x00000037, 0x00000038, 0x00000039, 0x0000003A, 0x0000003B,
        0x0000003C, 0x0000003D, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0x00000000, 0x00000001, 0x00000002, 0x00000003, 0x00000004, 0x00000005, 0x00000006,
        0x00000007, 0x00000008, 0x00000009, 0x0000000A, 0x0000000B, 0x0000000C, 0x0000000D, 0x0000000E,
        0x0000000F, 0x00000010, 0x00000011, 0x00000012, 0x00000013, 0x00000014, 0x00000015, 0x00000016,
        0x00000017, 0x00000018, 0x00000019, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0x0200003F,
        0xFF000000, 0x0000001A, 0x0000001B, 0x0000001C, 0x0000001D, 0x0000001E, 0x0000001F, 0x00000020,
        0x00000021, 0x00000022, 0x00000023, 0x00000024, 0x00000025, 0x00000026, 0x00000027, 0x00000028,
        0x00000029, 0x0000002A, 0x0000002B, 0x0000002C, 0x0000002D, 0x0000002E, 0x0000002F, 0x00000030,
        0x00000031, 0x00000032, 0x00000033, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
        0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000, 0xFF000000,
    ]

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
