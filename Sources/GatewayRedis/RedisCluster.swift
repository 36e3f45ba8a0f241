import Dispatch
import Foundation
import GatewayStore
import Synchronization

/// A Redis Cluster node's address as the cluster announces it (`CLUSTER SLOTS`, `MOVED`, `ASK`).
struct RedisNodeAddress: Hashable, Sendable, CustomStringConvertible {
    var host: String
    var port: UInt16

    var description: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }

    /// `host:port` (the last colon separates the port, so IPv6 hosts work), or nil.
    init?(_ text: some StringProtocol) {
        guard let colon = text.lastIndex(of: ":"), let port = UInt16(text[text.index(after: colon)...]), port > 0 else { return nil }
        var host = String(text[..<colon])
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        guard !host.isEmpty else { return nil }
        self.host = host
        self.port = port
    }

    init(host: String, port: UInt16) {
        self.host = host
        self.port = port
    }
}

/// A redirection or transient refusal from a cluster node, parsed from an error reply.
enum RedisClusterReply: Equatable {
    case moved(slot: Int, RedisNodeAddress)
    case ask(slot: Int, RedisNodeAddress)
    /// `TRYAGAIN` (a multi-key request during a slot migration) or `CLUSTERDOWN`.
    case retryLater(String)

    init?(_ value: RedisValue) {
        guard case .error(let message) = value else { return nil }
        let words = message.split(separator: " ")
        switch words.first {
        case "MOVED"?, "ASK"?:
            guard words.count == 3, let slot = Int(words[1]), let address = RedisNodeAddress(words[2]) else { return nil }
            self = words[0] == "MOVED" ? .moved(slot: slot, address) : .ask(slot: slot, address)
        case "TRYAGAIN"?, "CLUSTERDOWN"?:
            self = .retryLater(message)
        default:
            return nil
        }
    }
}

/// The slot → primary map, from a `CLUSTER SLOTS` reply.
struct RedisSlotMap: Equatable {
    /// For every slot, an index into `nodes`, or -1 when no node serves it.
    var owner: [Int16]
    var nodes: [RedisNodeAddress]

    static let empty = RedisSlotMap(owner: [Int16](repeating: -1, count: RedisSlot.count), nodes: [])

    /// The index of `address` in `nodes`, added if it is not there yet.
    mutating func nodeIndex(_ address: RedisNodeAddress) -> Int {
        if let i = nodes.firstIndex(of: address) { return i }
        nodes.append(address)
        return nodes.count - 1
    }

    /// Parses `CLUSTER SLOTS`: `[[start, end, [host, port, id…], replicas…]…]`. An empty host means
    /// "the node you asked" (`answeredBy`).
    init?(clusterSlots reply: RedisValue, answeredBy: RedisNodeAddress) {
        guard case .array(let ranges) = reply else { return nil }
        var map = RedisSlotMap.empty
        for range in ranges {
            guard case .array(let r) = range, r.count >= 3, let start = r[0].integer, let end = r[1].integer,
                start >= 0, end < RedisSlot.count, start <= end,
                case .array(let primary) = r[2], primary.count >= 2, let port = primary[1].integer, port > 0, port <= 65_535
            else { return nil }
            var host = primary[0].text ?? ""
            if host.isEmpty || host == "?" { host = answeredBy.host }
            let index = map.nodeIndex(RedisNodeAddress(host: host, port: UInt16(port)))
            for slot in Int(start)...Int(end) { map.owner[slot] = Int16(index) }
        }
        self = map
    }

    private init(owner: [Int16], nodes: [RedisNodeAddress]) {
        self.owner = owner
        self.nodes = nodes
    }

    func node(for slot: Int) -> RedisNodeAddress? {
        let i = owner[slot]
        return i < 0 ? nil : nodes[Int(i)]
    }

    var coveredSlots: Int { owner.lazy.filter { $0 >= 0 }.count }
}

