/// What every target shares to read its input: the bytes, a deterministic generator for the choices
/// a harness makes from them (where to split a stream, which requests to answer), and the trap that
/// reports a broken property.

/// SplitMix64: a small, fast, deterministic generator. Seeded from input bytes, so that libFuzzer
/// controls every choice a harness makes and a crasher replays exactly.
public struct FuzzRandom {
    private var state: UInt64

    public init(seed: UInt64) { state = seed }

    /// Seeded from `bytes` (FNV-1a over them, then the count).
    public init<C: Collection>(bytes: C) where C.Element == UInt8 {
        var h: UInt64 = 0xcbf2_9ce4_8422_2325
        for b in bytes { h = (h ^ UInt64(b)) &* 0x0000_0100_0000_01b3 }
        state = h ^ UInt64(bytes.count)
    }

    public mutating func next() -> UInt64 {
        state &+= 0x9e37_79b9_7f4a_7c15
        var z = state
        z = (z ^ (z >> 30)) &* 0xbf58_476d_1ce4_e5b9
        z = (z ^ (z >> 27)) &* 0x94d0_49bb_1331_11eb
        return z ^ (z >> 31)
    }

    /// 0 ..< n (n > 0).
    public mutating func below(_ n: Int) -> Int { Int(next() % UInt64(n)) }

    public mutating func chance(_ oneIn: Int) -> Bool { below(oneIn) == 0 }
}

public enum FuzzInput {
    /// The input as an array.
    public static func bytes(_ data: UnsafePointer<UInt8>, _ size: Int) -> [UInt8] {
        Array(UnsafeBufferPointer(start: data, count: size))
    }

    /// Up to `selector % 8` cut points in `0...count`, ascending (repeats allowed: an empty piece),
    /// chosen by `selector` and `count`: how a stream of `count` bytes arrives in pieces. Selector 0
    /// is one piece.
    public static func cuts(selector: UInt8, count: Int) -> [Int] {
        let n = Int(selector % 8)
        guard n > 0 else { return [] }
        var rng = FuzzRandom(seed: UInt64(selector) << 32 | UInt64(truncatingIfNeeded: count))
        return (0..<n).map { _ in rng.below(count + 1) }.sorted()
    }

    /// `bytes` cut at `cuts` (ascending, within `0...bytes.count`): the pieces, in order.
    public static func pieces(_ bytes: ArraySlice<UInt8>, cuts: [Int]) -> [ArraySlice<UInt8>] {
        var out: [ArraySlice<UInt8>] = []
        var from = bytes.startIndex
        for c in cuts {
            let end = bytes.startIndex + c
            out.append(bytes[from..<end])
            from = end
        }
        out.append(bytes[from..<bytes.endIndex])
        return out
    }
}

/// Reports a broken property: libFuzzer records the input as a crash.
public func fuzzFail(_ message: @autoclosure () -> String, file: StaticString = #fileID, line: UInt = #line) -> Never {
    fatalError("property broken: \(message())", file: file, line: line)
}
