import Dispatch
import GatewayIO
import GatewayProxy
import Synchronization

/// Resolves the host names of upstream servers again, each on its upstream's `resolve_interval`,
/// off the event loops: `tick` (called by the first loop's once-a-second maintenance) starts the
/// lookups that are due on a background queue, one at a time; a new address goes into the server's
/// shared state (`UpstreamServer.updateAddress`), which every loop takes within a second
/// (`UpstreamPool.syncAddress`). A failed lookup keeps the last good address. The lookup itself is
/// injectable (tests); by default it is the one the configuration was loaded with
/// (`SocketAddress.resolve`: getaddrinfo, IPv4 preferred, the first address).
final class UpstreamResolver: Sendable {
    typealias Resolve = @Sendable (_ host: String, _ port: UInt16) throws -> SocketAddress

    /// What one lookup did, for the metrics and the event log.
    enum Outcome: Sendable, Equatable {
        /// The address is new (`from` → `to`).
        case changed(from: SocketAddress, to: SocketAddress)
        case unchanged
        /// The lookup failed; `first` for the first failure after a success (logged once per streak).
        case failed(String, first: Bool)
        /// A success after failures.
        case recovered(SocketAddress)
    }

    private struct Entry {
        let server: UpstreamServer
        let intervalMillis: Int64
        var due: Int64
        var inFlight = false
        var failing = false
    }

    private let entries = Mutex<[ObjectIdentifier: Entry]>([:])
    private let queue: DispatchQueue
    private let resolve: Resolve
    private let report: @Sendable (UpstreamServer, Outcome) -> Void

    init(
        resolve: @escaping Resolve = { host, port in try SocketAddress.resolve(host: host, port: port) },
        queue: DispatchQueue = DispatchQueue(label: "gateway.upstream-dns"),
        report: @escaping @Sendable (UpstreamServer, Outcome) -> Void
    ) {
        self.resolve = resolve
        self.queue = queue
        self.report = report
    }

    /// The servers to watch, each with its interval; replaces the last set. A server already
    /// watched with the same interval keeps its schedule; a new one is first due one interval from now.
    func watch(_ servers: [(server: UpstreamServer, intervalMillis: Int64)], now: Int64) {
        entries.withLock { table in
            var next: [ObjectIdentifier: Entry] = [:]
            for (server, interval) in servers {
                let id = ObjectIdentifier(server)
                if let kept = table[id], kept.intervalMillis == interval {
                    next[id] = kept  // a lookup under way finishes and reports
                } else {
                    next[id] = Entry(server: server, intervalMillis: interval, due: now + interval)
                }
            }
            table = next
        }
    }

    var watchedCount: Int { entries.withLock { $0.count } }

    /// Starts the lookups that are due (`now`: the loop's wheel clock), on the background queue.
    func tick(now: Int64) {
        let due: [UpstreamServer] = entries.withLock { table in
            var out: [UpstreamServer] = []
            for (id, e) in table where !e.inFlight && now >= e.due {
                table[id]?.inFlight = true
                table[id]?.due = now + e.intervalMillis
                out.append(e.server)
            }
            return out
        }
        for server in due { queue.async { self.lookUp(server) } }
    }

    private func lookUp(_ server: UpstreamServer) {
        let id = ObjectIdentifier(server)
        let outcome: Outcome
        do {
            let address = try resolve(server.host, server.port)
            let before = server.address
            let changed = server.updateAddress(address)
            let wasFailing = entries.withLock { table -> Bool in
                let failing = table[id]?.failing ?? false
                table[id]?.failing = false
                return failing
            }
            outcome = changed ? .changed(from: before, to: address) : wasFailing ? .recovered(address) : .unchanged
        } catch {
            let first = entries.withLock { table -> Bool in
                let first = !(table[id]?.failing ?? false)
                table[id]?.failing = true
                return first
            }
            outcome = .failed("\(error)", first: first)
        }
        entries.withLock { $0[id]?.inFlight = false }
        report(server, outcome)
    }

    /// Waits for the lookups started so far (tests).
    func waitIdle() { queue.sync {} }
}
