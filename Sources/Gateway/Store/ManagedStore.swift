import Dispatch
import Foundation
import GatewayConfig
import GatewayIO
import GatewayRedis
import GatewayStore
import Synchronization

/// The store the gateway runs on, with its upkeep: restore at start, a challenge sweep and store
/// gauges every second, periodic snapshots, and a final snapshot (marking a clean stop) on drain.
/// With `kind: redis`: connect at start (not ready until connected), key count every second, and
/// readiness that follows the connection.
final class ManagedStore: @unchecked Sendable {
    let attestStore: any AttestStore
    private let memory: MemoryAttestStore?
    private let redis: RedisAttestStore?
    /// The store binds every challenge to a key (Redis Cluster).
    var requiresKeyBoundChallenges: Bool { redis?.requiresKeyBoundChallenges ?? false }
    private let metrics: AttestMetrics
    private let snapshotInterval: Duration?
    private let queue = DispatchQueue(label: "gateway.store.upkeep", qos: .utility)
    private var timer: (any DispatchSourceTimer)?
    private let lastSnapshot: LastSnapshot
    private var closed = false
    /// What the admission limits and challenge budgets did: logged at the first tick where they bit,
    /// then at most once per `limitLogInterval` ticks (seconds), with the counts since the last line.
    let limitEvents = LimitEvents()
    static let limitLogInterval = 10
    private var ticks = 0
    private var lastLimitLog = -limitLogInterval
    private var lastEvictions = ChallengeEvictions()
    /// How often idle keys are swept (`key_idle_ttl / 8`, from 1 s to 60 s), when they are evicted.
    private var idleSweepMillis: Int64?
    private var lastIdleSweep: Int64 = 0

    /// The store as the operator's page names it: `memory, data_dir PATH`, `memory, no data_dir`,
    /// `redis HOST:PORT`, `redis cluster HOST:PORT` (store settings apply only at a restart).
    let summary: String

    private init(
        memory: MemoryAttestStore, dataDirectory: String?, metrics: AttestMetrics, snapshotInterval: Duration?,
        lastSnapshot: LastSnapshot
    ) {
        summary = dataDirectory.map { "memory, data_dir \($0)" } ?? "memory, no data_dir"
        self.memory = memory
        redis = nil
        attestStore = memory
        self.metrics = metrics
        self.snapshotInterval = snapshotInterval
        self.lastSnapshot = lastSnapshot
    }

    private init(redis: RedisAttestStore, address: String, cluster: Bool, metrics: AttestMetrics) {
        summary = "redis\(cluster ? " cluster" : "") \(address)"
        memory = nil
        self.redis = redis
        redisAddress = address
        attestStore = redis
        self.metrics = metrics
        snapshotInterval = nil
        lastSnapshot = LastSnapshot()
    }

    /// The Redis store answers the calls made on each loop on that loop (docs/redis.md, "Connections").
    func serve(on loops: [EventLoop]) { redis?.serve(on: loops) }

    /// False while the Redis store has no live connection, or while the memory store refuses
    /// writes after a failed write to its data directory (`/readyz` answers 503 then).
    var isHealthy: Bool { redis?.isHealthy ?? (memory?.writeFailure == nil) }

    /// The Redis store's `host:port` (store.url), for `/readyz` reasons.
    private var redisAddress = ""

    /// Why the store is not healthy (for `/readyz`), empty when it is: `store: Redis 10.0.0.5:6379
    /// unreachable: connection refused`.
    var unhealthyReasons: [String] {
        if let redis {
            return redis.isHealthy ? [] : ["store: Redis \(redisAddress) \(Self.phrase(redis.lastFailureKind)): \(redis.lastError)"]
        }
        return memory?.writeFailure.map { ["store: \($0)"] } ?? []
    }

