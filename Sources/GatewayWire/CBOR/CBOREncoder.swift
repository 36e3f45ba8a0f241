/// Deterministic CBOR encoding (RFC 8949 §4.2.1 preferred serialisation of arguments; map entries in
/// the order given). Used by the device simulator, tests and fuzz seeds; the gateway itself only decodes.
public enum CBOREncoder {
    public static func encode(_ value: CBORValue) -> [UInt8] {
        var out = [UInt8]()
        append(value, to: &out)
        return out
    }

    public static func append(_ value: CBORValue, to out: inout [UInt8]) {
        switch value {
        case .unsigned(let n): head(0, n, &out)
        case .negative(let n): head(1, n, &out)
        case .bytes(let b): head(2, UInt64(b.count), &out); out += b
        case .text(let s): let u = Array(s.utf8); head(3, UInt64(u.count), &out); out += u
        case .array(let a): head(4, UInt64(a.count), &out); for v in a { append(v, to: &out) }
        case .map(let m):
            head(5, UInt64(m.count), &out)
            for e in m.entries { append(e.key, to: &out); append(e.value, to: &out) }
        case .bool(let b): out.append(b ? 0xf5 : 0xf4)
        case .null: out.append(0xf6)
        case .undefined: out.append(0xf7)
        case .simple(let v): if v < 24 { out.append(0xe0 | v) } else { out += [0xf8, v] }
        case .float(let d):
            out.append(0xfb)
            let bits = d.bitPattern
            for shift in stride(from: 56, through: 0, by: -8) { out.append(UInt8(truncatingIfNeeded: bits >> UInt64(shift))) }
        }
    }

    private static func head(_ major: UInt8, _ n: UInt64, _ out: inout [UInt8]) {
        let m = major << 5
        switch n {
        case 0..<24: out.append(m | UInt8(n))
        case 24...0xff: out += [m | 24, UInt8(n)]
        case 0x100...0xffff: out += [m | 25, UInt8(n >> 8), UInt8(n & 0xff)]
        case 0x10000...0xffff_ffff:
            out += [m | 26, UInt8(n >> 24), UInt8((n >> 16) & 0xff), UInt8((n >> 8) & 0xff), UInt8(n & 0xff)]
        default:
            out.append(m | 27)
            for shift in stride(from: 56, through: 0, by: -8) { out.append(UInt8(truncatingIfNeeded: n >> UInt64(shift))) }
        }
    }
}
