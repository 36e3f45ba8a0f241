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
        var out = ""
        Self.write(.object(self), to: &out)
        return out
    }

    private static func write(_ v: Value, to out: inout String) {
        switch v {
        case .string(let s): writeString(s, to: &out)
        case .int(let n): out += String(n)
        case .bool(let b): out += b ? "true" : "false"
        case .null: out += "null"
        case .array(let a):
            out += "["
            for (i, e) in a.enumerated() {
                if i > 0 { out += "," }
                write(e, to: &out)
            }
            out += "]"
        case .object(let o):
            out += "{"
            for (i, (k, e)) in o.fields.enumerated() {
                if i > 0 { out += "," }
                writeString(k, to: &out)
                out += ":"
                write(e, to: &out)
            }
            out += "}"
        }
    }

    private static func writeString(_ s: String, to out: inout String) {
        out += "\""
        for scalar in s.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case _ where scalar.value < 0x20 || scalar.value == 0x7f || scalar.value == 0x2028 || scalar.value == 0x2029:
                let hex = String(scalar.value, radix: 16)
                out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            default: out.unicodeScalars.append(scalar)
            }
        }
        out += "\""
    }
}