/// What a cluster node answered instead of a reply: the metric label of `RedisStoreObserver.clusterRedirect`.
public enum RedisClusterRedirect: String, Sendable, CaseIterable {
    /// `-MOVED`: the slot has a new owner (the map is updated, the request resent there).
    case moved
    /// `-ASK`: the slot is migrating; this key is already on the target (`ASKING`, then the request).
    case ask
    /// `-TRYAGAIN` or `-CLUSTERDOWN`: retried after a back-off.
    case tryAgain = "try_again"
}

/// Connections to the nodes of a Redis Cluster, and the routing of every request to the primary
/// that serves its slot.
///
/// - The slot map comes from `CLUSTER SLOTS`, asked of any live node (the seeds first, until a map
///   is known). It is read at start, after every `MOVED`, when a node's connections fail, and every
///   5 s; a failed read is retried with back-off (50 ms doubling to 2 s).
/// - Every primary gets its own pool of `RedisConnection`s (pipelining, scripts loaded on connect,
///   `NOSCRIPT` reload, reconnect with back-off: all as in single-server mode).
/// - `-MOVED slot host:port`: the slot is pointed at the new node at once, a map refresh is asked
///   for, and the request is sent again to the new node. `-ASK slot host:port`: `ASKING` and the
///   request are sent to that node, the map is left alone. At most 5 redirections per request.
/// - `-TRYAGAIN` / `-CLUSTERDOWN`: sent again after 10, 20, 40, 80, 160 ms, then
///   `StoreError(.unavailable, …)`.
/// - A node that is down fails its slots at once with `.unavailable` (other slots keep working);
///   a node just learned from the map or a redirection gets up to the command timeout to connect.
final class RedisCluster: @unchecked Sendable {
    struct Options: Sendable {
        var seeds: [RedisNodeAddress]
        var timeoutMillis: Int64
        var connectionsPerNode: Int
        /// Credentials and TLS for every node: the seeds and those the slot map or a redirection names.
        var security = RedisSecurity()
    }

    /// One primary's connections.
    final class NodePool: @unchecked Sendable {
        let address: RedisNodeAddress
        let connections: [RedisConnection]
        let createdNanos = DispatchTime.now().uptimeNanoseconds
        private let next = Atomic<Int>(0)

        init(address: RedisNodeAddress, options: Options, scripts: [String], onStateChange: @escaping @Sendable (Bool) -> Void) {
            self.address = address
            let endpoint = RedisEndpoint(
                host: address.host, port: address.port, database: 0, timeoutMillis: options.timeoutMillis, security: options.security)
            connections = (0..<max(1, options.connectionsPerNode)).map { i in
                RedisConnection(
                    endpoint: endpoint, scripts: scripts, name: "redis-cluster-\(address.port)-\(i)", onStateChange: onStateChange)
            }
        }

        var isUp: Bool { connections.contains { $0.isUp } }
        var lastError: String { connections.first?.lastErrorText ?? "" }
        var lastFailureKind: RedisFailureKind { connections.first?.lastFailure.kind ?? .unreachable }

        func submit(_ request: RedisRequest) -> Bool {
            let start = next.wrappingAdd(1, ordering: .relaxed).oldValue
            for i in 0..<connections.count where connections[(start &+ i) % connections.count].submit(request) { return true }
            return false
        }

        func close(wait: Bool) { for c in connections { c.close(wait: wait) } }
    }

    private struct State {
        var map: RedisSlotMap?
        var pools: [RedisNodeAddress: NodePool] = [:]
        var closed = false
        var lastMapError = "the slot map has not been read yet"
    }

    private struct Refresh {
        var scheduled = false
        var backoffMillis: Int64 = 0
        var notBeforeNanos: UInt64 = 0
    }

    let options: Options
    private let scripts: [String]
    private let onStateChange: @Sendable (Bool) -> Void
    private let state = Mutex(State())
    private let refresh = Mutex(Refresh())
    private let refreshQueue = DispatchQueue(label: "gateway.redis.cluster.map")
    private let retryQueue = DispatchQueue(label: "gateway.redis.cluster.retry", attributes: .concurrent)
    private let timer: any DispatchSourceTimer
    static let maxRedirects = 5
    static let maxRetries = 5

