import GatewayWire

public enum ChallengeState: Sendable, Equatable {
    /// How long an expired challenge is still known as `.expired` before it is removed (then
    /// `.unknown`), in both stores: a client that used it late learns `challenge_expired` whatever
    /// moment the memory store's sweep ran or Redis expired the key (docs/client-contract.md).
    public static let expiredGraceMillis: Int64 = 10_000

    /// Never issued, removed `expiredGraceMillis` after expiry, or retired by a restart after an unclean stop.
    case unknown
    case expired(expiresAtMillis: Int64)
    case consumed
    case valid(purpose: ChallengePurpose?, keyID: KeyID?, expiresAtMillis: Int64)
}
