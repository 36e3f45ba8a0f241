/// A route's budget per attested key (`assertion.key_rate: {rate, burst}`, issue 27): a token
/// bucket of `burst` tokens refilled at `count` per `periodMillis`, one per (key, route). The store
/// checks it inside the commit's atomic step, after every other check of the commit passed: a key
/// over its budget gets `.keyRateLimited` and nothing changes (the challenge stays unconsumed, the
/// counter where it was, the bucket as it was); an accepted commit takes its token in the same step.
///
/// The memory store and the Redis commit script run the same arithmetic (`refill`, `retryAfter`),
/// in doubles, from the caller's clock (`nowMillis`); a clock that goes back refills nothing.
public struct KeyRateLimit: Sendable, Hashable {
    /// Tokens added per `periodMillis` (1…1,000,000).
    public let count: Int
    /// 1,000 (per second), 60,000 (per minute) or 3,600,000 (per hour).
    public let periodMillis: Int64
    /// The bucket's size: requests a key may send at once after being idle (1…1,000,000).
    public let burst: Int
    /// Whose bucket: the route's name (a key has one bucket per route that sets `key_rate`).
    public let scope: String
    /// `scope` hashed (FNV-1a), for the memory store's table.
    let scopeHash: UInt64

    public init(count: Int, periodMillis: Int64, burst: Int, scope: String) {
        precondition(count >= 1 && periodMillis >= 1 && burst >= 1, "KeyRateLimit: count, period and burst must be at least 1")
        self.count = count
        self.periodMillis = periodMillis
        self.burst = burst
        self.scope = scope
        var h: UInt64 = 0xCBF2_9CE4_8422_2325
        for b in scope.utf8 { h = (h ^ UInt64(b)) &* 0x100_0000_01B3 }
        scopeHash = h
    }

    /// The bucket `elapsed` after it held `tokens`: refilled by `count` per `periodMillis`, up to `burst`.
    @inline(__always)
    func refill(_ tokens: Double, lastMillis: Int64, nowMillis: Int64) -> Double {
        let elapsed = Double(max(0, nowMillis - lastMillis))
        return min(Double(burst), tokens + elapsed * Double(count) / Double(periodMillis))
    }

    /// Seconds until a bucket holding `tokens` (< 1) has one again: rounded up, 1 to 86,400.
    @inline(__always)
    func retryAfter(_ tokens: Double) -> Int {
        let wait = ((1 - tokens) * Double(periodMillis) / Double(count) / 1000).rounded(.up)
        return max(1, Int(min(wait, 86_400)))
    }

    /// How long an idle bucket matters: the time it takes to refill from empty, plus a second. A
    /// bucket older than this is full, so Redis expires it then (an idle key costs nothing).
    public var idleMillis: Int64 {
        let full = (Double(burst) * Double(periodMillis) / Double(count)).rounded(.up)
        return Int64(min(full, 366 * 86_400_000)) + 1_000
    }

    /// `5/s, burst 10`: as `explain` names the limit.
    public var description: String {
        let unit =
            switch periodMillis {
            case 1_000: "s"
            case 60_000: "m"
            case 3_600_000: "h"
            default: "\(periodMillis)ms"
            }
        return "\(count)/\(unit)"
    }
}
