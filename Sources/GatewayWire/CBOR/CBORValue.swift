/// A decoded CBOR data item (RFC 8949), limited to what App Attest and WebAuthn use:
/// integers, byte and text strings, arrays, maps and simple values (including floats).
/// Tags and indefinite lengths are refused by the decoder.
public indirect enum CBORValue: Hashable, Sendable {
    case unsigned(UInt64)
    /// The negative integer `-1 - n`.
    case negative(UInt64)
    case bytes([UInt8])
    case text(String)
    case array([CBORValue])
    case map(CBORMap)
    case bool(Bool)
    case null
    case undefined
    /// Simple values other than false, true, null and undefined.
    case simple(UInt8)
    case float(Double)

    /// The value as a signed integer, when it is one that fits.
    public var int: Int64? {
        switch self {
        case .unsigned(let n): return n <= UInt64(Int64.max) ? Int64(n) : nil
        case .negative(let n): return n <= UInt64(Int64.max) ? -1 - Int64(n) : nil
        default: return nil
        }
    }

    public var bytes: [UInt8]? { if case .bytes(let b) = self { b } else { nil } }
    public var text: String? { if case .text(let s) = self { s } else { nil } }
    public var map: CBORMap? { if case .map(let m) = self { m } else { nil } }
    public var array: [CBORValue]? { if case .array(let a) = self { a } else { nil } }

    /// A short name of the major kind, for error details.
    public var kindName: String {
        switch self {
        case .unsigned, .negative: "integer"
        case .bytes: "byte string"
        case .text: "text string"
        case .array: "array"
        case .map: "map"
        case .bool: "boolean"
        case .null: "null"
        case .undefined: "undefined"
        case .simple: "simple value"
        case .float: "float"
        }
    }
}

/// A CBOR map in wire order. Keys are unique (the decoder refuses duplicates).
public struct CBORMap: Hashable, Sendable {
    public private(set) var entries: [(key: CBORValue, value: CBORValue)]

    public init(_ entries: [(key: CBORValue, value: CBORValue)] = []) { self.entries = entries }

    public var count: Int { entries.count }

    public subscript(key: CBORValue) -> CBORValue? {
        for e in entries where e.key == key { return e.value }
        return nil
    }

    public subscript(text key: String) -> CBORValue? { self[.text(key)] }

    public subscript(int key: Int64) -> CBORValue? {
        self[key >= 0 ? .unsigned(UInt64(key)) : .negative(UInt64(-1 - key))]
    }

    public mutating func append(_ key: CBORValue, _ value: CBORValue) { entries.append((key, value)) }

    public static func == (a: CBORMap, b: CBORMap) -> Bool {
        a.entries.count == b.entries.count && zip(a.entries, b.entries).allSatisfy { $0.key == $1.key && $0.value == $1.value }
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(entries.count)
        for e in entries {
            hasher.combine(e.key)
            hasher.combine(e.value)
        }
    }
}