    /// The store's key bounds from `store`. Without `max_keys`, the cap is derived from a stated
    /// memory budget: 1 GiB for the memory store, 64 GiB of Redis memory for Redis (docs/redis.md).
    static func keyLimits(_ config: StoreConfig) -> KeyLimits {
        let derived: Int
        switch config.backend {
        case .memory: derived = KeyLimits.defaultMaxKeys
        case .redis: derived = KeyLimits.defaultRedisMaxKeys
        }
        let k = config.keys
        return KeyLimits(
            maxKeys: k.maxKeys ?? derived, maxReregistrations: k.maxReregistrations,
            reregistrationWindowMillis: k.reregistrationWindow.millis, keyIdleTTLMillis: k.idleTTL?.millis)
    }

    /// What went wrong with Redis, for `/readyz` reasons and the start-up log.
    static func phrase(_ kind: RedisFailureKind) -> String {
        switch kind {
        case .unreachable: "unreachable"
        case .tls: "TLS failed"
        case .authentication: "authentication failed"
        case .refused: "refused a setup command"
        }
    }

    /// - Parameter security: the compiled credentials and TLS of a Redis store (`GatewayRuntime.storeSecurity`).
    static func open(_ config: StoreConfig, security: RedisSecurity?, metrics: AttestMetrics) throws -> ManagedStore {
        let keyLimits = keyLimits(config)
        metrics.keyCapacity(keyLimits.maxKeys)
        let m: StoreConfig.Memory
        switch config.backend {
        case .memory(let memoryConfig): m = memoryConfig
        case .redis(let r): return openRedis(r, security: security ?? RedisSecurity(), limits: keyLimits, metrics: metrics)
        }
        let started = Date()
        let last = LastSnapshot()
        let limits = ChallengeLimits(
            anonymous: m.maxAnonymousChallenges, keyBound: m.maxKeyBoundChallenges, perKey: m.maxChallengesPerKey)
        let memory = try MemoryAttestStore.open(
            directory: m.dataDirectory, shards: m.shards, challenges: limits,
            observer: StoreMetricsObserver(metrics: metrics, lastSnapshot: last, writeErrorLog: RateLimitedLog()),
            limits: keyLimits)
        let seconds = Date().timeIntervalSince(started)
        let stats = memory.statistics
        GatewayEvents.log(
            "info", "store restored",
            [
                ("kind", "memory"), ("data_dir", m.dataDirectory ?? "-"), ("keys", String(stats.keys)),
                ("live_challenges", String(stats.liveChallenges)), ("last_stop", memory.lastStopWasClean ? "clean" : "unclean"),
                ("journal_records", String(memory.restoreReport.replayedRecords)),
                ("journal_damaged", String(memory.restoreReport.damage.count)), ("seconds", String(format: "%.3f", seconds)),
                ("challenge_memory_bound_bytes", String(ChallengeMemory.bound(limits, shards: m.shards))),
                ("max_keys", String(keyLimits.maxKeys)),
                ("key_idle_ttl", config.keys.idleTTL.map { "\($0.millis / 1000)s" } ?? "off"),
            ])
        if !memory.lastStopWasClean {
            GatewayEvents.log(
                "warning",
                "the last stop was not clean: challenges issued before it are retired; counters and registrations come from the journal")
        }
        if m.dataDirectory != nil { logRestore(memory.restoreReport, metrics: metrics) }
        let store = ManagedStore(
            memory: memory, dataDirectory: m.dataDirectory, metrics: metrics,
            snapshotInterval: m.dataDirectory == nil ? nil : m.snapshotInterval, lastSnapshot: last)
        store.idleSweepMillis = keyLimits.keyIdleTTLMillis.map { min(60_000, max(1_000, $0 / 8)) }
        return store
    }

