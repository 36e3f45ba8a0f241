import GatewayHTTP
import GatewayIO

/// The protocols a listener serves.
public struct ServedProtocols: OptionSet, Sendable, Hashable {
    public let rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }
    /// HTTP/1.1 (and 1.0).
    public static let http1 = ServedProtocols(rawValue: 1)
    /// HTTP/2 over cleartext TCP with prior knowledge (RFC 9113 §3.3): the client starts with the preface.
    public static let h2c = ServedProtocols(rawValue: 2)
    /// HTTP/2 over TLS, chosen by ALPN `h2` (RFC 9113 §3.2).
    public static let h2 = ServedProtocols(rawValue: 4)
}
