import GatewayWire

public struct ChallengeRequest: Sendable, Equatable {
    /// nil: usable for either purpose.
    public var purpose: ChallengePurpose?
    /// nil: usable with any key.
    public var keyID: KeyID?
    public var ttlMillis: Int64
    /// Issued with the response to a verified assertion of `keyID` (`X-App-Attest-Next-Challenge`),
    /// not asked for at the challenge endpoint, where anyone can name any key. The memory store
    /// replaces such challenges last when a key reaches its per-key limit (docs/store.md).
    public var chained: Bool

    public init(purpose: ChallengePurpose?, keyID: KeyID?, ttlMillis: Int64, chained: Bool = false) {
        self.purpose = purpose
        self.keyID = keyID
        self.ttlMillis = ttlMillis
        self.chained = chained
    }
}
