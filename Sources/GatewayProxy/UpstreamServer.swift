import GatewayIO
import Synchronization

/// Passive health of one upstream server, as a pure state machine over times given in
/// milliseconds of a monotonic clock (the loops' wheel clock; tests pass their own).
///
/// A server that fails `maxFails` requests in a row (connect error or timeout, TLS handshake
/// failure, connection closed before any response: what `UpstreamExchange` reports) is ejected for
/// `failTimeout`; once that passes it is tried again, on probation: one more failure ejects it again
/// for twice as long (up to `maxFailTimeout`), a success ends the probation (Envoy's outlier
/// detection with nginx's `max_fails`/`fail_timeout`). Failures while ejected (requests that were
/// already under way) change nothing but `lastFailure`. A success always clears the state: the
/// server answered.
public struct PassiveHealth: Sendable, Equatable {
    public struct Policy: Sendable, Equatable {
        /// 0: never ejected.
        public var maxFails: Int
        public var failTimeoutMillis: Int64
        public var maxFailTimeoutMillis: Int64

        public init(maxFails: Int = 3, failTimeoutMillis: Int64 = 10_000, maxFailTimeoutMillis: Int64 = 300_000) {
            self.maxFails = maxFails
            self.failTimeoutMillis = failTimeoutMillis
            self.maxFailTimeoutMillis = max(failTimeoutMillis, maxFailTimeoutMillis)
        }
    }

    public enum Event: Sendable, Equatable {
        /// Taken out of the balance for this long (the `ejections`-th ejection in a row).
        case ejected(forMillis: Int64, ejections: Int)
        /// A success after one or more ejections.
        case recovered
    }

    public let policy: Policy
    /// Failures in a row since the last success or ejection.
    public private(set) var consecutiveFailures = 0
    /// Ejections in a row since the last success; > 0 and not ejected: on probation.
    public private(set) var ejections = 0
    /// Ejected while the clock is before this (0: never ejected).
    public private(set) var ejectedUntil: Int64 = 0
    /// The last failure, passive or of a health check (`Int64.min`: none).
    public private(set) var lastFailure: Int64 = .min

    public init(policy: Policy = Policy()) { self.policy = policy }

    @_spi(Testing) public func isEjected(now: Int64) -> Bool { now < ejectedUntil }

    /// Whether a success would change anything.
    public var needsSuccess: Bool { consecutiveFailures > 0 || ejections > 0 }

    public mutating func failure(now: Int64) -> Event? {
        lastFailure = now
        guard policy.maxFails > 0, now >= ejectedUntil else { return nil }
        consecutiveFailures += 1
        guard ejections > 0 || consecutiveFailures >= policy.maxFails else { return nil }
        let duration = min(policy.failTimeoutMillis << Int64(min(ejections, 30)), policy.maxFailTimeoutMillis)
        ejections += 1
        consecutiveFailures = 0
        ejectedUntil = now + duration
        return .ejected(forMillis: duration, ejections: ejections)
    }

    public mutating func success() -> Event? {
        consecutiveFailures = 0
        guard ejections > 0 else { return nil }
        ejections = 0
        ejectedUntil = 0
        return .recovered
    }

    /// A failed active health check: remembered for the choice among servers that are all out.
    public mutating func checkFailed(now: Int64) { lastFailure = now }
}

/// One server of an upstream as every event loop sees it: its name (`host:port`, the metric label),
/// its current address (re-resolved for a host name), its passive health and its active health
/// check's verdict. Shared by the loops (each has its own pool of connections to it); the request
/// path reads it with relaxed atomic loads only, and takes its lock only when something failed.
public final class UpstreamServer: Sendable {
    public let upstream: String
    /// `host:port` as configured (`[v6]:port`).
    public let label: String
    public let host: String
    public let port: UInt16
    public let weight: Int
    private let health: Mutex<PassiveHealth>
    /// Mirrors of `health` for lock-free reads: a success must be recorded; ejected until (ms).
    private let needsSuccess = Atomic<Bool>(false)
    private let ejectedUntil = Atomic<Int64>(0)
    /// The last active health check failed.
    private let checkFailing = Atomic<Bool>(false)
    private let currentAddress: Mutex<SocketAddress>
    private let addressVersion = Atomic<Int>(0)

    public init(
        upstream: String, label: String, host: String, port: UInt16, weight: Int = 1, address: SocketAddress,
        policy: PassiveHealth.Policy = PassiveHealth.Policy()
    ) {
        self.upstream = upstream
        self.label = label
        self.host = host
        self.port = port
        self.weight = max(1, weight)
        health = Mutex(PassiveHealth(policy: policy))
        currentAddress = Mutex(address)
    }

    public var policy: PassiveHealth.Policy { health.withLock { $0.policy } }
    public var state: PassiveHealth { health.withLock { $0 } }

    // MARK: Passive health

    /// A request to this server failed (see `PassiveHealth`).
    public func recordFailure(now: Int64) -> PassiveHealth.Event? {
        health.withLock { h in
            let event = h.failure(now: now)
            publish(h)
            return event
        }
    }

    /// A response head came from this server. Lock-free unless it had failed.
    @inline(__always)
    public func recordSuccess() -> PassiveHealth.Event? {
        guard needsSuccess.load(ordering: .relaxed) else { return nil }
        return recordSuccessSlow()
    }

    @inline(never)
    private func recordSuccessSlow() -> PassiveHealth.Event? {
        health.withLock { h in
            let event = h.success()
            publish(h)
            return event
        }
    }

    private func publish(_ h: PassiveHealth) {
        needsSuccess.store(h.needsSuccess, ordering: .relaxed)
        ejectedUntil.store(h.ejectedUntil, ordering: .relaxed)
    }

    public func isEjected(now: Int64) -> Bool { now < ejectedUntil.load(ordering: .relaxed) }

    /// In the balance: not ejected, and not failing its health check.
    @inline(__always)
    public func isAvailable(now: Int64) -> Bool {
        !checkFailing.load(ordering: .relaxed) && now >= ejectedUntil.load(ordering: .relaxed)
    }

    /// The last failure (passive or health check), `Int64.min` if none.
    public var lastFailure: Int64 { health.withLock { $0.lastFailure } }

    // MARK: Active health

    public var isFailingCheck: Bool { checkFailing.load(ordering: .relaxed) }

    /// A health check's result; true when it changed the server's check state.
    public func recordCheck(passed: Bool, now: Int64) -> Bool {
        if !passed { health.withLock { $0.checkFailed(now: now) } }
        return checkFailing.exchange(!passed, ordering: .relaxed) == passed
    }

    // MARK: Address

    /// Where connections go now.
    public var address: SocketAddress { currentAddress.withLock { $0 } }
    /// Moves each time the address changes: loops compare it with their pool's.
    public var addressGeneration: Int { addressVersion.load(ordering: .acquiring) }

    /// A new resolution of `host`; true when it differs from the current address.
    @discardableResult
    public func updateAddress(_ a: SocketAddress) -> Bool {
        let changed = currentAddress.withLock { current -> Bool in
            guard current != a else { return false }
            current = a
            return true
        }
        if changed { addressVersion.add(1, ordering: .releasing) }
        return changed
    }
}