    /// Told of each redirection or retry (for metrics): `moved`, `ask` or `try_again`.
    private let onRedirect: @Sendable (RedisClusterRedirect) -> Void

    init(
        options: Options, scripts: [String], onStateChange: @escaping @Sendable (Bool) -> Void,
        onRedirect: @escaping @Sendable (RedisClusterRedirect) -> Void = { _ in }
    ) {
        self.options = options
        self.scripts = scripts
        self.onStateChange = onStateChange
        self.onRedirect = onRedirect
        timer = DispatchSource.makeTimerSource(queue: refreshQueue)
        state.withLock { s in
            for seed in options.seeds where s.pools[seed] == nil {
                s.pools[seed] = NodePool(address: seed, options: options, scripts: scripts, onStateChange: onStateChange)
            }
        }
        timer.schedule(deadline: .now() + 5, repeating: 5, leeway: .milliseconds(500))
        timer.setEventHandler { [weak self] in self?.requestRefresh() }
        timer.resume()
        requestRefresh()
    }

    deinit {
        timer.cancel()
        for pool in state.withLock({ Array($0.pools.values) }) { pool.close(wait: false) }
    }

    func close() {
        timer.cancel()
        let pools = state.withLock { s -> [NodePool] in
            s.closed = true
            defer { s.pools = [:] }
            return Array(s.pools.values)
        }
        for pool in pools { pool.close(wait: true) }
    }

    // MARK: - State for the store

    /// A slot map is known and at least one of its nodes has a live connection.
    var isHealthy: Bool {
        state.withLock { s in
            guard let map = s.map else { return false }
            return map.nodes.contains { s.pools[$0]?.isUp == true }
        }
    }

    /// A slot map is known and every node in it has a live connection.
    var allNodesUp: Bool {
        state.withLock { s in
            guard let map = s.map, !map.nodes.isEmpty else { return false }
            return map.nodes.allSatisfy { s.pools[$0]?.isUp == true }
        }
    }

    /// The kind of the first failing node's failure (`unreachable` while no map is known and no seed
    /// said more).
    var lastFailureKind: RedisFailureKind {
        state.withLock { s in
            let nodes = s.map?.nodes ?? options.seeds
            for node in nodes {
                if let pool = s.pools[node], !pool.isUp { return pool.lastFailureKind }
            }
            return .unreachable
        }
    }

    var lastError: String {
        state.withLock { s in
            guard let map = s.map else { return s.lastMapError }
            for node in map.nodes {
                guard let pool = s.pools[node] else { return "Redis Cluster node \(node) has no connection yet" }
                if !pool.isUp { return "Redis Cluster node \(node): \(pool.lastError)" }
            }
            return ""
        }
    }

    /// The primary serving `key`'s slot in the current map (tests and diagnostics).
    func node(forKey key: [UInt8]) -> RedisNodeAddress? { state.withLock { $0.map?.node(for: RedisSlot.of(key)) } }

    /// The current map's primaries.
    var nodes: [RedisNodeAddress] { state.withLock { $0.map?.nodes ?? [] } }

    var description: String { "Redis Cluster (seeds \(options.seeds.map(\.description).joined(separator: ", ")))" }

    // MARK: - Routing

    /// Sends `commands` (one request, answered together) to the primary serving `key`'s slot.
    func send(key: [UInt8], _ commands: [RedisCommand], _ completion: @escaping @Sendable (Result<[RedisValue], StoreError>) -> Void) {
        dispatch(slot: RedisSlot.of(key), target: nil, asking: false, commands, redirects: 0, retries: 0, completion)
    }