    /// Journal damage found at restore: each at error level (the first 20; then a count), counted;
    /// a torn tail (a crash in the middle of a write) at warning.
    private static func logRestore(_ report: RestoreReport, metrics: AttestMetrics) {
        metrics.journalCorruptRecords(report.damage.count)
        for d in report.damage.prefix(20) {
            var fields = [
                ("kind", d.kind.rawValue), ("segment", d.segment), ("offset", String(d.offset)), ("length", String(d.length)),
            ]
            if let k = d.keyID { fields.append(("key_id", k.description)) }
            if let c = d.recordedCounter { fields.append(("recorded_counter", String(c))) }
            if let r = d.counterRaised {
                fields += [("counter_raised_from", String(r.from)), ("counter_raised_to", String(r.to))]
            }
            if d.windowClosed > 0 { fields.append(("counter_window_closed", String(d.windowClosed))) }
            GatewayEvents.log(
                "error",
                "journal damage: a record could not be read and was skipped (a damaged record can only raise its key's counter and close its counter window)",
                fields)
        }
        if report.damage.count > 20 {
            GatewayEvents.log("error", "journal damage: more damaged records skipped", [("count", String(report.damage.count - 20))])
        }
        if let t = report.tornTail {
            GatewayEvents.log(
                "warning", "journal: a record torn by a crash in the middle of its write was cut",
                [
                    ("segment", t.segment), ("offset", String(t.offset)), ("bytes", String(t.bytes)),
                ])
        }
    }

    /// Starts the connections and waits up to the command timeout (at least 1 s) for the first
    /// one; a Redis that is down at start is not fatal: the gateway starts not ready, answers 503
    /// `store_unavailable` (or fails open where the route says so) and connects when Redis returns.
    private static func openRedis(
        _ r: StoreConfig.Redis, security: RedisSecurity, limits: KeyLimits, metrics: AttestMetrics
    ) -> ManagedStore {
        let endpoint = RedisEndpoint(
            host: r.url.host, port: r.url.port, database: r.url.database, timeoutMillis: r.timeout.millis, security: security)
        let seeds = r.seeds.map {
            RedisEndpoint(host: $0.host, port: $0.port, database: 0, timeoutMillis: r.timeout.millis, security: security)
        }
        let connectionLog = RedisConnectionLog(url: r.url.description)
        let store = RedisAttestStore(
            options: .init(
                endpoint: endpoint, waitReplicas: r.waitReplicas, cluster: r.cluster,
                seeds: seeds, limits: limits),
            observer: RedisMetricsObserver(metrics: RedisMetrics(factory: metrics.factory), connectionLog: connectionLog))
        let connected = store.waitUntilConnected(timeoutMillis: max(1_000, r.timeout.millis))
        // From now on each connection lost or regained is logged (start-up says what it found below).
        defer { connectionLog.arm(lastError: { [weak store] in store?.lastError ?? "" }) }
        if connected {
            var fields = [
                ("kind", "redis"), ("url", r.url.description), ("timeout_ms", String(r.timeout.millis)),
                ("wait_replicas", String(r.waitReplicas)), ("max_keys", String(limits.maxKeys)),
            ]
            if r.cluster { fields += [("cluster", "true"), ("nodes", store.clusterNodes.joined(separator: ","))] }
            GatewayEvents.log("info", "store connected", fields)
            if r.cluster && !store.lastError.isEmpty {
                GatewayEvents.log(
                    "warning",
                    "Redis Cluster: not every primary answers; its slots answer 503 store_unavailable (or fail open) until it does",
                    [
                        ("error", store.lastError)
                    ])
            }
        } else {
            let what: String
            switch store.lastFailureKind {
            case .authentication:
                what =
                    "store: Redis refused the credentials (store.url user and password, or store.password_file): not ready until it accepts them"
            case .tls:
                what =
                    "store: the TLS handshake with Redis failed (store.tls: ca_file, server_name, client certificate): not ready until it succeeds"
            case .refused:
                what =
                    "store: Redis refused a setup command (SELECT or SCRIPT LOAD; check the ACL user's permissions): not ready until it accepts it"
            case .unreachable:
                what = "store unreachable: not ready until Redis answers"
            }
            GatewayEvents.log(
                "error", "\(what); protected routes answer 503 store_unavailable or fail open",
                [
                    ("kind", "redis"), ("url", r.url.description), ("error", store.lastError),
                ])
        }
        let host = r.url.host.contains(":") ? "[\(r.url.host)]" : r.url.host
        return ManagedStore(redis: store, address: "\(host):\(r.url.port)", cluster: r.cluster, metrics: metrics)
    }

