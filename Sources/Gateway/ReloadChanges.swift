import GatewayConfig

/// What a reload changes, by key: what it applies (for the `configuration reloaded` line) and what
/// only a restart applies (`pendingRestart`: a warning per key, and the gauge
/// `attest_gateway_config_reload_pending_restart`).
enum ReloadChanges {
    /// A key whose value in the file is not the one the process runs with, and that only a restart
    /// applies. `change` says how (`changed 2 → 4`); secrets never show (a password file's content is
    /// only said to differ).
    struct PendingKey: Equatable, CustomStringConvertible {
        let key: String
        let change: String

        init(key: String, running: String, file: String) {
            self.key = key
            change = "changed \(running) → \(file)"
        }

        init(key: String, change: String) {
            self.key = key
            self.change = change
        }

        var description: String { "reload: \(key) \(change); takes effect after a restart" }
    }

    /// What the process was started with, for the keys only a restart applies.
    struct Started {
        let config: GatewayConfig
        /// The number of event loops (`workers` resolved).
        let workers: Int
        /// The Redis password read at start (`store.password_file`, or the url's).
        let storePassword: [UInt8]?
    }

    /// The keys only a restart applies whose value in the file (`file`, with `workers` resolved to
    /// `fileWorkers`) differs from what the process started with. Empty: the process runs the file.
    static func pendingRestart(started: Started, file: GatewayConfig, fileWorkers: Int, filePassword: [UInt8]?) -> [PendingKey] {
        var out: [PendingKey] = []
        if fileWorkers != started.workers {
            out.append(
                PendingKey(
                    key: "workers", running: workers(started.config.workers, started.workers),
                    file: workers(file.workers, fileWorkers)))
        }
        let store = store(started.config.store, file.store)
        out += store
        // The same url and password_file, another password in the file (rotated in place).
        if started.storePassword != filePassword, case .redis = file.store.backend, case .redis = started.config.store.backend,
            !store.contains(where: { $0.key == "store.url" || $0.key == "store.password_file" })
        {
            out.append(PendingKey(key: "store.password_file", change: "holds another password than the one read at start"))
        }
        return out
    }

    private static func workers(_ w: Workers, _ resolved: Int) -> String {
        if case .auto = w { return "auto (\(resolved))" }
        return String(resolved)
    }

    /// `store.*`: each differing key with both values.
    static func store(_ a: StoreConfig, _ b: StoreConfig) -> [PendingKey] {
        var out: [PendingKey] = []
        func diff<T: Equatable>(_ key: String, _ x: T, _ y: T, _ show: (T) -> String) {
            if x != y { out.append(PendingKey(key: "store." + key, running: show(x), file: show(y))) }
        }
        switch (a.backend, b.backend) {
        case (.memory(let x), .memory(let y)):
            diff("shards", x.shards, y.shards, String.init)
            diff("data_dir", x.dataDirectory, y.dataDirectory) { $0 ?? "(none)" }
            diff("snapshot_interval", x.snapshotInterval, y.snapshotInterval, duration)
            diff("max_anonymous_challenges", x.maxAnonymousChallenges, y.maxAnonymousChallenges, String.init)
            diff("max_key_bound_challenges", x.maxKeyBoundChallenges, y.maxKeyBoundChallenges, String.init)
            diff("max_challenges_per_key", x.maxChallengesPerKey, y.maxChallengesPerKey, String.init)
        case (.redis(let x), .redis(let y)):
            diff("url", x.url, y.url) { $0.description }
            diff("timeout", x.timeout, y.timeout, duration)
            diff("wait_replicas", x.waitReplicas, y.waitReplicas, String.init)
            diff("cluster", x.cluster, y.cluster) { String($0) }
            diff("seeds", x.seeds, y.seeds) { "[" + $0.map(\.description).joined(separator: ", ") + "]" }
            diff("password_file", x.passwordFile, y.passwordFile) { $0 ?? "(none)" }
            diff("tls", x.tls, y.tls) { $0 == nil ? "off" : "{ca_file: \($0?.caFile ?? "-"), server_name: \($0?.serverName ?? "-")}" }
        default:
            out.append(PendingKey(key: "store.kind", running: a.kind, file: b.kind))
        }
        diff("max_keys", a.keys.maxKeys, b.keys.maxKeys) { $0.map(String.init) ?? "(default)" }
        diff("max_reregistrations", a.keys.maxReregistrations, b.keys.maxReregistrations, String.init)
        diff("reregistration_window", a.keys.reregistrationWindow, b.keys.reregistrationWindow, duration)
        diff("key_idle_ttl", a.keys.idleTTL, b.keys.idleTTL) { $0.map(duration) ?? "(none)" }
        return out
    }

    /// `30s`, `1500ms`: as a duration could be written in the file.
    static func duration(_ d: Duration) -> String {
        let ms = d.millis
        return ms % 1000 == 0 ? "\(ms / 1000)s" : "\(ms)ms"
    }

    /// The sections (or keys) a reload from `old` to `new` applies, in file order, for the
    /// `configuration reloaded` line; listeners are reported by name elsewhere, and the keys only a
    /// restart applies never appear here.
    static func applied(_ old: GatewayConfig, _ new: GatewayConfig) -> [String] {
        var out: [String] = []
        if old.admin.address != new.admin.address { out.append("admin.address") }
        if old.admin.tokenFile != new.admin.tokenFile || old.admin.protectMetrics != new.admin.protectMetrics
            || old.admin.allow != new.admin.allow
        {
            out.append("admin")
        }
        if old.limits != new.limits { out.append("limits") }
        if old.upstreams != new.upstreams { out.append("upstreams") }
        if old.routes != new.routes { out.append("routes") }
        if old.apps != new.apps { out.append("apps") }
        if old.trust != new.trust { out.append("trust") }
        if old.attest != new.attest { out.append("attest") }
        if old.logging.level != new.logging.level { out.append("logging.level") }
        if !sameAccessLog(old.logging, new.logging) { out.append("logging.access_log") }
        if old.verdict != new.verdict { out.append("verdict") }
        if old.accounts != new.accounts { out.append("accounts") }
        if old.android != new.android { out.append("android") }
        return out
    }

    /// Whether two `logging` sections log requests alike (everything but `level`).
    private static func sameAccessLog(_ a: LoggingConfig, _ b: LoggingConfig) -> Bool {
        var a = a
        a.level = b.level
        return a == b
    }
}
