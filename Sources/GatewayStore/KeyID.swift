import GatewayWire

/// SHA-256 of a device public key: exactly 32 bytes.
public struct KeyID: Hashable, Sendable, CustomStringConvertible {
    public let bytes: [UInt8]

    public init?(_ bytes: [UInt8]) {
        guard bytes.count == 32 else { return nil }
        self.bytes = bytes
    }

    /// Standard base64 with padding (how Apple's APIs print key ids).
    public var description: String { Base64.encode(bytes) }

    /// The 32 bytes in one call (the synthesized hash feeds them to the hasher one at a time).
    public func hash(into hasher: inout Hasher) { bytes.withUnsafeBytes { hasher.combine(bytes: $0) } }
}
