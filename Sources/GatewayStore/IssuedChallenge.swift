import GatewayWire

public struct IssuedChallenge: Sendable, Equatable {
    public let token: ChallengeToken
    public let expiresAtMillis: Int64

    public init(token: ChallengeToken, expiresAtMillis: Int64) {
        self.token = token
        self.expiresAtMillis = expiresAtMillis
    }
}
