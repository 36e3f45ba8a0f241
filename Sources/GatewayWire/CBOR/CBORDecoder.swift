/// A strict, bounded CBOR decoder (RFC 8949) with no I/O.
///
/// - Definite lengths only; tags, indefinite lengths and reserved additional-information values are errors.
/// - A declared length or count larger than what the remaining input could hold is an error before any
///   allocation, so a 5-byte input cannot make the decoder reserve gigabytes.
/// - Nesting depth, the total number of items and string lengths are capped by `Limits`.
/// - Text strings must be valid UTF-8; duplicate map keys are an error.
public struct CBORDecoder: Sendable {
    public struct Limits: Sendable {
        public var maxDepth: Int
        public var maxItems: Int
        public var maxStringLength: Int

        public init(maxDepth: Int = 16, maxItems: Int = 4096, maxStringLength: Int = 1 << 20) {
            self.maxDepth = maxDepth
            self.maxItems = maxItems
            self.maxStringLength = maxStringLength
        }

        public static let `default` = Limits()
    }

    public let limits: Limits

    public init(limits: Limits = .default) { self.limits = limits }

    /// Decodes exactly one item that spans the whole input.
    public func decode(_ bytes: [UInt8]) throws(CBORError) -> CBORValue {
        let (value, end) = try decodePrefix(bytes, from: 0)
        if end != bytes.count {
            throw CBORError(offset: end, reason: "\(bytes.count - end) trailing byte(s) after the data item")
        }
        return value
    }

    /// Decodes one item starting at `offset`; returns it and the offset just past it.
    public func decodePrefix(_ bytes: [UInt8], from offset: Int) throws(CBORError) -> (CBORValue, Int) {
        guard offset >= 0 && offset <= bytes.count else { throw CBORError(offset: offset, reason: "offset outside the input") }
        let result: Result<(CBORValue, Int), CBORError> = bytes.withUnsafeBufferPointer { buf in
            Result { () throws(CBORError) in
                var state = State(buf: buf, pos: offset, items: 0, limits: limits)
                let v = try state.item(depth: 0)
                return (v, state.pos)
            }
        }
        return try result.get()
    }

    private struct State {
        let buf: UnsafeBufferPointer<UInt8>
        var pos: Int
        var items: Int
        let limits: Limits

        var remaining: Int { buf.count - pos }

        mutating func byte() throws(CBORError) -> UInt8 {
            guard pos < buf.count else { throw CBORError(offset: pos, reason: "unexpected end of input") }
            defer { pos += 1 }
            return buf[pos]
        }

        mutating func argument(_ info: UInt8, at start: Int) throws(CBORError) -> UInt64 {
            switch info {
            case 0..<24: return UInt64(info)
            case 24, 25, 26, 27:
                let n = 1 << Int(info - 24)
                guard remaining >= n else {
                    throw CBORError(offset: pos, reason: "unexpected end of input in a \(n)-byte argument")
                }
                var v: UInt64 = 0
                for _ in 0..<n { v = v << 8 | UInt64(buf[pos]); pos += 1 }
                return v
            case 31: throw CBORError(offset: start, reason: "indefinite lengths are not supported")
            default: throw CBORError(offset: start, reason: "reserved additional information \(info)")
            }
        }

        mutating func length(_ arg: UInt64, at start: Int, what: String) throws(CBORError) -> Int {
            guard arg <= UInt64(remaining) else {
                throw CBORError(offset: start, reason: "\(what) declares \(arg) bytes but only \(remaining) remain")
            }
            let n = Int(arg)
            guard n <= limits.maxStringLength else {
                throw CBORError(offset: start, reason: "\(what) of \(n) bytes exceeds the limit of \(limits.maxStringLength)")
            }
            return n
        }

