import GatewayWire

public enum ChallengePurpose: String, Sendable, CaseIterable {
    case register
    case assert
}
