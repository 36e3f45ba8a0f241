/// Where attested keys, counters and challenges are kept: in process memory or in Redis.
public struct StoreConfig: Sendable, Equatable {
    public enum Backend: Sendable, Equatable {
        case memory(Memory)
        case redis(Redis)
    }

    /// `kind: memory`: sharded in-process records, optionally snapshotted to disk.
    public struct Memory: Sendable, Equatable {
        /// A power of two from 1 to 4096. Default 64.
        public var shards: Int
        /// Snapshot directory, resolved against the config file's directory. nil (default): no snapshots.
        public var dataDirectory: String?
        /// How often a snapshot is written when `dataDirectory` is set. Default 30s.
        public var snapshotInterval: Duration
        /// Live challenges not bound to a registered key; when full, the oldest is replaced. Default 500,000.
        public var maxAnonymousChallenges: Int
        /// Live challenges bound to a registered key; when full, the oldest is replaced. Default 250,000.
        public var maxKeyBoundChallenges: Int
        /// Live challenges per registered key, 1…8; the next one replaces one. Default 4.
        public var maxChallengesPerKey: Int

        public init(
            shards: Int = 64, dataDirectory: String? = nil, snapshotInterval: Duration = .seconds(30),
            maxAnonymousChallenges: Int = 500_000, maxKeyBoundChallenges: Int = 250_000, maxChallengesPerKey: Int = 4
        ) {
            self.shards = shards
            self.dataDirectory = dataDirectory
            self.snapshotInterval = snapshotInterval
            self.maxAnonymousChallenges = maxAnonymousChallenges
            self.maxKeyBoundChallenges = maxKeyBoundChallenges
            self.maxChallengesPerKey = maxChallengesPerKey
        }

        public static let challengeBudgetRange = 1...100_000_000
        public static let perKeyRange = 1...8
    }

    /// `kind: redis`.
    public struct Redis: Sendable, Equatable {
        public var url: RedisURL
        /// Per-command timeout. Default 1s.
        public var timeout: Duration
        /// Replicas that must acknowledge a write (`WAIT`) before it counts. Default 0.
        public var waitReplicas: Int
        /// Redis Cluster: `url` (and `seeds`) are where the slot map is first read; commands go to
        /// the primary that serves their slot. Every challenge must then be bound to a key. Default false.
        public var cluster: Bool
        /// More cluster nodes to read the slot map from (database 0). Only with `cluster`. Default none.
        /// They carry no credentials: every node gets those of `url` / `passwordFile`, and its TLS.
        public var seeds: [RedisURL]
        /// A file holding the password (`AUTH`), instead of one in `url`; the user, if any, is the
        /// url's (`redis://gateway@host`). Read at start and by `gatewayd check`; resolved against
        /// the config file's directory. Default none.
        public var passwordFile: String?
        /// TLS settings for `rediss://` urls (nil for `redis://`; the defaults when the url is
        /// `rediss://` and `tls` is not given).
        public var tls: RedisTLSConfig?

        public init(
            url: RedisURL, timeout: Duration = .seconds(1), waitReplicas: Int = 0, cluster: Bool = false, seeds: [RedisURL] = [],
            passwordFile: String? = nil, tls: RedisTLSConfig? = nil
        ) {
            self.url = url
            self.timeout = timeout
            self.waitReplicas = waitReplicas
            self.cluster = cluster
            self.seeds = seeds
            self.passwordFile = passwordFile
            self.tls = tls ?? (url.tls ? RedisTLSConfig() : nil)
        }
    }

    /// What bounds the registered keys, on either kind of store.
    public struct Keys: Sendable, Equatable {
        /// `max_keys`: registered keys the store accepts; beyond it new keys get 503 `key_capacity`.
        /// nil (default): derived from a stated budget (`KeyLimits.defaultMaxKeys`, 1 GiB, for memory;
        /// `KeyLimits.defaultRedisMaxKeys`, 64 GiB of Redis memory, for Redis). 1 to 1,000,000,000.
        public var maxKeys: Int?
        /// `max_reregistrations`: registrations of an already registered key per window, 1 to 100. Default 3.
        public var maxReregistrations: Int
        /// `reregistration_window`: 1s to 720h. Default 1h.
        public var reregistrationWindow: Duration
        /// `key_idle_ttl` (memory store only): keys with no registration or accepted assertion for
        /// this long are removed. nil (default): never.
        public var idleTTL: Duration?

