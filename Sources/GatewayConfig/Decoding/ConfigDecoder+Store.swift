/// `store`: `kind: memory` (shards, snapshots, idle eviction) or `kind: redis` (url, timeout, replicas,
/// cluster, seeds, password_file, tls); key bounds (cap, re-registration window) on both.
extension ConfigDecoder {
    private enum StoreKind: String, CaseIterable {
        case memory
        case redis
    }

    func decodeStore(_ node: YAMLNode, path: String) -> StoreConfig? {
        guard let fields = fields(of: node, path: path, keys: ConfigKeys.store) else { return nil }
        let kindNode = fields["kind"]
        let kind = kindNode.map { choice($0, fields.path("kind"), as: StoreKind.self) } ?? .memory
        guard let kind else { return nil }
        let allowed = kind == .memory ? ConfigKeys.memoryStore : ConfigKeys.redisStore
        var valid = true
        for key in ConfigKeys.store where !allowed.contains(key) && fields[key] != nil {
            let position = fields.keyPosition(key) ?? fields.position
            report(
                "\(fields.path(key)) applies only to kind \(quoted(kind == .memory ? "redis" : "memory")); this store is \(quoted(kind.rawValue))",
                at: position
            )
            valid = false
        }
        let keys = decodeStoreKeys(fields)
        switch kind {
        case .memory:
            let memory = decodeMemoryStore(fields)
            guard valid, let memory, let keys else { return nil }
            return StoreConfig(backend: .memory(memory), keys: keys)
        case .redis:
            let redis = decodeRedisStore(fields)
            guard valid, let redis, let keys else { return nil }
            return StoreConfig(backend: .redis(redis), keys: keys)
        }
    }

    /// `max_keys`, `max_reregistrations`, `reregistration_window`, `key_idle_ttl` (only allowed on
    /// kind memory, checked by the caller).
    private func decodeStoreKeys(_ fields: MappingFields) -> StoreConfig.Keys? {
        var keys = StoreConfig.Keys()
        var valid = true
        if let node = fields["max_keys"] {
            if let n = int(node, fields.path("max_keys"), in: 1...1_000_000_000) { keys.maxKeys = n } else { valid = false }
        }
        if let node = fields["max_reregistrations"] {
            if let n = int(node, fields.path("max_reregistrations"), in: 1...100) { keys.maxReregistrations = n } else { valid = false }
        }
        if let node = fields["reregistration_window"] {
            if let d = duration(node, fields.path("reregistration_window"), minimum: .seconds(1), maximum: .seconds(720 * 3600)) {
                keys.reregistrationWindow = d
            } else {
                valid = false
            }
        }
        if let node = fields["key_idle_ttl"] {
            if let d = duration(node, fields.path("key_idle_ttl"), minimum: .seconds(1)) { keys.idleTTL = d } else { valid = false }
        }
        return valid ? keys : nil
    }

    private func decodeMemoryStore(_ fields: MappingFields) -> StoreConfig.Memory? {
        var memory = StoreConfig.Memory()
        var valid = true
        if let node = fields["shards"] {
            if let shards = int(node, fields.path("shards"), in: 1...4096) {
                if shards & (shards - 1) == 0 {
                    memory.shards = shards
                } else {
                    report(
                        "\(fields.path("shards")) must be a power of two (1, 2, 4 … 4096), got \(shards)",
                        at: node.position
                    )
                    valid = false
                }
            } else {
                valid = false
            }
        }
        if let node = fields["data_dir"] {
            memory.dataDirectory = filePath(node, fields.path("data_dir"))
            if memory.dataDirectory == nil { valid = false }
        }
        if let node = fields["snapshot_interval"] {
            if let interval = duration(node, fields.path("snapshot_interval")) {
                memory.snapshotInterval = interval
            } else {
                valid = false
            }
            if fields.keyPosition("data_dir") == nil {
                report(
                    "\(fields.path("snapshot_interval")) has no effect without \(fields.path("data_dir")) (nothing is written to "
                        + "disk); add data_dir, or remove it",
                    at: fields.keyPosition("snapshot_interval") ?? node.position)
                valid = false
            }
        }
        let budget = StoreConfig.Memory.challengeBudgetRange
        fields.read("max_anonymous_challenges", into: &memory, \.maxAnonymousChallenges, valid: &valid) { int($0, $1, in: budget) }
        fields.read("max_key_bound_challenges", into: &memory, \.maxKeyBoundChallenges, valid: &valid) { int($0, $1, in: budget) }
        fields.read("max_challenges_per_key", into: &memory, \.maxChallengesPerKey, valid: &valid) {
            int($0, $1, in: StoreConfig.Memory.perKeyRange)
        }
        return valid ? memory : nil
    }