    private func dispatch(
        slot: Int, target: RedisNodeAddress?, asking: Bool, _ commands: [RedisCommand], redirects: Int, retries: Int,
        _ completion: @escaping @Sendable (Result<[RedisValue], StoreError>) -> Void
    ) {
        let (address, pool, closed, why) = state.withLock { s -> (RedisNodeAddress?, NodePool?, Bool, String) in
            guard !s.closed else { return (nil, nil, true, "") }
            guard let address = target ?? s.map?.node(for: slot) else {
                return (nil, nil, false, s.map == nil ? "the slot map is not known yet (\(s.lastMapError))" : "no node serves slot \(slot)")
            }
            if s.pools[address] == nil {
                s.pools[address] = NodePool(address: address, options: options, scripts: scripts, onStateChange: onStateChange)
            }
            return (address, s.pools[address], false, "")
        }
        if closed { return completion(.failure(StoreError(.unavailable, "the Redis store is closed"))) }
        guard let address, let pool else {
            requestRefresh()
            return completion(.failure(StoreError(.unavailable, "\(description): \(why)")))
        }
        let sent = asking ? [RedisCommand("ASKING")] + commands : commands
        let request = RedisRequest(commands: sent) { [self] result in
            switch result {
            case .failure(let e):
                requestRefresh()
                completion(.failure(e))
            case .success(var replies):
                if asking { replies.removeFirst() }
                guard let special = replies.lazy.compactMap(RedisClusterReply.init).first else { return completion(.success(replies)) }
                switch special {
                case .moved(let movedSlot, let to):
                    onRedirect(.moved)
                    pointSlot(movedSlot, at: to)
                    requestRefresh()
                    guard redirects < Self.maxRedirects else {
                        return completion(
                            .failure(
                                StoreError(
                                    .unavailable, "\(description): slot \(slot) redirected \(redirects + 1) times (last MOVED to \(to))")))
                    }
                    dispatch(slot: slot, target: to, asking: false, commands, redirects: redirects + 1, retries: retries, completion)
                case .ask(_, let to):
                    onRedirect(.ask)
                    guard redirects < Self.maxRedirects else {
                        return completion(
                            .failure(
                                StoreError(
                                    .unavailable, "\(description): slot \(slot) redirected \(redirects + 1) times (last ASK to \(to))")))
                    }
                    dispatch(slot: slot, target: to, asking: true, commands, redirects: redirects + 1, retries: retries, completion)
                case .retryLater(let message):
                    guard retries < Self.maxRetries else {
                        return completion(.failure(StoreError(.unavailable, "\(description): slot \(slot) on \(address): \(message)")))
                    }
                    onRedirect(.tryAgain)
                    if message.hasPrefix("CLUSTERDOWN") { requestRefresh() }
                    retryQueue.asyncAfter(deadline: .now() + .milliseconds(10 << retries)) { [self] in
                        dispatch(slot: slot, target: nil, asking: false, commands, redirects: redirects, retries: retries + 1, completion)
                    }
                }
            }
        }
        if pool.submit(request) { return }
        // A pool created a moment ago (a node just learned) gets up to the timeout to connect.
        let age = DispatchTime.now().uptimeNanoseconds &- pool.createdNanos
        if age < UInt64(options.timeoutMillis) * 1_000_000 {
            retryQueue.asyncAfter(deadline: .now() + .milliseconds(10)) { [self] in
                dispatch(slot: slot, target: target, asking: asking, commands, redirects: redirects, retries: retries, completion)
            }
            return
        }
        requestRefresh()
        let detail =
            pool.isUp
            ? "Redis Cluster node \(address) (slot \(slot)) is too slow: \(RedisConnection.maxPending) requests queued on every connection"
            : "Redis Cluster node \(address) (slot \(slot)) is unreachable: \(pool.lastError)"
        completion(.failure(StoreError(.unavailable, detail)))
    }

    /// After a `MOVED`: the slot goes to `address` now (the full map follows with the refresh).
    private func pointSlot(_ slot: Int, at address: RedisNodeAddress) {
        guard slot >= 0, slot < RedisSlot.count else { return }
        state.withLock { s in
            // In place: a copy of the map would copy its 16,384 slot owners.
            guard s.map != nil else { return }
            let i = s.map!.nodeIndex(address)
            s.map!.owner[slot] = Int16(i)
        }
    }

