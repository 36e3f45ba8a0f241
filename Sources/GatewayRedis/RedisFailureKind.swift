import Dispatch
import Foundation
import GatewayCrypto
import GatewayIO
import GatewayStore
import Synchronization

/// Why a connection is down, in the categories an operator acts on (readiness, logs).
public enum RedisFailureKind: String, Sendable, Equatable {
    /// Name resolution, TCP connect, a broken or silent connection.
    case unreachable
    /// The TLS handshake (e.g. the server's certificate does not verify) or a TLS record failed.
    case tls
    /// The server refused the credentials (`WRONGPASS`), or wants some (`NOAUTH`).
    case authentication
    /// The server refused a setup command (`SELECT`, `SCRIPT LOAD`: e.g. `NOPERM` for an ACL user).
    case refused
}
