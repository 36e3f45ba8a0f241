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
        /// Live challenges per registered key, 1…4; the next one replaces one. Default 4.
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
        public static let perKeyRange = 1...4
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
        public var seeds: [RedisURL]

        public init(url: RedisURL, timeout: Duration = .seconds(1), waitReplicas: Int = 0, cluster: Bool = false, seeds: [RedisURL] = []) {
            self.url = url
            self.timeout = timeout
            self.waitReplicas = waitReplicas
            self.cluster = cluster
            self.seeds = seeds
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

        public init(maxKeys: Int? = nil, maxReregistrations: Int = 3, reregistrationWindow: Duration = .seconds(3600), idleTTL: Duration? = nil) {
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

/// `redis://host[:port][/db]`.
public struct RedisURL: Sendable, Equatable, CustomStringConvertible {
    public var host: String
    /// Default 6379.
    public var port: UInt16
    /// Default 0.
    public var database: Int

    public init(host: String, port: UInt16 = 6379, database: Int = 0) {
        self.host = host
        self.port = port
        self.database = database
    }

    public var description: String {
        let shownHost = host.contains(":") ? "[\(host)]" : host
        return "redis://\(shownHost):\(port)/\(database)"
    }
}
