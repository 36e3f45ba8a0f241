import Dispatch
import GatewayCrypto
import GatewayIO
import GatewayStore
import GatewayWire
import Glibc
import Synchronization

/// What the Redis store measures; the gateway turns it into metrics.
public protocol RedisStoreObserver: Sendable {
    /// One store call, from the call to its completion. `error`: the failure, if it failed.
    func operation(_ operation: RedisStoreOperation, seconds: Double, error: StoreError?)
    /// A connection came up (true) or went down (false).
    func connectionChanged(up: Bool)
    /// Redis Cluster only: a node redirected a request or asked for a retry.
    func clusterRedirect(_ kind: RedisClusterRedirect)
}

extension RedisStoreObserver {
    public func clusterRedirect(_ kind: RedisClusterRedirect) {}
}

/// The store calls, as metric labels.
public enum RedisStoreOperation: String, Sendable, CaseIterable {
    case issueChallenge = "issue_challenge"
    case challengeState = "challenge_state"
    case deviceKey = "device_key"
    case register
    case commitAssertion = "commit_assertion"
    case statistics
    /// The risk refresher's calls (`RiskRefreshStore`): claiming due keys, storing what a refresh found.
    case claimRefreshes = "claim_refreshes"
    case recordRefresh = "record_refresh"
    /// The DeviceCheck fallback's replay cache: claiming a device token, giving it back.
    case claimToken = "claim_token"
    case releaseToken = "release_token"
    /// Keys per account: recording a key's association with an account (`AccountStore`).
    case associateAccount = "associate_account"
}

/// `AttestStore` on Redis: the same semantics as `MemoryAttestStore`, shared by every gateway
/// instance on one Redis. Each atomic step (issue, register, commit) is one Lua script; challenge
/// expiry is a Redis expiry; the event loops never wait (connections run on their own threads, see
/// `RedisConnection`). While Redis is unreachable every call fails at once with
/// `StoreError(.unavailable, …)`. See docs/redis.md.
public final class RedisAttestStore: AttestStore {
    public struct Options: Sendable, Equatable {
        public var endpoint: RedisEndpoint
        /// Replicas that must acknowledge a registration (`WAIT`) before it is answered. 0: none.
        public var waitReplicas: Int
        /// Connections in the pool (each with its own thread and pipeline). Default 2.
        public var connections: Int
        /// Prefix of every Redis key the store writes. Default `ag:`.
        public var keyPrefix: String
        /// How long a challenge stays in Redis after its expiry, so that it answers `expired`
        /// (then `unknown`), like the memory store before its sweep. Default `ChallengeState.expiredGraceMillis`.
        public var expiredGraceMillis: Int64
        /// Redis Cluster: `endpoint` (and `seeds`) are where the slot map is first read; commands go
        /// to the primary serving their slot, with `connections` per primary. Every challenge must be
        /// bound to a key (see `requiresKeyBoundChallenges`). The database must be 0.
        public var cluster: Bool
        /// More cluster nodes to read the slot map from when `endpoint` does not answer. Every node
        /// (these, and those the cluster names) connects with `endpoint.security`.
        public var seeds: [RedisEndpoint]
        /// Key cap and re-registration window (checked in the register script). `keyIdleTTLMillis`
        /// does not apply: keys in Redis are not evicted.
        public var limits: KeyLimits

        public init(
            endpoint: RedisEndpoint, waitReplicas: Int = 0, connections: Int = 2, keyPrefix: String = "ag:",
            expiredGraceMillis: Int64 = ChallengeState.expiredGraceMillis, cluster: Bool = false, seeds: [RedisEndpoint] = [],
            limits: KeyLimits = KeyLimits(maxKeys: KeyLimits.defaultRedisMaxKeys)
        ) {
            self.endpoint = endpoint
            self.waitReplicas = max(0, waitReplicas)
            self.connections = max(1, connections)
            self.keyPrefix = keyPrefix
            self.expiredGraceMillis = max(0, expiredGraceMillis)
            self.cluster = cluster
            self.seeds = seeds
            self.limits = limits
        }
    }

    /// One server (a pool of connections), or a cluster (a pool per primary, routed by slot).
    private enum Transport {
        case single([RedisConnection])
        case cluster(RedisCluster)
    }