        mutating func item(depth: Int) throws(CBORError) -> CBORValue {
            let start = pos
            items += 1
            guard items <= limits.maxItems else {
                throw CBORError(offset: start, reason: "more than \(limits.maxItems) data items")
            }
            let initial = try byte()
            let major = initial >> 5
            let info = initial & 0x1f
            switch major {
            case 0:
                return .unsigned(try argument(info, at: start))
            case 1:
                return .negative(try argument(info, at: start))
            case 2:
                let n = try length(try argument(info, at: start), at: start, what: "byte string")
                defer { pos += n }
                return .bytes(Array(buf[pos..<pos + n]))
            case 3:
                let n = try length(try argument(info, at: start), at: start, what: "text string")
                guard let s = String(validating: buf[pos..<pos + n], as: UTF8.self) else {
                    throw CBORError(offset: start, reason: "text string is not valid UTF-8")
                }
                pos += n
                return .text(s)
            case 4:
                let count = try argument(info, at: start)
                // Every element takes at least one byte: a count beyond the input is a lie.
                guard count <= UInt64(remaining) else {
                    throw CBORError(offset: start, reason: "array declares \(count) items but only \(remaining) bytes remain")
                }
                guard depth < limits.maxDepth else {
                    throw CBORError(offset: start, reason: "nesting deeper than \(limits.maxDepth)")
                }
                var out = [CBORValue]()
                out.reserveCapacity(Int(count))
                for _ in 0..<count { out.append(try item(depth: depth + 1)) }
                return .array(out)
            case 5:
                let count = try argument(info, at: start)
                guard count <= UInt64(remaining / 2) else {
                    throw CBORError(offset: start, reason: "map declares \(count) entries but only \(remaining) bytes remain")
                }
                guard depth < limits.maxDepth else {
                    throw CBORError(offset: start, reason: "nesting deeper than \(limits.maxDepth)")
                }
                var entries = [(key: CBORValue, value: CBORValue)]()
                entries.reserveCapacity(Int(count))
                // Small maps (every App Attest one) compare keys directly; large ones hash.
                var seen = count > 16 ? Set<CBORValue>() : nil
                for _ in 0..<count {
                    let keyOffset = pos
                    let k = try item(depth: depth + 1)
                    let duplicate = seen != nil ? !seen!.insert(k).inserted : entries.contains { $0.key == k }
                    guard !duplicate else {
                        throw CBORError(offset: keyOffset, reason: "duplicate map key \(k.debugSummary)")
                    }
                    let v = try item(depth: depth + 1)
                    entries.append((k, v))
                }
                return .map(CBORMap(entries))
            case 6:
                throw CBORError(offset: start, reason: "tags are not supported")
            default:
                switch info {
                case 20: return .bool(false)
                case 21: return .bool(true)
                case 22: return .null
                case 23: return .undefined
                case 24:
                    let v = try byte()
                    guard v >= 32 else { throw CBORError(offset: start, reason: "simple value \(v) in two bytes") }
                    return .simple(v)
                case 25:
                    let bits = UInt16(truncatingIfNeeded: try argument(info, at: start))
                    return .float(Double(Float16Bits.toFloat(bits)))
                case 26:
                    let bits = UInt32(truncatingIfNeeded: try argument(info, at: start))
                    return .float(Double(Float(bitPattern: bits)))
                case 27:
                    return .float(Double(bitPattern: try argument(info, at: start)))
                case 31:
                    throw CBORError(offset: start, reason: "unexpected break code")
                case 28, 29, 30:
                    throw CBORError(offset: start, reason: "reserved additional information \(info)")
                default:
                    return .simple(info)
                }
            }
        }
    }
}

/// Half-precision decoding without relying on `Float16` (unavailable on some platforms).
enum Float16Bits {
    static func toFloat(_ h: UInt16) -> Float {
        let sign: Float = (h & 0x8000) != 0 ? -1 : 1
        let exp = Int((h >> 10) & 0x1f)
        let frac = Float(h & 0x3ff)
        switch exp {
        case 0: return sign * frac * Float(sign: .plus, exponent: -24, significand: 1)
        case 31: return frac == 0 ? sign * .infinity : .nan
        default: return sign * (1 + frac / 1024) * Float(sign: .plus, exponent: exp - 15, significand: 1)
        }
    }
}

public struct CBORError: Error, Equatable, Sendable, CustomStringConvertible {
    public let offset: Int
    public let reason: String

    public init(offset: Int, reason: String) {
        self.offset = offset
        self.reason = reason
    }

    public var description: String { "CBOR: \(reason) (at byte \(offset))" }
}

extension CBORValue {
    /// A one-line rendering for error details; long strings are cut.
    public var debugSummary: String {
        switch self {
        case .unsigned(let n): return String(n)
        case .negative(let n): return n == .max ? "-18446744073709551616" : "-\(n + 1)"
        case .bytes(let b): return "h'\(Hex.encode(b.prefix(16)))\(b.count > 16 ? "…" : "")'"
        case .text(let s): return "\"\(s.prefix(40))\(s.count > 40 ? "…" : "")\""
        case .array(let a): return "[\(a.count) items]"
        case .map(let m): return "{\(m.count) entries}"
        case .bool(let b): return String(b)
        case .null: return "null"
        case .undefined: return "undefined"
        case .simple(let v): return "simple(\(v))"
        case .float(let d): return String(d)
        }
    }
}