    /// Sends one request to one node and waits for its answer (the map reads, and tests).
    func call(_ node: RedisNodeAddress, _ command: RedisCommand, timeoutMillis: Int64) -> Result<RedisValue, StoreError> {
        guard let pool = state.withLock({ $0.pools[node] }) else {
            return .failure(StoreError(.unavailable, "no connection to \(node)"))
        }
        let box = Mutex<Result<RedisValue, StoreError>?>(nil)
        let done = DispatchSemaphore(value: 0)
        let request = RedisRequest(commands: [command]) { result in
            box.withLock { $0 = result.map { $0.first ?? .null } }
            done.signal()
        }
        guard pool.submit(request) else { return .failure(StoreError(.unavailable, "\(node) is unreachable: \(pool.lastError)")) }
        guard done.wait(timeout: .now() + .milliseconds(Int(timeoutMillis))) == .success else {
            return .failure(StoreError(.unavailable, "\(node) did not answer within \(timeoutMillis) ms"))
        }
        return box.withLock { $0! }
    }

    // MARK: - The slot map

    /// Asks for a map read: at once if none ran recently, else after the back-off.
    func requestRefresh() {
        let delay = refresh.withLock { r -> UInt64? in
            guard !r.scheduled else { return nil }
            r.scheduled = true
            let now = DispatchTime.now().uptimeNanoseconds
            return r.notBeforeNanos > now ? r.notBeforeNanos - now : 0
        }
        guard let delay else { return }
        refreshQueue.asyncAfter(deadline: .now() + .nanoseconds(Int(delay))) { [weak self] in self?.runRefresh() }
    }

    private func runRefresh() {
        refresh.withLock { $0.scheduled = false }
        if state.withLock({ $0.closed }) { return }
        let ok = readMap()
        let retry = refresh.withLock { r -> Bool in
            r.backoffMillis = ok ? 0 : min(2_000, max(50, r.backoffMillis * 2))
            // After a good read, at most one read per 100 ms (a burst of MOVED asks for one read).
            r.notBeforeNanos = DispatchTime.now().uptimeNanoseconds + UInt64(ok ? 100 : r.backoffMillis) * 1_000_000
            return !ok
        }
        if retry { requestRefresh() }
    }

    /// `CLUSTER SLOTS` from the first node that answers: the map's nodes, then the seeds.
    private func readMap() -> Bool {
        let candidates = state.withLock { s -> [RedisNodeAddress] in
            var list = (s.map?.nodes ?? []).shuffled()
            for seed in options.seeds where !list.contains(seed) { list.append(seed) }
            return list.filter { s.pools[$0]?.isUp == true }
        }
        var errors: [String] = []
        for node in candidates {
            switch call(node, RedisCommand("CLUSTER", "SLOTS"), timeoutMillis: options.timeoutMillis + 500) {
            case .success(let reply):
                guard let map = RedisSlotMap(clusterSlots: reply, answeredBy: node), map.coveredSlots > 0 else {
                    errors.append("\(node): not a usable CLUSTER SLOTS reply (\(String(describing: reply).prefix(200)))")
                    continue
                }
                apply(map)
                return true
            case .failure(let e):
                errors.append("\(node): \(e.detail)")
            }
        }
        let why =
            errors.isEmpty
            ? "no seed or node is reachable (\(seedErrors()))"
            : errors.joined(separator: "; ")
        state.withLock { $0.lastMapError = why }
        return false
    }

    private func seedErrors() -> String {
        state.withLock { s in options.seeds.map { "\($0): \(s.pools[$0]?.lastError ?? "no connection")" }.joined(separator: "; ") }
    }

    /// Installs `map`: pools for new primaries, pools of nodes that left (and are not seeds) closed.
    private func apply(_ map: RedisSlotMap) {
        let retired = state.withLock { s -> [NodePool] in
            guard !s.closed else { return [] }
            s.map = map
            for node in map.nodes where s.pools[node] == nil {
                s.pools[node] = NodePool(address: node, options: options, scripts: scripts, onStateChange: onStateChange)
            }
            let gone = s.pools.keys.filter { !map.nodes.contains($0) && !options.seeds.contains($0) }
            return gone.compactMap { s.pools.removeValue(forKey: $0) }
        }
        for pool in retired { pool.close(wait: false) }
    }
}
