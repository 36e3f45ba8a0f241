import GatewayWire

// MARK: - The protected request's store calls (one round trip on a network store)

/// What the assertion gate decided on of a key record besides its public key: a store that answers
/// `assertionKey` from a cache commits only while these are still the key's (else `.keyChanged`).
public struct CheckedKey: Sendable, Equatable {
    public var appID: String
    public var environment: KeyEnvironment
    public var validationCategory: UInt32?
    public var bundleVersion: String?

    public init(_ record: DeviceKeyRecord) {
        appID = record.appID
        environment = record.environment
        validationCategory = record.validationCategory
        bundleVersion = record.bundleVersion
    }
}