    func startMaintenance() {
        let t = DispatchSource.makeTimerSource(queue: queue)
        t.schedule(deadline: .now() + 1, repeating: 1, leeway: .milliseconds(100))
        t.setEventHandler { [unowned self] in self.tick() }
        t.resume()
        timer = t
        // Snapshots run on the store's own timer, and only when the journal holds something new.
        if let interval = snapshotInterval, let memory {
            memory.startPeriodicSnapshots(every: interval) { [metrics] error in
                metrics.snapshotFailed("\(error)")
                GatewayEvents.log(
                    "error", "snapshot failed; the journal keeps every change until the next one succeeds", [("error", "\(error)")])
            }
        }
    }

    private func tick() {
        guard !closed else { return }
        ticks += 1
        if let memory {
            let now = memory.challengeEvictions
            let delta = ChallengeEvictions(
                anonymous: now.anonymous - lastEvictions.anonymous, keyBound: now.keyBound - lastEvictions.keyBound,
                perKey: now.perKey - lastEvictions.perKey)
            lastEvictions = now
            metrics.challengesEvicted(.anonymous, delta.anonymous)
            metrics.challengesEvicted(.keyBound, delta.keyBound)
            metrics.challengesEvicted(.perKey, delta.perKey)
            limitEvents.evicted(delta)
        }
        if ticks - lastLimitLog >= Self.limitLogInterval, let fields = limitEvents.report(seconds: min(ticks, ticks - lastLimitLog)) {
            lastLimitLog = ticks
            GatewayEvents.log(
                "warning", "challenge limits in effect: requests refused with 429 or challenges replaced (docs/operations.md)", fields)
        }
        if let redis {
            redis.refreshStatistics()  // the key count arrives for the next tick
            let stats = redis.statistics
            metrics.storeSizes(keys: stats.keys, challenges: stats.liveChallenges)
            return
        }
        guard let memory else { return }
        let now = AttestContext.nowMillis()
        // An expired challenge stays known as expired for the stores' grace (ChallengeState.expiredGraceMillis).
        _ = memory.sweepExpired(nowMillis: now - ChallengeState.expiredGraceMillis)  // counted through the observer
        // While the store refuses writes the sweep would be refused too (its removals are journaled).
        if let every = idleSweepMillis, now - lastIdleSweep >= every, memory.writeFailure == nil {
            lastIdleSweep = now
            do {
                try memory.sweepIdleKeys(nowMillis: now)  // counted through the observer
            } catch {
                GatewayEvents.log("error", "idle key sweep failed; idle keys stay until a sweep succeeds", [("error", "\(error)")])
            }
        }
        let stats = memory.statistics
        metrics.storeSizes(keys: stats.keys, challenges: stats.liveChallenges)
        let receipts = memory.receiptBytes
        metrics.receiptBytes(live: receipts.live, file: receipts.file)
        guard snapshotInterval != nil else { return }
        // The age of the oldest change not yet in a snapshot: 0 while everything is covered (an idle
        // gateway does not rewrite an unchanged snapshot, and must not look stale for it).
        metrics.snapshotAge(seconds: memory.unsnapshottedRecords == 0 ? 0 : Date().timeIntervalSince(lastSnapshot.date))
    }

    /// The final snapshot and clean-stop marker. Called once no loop can reach the store.
    func close() {
        queue.sync {
            guard !closed else { return }
            closed = true
            timer?.cancel()
            if let redis {
                redis.close()
                GatewayEvents.log("info", "store closed", [("kind", "redis")])
                return
            }
            guard let memory else { return }
            do {
                try memory.close()
                GatewayEvents.log("info", "store closed cleanly", [("keys", String(memory.statistics.keys))])
            } catch {
                GatewayEvents.log("error", "store close failed: the next start will treat this stop as unclean", [("error", "\(error)")])
            }
        }
    }
}

