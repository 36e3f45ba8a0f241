import GatewayWire

public struct StoreStatistics: Sendable, Equatable {
    public var keys: Int
    public var liveChallenges: Int

    public init(keys: Int, liveChallenges: Int) {
        self.keys = keys
        self.liveChallenges = liveChallenges
    }
}