    public let options: Options
    private let transport: Transport
    /// The connection of each event loop the store serves on (`serve(on:)`), found from the loop's
    /// queue: a call made on a loop goes out on that loop's own connection.
    private let loopKey = DispatchSpecificKey<LoopOwned<RedisLoopConnection>>()
    private let loopConnections = Mutex<[(loop: EventLoop, connection: LoopOwned<RedisLoopConnection>)]>([])
    private let servesOnLoops = Atomic<Bool>(false)
    private let isClosed = Atomic<Bool>(false)
    private let next = Atomic<Int>(0)
    private let observer: (any RedisStoreObserver)?
    private let cachedKeys = Atomic<Int>(0)
    /// Challenges this instance issued, by expiry second (for `statistics.liveChallenges`).
    private let issued = Mutex<[Int64: Int]>([:])
    // Command words and script names as bytes, made once (not per call).
    private let issueSHA = Array(Hex.encode(SHA1.hash(RedisScripts.issue)).utf8)
    private let registerSHA = Array(Hex.encode(SHA1.hash(RedisScripts.register)).utf8)
    private let commitSHA = Array(Hex.encode(SHA1.hash(RedisScripts.commit)).utf8)
    private let commitNextSHA = Array(Hex.encode(SHA1.hash(RedisScripts.commitNext)).utf8)
    /// Key records the assertion gate read or committed (`assertionKey`), so that a key's requests
    /// after its first cost one round trip (`commitNext`). A public key never changes for a key id;
    /// the counter is decided by the commit script, the policy fields are checked by it, and the
    /// risk comes back with it. Bounded: emptied when full.
    private let keyCache = Mutex<[KeyID: DeviceKeyRecord]>([:])
    static let keyCacheLimit = 16_384
    let claimSHA = Array(Hex.encode(SHA1.hash(RedisScripts.claimRefreshes)).utf8)
    let recordRefreshSHA = Array(Hex.encode(SHA1.hash(RedisScripts.recordRefresh)).utf8)
    let accountAddSHA = Array(Hex.encode(SHA1.hash(RedisAccountScripts.accountAdd)).utf8)
    let keyAccountSHA = Array(Hex.encode(SHA1.hash(RedisAccountScripts.keyAccount)).utf8)
    static let evalsha = Array("EVALSHA".utf8)
    static let hmget = Array("HMGET".utf8)
    /// The key record's fields but the receipt, in `DeviceKeyRecord` order, then its risk (`KeyRisk`).
    /// Keys per account's `ah an at` last (RedisAttestStore+Accounts.swift).
    static let deviceKeyFields = [
        "pk", "ctr", "app", "env", "cat", "bv", "fs", "ls", "rm", "rs", "rcr", "rnb", "rex", "rnx", "ah", "an", "at",
    ]
    .map { Array($0.utf8) }
    private let keyCountName: [UInt8]
    /// The risk refresher's schedule: a sorted set of key ids by next refresh (Unix ms).
    let refreshScheduleName: [UInt8]
    /// `<prefix>k:` and `<prefix>c:`, the key records' and the challenges' name prefixes as bytes.
    private let keyNamePrefix: [UInt8]
    private let challengeNamePrefix: [UInt8]
    /// The random part of the challenges this instance names: OpenSSL's CSPRNG 256 bytes at a
    /// time (`RandomWords`), not a `RAND_bytes` call per challenge.
    private let random = Mutex(RandomWords())

    /// Starts the connections (they connect in the background; see `waitUntilConnected`).
    public init(options: Options, observer: (any RedisStoreObserver)? = nil) {
        self.options = options
        self.observer = observer
        keyCountName = Array((options.keyPrefix + "keys").utf8)
        keyNamePrefix = Array((options.keyPrefix + "k:").utf8)
        challengeNamePrefix = Array((options.keyPrefix + "c:").utf8)
        refreshScheduleName = Array((options.keyPrefix + "riskdue").utf8)
        let changed: @Sendable (Bool) -> Void = { up in observer?.connectionChanged(up: up) }
        if options.cluster {
            var seeds: [RedisNodeAddress] = []
            for e in [options.endpoint] + options.seeds where !seeds.contains(RedisNodeAddress(host: e.host, port: e.port)) {
                seeds.append(RedisNodeAddress(host: e.host, port: e.port))
            }
            transport = .cluster(
                RedisCluster(
                    options: .init(
                        seeds: seeds, timeoutMillis: options.endpoint.timeoutMillis, connectionsPerNode: options.connections,
                        security: options.endpoint.security),
                    scripts: RedisScripts.all, onStateChange: changed, onRedirect: { kind in observer?.clusterRedirect(kind) }))
        } else {
            transport = .single(
                (0..<options.connections).map { i in
                    RedisConnection(endpoint: options.endpoint, scripts: RedisScripts.all, name: "redis-store-\(i)", onStateChange: changed)
                })
        }
    }

    /// On Redis Cluster a challenge must be bound to a key (its hash tag is the key's, so that each
    /// atomic step touches one slot): `issueChallenge` without a key id is refused.
    public var requiresKeyBoundChallenges: Bool { options.cluster }

    /// On Cluster: the primaries of the current slot map (`host:port`); empty otherwise.
    public var clusterNodes: [String] { cluster?.nodes.map(\.description) ?? [] }

    /// The cluster client, in cluster mode (tests).
    var cluster: RedisCluster? {
        if case .cluster(let c) = transport { return c }
        return nil
    }

    /// True while at least one connection is up (readiness). On Cluster: the slot map is known and at
    /// least one of its primaries is connected (the slots of a node that is down fail on their own).
    public var isHealthy: Bool {
        switch transport {
        case .single(let pool): pool.contains { $0.isUp }
        case .cluster(let c): c.isHealthy
        }
    }

    /// Why the store is not healthy (the last connection error), for logs and `/readyz`.
    public var lastError: String {
        switch transport {
        case .single(let pool): pool.first?.lastErrorText ?? ""
        case .cluster(let c): c.lastError
        }
    }

    /// What kind of failure `lastError` is (connect, TLS, authentication, a refused setup command).
    public var lastFailureKind: RedisFailureKind {
        switch transport {
        case .single(let pool): pool.first?.lastFailure.kind ?? .unreachable
        case .cluster(let c): c.lastFailureKind
        }
    }

    /// Waits (polling, at most `timeoutMillis`) until a connection is up (on Cluster: until every
    /// primary of the slot map is connected; at the deadline, whether the store is healthy at all).
    /// Called at start-up only.
    public func waitUntilConnected(timeoutMillis: Int64) -> Bool {
        let deadline = DispatchTime.now().uptimeNanoseconds + UInt64(max(0, timeoutMillis)) * 1_000_000
        while true {
            switch transport {
            case .single: if isHealthy { return true }
            case .cluster(let c): if c.allNodesUp { return true }
            }
            if DispatchTime.now().uptimeNanoseconds >= deadline { return isHealthy }
            usleep(10_000)
        }
    }