/// The memory store's measurements, into the gateway's metrics.
struct StoreMetricsObserver: AttestStoreObserver {
    let metrics: AttestMetrics
    let lastSnapshot: LastSnapshot
    let writeErrorLog: RateLimitedLog

    /// Every failed call is counted; the log gets one line per file and errno per interval (with
    /// how many were not logged), not one per retry.
    func storeWriteFailed(_ f: StoreWriteFailure) {
        metrics.storeWriteError(file: f.file.rawValue, errno: f.errnoName)
        writeErrorLog.log("\(f.file.rawValue)|\(f.errnoName)") { suppressed in
            var fields = [
                ("file", f.file.rawValue), ("operation", f.operation.rawValue), ("errno", f.errnoName), ("path", f.path),
            ]
            if suppressed > 0 { fields.append(("repeated", String(suppressed))) }
            GatewayEvents.log("error", "store write failed", fields)
        }
    }

    func storeWritesRefused(_ f: StoreWriteFailure) {
        GatewayEvents.log(
            "error",
            "store refuses writes: registrations and protected requests answer 503 store_unavailable (or fail open) and /readyz 503 until writes succeed again (retried with back-off)",
            [("reason", f.description)])
    }

    func storeWritesRecovered(after failure: StoreWriteFailure, seconds: Double) {
        writeErrorLog.reset()
        GatewayEvents.log(
            "warning", "store writes recovered",
            [
                ("last_error", failure.description), ("seconds", String(format: "%.3f", seconds)),
            ])
    }

    func journalSynced(seconds: Double) { metrics.journalFsync(seconds: seconds) }
    func snapshotWritten(_ report: SnapshotReport) {
        lastSnapshot.date = Date()
        metrics.snapshot(seconds: report.seconds)
    }
    func restored(keys: Int, seconds: Double) { metrics.restored(seconds: seconds) }
    func challengesExpired(_ count: Int) { metrics.challengesExpired(count) }
    func keysEvicted(_ count: Int) {
        metrics.keysEvicted(count)
        GatewayEvents.log("info", "idle keys removed", [("keys", String(count))])
    }
    func receiptCompactionFailed(_ error: StoreError) {
        metrics.receiptsCompacted(success: false)
        GatewayEvents.log(
            "error", "receipt compaction failed; the snapshot was written without it; tried again once the receipts file grows by 1 MiB",
            [
                ("error", "\(error)")
            ])
    }
    func receiptsCompacted(_ report: ReceiptCompactionReport) {
        metrics.receiptsCompacted(success: true)
        GatewayEvents.log(
            "info", "receipts compacted",
            [
                ("receipts", String(report.receipts)), ("live_bytes", String(report.liveBytes)),
                ("reclaimed_bytes", String(report.reclaimedBytes)), ("seconds", String(format: "%.3f", report.seconds)),
            ])
    }
}

/// When the last snapshot was written (or the store opened).
final class LastSnapshot: Sendable {
    private let value = Mutex(Date())
    var date: Date {
        get { value.withLock { $0 } }
        set { value.withLock { $0 = newValue } }
    }
}

/// At most one line per key per `interval`; the next line says how many were not logged.
final class RateLimitedLog: Sendable {
    private let interval: Double
    private let state = Mutex<[String: (last: Date, suppressed: Int)]>([:])

    init(interval: Double = 30) { self.interval = interval }

    func log(_ key: String, _ write: (_ suppressed: Int) -> Void) {
        let now = Date()
        let suppressed = state.withLock { table -> Int? in
            if let e = table[key], now.timeIntervalSince(e.last) < interval {
                table[key]!.suppressed += 1
                return nil
            }
            let n = table[key]?.suppressed ?? 0
            table[key] = (now, 0)
            return n
        }
        if let suppressed { write(suppressed) }
    }

    /// A new episode logs its first failure at once.
    func reset() { state.withLock { $0 = [:] } }
}
