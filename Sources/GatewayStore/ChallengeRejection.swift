import GatewayWire

public enum ChallengeRejection: String, Sendable, Equatable, CaseIterable {
    case unknown = "challenge_unknown"
    case expired = "challenge_expired"
    case consumed = "challenge_consumed"
    /// Issued for the other purpose.
    case wrongPurpose = "challenge_wrong_purpose"
    /// Issued for another key.
    case wrongKey = "challenge_wrong_key"
}
