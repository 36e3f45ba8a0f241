/// A key's counter window (docs/store.md, "Counter window"): the highest accepted counter and which
/// of the 63 counters below it were skipped and are still acceptable, like IPsec's anti-replay
/// window (RFC 4303 §3.4.3).
///
/// Every accepted counter updates it, whatever the route: a counter above `highest` moves the
/// window up (the counters it skipped become open, `highest` itself closed), an open counter
/// below it is closed. A route without a window (`width` 0 or 1) accepts only counters above
/// `highest`; a route with `counter_window: N` also accepts an open counter above `highest − N`.
/// Each counter is accepted at most once: nothing ever reopens a closed counter.
///
/// Pure and allocation-free: the memory store keeps `gaps` in the key's record, its journal and its
/// snapshots; the Redis store in the key's hash.
public struct CounterWindow: Sendable, Equatable, CustomStringConvertible {
    /// Counters below `highest` the window tracks (a route window of 64 reaches 63 of them).
    public static let span = 63
    /// The widest route window (`assertion.counter_window`).
    public static let maxWidth = span + 1
    static let mask: UInt64 = (1 << 63) - 1

    /// The highest accepted counter (0 right after attestation).
    public var highest: UInt32
    /// Bit i set: counter `highest − 1 − i` was skipped and has not been accepted (open). Bit 63 is
    /// always clear.
    public var gaps: UInt64

    public init(highest: UInt32, gaps: UInt64 = 0) {
        self.highest = highest
        self.gaps = gaps & Self.mask
    }

    /// The window once `counter` is accepted by a route window of `width` (0 or 1: none), or nil when
    /// it is refused (not above `highest`, and not an open counter above `highest − width`).
    @inline(__always)
    public func accepting(_ counter: UInt32, width: Int) -> CounterWindow? {
        if counter > highest { return CounterWindow(highest: counter, gaps: aligned(to: counter)) }
        let distance = Int(highest - counter)
        guard distance >= 1, distance < width, distance <= Self.span else { return nil }
        let bit = UInt64(1) << UInt64(distance - 1)
        guard gaps & bit != 0 else { return nil }
        return CounterWindow(highest: highest, gaps: gaps & ~bit)
    }

    /// `gaps` as seen from `top` ≥ `highest`: the counters between `highest` and `top` are open (not
    /// accepted yet), `highest` is closed, the rest keeps its state; beyond the span, forgotten.
    @inline(__always)
    func aligned(to top: UInt32) -> UInt64 {
        let d = UInt64(top - highest)
        if d == 0 { return gaps }
        let shifted: UInt64 = d >= 64 ? 0 : gaps << d
        let skipped: UInt64 = d - 1 >= 64 ? .max : (1 << (d - 1)) - 1
        return (shifted | skipped) & Self.mask
    }

    /// What both windows say together: a counter is closed if either closed it (the higher
    /// `highest`, the open counters of both). Commutative, associative and idempotent, so a journal
    /// replayed over a snapshot that already holds some of its records ends in the same window,
    /// and a record can only close counters, never reopen one.
    public func merged(with other: CounterWindow) -> CounterWindow {
        let top = max(highest, other.highest)
        return CounterWindow(highest: top, gaps: aligned(to: top) & other.aligned(to: top))
    }

    /// The open counters a route window of `width` still accepts below `highest` (bit i: counter
    /// `highest − 1 − i`); 0 without a window.
    public func open(width: Int) -> UInt64 {
        guard width > 1 else { return 0 }
        let bits = min(width - 1, Self.span)
        return gaps & ((1 << UInt64(bits)) - 1)
    }

    /// The lowest counter a route window of `width` can accept (a counter at or below `floor − 1` is
    /// refused whatever the bitmap says): `highest − width + 1`, at least 1; `highest + 1` without a
    /// window.
    public func floor(width: Int) -> UInt32 {
        guard width > 1 else { return highest &+ 1 }
        let w = UInt32(min(width, Self.maxWidth))
        return highest >= w ? highest - w + 1 : 1
    }

    /// The open counters of `open(width:)`, ascending.
    public func openCounters(width: Int) -> [UInt32] {
        let bits = open(width: width)
        var out: [UInt32] = []
        var i = Self.span - 1
        while i >= 0 {
            if bits & (1 << UInt64(i)) != 0, UInt32(i) < highest { out.append(highest - 1 - UInt32(i)) }
            i -= 1
        }
        return out
    }

    public var description: String {
        "highest \(highest), open below it: \(openCounters(width: Self.maxWidth).map(String.init).joined(separator: ","))"
    }
}