    /// Ends the connections; later calls fail with `unavailable`.
    public func close() {
        isClosed.store(true, ordering: .releasing)
        closeLoopConnections(wait: true)
        switch transport {
        case .single(let pool): for c in pool { c.close() }
        case .cluster(let c): c.close()
        }
    }

    /// The last reference may go away inside a completion, on a connection's thread: no waiting.
    deinit {
        closeLoopConnections(wait: false)
        if case .single(let pool) = transport { for c in pool { c.close(wait: false) } }
    }

    // MARK: - Event loops

    /// Serves the calls made on each of `loops` on that loop: a non-blocking connection per loop,
    /// on the loop's epoll, pipelined, its replies completing the calls inline on the loop
    /// (`RedisLoopConnection`), instead of a hop to a connection thread and back. Calls made
    /// anywhere else (start-up, the admin's upkeep, the risk refresher, registrations verified off
    /// the loops), and calls made while a loop's connection is not up, keep going through the
    /// threaded pool. Single server (TCP or TLS) only: on Redis Cluster (redirections, a pool per
    /// primary) every call keeps the threaded connections. Call once.
    public func serve(on loops: [EventLoop]) {
        guard case .single = transport, !isClosed.load(ordering: .acquiring) else { return }
        for loop in loops {
            let connection = LoopOwned(RedisLoopConnection(loop: loop, endpoint: options.endpoint, scripts: RedisScripts.all))
            loopConnections.withLock { $0.append((loop, connection)) }
            let key = loopKey
            // Installed on the loop itself: the loop alone reads its queue's specific value.
            loop.execute {
                loop.queue.setSpecific(key: key, value: connection)
                connection.value.start()
            }
        }
        servesOnLoops.store(true, ordering: .releasing)
    }

    private func closeLoopConnections(wait: Bool) {
        let all = loopConnections.withLock { all in
            defer { all.removeAll() }
            return all
        }
        for (loop, connection) in all {
            let key = loopKey
            let end: @Sendable () -> Void = {
                loop.queue.setSpecific(key: key, value: nil)
                connection.value.close()
            }
            if DispatchQueue.getSpecific(key: key)?.value === connection.value {
                end()
            } else if wait {
                loop.queue.sync(execute: end)
            } else {
                loop.execute(end)
            }
        }
    }

    /// The loop connection of the loop this runs on (tests: on `loop.queue`).
    var currentLoopConnection: RedisLoopConnection? { DispatchQueue.getSpecific(key: loopKey)?.value }

    // MARK: - Sending

    /// Sends `commands` (answered together); on Cluster to the primary serving `key`'s slot (every
    /// key the commands touch hashes to that slot).
    func send(
        key: [UInt8], _ commands: [RedisCommand], _ completion: @escaping @Sendable (Result<[RedisValue], StoreError>) -> Void
    ) {
        let pool: [RedisConnection]
        switch transport {
        case .single(let p): pool = p
        case .cluster(let c): return c.send(key: key, commands, completion)
        }
        let request = RedisRequest(commands: commands, completion: completion)
        if servesOnLoops.load(ordering: .relaxed), !isClosed.load(ordering: .relaxed),
            let connection = DispatchQueue.getSpecific(key: loopKey), connection.value.submit(request)
        {
            return
        }
        let start = next.wrappingAdd(1, ordering: .relaxed).oldValue
        for i in 0..<pool.count where pool[(start &+ i) % pool.count].submit(request) { return }
        let detail =
            isHealthy
            ? "Redis at \(options.endpoint.description) is too slow: \(RedisConnection.maxPending) requests queued on every connection"
            : "Redis at \(options.endpoint.description) is unreachable: \(lastError)"
        completion(.failure(StoreError(.unavailable, detail)))
    }

    /// Times `operation` and reports it to the observer around `completion`.
    func timed<T>(
        _ operation: RedisStoreOperation, _ completion: @escaping @Sendable (Result<T, StoreError>) -> Void
    ) -> @Sendable (Result<T, StoreError>) -> Void {
        guard let observer else { return completion }
        let started = DispatchTime.now().uptimeNanoseconds
        return { result in
            let seconds = Double(DispatchTime.now().uptimeNanoseconds &- started) / 1e9
            if case .failure(let e) = result {
                observer.operation(operation, seconds: seconds, error: e)
            } else {
                observer.operation(operation, seconds: seconds, error: nil)
            }
            completion(result)
        }
    }

    static func protocolError(_ what: String, _ replies: [RedisValue]) -> StoreError {
        StoreError(.unavailable, "unexpected Redis reply to \(what): \(replies)")
    }

    // MARK: - Key layout

    /// `ag:k:{8 hex}` ‖ 56 hex: the tag is the key id's first 4 bytes.
    func keyName(_ id: KeyID) -> [UInt8] { Self.tagged(keyNamePrefix, id.bytes) }

    /// `ag:c:{8 hex}` ‖ rest: the tag is the token's first 4 bytes (the bound key's first 4 bytes
    /// for a challenge bound to a key, so that both hash to one Cluster slot).
    func challengeName(_ token: ChallengeToken) -> [UInt8] { Self.tagged(challengeNamePrefix, token.bytes) }