    private func decodeRedisStore(_ fields: MappingFields) -> StoreConfig.Redis? {
        let url = required("url", in: fields).flatMap {
            parsed($0, fields.path("url"), expected: "a url such as redis://127.0.0.1:6379/0", AddressSyntax.redisURL)
        }
        var valid = url != nil
        var redis = StoreConfig.Redis(url: url ?? RedisURL(host: ""))
        if let node = fields["timeout"] {
            if let timeout = duration(node, fields.path("timeout")) { redis.timeout = timeout } else { valid = false }
        }
        if let node = fields["wait_replicas"] {
            if let replicas = int(node, fields.path("wait_replicas"), in: 0...100) {
                redis.waitReplicas = replicas
            } else {
                valid = false
            }
        }
        // `seeds` without `cluster: true` is reported only when `cluster` itself was readable.
        var clusterReadable = true
        if let node = fields["cluster"] {
            if let cluster = bool(node, fields.path("cluster")) { redis.cluster = cluster } else { clusterReadable = false }
        }
        valid = valid && clusterReadable
        if let node = fields["seeds"] {
            if let items = list(node, fields.path("seeds"), nonEmpty: true) {
                for (i, item) in items.enumerated() {
                    let path = ConfigDecoder.element(fields.path("seeds"), i)
                    guard let seed = parsed(item, path, expected: "a url such as redis://10.0.0.2:6379", AddressSyntax.redisURL) else {
                        valid = false
                        continue
                    }
                    if seed.database != 0 {
                        report("\(path) names database \(seed.database): Redis Cluster has only database 0", at: item.position)
                        valid = false
                    }
                    if seed.username != nil || seed.password != nil {
                        report(
                            "\(path) must not carry a user or password: every node gets those of \(fields.path("url")) (or \(fields.path("password_file")))",
                            at: item.position)
                        valid = false
                    }
                    if let url, seed.tls != url.tls {
                        report(
                            "\(path) is \(seed.tls ? "rediss://" : "redis://") but \(fields.path("url")) is \(url.tls ? "rediss://" : "redis://"): every node of a cluster is reached the same way",
                            at: item.position)
                        valid = false
                    }
                    redis.seeds.append(seed)
                }
            } else {
                valid = false
            }
            if !redis.cluster && clusterReadable {
                report(
                    "\(fields.path("seeds")) needs cluster: true (a single Redis server has one url)",
                    at: fields.keyPosition("seeds") ?? node.position)
                valid = false
            }
        }
        if redis.cluster, let url, url.database != 0, let node = fields["url"] {
            report(
                "\(fields.path("url")) names database \(url.database): Redis Cluster has only database 0 (use /0 or no path)",
                at: node.position)
            valid = false
        }
        if let file = fields.optional("password_file", valid: &valid, { filePath($0, $1) }) {
            redis.passwordFile = file
            if url?.password != nil, let node = fields["password_file"] {
                report(
                    "\(fields.path("password_file")) and a password in \(fields.path("url")) are both set: keep one (the file keeps the password out of gateway.yaml)",
                    at: node.position)
                valid = false
            }
        }
        if let url, let user = url.username, url.password == nil, fields["password_file"] == nil, let node = fields["url"] {
            report(
                "\(fields.path("url")) names the user \(quoted(user)) but no password: add it to the url (redis://USER:PASSWORD@HOST) or set \(fields.path("password_file"))",
                at: node.position)
            valid = false
        }
        if let tlsNode = fields["tls"] {
            if let url, !url.tls {
                report(
                    "\(fields.path("tls")) applies only to rediss:// urls (TLS); \(fields.path("url")) is redis://",
                    at: fields.keyPosition("tls") ?? tlsNode.position)
                valid = false
            } else if let tls = decodeStoreTLS(tlsNode, path: fields.path("tls")) {
                redis.tls = tls
            } else {
                valid = false
            }
        } else if url?.tls == true {
            redis.tls = RedisTLSConfig()
        }
        return valid ? redis : nil
    }

    /// `store.tls`: trust, the name to verify, and an optional client certificate (both files or neither).
    private func decodeStoreTLS(_ node: YAMLNode, path: String) -> RedisTLSConfig? {
        guard let fields = fields(of: node, path: path, keys: ConfigKeys.storeTLS) else { return nil }
        var tls = RedisTLSConfig()
        var valid = true
        tls.caFile = fields.optional("ca_file", valid: &valid) { filePath($0, $1) }
        tls.serverName = fields.optional("server_name", valid: &valid) { hostname($0, $1) }
        tls.clientCertificate = fields.optional("client_certificate", valid: &valid) { filePath($0, $1) }
        tls.clientKey = fields.optional("client_key", valid: &valid) { filePath($0, $1) }
        if (fields["client_certificate"] == nil) != (fields["client_key"] == nil) {
            let missing = fields["client_key"] == nil ? "client_key" : "client_certificate"
            let present = missing == "client_key" ? "client_certificate" : "client_key"
            report("\(path) has \(present) but no \(missing): mutual TLS needs both", at: fields.keyPosition(present) ?? fields.position)
            valid = false
        }
        return valid ? tls : nil
    }
}
