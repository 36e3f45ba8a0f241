/// A route's `assertion.key_rate: {rate: 5/s, burst: 10}` (issue 27): a token bucket per attested
/// key on this route, checked in the store's commit (docs/configuration.md, "Budgets per key").
public struct KeyRateConfig: Sendable, Equatable {
    /// Sustained verified requests per key.
    public var rate: Rate
    /// Requests a key may send at once after being idle (the bucket's size). Default: two seconds'
    /// worth of the rate, at least 1 (`ClientRateConfig.defaultBurst`).
    public var burst: Int

    public init(rate: Rate, burst: Int? = nil) {
        self.rate = rate
        self.burst = burst ?? ClientRateConfig.defaultBurst(rate)
    }

    public static let burstRange = 1...ClientRateConfig.maximumBurst
}