    /// `prefix` ‖ `{` hex of the first 4 bytes `}` ‖ hex of the rest, written straight into the
    /// array's storage (three names per protected request).
    static func tagged(_ prefix: [UInt8], _ bytes: [UInt8]) -> [UInt8] {
        let count = prefix.count + 2 + 2 * bytes.count
        return [UInt8](unsafeUninitializedCapacity: count) { out, initialized in
            guard let base = out.baseAddress else { return }
            prefix.withUnsafeBufferPointer { p in
                if let pb = p.baseAddress { base.update(from: pb, count: p.count) }
            }
            var i = prefix.count
            base[i] = UInt8(ascii: "{")
            i += 1
            bytes.withUnsafeBufferPointer { src in
                for n in 0..<src.count {
                    let b = src[n]
                    base[i] = Hex.lowercaseDigit(b >> 4)
                    base[i + 1] = Hex.lowercaseDigit(b & 0x0f)
                    i += 2
                    if n == 3 {
                        base[i] = UInt8(ascii: "}")
                        i += 1
                    }
                }
            }
            if bytes.count < 4 {
                base[i] = UInt8(ascii: "}")
                i += 1
            }
            initialized = i
        }
    }

    /// A new challenge's name bytes: the tag (the bound key's first 4 bytes, so that both share a
    /// Cluster slot; random for an unbound one), then 16 random bytes, from `random`.
    private func newToken(boundTo key: KeyID?) -> ChallengeToken {
        let tag = key.map { Array($0.bytes.prefix(4)) } ?? []
        return ChallengeToken(tag + randomBytes(20 - tag.count))!
    }

    private func randomBytes(_ count: Int) -> [UInt8] {
        random.withLock { words in
            [UInt8](unsafeUninitializedCapacity: count) { out, initialized in
                var i = 0
                while i < count {
                    var w = words.draw()
                    withUnsafeBytes(of: &w) { raw in
                        for b in raw where i < count {
                            out[i] = b
                            i += 1
                        }
                    }
                }
                initialized = count
            }
        }
    }

    static func purposeCode(_ p: ChallengePurpose?) -> String {
        switch p {
        case nil: "0"
        case .register?: "1"
        case .assert?: "2"
        }
    }

    static func decimal(_ n: some BinaryInteger) -> [UInt8] {
        guard let value = Int64(exactly: n) else { return Array(String(n).utf8) }
        return RESP.withDecimal(value) { Array($0) }
    }

    // MARK: - AttestStore

    public var statistics: StoreStatistics {
        let now = Int64(DispatchTime.now().uptimeNanoseconds / 1_000_000_000)
        let live = issued.withLock { table -> Int in
            table = table.filter { $0.key >= now }
            return table.values.reduce(0, +)
        }
        return StoreStatistics(keys: cachedKeys.load(ordering: .relaxed), liveChallenges: live)
    }

    /// Reads the Redis-wide key count into `statistics.keys` (called about once a second).
    public func refreshStatistics() {
        send(
            key: keyCountName, [RedisCommand([Array("GET".utf8), keyCountName])],
            timed(.statistics) { [self] result in
                if case .success(let replies) = result, let n = replies.first?.integer { self.cachedKeys.store(Int(n), ordering: .relaxed) }
            })
    }

    public func issueChallenge(
        _ request: ChallengeRequest, nowMillis: Int64,
        completion: @escaping @Sendable (Result<IssuedChallenge, StoreError>) -> Void
    ) {
        issue(request, nowMillis: nowMillis, attempts: 3, completion: timed(.issueChallenge, completion))
    }

    private func issue(
        _ request: ChallengeRequest, nowMillis: Int64, attempts: Int,
        completion: @escaping @Sendable (Result<IssuedChallenge, StoreError>) -> Void
    ) {
        if options.cluster && request.keyID == nil {
            return completion(
                .failure(
                    StoreError(
                        .unavailable,
                        "on Redis Cluster a challenge must be bound to a key (keyId): an unbound challenge would put the registration's two records in two slots"
                    )))
        }
        let ttl = max(0, request.ttlMillis)
        let (sum, overflow) = nowMillis.addingReportingOverflow(ttl)
        let expires = overflow ? Int64.max : sum
        let token = newToken(boundTo: request.keyID)
        let redisTTL = min(ttl, Int64.max / 2) + options.expiredGraceMillis
        let name = challengeName(token)
        var w = RESPCommandWriter(arguments: 8)
        w.append(Self.evalsha)
        w.append(issueSHA)
        w.append(decimal: 1)
        w.append(name)
        w.append(utf8: Self.purposeCode(request.purpose))
        w.append(request.keyID?.bytes ?? [])
        w.append(decimal: expires)
        w.append(decimal: max(1, redisTTL))
        send(key: name, [w.command]) { [self] result in
            switch result {
            case .failure(let e):
                completion(.failure(e))
            case .success(let replies):
                switch replies.first {
                case .integer(1)?:
                    let second = Int64(DispatchTime.now().uptimeNanoseconds / 1_000_000_000) + (ttl + 999) / 1000
                    issued.withLock { $0[second, default: 0] += 1 }
                    completion(.success(IssuedChallenge(token: token, expiresAtMillis: expires)))
                case .integer(0)? where attempts > 1:
                    issue(request, nowMillis: nowMillis, attempts: attempts - 1, completion: completion)
                default:
                    completion(.failure(Self.protocolError("the issue script", replies)))
                }
            }
        }
    }

    public func challengeState(
        _ token: ChallengeToken, nowMillis: Int64,
        completion: @escaping @Sendable (Result<ChallengeState, StoreError>) -> Void
    ) {
        readChallenge(token, nowMillis: nowMillis, completion: timed(.challengeState, completion))
    }

