/// The admin endpoint (health, readiness, metrics).
public struct AdminConfig: Sendable, Equatable {
    /// Default: `127.0.0.1:9090`. Must not collide with a listener's address.
    public var address: SocketAddressSpec

    public init(address: SocketAddressSpec = SocketAddressSpec(host: "127.0.0.1", port: 9090)) {
        self.address = address
    }
}
