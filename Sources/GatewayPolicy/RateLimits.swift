import Synchronization

/// Who an attest-endpoint request is counted against: an IPv4 address, or an IPv6 /64 (one
/// subscriber's prefix: a host picks any address in its /64 at will, so counting addresses would
/// count nothing). An IPv4-mapped IPv6 address (`::ffff:a.b.c.d`, a dual-stack listener) is IPv4.
public struct ClientKey: Hashable, Sendable, CustomStringConvertible {
    public enum Family: UInt8, Sendable {
        case ipv4 = 4
        case ipv6 = 6
    }

    public let family: Family
    /// IPv4: the address; IPv6: the first 64 bits. Big-endian, as on the wire.
    public let bits: UInt64

    public init(family: Family, bits: UInt64) {
        self.family = family
        self.bits = family == .ipv4 ? bits & 0xFFFF_FFFF : bits
    }

    /// From the 4 bytes of an IPv4 address or the 16 of an IPv6 address; nil for any other length.
    public init?(addressBytes raw: UnsafeRawBufferPointer) {
        func word(_ offset: Int, _ count: Int) -> UInt64 {
            var w: UInt64 = 0
            for i in offset..<(offset + count) { w = w << 8 | UInt64(raw[i]) }
            return w
        }
        switch raw.count {
        case 4:
            self.init(family: .ipv4, bits: word(0, 4))
        case 16:
            if word(0, 8) == 0, word(8, 4) == 0xFFFF {
                self.init(family: .ipv4, bits: word(12, 4))
            } else {
                self.init(family: .ipv6, bits: word(0, 8))
            }
        default:
            return nil
        }
    }

    /// `192.0.2.7`, or `2001:db8:0:1::/64`.
    public var description: String {
        switch family {
        case .ipv4:
            return (0..<4).map { String((bits >> (24 - 8 * $0)) & 0xFF) }.joined(separator: ".")
        case .ipv6:
            let groups = (0..<4).map { String((bits >> (48 - 16 * $0)) & 0xFFFF, radix: 16) }
            return groups.joined(separator: ":") + "::/64"
        }
    }
}

/// A token bucket's answer.
public enum RateDecision: Sendable, Equatable {
    case admitted
    /// Refused; a token is back after at most this many seconds (at least 1, for `Retry-After`).
    case limited(retryAfterSeconds: Int)
}

/// Refill and take one token: `tokens` grows by `ratePerSecond` per second up to `burst`.
@inline(__always)
func takeToken(tokens: inout Double, lastMillis: inout Int64, nowMillis: Int64, ratePerSecond: Double, burst: Double)
    -> RateDecision
{
    let elapsed = Double(max(0, nowMillis - lastMillis))
    tokens = min(burst, tokens + elapsed * ratePerSecond / 1000)
    lastMillis = max(lastMillis, nowMillis)
    if tokens >= 1 {
        tokens -= 1
        return .admitted
    }
    let wait = ((1 - tokens) / ratePerSecond).rounded(.up)
    return .limited(retryAfterSeconds: max(1, Int(min(wait, 86_400))))
}

/// One process-wide token bucket (`attest.registration_rate`). Rate and burst are passed on each
/// call, so that a reload changes them without losing the bucket's state.
public final class RateBucket: Sendable {
    private struct State {
        var tokens: Double
        var lastMillis: Int64
        var started: Bool
    }

    private let state = Mutex(State(tokens: 0, lastMillis: 0, started: false))

    public init() {}

    /// `nowMillis`: a monotonic clock. The bucket starts full.
    public func take(nowMillis: Int64, ratePerSecond: Double, burst: Int) -> RateDecision {
        state.withLock { s in
            if !s.started {
                s = State(tokens: Double(burst), lastMillis: nowMillis, started: true)
            }
            return takeToken(
                tokens: &s.tokens, lastMillis: &s.lastMillis, nowMillis: nowMillis, ratePerSecond: ratePerSecond,
                burst: Double(burst))
        }
    }
}

