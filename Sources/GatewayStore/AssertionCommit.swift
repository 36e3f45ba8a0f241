import GatewayWire

public struct AssertionCommit: Sendable, Equatable {
    public var keyID: KeyID
    public var counter: UInt32
    /// nil on routes whose challenge policy lets a request go without one.
    public var challenge: ChallengeToken?
    /// The route's `assertion.counter_window` (1…64), or 0 without one: a counter below the stored
    /// one is accepted if it is above the stored one minus this and has never been accepted
    /// (`CounterWindow`).
    public var counterWindow: Int
    /// The route's `assertion.key_rate` (issue 27): the key's bucket must hold a token, else
    /// `.keyRateLimited` and nothing changes; nil: no budget.
    public var keyRate: KeyRateLimit?

    public init(keyID: KeyID, counter: UInt32, challenge: ChallengeToken?, counterWindow: Int = 0, keyRate: KeyRateLimit? = nil) {
        self.keyID = keyID
        self.counter = counter
        self.challenge = challenge
        self.counterWindow = counterWindow
        self.keyRate = keyRate
    }
}
