import GatewayIO

/// An upstream with several servers, on one loop: one pool per server and the choice of a server
/// for each attempt of a request. Loop-confined (its round-robin state is the loop's own, as each
/// nginx worker's is); the servers' health is shared by the loops (`UpstreamServer`).
///
/// Only servers in the balance are chosen (not ejected by passive health, not failing an active
/// health check). When none of those is left to try, the choice falls back to the servers out of the
/// balance, the one that failed least recently first: a request is never refused only because every
/// server is out (nginx and Envoy's panic mode do the same); if that server answers, it is back.
public final class UpstreamBalancer {
    public enum Algorithm: Sendable {
        /// Smooth weighted round robin (nginx's): each pick adds every eligible server's weight to
        /// its running score and takes the highest, which then loses the eligible weights' total.
        case roundRobin
        /// The fewest requests in progress on this loop relative to the weight; ties in turn.
        case leastConnections
    }

    public let name: String
    public let pools: [UpstreamPool]
    public let algorithm: Algorithm
    /// Further servers a failed request may try (`upstreams[].retries`).
    public let retries: Int
    private let weights: [Int]
    private var scores: [Int]
    private var turn = 0
    /// Requests sent to another server after a failure (read and reset by the metrics).
    var retriesDone = 0
    /// The same, never reset.
    public private(set) var retriesTotal = 0

    public init(name: String, pools: [UpstreamPool], algorithm: Algorithm = .roundRobin, retries: Int = 1) {
        precondition(!pools.isEmpty && pools.count <= 64, "an upstream has 1 to 64 servers")
        self.name = name
        self.pools = pools
        self.algorithm = algorithm
        self.retries = retries
        weights = pools.map { max(1, $0.server?.weight ?? 1) }
        scores = Array(repeating: 0, count: pools.count)
    }

    func noteRetry() {
        retriesDone += 1
        retriesTotal += 1
    }

    public func takeRetries() -> Int {
        let n = retriesDone
        retriesDone = 0
        return n
    }

    /// The server (index into `pools`) for the next attempt, among those not in `tried` (bit i for
    /// server i); nil when every server was tried.
    public func pick(excluding tried: UInt64, now: Int64) -> Int? {
        var eligible: UInt64 = 0
        var untried: UInt64 = 0
        for i in pools.indices where tried & (1 << UInt64(i)) == 0 {
            untried |= 1 << UInt64(i)
            if pools[i].server?.isAvailable(now: now) ?? true { eligible |= 1 << UInt64(i) }
        }
        guard untried != 0 else { return nil }
        guard eligible != 0 else { return leastRecentlyFailed(untried) }
        switch algorithm {
        case .roundRobin: return smoothRoundRobin(eligible)
        case .leastConnections: return leastConnections(eligible)
        }
    }

    private func smoothRoundRobin(_ eligible: UInt64) -> Int {
        var best = -1
        var total = 0
        for i in pools.indices where eligible & (1 << UInt64(i)) != 0 {
            scores[i] += weights[i]
            total += weights[i]
            if best < 0 || scores[i] > scores[best] { best = i }
        }
        scores[best] -= total
        return best
    }

    private func leastConnections(_ eligible: UInt64) -> Int {
        let n = pools.count
        var best = -1
        var bestActive = 0
        for k in 0..<n {
            let i = (turn + k) % n
            guard eligible & (1 << UInt64(i)) != 0 else { continue }
            let active = pools[i].activeRequests
            // active/weight < bestActive/bestWeight, without division.
            if best < 0 || active * weights[best] < bestActive * weights[i] {
                best = i
                bestActive = active
            }
        }
        turn = (turn + 1) % n
        return best
    }

    private func leastRecentlyFailed(_ candidates: UInt64) -> Int {
        var best = -1
        var bestFailure = Int64.max
        for i in pools.indices where candidates & (1 << UInt64(i)) != 0 {
            let last = pools[i].server?.lastFailure ?? .min
            if best < 0 || last < bestFailure {
                best = i
                bestFailure = last
            }
        }
        return best
    }

    /// Closes every pool's idle connections.
    public func closeIdle() { for p in pools { p.closeIdle() } }

    /// Takes each server's latest address (`UpstreamPool.syncAddress`); true when one changed.
    @discardableResult
    public func syncAddresses() -> Bool {
        var changed = false
        for p in pools where p.syncAddress() { changed = true }
        return changed
    }
}
