import Synchronization

/// The memory store's token buckets of `KeyRateLimit` (issue 27): one per (key, route), in a table
/// of fixed size allocated on first use (`capacity` slots of `slotBytes`: 64 B, 16 MiB; nothing while no
/// route sets `key_rate`).
///
/// The table is set-associative, as `ClientRateLimiter` is: 64 stripes behind their own locks, each
/// of sets of 8 slots; a bucket not in its set takes the set's least recently used slot. Forgetting a
/// bucket only lets its key through sooner (it starts full again), and a bucket idle for
/// `KeyRateLimit.idleMillis` is full anyway, so with the buckets active within that time well under
/// `capacity` nothing is lost. Buckets are per process and not journaled: a restart starts every
/// bucket full.
///
/// Always used under the key's shard lock (the store's commit): a key's commits are serialized by
/// it, so `peek` then `take` within one commit see the same bucket. The stripe locks are taken only
/// inside a shard lock, never the other way round.
final class KeyRateBuckets: Sendable {
    struct Slot {
        var key = KeyBits(w0: 0, w1: 0, w2: 0, w3: 0)
        var scope: UInt64 = 0
        var tokens: Double = 0
        var lastMillis: Int64 = 0
        var used = false
    }

    static let ways = 8
    static let stripeCount = 64
    /// Buckets in all: 262,144.
    static let capacity = 1 << 18
    static let slotBytes = MemoryLayout<Slot>.stride
    static let setsPerStripe = capacity / stripeCount / ways

    final class Stripe: Sendable {
        let slots = Mutex(ContiguousArray<Slot>())
    }

    private let stripes: [Stripe]

    init() {
        stripes = (0..<Self.stripeCount).map { _ in Stripe() }
    }

    /// Buckets currently held (a walk over the table, for tests).
    var count: Int { stripes.reduce(0) { n, s in n + s.slots.withLock { $0.reduce(0) { $0 + ($1.used ? 1 : 0) } } } }

    /// The slot index of (key, scope) in its stripe's set, the one to replace when it is absent.
    @inline(__always)
    private static func locate(_ slots: ContiguousArray<Slot>, base: Int, key: KeyBits, scope: UInt64) -> (Int, found: Bool) {
        var victim = base
        var victimSeen = Int64.max
        for i in base..<(base + ways) {
            let s = slots[i]
            if s.used && s.key == key && s.scope == scope { return (i, true) }
            let seen = s.used ? s.lastMillis : Int64.min
            if seen < victimSeen {
                victim = i
                victimSeen = seen
            }
        }
        return (victim, false)
    }

    @inline(__always)
    private func place(_ key: KeyBits, _ limit: KeyRateLimit) -> (stripe: Int, base: Int) {
        var h = key.w1 ^ limit.scopeHash
        h = (h ^ (h >> 30)) &* 0xBF58_476D_1CE4_E5B9
        h = (h ^ (h >> 27)) &* 0x94D0_49BB_1331_11EB
        h ^= h >> 31
        return (Int(h & UInt64(Self.stripeCount - 1)), Int(truncatingIfNeeded: (h >> 8) % UInt64(Self.setsPerStripe)) * Self.ways)
    }

    /// nil when the key has a token for this commit; else the seconds until it has one. Changes nothing.
    func refusal(_ key: KeyBits, _ limit: KeyRateLimit, nowMillis: Int64) -> Int? {
        let (stripe, base) = place(key, limit)
        return stripes[stripe].slots.withLock { slots -> Int? in
            guard !slots.isEmpty else { return nil }
            let (i, found) = Self.locate(slots, base: base, key: key, scope: limit.scopeHash)
            guard found else { return nil }  // a bucket not held is full
            let tokens = limit.refill(slots[i].tokens, lastMillis: slots[i].lastMillis, nowMillis: nowMillis)
            return tokens >= 1 ? nil : limit.retryAfter(tokens)
        }
    }

    /// Takes the commit's token (after `refusal` answered nil and the commit went through).
    func take(_ key: KeyBits, _ limit: KeyRateLimit, nowMillis: Int64) {
        let (stripe, base) = place(key, limit)
        stripes[stripe].slots.withLock { slots in
            if slots.isEmpty { slots = ContiguousArray(repeating: Slot(), count: Self.capacity / Self.stripeCount) }
            let (i, found) = Self.locate(slots, base: base, key: key, scope: limit.scopeHash)
            var tokens = Double(limit.burst)
            var last = nowMillis
            if found {
                tokens = limit.refill(slots[i].tokens, lastMillis: slots[i].lastMillis, nowMillis: nowMillis)
                last = max(slots[i].lastMillis, nowMillis)
            }
            slots[i] = Slot(key: key, scope: limit.scopeHash, tokens: max(0, tokens - 1), lastMillis: last, used: true)
        }
    }
}
