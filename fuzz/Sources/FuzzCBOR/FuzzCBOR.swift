// libFuzzer target: CBORDecoder on arbitrary bytes.
//
// Properties checked (a violation traps, which libFuzzer reports as a crash):
//   1. decode never crashes, whatever the input (only CBORError is thrown: typed throws).
//   2. If the input decodes to v, CBOREncoder.encode(v) decodes again to a value that is
//      structurally identical to v (floats compared by bit pattern, text by UTF-8 bytes, map entries
//      in order), and encoding is idempotent: encode(decode(encode(v))) == encode(v), byte for byte.
//   3. A decoded CBORError points inside the input (0 ... count).
//   4. No decoded map holds two keys that compare equal (the decoder refuses duplicates, whether it
//      checks a small map linearly or a large one through a Set).
//   5. For a lone half-precision float (0xf9 hh ll) the decoded value equals Swift's own Float16
//      conversion (an oracle for Float16Bits).
import GatewayWire

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    let value: CBORValue
    do {
        value = try CBORDecoder().decode(bytes)
    } catch {
        guard error.offset >= 0 && error.offset <= bytes.count else {
            fatalError("CBORError offset \(error.offset) outside input of \(bytes.count) bytes: \(error)")
        }
        return 0
    }

    guard noDuplicateKeys(value) else {
        fatalError("decoded map holds duplicate keys\ninput \(Hex.encode(bytes))")
    }

    let encoded = CBOREncoder.encode(value)
    let again: CBORValue
    do {
        again = try CBORDecoder().decode(encoded)
    } catch {
        fatalError("re-encoded value does not decode: \(error)\ninput   \(Hex.encode(bytes))\nencoded \(Hex.encode(encoded))")
    }
    guard identical(value, again) else {
        fatalError("round trip changed the value\ninput   \(Hex.encode(bytes))\nencoded \(Hex.encode(encoded))")
    }
    let encodedAgain = CBOREncoder.encode(again)
    guard encodedAgain == encoded else {
        fatalError("encoding is not idempotent\nfirst  \(Hex.encode(encoded))\nsecond \(Hex.encode(encodedAgain))")
    }

    #if arch(x86_64) || arch(arm64)
        if bytes.count == 3, bytes[0] == 0xf9, case .float(let d) = value {
            let bits = UInt16(bytes[1]) << 8 | UInt16(bytes[2])
            let expected = Double(Float(Float16(bitPattern: bits)))
            guard d.bitPattern == expected.bitPattern || (d.isNaN && expected.isNaN) else {
                fatalError("half float 0x\(String(bits, radix: 16)) decoded as \(d), Float16 says \(expected)")
            }
        }
    #endif
    return 0
}

/// Strict structural equality: unlike CBORValue's ==, NaN equals NaN with the same bits, 0.0 differs
/// from -0.0, and texts compare by their UTF-8 bytes (String == uses canonical equivalence).
func identical(_ a: CBORValue, _ b: CBORValue) -> Bool {
    switch (a, b) {
    case (.unsigned(let x), .unsigned(let y)): return x == y
    case (.negative(let x), .negative(let y)): return x == y
    case (.bytes(let x), .bytes(let y)): return x == y
    case (.text(let x), .text(let y)): return Array(x.utf8) == Array(y.utf8)
    case (.array(let x), .array(let y)):
        return x.count == y.count && zip(x, y).allSatisfy { identical($0, $1) }
    case (.map(let x), .map(let y)):
        return x.count == y.count
            && zip(x.entries, y.entries).allSatisfy { identical($0.key, $1.key) && identical($0.value, $1.value) }
    case (.bool(let x), .bool(let y)): return x == y
    case (.null, .null), (.undefined, .undefined): return true
    case (.simple(let x), .simple(let y)): return x == y
    case (.float(let x), .float(let y)): return x.bitPattern == y.bitPattern
    default: return false
    }
}

/// True when no map inside `v` has two keys equal under CBORValue's == (pairwise for maps of up to
/// 512 entries; larger ones are checked through a Set, as the decoder does).
func noDuplicateKeys(_ v: CBORValue) -> Bool {
    switch v {
    case .array(let a):
        return a.allSatisfy(noDuplicateKeys)
    case .map(let m):
        let keys = m.entries.map(\.key)
        if keys.count <= 512 {
            for i in keys.indices {
                for j in keys.indices where j > i && keys[i] == keys[j] { return false }
            }
        } else if Set(keys).count != keys.count {
            return false
        }
        return m.entries.allSatisfy { noDuplicateKeys($0.key) && noDuplicateKeys($0.value) }
    default:
        return true
    }
}