    private func readChallenge(
        _ token: ChallengeToken, nowMillis: Int64, completion: @escaping @Sendable (Result<ChallengeState, StoreError>) -> Void
    ) {
        let name = challengeName(token)
        let command = RedisCommand([Self.hmget, name, [0x70], [0x6B], [0x65], [0x75]])  // p k e u
        send(key: name, [command]) { result in
            switch result {
            case .failure(let e):
                completion(.failure(e))
            case .success(let replies):
                guard case .array(let f)? = replies.first, f.count == 4 else {
                    return completion(.failure(Self.protocolError("HMGET", replies)))
                }
                guard let expires = f[2].integer else { return completion(.success(.unknown)) }
                if f[3].text == "1" { return completion(.success(.consumed)) }
                if nowMillis >= expires { return completion(.success(.expired(expiresAtMillis: expires))) }
                let purpose: ChallengePurpose? =
                    switch f[0].text {
                    case "1": .register
                    case "2": .assert
                    default: nil
                    }
                let key = f[1].bytes.flatMap(KeyID.init)
                completion(.success(.valid(purpose: purpose, keyID: key, expiresAtMillis: expires)))
            }
        }
    }

    public func deviceKey(_ id: KeyID, completion: @escaping @Sendable (Result<DeviceKeyRecord?, StoreError>) -> Void) {
        let completion = timed(.deviceKey, completion)
        let name = keyName(id)
        send(key: name, [RedisCommand([Self.hmget, name] + Self.deviceKeyFields)]) { result in
            switch result {
            case .failure(let e):
                completion(.failure(e))
            case .success(let replies):
                guard case .array(let f)? = replies.first, f.count == Self.deviceKeyFields.count else {
                    return completion(.failure(Self.protocolError("HMGET", replies)))
                }
                completion(.success(Self.deviceKeyRecord(id, f)))
            }
        }
    }

    /// A key record from the reply to `HMGET deviceKeyFields`; nil for a key that is not there.
    static func deviceKeyRecord(_ id: KeyID, _ f: [RedisValue]) -> DeviceKeyRecord? {
        guard let point = f[0].bytes, let counter = f[1].integer else { return nil }
        var risk: KeyRisk?
        if let created = f[10].integer {
            risk = KeyRisk(
                metric: f[8].integer.map { UInt32(clamping: $0) }, stale: f[9].text == "1", receiptCreatedMillis: created,
                notBeforeMillis: f[11].integer, expiresMillis: f[12].integer, nextRefreshMillis: f[13].integer)
        }
        return DeviceKeyRecord(
            keyID: id, publicKey: point, counter: UInt32(clamping: counter), appID: f[2].text ?? "",
            environment: f[3].text == "1" ? .production : .development,
            validationCategory: f[4].integer.map { UInt32(clamping: $0) }, bundleVersion: f[5].text,
            firstSeenMillis: f[6].integer ?? 0, lastSeenMillis: f[7].integer ?? 0, risk: risk,
            account: f.count >= 17 ? keyAccount(f[14..<17]) : nil)
    }

    /// The receipt stored with the key's latest registration, or nil.
    public func receipt(for id: KeyID, completion: @escaping @Sendable (Result<[UInt8]?, StoreError>) -> Void) {
        let name = keyName(id)
        send(key: name, [RedisCommand([Array("HGET".utf8), name, Array("rc".utf8)])]) { result in
            completion(result.map { $0.first?.bytes })
        }
    }

