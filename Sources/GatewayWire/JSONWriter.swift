/// A minimal JSON object writer that keeps keys in the order written (so `"valid"` or `"error"` comes
/// first in every answer) and escapes strings per RFC 8259. For the gateway's own small answers and
/// the CLI; parsing JSON is not its job.
public struct JSONObject: Sendable, CustomStringConvertible {
    public indirect enum Value: Sendable {
        case string(String)
        case int(Int64)
        case bool(Bool)
        case null
        case object(JSONObject)
        case array([Value])
    }

    private var fields: [(String, Value)] = []

    public init() {}

    public mutating func set(_ key: String, _ value: Value) {
        if let i = fields.firstIndex(where: { $0.0 == key }) { fields[i].1 = value } else { fields.append((key, value)) }
    }

    public mutating func set(_ key: String, _ value: String?) { set(key, value.map(Value.string) ?? .null) }
    public mutating func set(_ key: String, _ value: Bool) { set(key, .bool(value)) }
    public mutating func set(_ key: String, _ value: some BinaryInteger) { set(key, .int(Int64(value))) }

    /// Appends `other`'s fields (replacing same-named ones), keeping this object's order first.
    public mutating func merge(_ other: JSONObject) {
        for (k, v) in other.fields { set(k, v) }
    }

    public var description: String {
        var out: [UInt8] = []
        out.reserveCapacity(256)
        Self.write(.object(self), to: &out)
        return String(decoding: out, as: UTF8.self)
    }

    /// Written as UTF-8 bytes (every piece comes from a `String`, so the whole is valid UTF-8).
    private static func write(_ v: Value, to out: inout [UInt8]) {
        switch v {
        case .string(let s): writeString(s, to: &out)
        case .int(let n): out.append(contentsOf: String(n).utf8)
        case .bool(let b): out.append(contentsOf: (b ? "true" : "false").utf8)
        case .null: out.append(contentsOf: "null".utf8)
        case .array(let a):
            out.append(UInt8(ascii: "["))
            for (i, e) in a.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                write(e, to: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .object(let o):
            out.append(UInt8(ascii: "{"))
            for (i, (k, e)) in o.fields.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                writeString(k, to: &out)
                out.append(UInt8(ascii: ":"))
                write(e, to: &out)
            }
            out.append(UInt8(ascii: "}"))
        }
    }

    /// RFC 8259 escaping over the string's UTF-8: runs that need none are copied whole; `"`, `\`,
    /// the C0 controls, DEL and U+2028/U+2029 (line breaks to JavaScript) are escaped (`\n`, `\r`,
    /// `\t` by name, the others as `\u00XX` / `\u2028`).
    private static func writeString(_ s: String, to out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        var text = s
        text.withUTF8 { u in
            var start = 0
            var i = 0
            while i < u.count {
                let b = u[i]
                var escape: StaticString? = nil
                var code: UInt32 = 0
                var width = 1
                switch b {
                case UInt8(ascii: "\""): escape = "\\\""
                case UInt8(ascii: "\\"): escape = "\\\\"
                case 0x0a: escape = "\\n"
                case 0x0d: escape = "\\r"
                case 0x09: escape = "\\t"
                case 0x00..<0x20, 0x7f: code = UInt32(b)
                case 0xe2 where i + 2 < u.count && u[i + 1] == 0x80 && (u[i + 2] == 0xa8 || u[i + 2] == 0xa9):
                    code = u[i + 2] == 0xa8 ? 0x2028 : 0x2029
                    width = 3
                default:
                    i += 1
                    continue
                }
                out.append(contentsOf: UnsafeBufferPointer(rebasing: u[start..<i]))
                if let e = escape {
                    e.withUTF8Buffer { out.append(contentsOf: $0) }
                } else {
                    out.append(contentsOf: "\\u".utf8)
                    for shift in stride(from: 12, through: 0, by: -4) {
                        out.append(Hex.lowercaseDigit(UInt8(truncatingIfNeeded: code >> UInt32(shift)) & 0x0f))
                    }
                }
                i += width
                start = i
            }
            out.append(contentsOf: UnsafeBufferPointer(rebasing: u[start..<u.count]))
        }
        out.append(UInt8(ascii: "\""))
    }
}
