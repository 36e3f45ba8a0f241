import GatewayWire

/// `record.risk`, when given, holds the verified `ATTEST` receipt's dates and the first refresh of
/// the risk metric (`nextRefreshMillis`); its metric is ignored: a key registered again keeps the
/// metric it had (the store clears only `stale`).
public struct Registration: Sendable, Equatable {
    public var record: DeviceKeyRecord
    public var receipt: [UInt8]
    public var challenge: ChallengeToken

    public init(record: DeviceKeyRecord, receipt: [UInt8], challenge: ChallengeToken) {
        self.record = record
        self.receipt = receipt
        self.challenge = challenge
    }
}