    public func register(
        _ registration: Registration, nowMillis: Int64,
        completion: @escaping @Sendable (Result<RegistrationOutcome, StoreError>) -> Void
    ) {
        let completion = timed(.register, completion)
        let rec = registration.record
        forget(rec.keyID)
        guard rec.publicKey.count == 65, rec.publicKey[0] == 0x04 else {
            return completion(
                .failure(
                    StoreError(
                        .unavailable, "registration refused: the public key must be a 65-byte uncompressed point (04 ‖ x ‖ y)")))
        }
        guard rec.appID.utf8.count <= 4096, (rec.bundleVersion?.utf8.count ?? 0) <= 4096 else {
            return completion(
                .failure(
                    StoreError(
                        .unavailable, "registration refused: app id or bundle version over 4096 bytes")))
        }
        if options.cluster && !Self.sameSlot(rec.keyID, registration.challenge) {
            // Not a challenge bound to this key: the script would span two slots. Nothing can be
            // written, so a read names the rejection (the memory store's order: state, purpose, key).
            return rejectionByRead(registration.challenge, keyID: rec.keyID, want: .register, nowMillis: nowMillis) { result in
                completion(result.map { .challengeRejected($0) })
            }
        }
        let keyRecordName = keyName(rec.keyID)
        let scriptKeys =
            options.cluster
            ? [Array("2".utf8), keyRecordName, challengeName(registration.challenge)]
            : [Array("4".utf8), keyRecordName, challengeName(registration.challenge), keyCountName, refreshScheduleName]
        let risk = rec.risk.flatMap { $0.receiptCreatedMillis > 0 ? $0 : nil }
        var commands = [
            RedisCommand(
                [Self.evalsha, registerSHA] + scriptKeys + [
                    Self.decimal(nowMillis), rec.keyID.bytes, rec.publicKey, Self.decimal(rec.counter), Array(rec.appID.utf8),
                    Array((rec.environment == .production ? "1" : "0").utf8), rec.validationCategory.map(Self.decimal) ?? [],
                    rec.bundleVersion.map { Array(("v" + $0).utf8) } ?? [],
                    Self.decimal(rec.firstSeenMillis), Self.decimal(rec.lastSeenMillis), registration.receipt,
                    Self.decimal(options.limits.maxReregistrations), Self.decimal(options.limits.reregistrationWindowMillis),
                    Self.decimal(options.limits.maxKeys),
                    Array((options.cluster && cachedKeys.load(ordering: .relaxed) >= options.limits.maxKeys ? "1" : "0").utf8),
                    risk.map { Self.decimal($0.receiptCreatedMillis) } ?? [], risk?.notBeforeMillis.map(Self.decimal) ?? [],
                    risk?.expiresMillis.map(Self.decimal) ?? [], risk?.nextRefreshMillis.map(Self.decimal) ?? [],
                ])
        ]
        let replicas = options.waitReplicas
        let waitMillis = max(1, options.endpoint.timeoutMillis * 3 / 4)
        if replicas > 0 { commands.append(RedisCommand("WAIT", String(replicas), String(waitMillis))) }
        send(key: keyRecordName, commands) { [self] result in
            switch result {
            case .failure(let e):
                completion(.failure(e))
            case .success(let replies):
                guard case .array(let a)? = replies.first, let status = a.first?.text else {
                    return completion(.failure(Self.protocolError("the register script", replies)))
                }
                forget(rec.keyID)
                if options.cluster && status == "new" {
                    // The key count lives in its own slot: counted after the fact (a statistic only).
                    send(key: keyCountName, [RedisCommand([Array("INCR".utf8), keyCountName])]) { _ in }
                }
                if options.cluster && (status == "new" || status == "existing") {
                    // So does the refresh schedule: the key's first refresh is set after the fact.
                    scheduleRefresh(rec.keyID, at: risk?.nextRefreshMillis)
                }
                let outcome: RegistrationOutcome
                switch status {
                case "new": outcome = .registered(existing: false)
                case "existing": outcome = .registered(existing: true)
                // Refusals by the key's limits wrote nothing: no replica to wait for.
                case "app_conflict":
                    return completion(.success(.appConflict(registeredAppID: a.count > 2 ? a[2].text ?? "" : "")))
                case "rereg_limited":
                    return completion(.success(.reregistrationLimited(retryAfterMillis: max(1, a.count > 1 ? a[1].integer ?? 1 : 1))))
                case "key_capacity":
                    return completion(.success(.keyCapacity(maxKeys: options.limits.maxKeys)))
                default:
                    guard let why = Self.rejection(status) else {
                        return completion(.failure(Self.protocolError("the register script", replies)))
                    }
                    return completion(.success(.challengeRejected(why)))
                }
                if replicas > 0 {
                    let acknowledged = replies.count > 1 ? replies[1].integer ?? -1 : -1
                    guard acknowledged >= Int64(replicas) else {
                        return completion(
                            .failure(
                                StoreError(
                                    .unavailable,
                                    "registration written but acknowledged by \(max(0, acknowledged)) of \(replicas) replicas within \(waitMillis) ms"
                                )))
                    }
                }
                completion(.success(outcome))
            }
        }
    }

    static func rejection(_ status: String) -> ChallengeRejection? {
        switch status {
        case "unknown": .unknown
        case "expired": .expired
        case "consumed": .consumed
        case "wrong_purpose": .wrongPurpose
        case "wrong_key": .wrongKey
        default: nil
        }
    }

    public func commitAssertion(
        _ commit: AssertionCommit, nowMillis: Int64,
        completion: @escaping @Sendable (Result<CommitOutcome, StoreError>) -> Void
    ) {
        let completion = timed(.commitAssertion, completion)
        if options.cluster, let token = commit.challenge, !Self.sameSlot(commit.keyID, token) {
            return commitRejectionByRead(commit, token: token, nowMillis: nowMillis, completion: completion)
        }
        let name = keyName(commit.keyID)
        var w = RESPCommandWriter(arguments: (commit.challenge == nil ? 9 : 10) + Self.keyRateArguments(commit))
        w.append(Self.evalsha)
        w.append(commitSHA)
        w.append(decimal: (commit.challenge == nil ? 1 : 2) + (commit.keyRate == nil ? 0 : 1))
        w.append(name)
        if let token = commit.challenge { w.append(challengeName(token)) }
        if let limit = commit.keyRate { w.append(keyRateName(commit.keyID, limit)) }
        w.append(decimal: nowMillis)
        w.append(commit.keyID.bytes)
        w.append(decimal: Int64(commit.counter))
        w.append(decimal: Int64(max(0, commit.counterWindow)))
        w.append(decimal: commit.challenge == nil ? 0 : 1)
        if let limit = commit.keyRate { Self.appendKeyRate(limit, to: &w) }
        send(key: name, [w.command]) { result in
            switch result {
            case .failure(let e):
                completion(.failure(e))
            case .success(let replies):
                guard case .array(let a)? = replies.first, a.count >= 2, let status = a[0].text, let n = a[1].integer else {
                    return completion(.failure(Self.protocolError("the commit script", replies)))
                }
                switch status {
                case "committed": completion(.success(.committed(previousCounter: UInt32(clamping: n))))
                case "unknown_key": completion(.success(.unknownKey))
                case "replay":
                    let open = a.count > 2 ? Self.windowBits(a[2].text ?? "") : 0
                    completion(.success(.counterReplay(stored: UInt32(clamping: n), open: open)))
                case "key_rate_limited": completion(.success(.keyRateLimited(retryAfterSeconds: max(1, Int(n)))))
                default:
                    guard let why = Self.rejection(status) else {
                        return completion(.failure(Self.protocolError("the commit script", replies)))
                    }
                    completion(.success(.challengeRejected(why)))
                }
            }
        }
    }

