/// A listen address as written: `0.0.0.0:8080`, `[::1]:9090`, `localhost:8080`, or `:8080`.
///
/// `host` is an IPv4 address, an IPv6 address without brackets, a host name, or empty for every
/// interface (`:8080`). Port 0 asks the system for a free port (tests). Nothing is resolved here.
public struct SocketAddressSpec: Sendable, Hashable, CustomStringConvertible {
    public var host: String
    public var port: UInt16

    public init(host: String, port: UInt16) {
        self.host = host
        self.port = port
    }

    /// True for `:PORT`, `0.0.0.0` and `::`: the address takes the port on every interface.
    public var isWildcard: Bool {
        host.isEmpty || host == "0.0.0.0" || HostSyntax.isIPv6(host) && host.allSatisfy { $0 == ":" || $0 == "0" }
    }

    /// Whether binding both would collide: same port (not 0) and the same host, or either a wildcard.
    public func conflicts(with other: SocketAddressSpec) -> Bool {
        guard port == other.port, port != 0 else { return false }
        return isWildcard || other.isWildcard || host.lowercased() == other.host.lowercased()
    }

    /// The address as it would be written in gateway.yaml (IPv6 hosts bracketed).
    public var description: String {
        host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
    }
}
