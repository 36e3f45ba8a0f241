import Dispatch
import Foundation
import GatewayCrypto
import GatewayIO
import GatewayStore
import Synchronization

/// Where to connect and how long a command may take.
public struct RedisEndpoint: Sendable, Equatable {
    public var host: String
    public var port: UInt16
    public var database: Int
    /// Connect timeout and per-command (socket read/write) timeout.
    public var timeoutMillis: Int64
    /// Credentials and TLS. Default none.
    public var security: RedisSecurity

    public init(host: String, port: UInt16, database: Int = 0, timeoutMillis: Int64 = 1_000, security: RedisSecurity = RedisSecurity()) {
        self.host = host
        self.port = port
        self.database = database
        self.timeoutMillis = max(1, timeoutMillis)
        self.security = security
    }

    /// `AUTH [user] password`, when the endpoint has a password (sent to the server only: no
    /// message repeats it).
    var authCommand: RedisCommand? {
        guard let password = security.password else { return nil }
        var args = [Array("AUTH".utf8)]
        if let user = security.username { args.append(Array(user.utf8)) }
        args.append(password)
        return RedisCommand(args)
    }

    /// What a connection sends after `AUTH`: `SELECT` (database other than 0), then a `SCRIPT
    /// LOAD` per script.
    func setupCommands(scripts: [String]) -> [RedisCommand] {
        (database != 0 ? [RedisCommand("SELECT", String(database))] : []) + scripts.map { RedisCommand("SCRIPT", "LOAD", $0) }
    }

    /// `redis://host:port/db` (`rediss://` with TLS); never with credentials.
    public var description: String {
        "\(security.tls == nil ? "redis" : "rediss")://\(host.contains(":") ? "[\(host)]" : host):\(port)/\(database)"
    }
}
