/// Lowercase hexadecimal, for logs, details and the request binding (`hex(SHA256(body))`).
public enum Hex {
    private static let digits = Array("0123456789abcdef".utf8)

    /// Appends the lowercase hex of `bytes` to `out` (no string in between).
    public static func append(_ bytes: [UInt8], to out: inout [UInt8]) {
        digits.withUnsafeBufferPointer { d in
            for b in bytes {
                out.append(d[Int(b >> 4)])
                out.append(d[Int(b & 0x0f)])
            }
        }
    }

    /// The lowercase hex digit of a nibble (0…15), computed without a table.
    @inline(__always)
    public static func lowercaseDigit(_ nibble: UInt8) -> UInt8 {
        nibble < 10 ? nibble &+ 0x30 : nibble &+ 0x57
    }

    public static func encode(_ bytes: some Sequence<UInt8>) -> String {
        var out = [UInt8]()
        for b in bytes {
            out.append(digits[Int(b >> 4)])
            out.append(digits[Int(b & 0x0f)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Strict: an even number of hex digits, either case, nothing else.
    public static func decode(_ text: String) -> [UInt8]? {
        let u = Array(text.utf8)
        guard u.count % 2 == 0 else { return nil }
        var out = [UInt8]()
        out.reserveCapacity(u.count / 2)
        var i = 0
        while i < u.count {
            guard let hi = value(u[i]), let lo = value(u[i + 1]) else { return nil }
            out.append(hi << 4 | lo)
            i += 2
        }
        return out
    }

    private static func value(_ c: UInt8) -> UInt8? {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return c - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return c - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return c - UInt8(ascii: "A") + 10
        default: return nil
        }
    }
}
