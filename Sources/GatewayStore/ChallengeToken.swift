import GatewayWire

/// A challenge's bytes as issued (at least 16). Clients send them back base64url-encoded.
public struct ChallengeToken: Hashable, Sendable {
    public let bytes: [UInt8]

    public init?(_ bytes: [UInt8]) {
        guard (16...64).contains(bytes.count) else { return nil }
        self.bytes = bytes
    }

    /// The bytes and their count in two calls (the synthesized hash feeds them one at a time).
    public func hash(into hasher: inout Hasher) {
        hasher.combine(bytes.count)
        bytes.withUnsafeBytes { hasher.combine(bytes: $0) }
    }
}