    // MARK: - The assertion gate's calls: one round trip per request of a known key

    public func assertionKey(_ id: KeyID, completion: @escaping @Sendable (Result<DeviceKeyRecord?, StoreError>) -> Void) {
        if let cached = keyCache.withLock({ $0[id] }) { return completion(.success(cached)) }
        deviceKey(id) { [self] result in
            if case .success(let record?) = result { remember(record) }
            completion(result)
        }
    }

    private func remember(_ record: DeviceKeyRecord) {
        keyCache.withLock { cache in
            if cache.count >= Self.keyCacheLimit, cache[record.keyID] == nil { cache.removeAll(keepingCapacity: true) }
            cache[record.keyID] = record
        }
    }

    private func forget(_ id: KeyID) { _ = keyCache.withLock { $0.removeValue(forKey: id) } }

    /// A key's cached record is dropped when its account changed (its next request reads it again).
    func forgetCached(_ id: KeyID) { forget(id) }

    /// Keys the gate's cache holds (tests).
    var cachedKeyRecords: Int { keyCache.withLock { $0.count } }

    /// The commit, the challenge's consumption and the next challenge in one script (`commitNext`).
    /// On Cluster with a presented challenge in another slot than the key: as `commitAssertion` (it
    /// can only refuse). Without `checked` or `next`: `commitAssertion`, then as the default.
    public func commitAssertion(
        _ commit: AssertionCommit, checked: CheckedKey?, issuing next: ChallengeRequest?, nowMillis: Int64,
        completion: @escaping @Sendable (Result<CommitAndNext, StoreError>) -> Void
    ) {
        guard let checked, let next, next.keyID == commit.keyID,
            !(options.cluster && commit.challenge.map { !Self.sameSlot(commit.keyID, $0) } ?? false)
        else {
            return commitAssertion(commit, nowMillis: nowMillis) { [self] result in
                switch result {
                case .failure(let e):
                    completion(.failure(e))
                case .success(let outcome):
                    noteOutcome(commit, outcome)
                    guard case .committed = outcome, let next else { return completion(.success(CommitAndNext(outcome: outcome))) }
                    issueChallenge(next, nowMillis: nowMillis) { issued in
                        completion(.success(CommitAndNext(outcome: outcome, next: try? issued.get())))
                    }
                }
            }
        }
        let timedCompletion = timed(.commitAssertion, completion)
        let name = keyName(commit.keyID)
        let ttl = max(0, next.ttlMillis)
        let (sum, overflow) = nowMillis.addingReportingOverflow(ttl)
        let expires = overflow ? Int64.max : sum
        let token = newToken(boundTo: commit.keyID)
        let redisTTL = min(ttl, Int64.max / 2) + options.expiredGraceMillis
        // EVALSHA sha numkeys, the keys (the record, the presented challenge if any, the next), 13 arguments.
        var w = RESPCommandWriter(arguments: (commit.challenge == nil ? 18 : 19) + Self.keyRateArguments(commit), capacity: 512)
        w.append(Self.evalsha)
        w.append(commitNextSHA)
        w.append(decimal: (commit.challenge == nil ? 2 : 3) + (commit.keyRate == nil ? 0 : 1))
        w.append(name)
        if let presented = commit.challenge { w.append(challengeName(presented)) }
        w.append(challengeName(token))
        if let limit = commit.keyRate { w.append(keyRateName(commit.keyID, limit)) }
        w.append(decimal: nowMillis)
        w.append(commit.keyID.bytes)
        w.append(decimal: Int64(commit.counter))
        w.append(decimal: Int64(max(0, commit.counterWindow)))
        w.append(decimal: commit.challenge == nil ? 0 : 1)
        w.append(utf8: checked.appID)
        w.append(decimal: checked.environment == .production ? 1 : 0)
        if let category = checked.validationCategory { w.append(decimal: Int64(category)) } else { w.append([]) }
        if let version = checked.bundleVersion { w.append(utf8: "v" + version) } else { w.append([]) }
        w.append(utf8: Self.purposeCode(next.purpose))
        w.append(commit.keyID.bytes)
        w.append(decimal: expires)
        w.append(decimal: max(1, redisTTL))
        if let limit = commit.keyRate { Self.appendKeyRate(limit, to: &w) }
        send(key: name, [w.command]) { [self] result in
            switch result {
            case .failure(let e):
                timedCompletion(.failure(e))
            case .success(let replies):
                guard case .array(let a)? = replies.first, a.count >= 2, let status = a[0].text, let n = a[1].integer else {
                    return timedCompletion(.failure(Self.protocolError("the commit script", replies)))
                }
                let outcome: CommitOutcome
                switch status {
                case "committed":
                    outcome = .committed(previousCounter: UInt32(clamping: n))
                case "changed":
                    forget(commit.keyID)
                    return timedCompletion(.success(CommitAndNext(outcome: .unknownKey, keyChanged: true)))
                case "unknown_key": outcome = .unknownKey
                case "key_rate_limited": outcome = .keyRateLimited(retryAfterSeconds: max(1, Int(n)))
                case "replay":
                    let open = a.count > 2 ? Self.windowBits(a[2].text ?? "") : 0
                    outcome = .counterReplay(stored: UInt32(clamping: n), open: open)
                default:
                    guard let why = Self.rejection(status) else {
                        return timedCompletion(.failure(Self.protocolError("the commit script", replies)))
                    }
                    outcome = .challengeRejected(why)
                }
                noteOutcome(commit, outcome)
                guard case .committed = outcome else { return timedCompletion(.success(CommitAndNext(outcome: outcome))) }
                // The record as the commit left it: ctr app env cat bv fs ls rm rs rcr rnb rex rnx ah an at.
                var read: DeviceKeyRecord?
                if a.count > 3, case .array(let f) = a[3], f.count == Self.deviceKeyFields.count - 1 {
                    read = Self.deviceKeyRecord(commit.keyID, [.string(keyCache.withLock { $0[commit.keyID]?.publicKey } ?? [])] + f)
                }
                let current = read
                if let current, !current.publicKey.isEmpty { remember(current) } else { forget(commit.keyID) }
                if a.count > 2, a[2].integer == 1 {
                    let second = Int64(DispatchTime.now().uptimeNanoseconds / 1_000_000_000) + (ttl + 999) / 1000
                    issued.withLock { $0[second, default: 0] += 1 }
                    return timedCompletion(
                        .success(
                            CommitAndNext(
                                outcome: outcome, next: IssuedChallenge(token: token, expiresAtMillis: expires), current: current)))
                }
                // The next challenge's name was taken (a 128-bit collision): issued on its own.
                issue(next, nowMillis: nowMillis, attempts: 3) { issuedResult in
                    timedCompletion(.success(CommitAndNext(outcome: outcome, next: try? issuedResult.get(), current: current)))
                }
            }
        }
    }