/// A token bucket per client (`ClientKey`) in a table of fixed size, shared by every event loop
/// (the kernel may spread one client's connections over several loops: only per-process accounting
/// sees its whole rate).
///
/// The table is set-associative: a client's key hashes (with a per-process random seed) to one of
/// 16 shards, each behind its own lock, and within it to a set of 8 slots; a client not in its set
/// takes the set's least recently seen slot. So memory is fixed (`capacity` × 24 bytes) and each
/// decision touches one lock and three cache lines. Forgetting a client only ever lets it through
/// sooner (its bucket restarts full), and a bucket idle for `burst / rate` is full anyway, so
/// with `capacity` well above the clients active within that time nothing is lost.
public final class ClientRateLimiter: Sendable {
    struct Slot {
        /// 0: empty; else `ClientKey.Family` raw value.
        var family: UInt8 = 0
        var tokens: Float = 0
        var bits: UInt64 = 0
        var lastMillis: Int64 = 0
    }

    final class Shard: Sendable {
        let slots: Mutex<ContiguousArray<Slot>>
        init(count: Int) { slots = Mutex(ContiguousArray(repeating: Slot(), count: count)) }
    }

    static let ways = 8
    static let shardCount = 16

    /// Slots in all (a power of two, at least 8 × 16).
    public let capacity: Int
    private let shards: [Shard]
    private let setMask: Int
    private let seed: UInt64

    /// `capacity` is rounded up to a power of two (at least 128).
    public init(capacity: Int) {
        var n = Self.ways * Self.shardCount
        while n < capacity { n *= 2 }
        self.capacity = n
        let perShard = n / Self.shardCount
        shards = (0..<Self.shardCount).map { _ in Shard(count: perShard) }
        setMask = perShard / Self.ways - 1
        seed = UInt64.random(in: .min ... .max)
    }

    /// Bytes of the table (fixed at creation).
    public var memoryBytes: Int { capacity * MemoryLayout<Slot>.stride }

    /// Clients currently tracked (a walk over the table, for tests).
    public var trackedClients: Int {
        shards.reduce(0) { n, shard in n + shard.slots.withLock { $0.reduce(0) { $0 + ($1.family == 0 ? 0 : 1) } } }
    }

    /// Takes one token from `key`'s bucket. `nowMillis`: a monotonic clock.
    public func admit(_ key: ClientKey, nowMillis: Int64, ratePerSecond: Double, burst: Int) -> RateDecision {
        var h = key.bits ^ seed ^ (UInt64(key.family.rawValue) << 56)
        h = (h ^ (h >> 30)) &* 0xBF58_476D_1CE4_E5B9
        h = (h ^ (h >> 27)) &* 0x94D0_49BB_1331_11EB
        h ^= h >> 31
        let shard = shards[Int(h & UInt64(Self.shardCount - 1))]
        let base = (Int(truncatingIfNeeded: h >> 8) & setMask) * Self.ways
        let family = key.family.rawValue
        let burstValue = Double(burst)
        return shard.slots.withLock { slots in
            var victim = base
            var victimSeen = Int64.max
            var found = -1
            for i in base..<(base + Self.ways) {
                let s = slots[i]
                if s.family == family && s.bits == key.bits {
                    found = i
                    break
                }
                let seen = s.family == 0 ? Int64.min : s.lastMillis
                if seen < victimSeen {
                    victim = i
                    victimSeen = seen
                }
            }
            if found < 0 {
                found = victim
                slots[found] = Slot(family: family, tokens: Float(burstValue), bits: key.bits, lastMillis: nowMillis)
            }
            var tokens = Double(slots[found].tokens)
            var last = slots[found].lastMillis
            let decision = takeToken(
                tokens: &tokens, lastMillis: &last, nowMillis: nowMillis, ratePerSecond: ratePerSecond, burst: burstValue)
            slots[found].tokens = Float(tokens)
            slots[found].lastMillis = last
            return decision
        }
    }
}
