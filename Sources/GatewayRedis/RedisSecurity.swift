import Dispatch
import Foundation
import GatewayCrypto
import GatewayIO
import GatewayStore
import Synchronization

/// Who connects, and how: the same for every connection of a store (every node of a cluster).
/// Never printed with its password (`description` and reflection hide it).
public struct RedisSecurity: Sendable, Equatable, CustomStringConvertible, CustomReflectable {
    /// The ACL user for `AUTH user password`; nil: `AUTH password` (Redis' `default` user).
    public var username: String?
    /// Sent with `AUTH` right after connecting; nil: no `AUTH`.
    public var password: [UInt8]?
    /// TLS towards the server (`rediss://`); nil: plain TCP.
    public var tls: TLSClientContext?
    /// The name verified in the server's certificate (and sent as SNI); nil: each node's host.
    public var tlsServerName: String?

    public init(username: String? = nil, password: [UInt8]? = nil, tls: TLSClientContext? = nil, tlsServerName: String? = nil) {
        self.username = username
        self.password = password
        self.tls = tls
        self.tlsServerName = tlsServerName
    }

    public static func == (a: RedisSecurity, b: RedisSecurity) -> Bool {
        a.username == b.username && a.password == b.password && a.tls === b.tls && a.tlsServerName == b.tlsServerName
    }

    public var description: String {
        var parts: [String] = []
        if let username { parts.append("user \(username)") }
        if password != nil { parts.append("password ***") }
        if tls != nil { parts.append("tls" + (tlsServerName.map { " (\($0))" } ?? "")) }
        return parts.isEmpty ? "none" : parts.joined(separator: ", ")
    }

    public var customMirror: Mirror { Mirror(self, children: ["description": description], displayStyle: .struct) }
}