    /// What a commit taught the cache: the counter it found stored (a replay), or that the key is gone.
    private func noteOutcome(_ commit: AssertionCommit, _ outcome: CommitOutcome) {
        switch outcome {
        case .unknownKey:
            forget(commit.keyID)
        case .counterReplay(let stored, _):
            keyCache.withLock { cache in
                if var r = cache[commit.keyID], r.counter < stored {
                    r.counter = stored
                    cache[commit.keyID] = r
                }
            }
        case .committed, .challengeRejected, .keyRateLimited:
            break
        }
    }

    /// `CounterWindow.gaps` from the scripts' `0`/`1` characters (character i + 1: bit i).
    static func windowBits(_ text: String) -> UInt64 {
        var bits: UInt64 = 0
        for (i, c) in text.utf8.prefix(CounterWindow.span).enumerated() where c == UInt8(ascii: "1") { bits |= 1 << UInt64(i) }
        return bits
    }

    /// The key's counter window from its hash's `ctr` and `cw` (a `cw` naming another counter is
    /// stale: nothing open), as the commit script reads it.
    static func counterWindow(ctr: Int64, cw: String?) -> CounterWindow {
        let highest = UInt32(clamping: ctr)
        guard let cw, let colon = cw.firstIndex(of: ":"), cw[..<colon] == String(ctr) else { return CounterWindow(highest: highest) }
        return CounterWindow(highest: highest, gaps: windowBits(String(cw[cw.index(after: colon)...])))
    }

    // MARK: - Cluster: a challenge in another slot than the key

    /// Whether the challenge carries the key's hash tag (a challenge bound to this key does).
    static func sameSlot(_ key: KeyID, _ token: ChallengeToken) -> Bool {
        token.bytes.count >= 4 && token.bytes.prefix(4).elementsEqual(key.bytes.prefix(4))
    }

    /// The rejection of a challenge that cannot be this key's (it is in another slot), named as the
    /// scripts would: unknown, consumed, expired, wrong purpose, else wrong key. Read only.
    private func rejectionByRead(
        _ token: ChallengeToken, keyID: KeyID, want: ChallengePurpose, nowMillis: Int64,
        completion: @escaping @Sendable (Result<ChallengeRejection, StoreError>) -> Void
    ) {
        readChallenge(token, nowMillis: nowMillis) { result in
            completion(
                result.map { state in
                    switch state {
                    case .unknown: .unknown
                    case .consumed: .consumed
                    case .expired: .expired
                    case .valid(let purpose, _, _):
                        // Bound to another key (or, from a single-server past, unbound: on Cluster an
                        // unbound challenge cannot be consumed atomically with a key, so it is refused).
                        if let purpose, purpose != want { .wrongPurpose } else { .wrongKey }
                    }
                })
        }
    }

    /// A commit whose challenge is in another slot: the script's order (key known, counter accepted
    /// by the key's counter window, then the challenge) with reads only; it always ends in a
    /// refusal, nothing written.
    private func commitRejectionByRead(
        _ commit: AssertionCommit, token: ChallengeToken, nowMillis: Int64,
        completion: @escaping @Sendable (Result<CommitOutcome, StoreError>) -> Void
    ) {
        let name = keyName(commit.keyID)
        send(key: name, [RedisCommand([Self.hmget, name, Array("ctr".utf8), Array("cw".utf8)])]) { [self] result in
            switch result {
            case .failure(let e):
                completion(.failure(e))
            case .success(let replies):
                guard case .array(let f)? = replies.first, f.count == 2 else {
                    return completion(.failure(Self.protocolError("HMGET ctr cw", replies)))
                }
                if case .null = f[0] { return completion(.success(.unknownKey)) }
                guard let stored = f[0].integer else { return completion(.failure(Self.protocolError("HMGET ctr cw", replies))) }
                let window = Self.counterWindow(ctr: stored, cw: f[1].text)
                if window.accepting(commit.counter, width: commit.counterWindow) == nil {
                    return completion(.success(.counterReplay(stored: window.highest, open: window.open(width: commit.counterWindow))))
                }
                rejectionByRead(token, keyID: commit.keyID, want: .assert, nowMillis: nowMillis) { result in
                    completion(result.map { .challengeRejected($0) })
                }
            }
        }
    }
}