        public init(
            maxKeys: Int? = nil, maxReregistrations: Int = 3, reregistrationWindow: Duration = .seconds(3600), idleTTL: Duration? = nil
        ) {
            self.maxKeys = maxKeys
            self.maxReregistrations = maxReregistrations
            self.reregistrationWindow = reregistrationWindow
            self.idleTTL = idleTTL
        }
    }

    public var backend: Backend
    public var keys: Keys

    /// Default: `.memory(Memory())`.
    public init(backend: Backend = .memory(Memory()), keys: Keys = Keys()) {
        self.backend = backend
        self.keys = keys
    }

    /// The YAML `kind`: `memory` or `redis`.
    public var kind: String {
        switch backend {
        case .memory: "memory"
        case .redis: "redis"
        }
    }
}

/// `redis://[user[:password]@]host[:port][/db]`, or `rediss://…` for TLS.
public struct RedisURL: Sendable, Equatable, CustomStringConvertible {
    public var host: String
    /// Default 6379.
    public var port: UInt16
    /// Default 0.
    public var database: Int
    /// `rediss://`: TLS (the server's certificate verified, see `StoreConfig.Redis.tls`).
    public var tls: Bool
    /// The ACL user (`redis://gateway:…@host`), percent-decoded; nil: Redis' `default` user.
    public var username: String?
    /// The password in the url, percent-decoded; never printed (see `RedisSecret`).
    public var password: RedisSecret?

    public init(
        host: String, port: UInt16 = 6379, database: Int = 0, tls: Bool = false, username: String? = nil, password: RedisSecret? = nil
    ) {
        self.host = host
        self.port = port
        self.database = database
        self.tls = tls
        self.username = username
        self.password = password
    }

    /// The url as logs and `check` show it: the password, when there is one, as `***`.
    public var description: String {
        let shownHost = host.contains(":") ? "[\(host)]" : host
        var user = ""
        if let username { user = RedisURL.percentEncoded(username) }
        if password != nil { user += ":***" }
        if !user.isEmpty { user += "@" }
        return "\(tls ? "rediss" : "redis")://\(user)\(shownHost):\(port)/\(database)"
    }

    /// `user` with every character outside RFC 3986's unreserved set percent-encoded.
    static func percentEncoded(_ text: String) -> String {
        var out = ""
        for b in text.utf8 {
            let c = Character(Unicode.Scalar(b))
            if b < 0x80 && (c.isLetter || c.isNumber || "-._~".contains(c)) {
                out.append(c)
            } else {
                out += "%" + String(b, radix: 16, uppercase: true).leftPaddedHex
            }
        }
        return out
    }
}

/// A password: compared, copied and handed to the connection, never printed (`description`,
/// `debugDescription` and reflection all show `***`).
public struct RedisSecret: Sendable, Equatable, CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    public let bytes: [UInt8]

    public init(_ bytes: [UInt8]) { self.bytes = bytes }
    public init(_ text: String) { bytes = Array(text.utf8) }

    public var description: String { "***" }
    public var debugDescription: String { "***" }
    public var customMirror: Mirror { Mirror(self, children: [], displayStyle: .struct) }
}

/// `store.tls` for a `rediss://` url: whose certificates to trust, the name to verify, and an
/// optional client certificate (mutual TLS). The same for every node of a cluster.
public struct RedisTLSConfig: Sendable, Equatable {
    /// PEM roots to trust instead of the system's. nil: the system roots.
    public var caFile: String?
    /// SNI and the name checked in the server's certificate. nil: the host of each node's address
    /// (the url's host, a seed's, or the address a cluster announces).
    public var serverName: String?
    /// Client certificate (PEM chain) and its key, for servers that require one
    /// (`tls-auth-clients yes`): both or neither.
    public var clientCertificate: String?
    public var clientKey: String?

    public init(caFile: String? = nil, serverName: String? = nil, clientCertificate: String? = nil, clientKey: String? = nil) {
        self.caFile = caFile
        self.serverName = serverName
        self.clientCertificate = clientCertificate
        self.clientKey = clientKey
    }
}

extension String {
    fileprivate var leftPaddedHex: String { count < 2 ? "0" + self : self }
}
