/// The admin endpoint (health, readiness, metrics, explain).
public struct AdminConfig: Sendable, Equatable {
    /// Default: `127.0.0.1:9090`. Must not collide with a listener's address.
    public var address: SocketAddressSpec
    /// A file holding the bearer token that `/explain` (and every admin path but the health
    /// endpoints and, unless `protectMetrics`, `/metrics`) requires. Read at start and on every
    /// reload (`gatewayd check` reads it too); nil: those paths are open to whoever reaches the
    /// admin address. Resolved against the config file's directory.
    public var tokenFile: String?
    /// `/metrics` requires the token too. Needs `tokenFile`. Default false.
    public var protectMetrics: Bool
    /// Networks whose clients may connect to the admin listener; a connection from any other
    /// address is closed as soon as it is accepted, before a byte is read. Empty (default): any.
    public var allow: [IPNetwork]

    public init(
        address: SocketAddressSpec = SocketAddressSpec(host: "127.0.0.1", port: 9090), tokenFile: String? = nil,
        protectMetrics: Bool = false, allow: [IPNetwork] = []
    ) {
        self.address = address
        self.tokenFile = tokenFile
        self.protectMetrics = protectMetrics
        self.allow = allow
    }
}
