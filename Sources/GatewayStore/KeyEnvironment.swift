import GatewayWire

/// Apple's attestation environment (the aaguid).
public enum KeyEnvironment: UInt8, Sendable, CaseIterable {
    case development = 0
    case production = 1

    public var name: String { self == .development ? "development" : "production" }
}
