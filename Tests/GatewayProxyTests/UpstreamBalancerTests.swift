import Foundation
import GatewayIO
@_spi(Testing) import GatewayProxy
import GatewayTestSupport
import Glibc
import Testing

/// The choice of a server (`UpstreamBalancer`) and passive health (`PassiveHealth`, `UpstreamServer`),
/// with times given by the test.
@Suite("Upstream balancing and passive health", .serialized)
struct UpstreamBalancerTests {
    static let loop = EventLoop(index: 20)

    /// Servers `a`, `b`, … with these weights on 127.0.0.1 ports 1, 2, … (never connected to here).
    static func balancer(
        _ weights: [Int], algorithm: UpstreamBalancer.Algorithm = .roundRobin,
        policy: PassiveHealth.Policy = PassiveHealth.Policy()
    ) throws -> (UpstreamBalancer, [UpstreamServer]) {
        var servers: [UpstreamServer] = []
        var pools: [UpstreamPool] = []
        for (i, w) in weights.enumerated() {
            let address = try SocketAddress(host: "127.0.0.1", port: UInt16(i + 1))
            let s = UpstreamServer(
                upstream: "u", label: String(UnicodeScalar(UInt8(97 + i))), host: "127.0.0.1", port: UInt16(i + 1), weight: w,
                address: address, policy: policy)
            servers.append(s)
            pools.append(UpstreamPool(target: UpstreamTarget(name: "u", address: address), loop: loop, server: s))
        }
        return (UpstreamBalancer(name: "u", pools: pools, algorithm: algorithm, retries: weights.count - 1), servers)
    }

    static func picks(_ b: UpstreamBalancer, _ servers: [UpstreamServer], _ n: Int, now: Int64 = 0) -> String {
        String((0..<n).map { _ in Character(servers[b.pick(excluding: 0, now: now)!].label) })
    }

    @Test("smooth weighted round robin: weights 5, 1, 1 give nginx's interleaved a a b a c a a, again and again")
    func smoothWeights() throws {
        let (b, servers) = try Self.balancer([5, 1, 1])
        #expect(Self.picks(b, servers, 14) == "aabacaaaabacaa")
        let (even, evenServers) = try Self.balancer([1, 1, 1])
        #expect(Self.picks(even, evenServers, 6) == "abcabc")
        let (two, twoServers) = try Self.balancer([1, 3])
        let s = Self.picks(two, twoServers, 400)
        #expect(s.filter { $0 == "b" }.count == 300)
        #expect(!s.contains("bbbb"), "runs longer than the weight: \(s.prefix(16))")
    }

    @Test("a request never goes twice to one server; every server tried: none left")
    func excluding() throws {
        let (b, _) = try Self.balancer([1, 1, 1])
        var tried: UInt64 = 0
        var seen: Set<Int> = []
        for _ in 0..<3 {
            let i = try #require(b.pick(excluding: tried, now: 0))
            #expect(seen.insert(i).inserted)
            tried |= 1 << UInt64(i)
        }
        #expect(b.pick(excluding: tried, now: 0) == nil)
    }

    @Test("an ejected server is skipped until its ejection ends; the others share its load by weight")
    func ejectedSkipped() throws {
        let (b, servers) = try Self.balancer([1, 1, 1])
        for t in 0..<3 { _ = servers[1].recordFailure(now: Int64(t)) }
        #expect(servers[1].isEjected(now: 5) && !servers[1].isAvailable(now: 5))
        #expect(!Self.picks(b, servers, 30, now: 100).contains("b"))
        #expect(Self.picks(b, servers, 30, now: 10_002).contains("b"))
    }

    @Test("every server out: the one that failed least recently is chosen, never none")
    func allOut() throws {
        let (b, servers) = try Self.balancer([1, 1, 1], policy: PassiveHealth.Policy(maxFails: 1))
        _ = servers[0].recordFailure(now: 300)
        _ = servers[1].recordFailure(now: 100)
        _ = servers[2].recordFailure(now: 200)
        #expect(b.pick(excluding: 0, now: 400) == 1)
        #expect(b.pick(excluding: 1 << 1, now: 400) == 2)
        // A failing health check takes a server out too; it counts as its last failure.
        let (c, others) = try Self.balancer([1, 1])
        #expect(others[0].recordCheck(passed: false, now: 50))
        #expect(!others[0].recordCheck(passed: false, now: 60))
        #expect(Self.picks(c, others, 4, now: 70) == "bbbb")
        _ = others[1].recordCheck(passed: false, now: 80)
        #expect(c.pick(excluding: 0, now: 90) == 0)  // failed at 60, before b at 80
        #expect(others[0].recordCheck(passed: true, now: 100))
        #expect(Self.picks(c, others, 2, now: 110) == "aa")
    }

    @Test("least connections: the fewest requests in progress relative to the weight; ties in turn")
    func leastConnections() throws {
        // Servers that accept and hold connections, so that requests stay in progress.
        let server = try ScriptedServer { conn in _ = conn.readRequest() }
        defer { server.stop() }
        let loop = EventLoop(index: 21)
        let kept = PoolsBox()
        defer {
            server.stop()
            withExtendedLifetime(kept) { loop.shutdownAndWait() }  // the pools outlive their connections' events
        }
        let (picks, active): ([String], [Int]) = try loop.queue.sync {
            var pools: [UpstreamPool] = []
            var labels: [String] = []
            for (i, w) in [1, 2].enumerated() {
                let address = try SocketAddress(host: "127.0.0.1", port: server.port)
                let s = UpstreamServer(
                    upstream: "u", label: i == 0 ? "a" : "b", host: "127.0.0.1", port: server.port, weight: w, address: address)
                pools.append(UpstreamPool(target: UpstreamTarget(name: "u", address: address), loop: loop, server: s))
                labels.append(s.label)
            }
            kept.pools = pools
            let b = UpstreamBalancer(name: "u", pools: pools, algorithm: .leastConnections)
            var picks: [String] = []
            // Each pick takes a connection of the chosen pool and keeps it (in progress).
            for _ in 0..<6 {
                let i = b.pick(excluding: 0, now: 0)!
                picks.append(labels[i])
                pools[i].acquire { _ in }
            }
            return (picks, pools.map(\.activeRequests))
        }
        // a: 0/1, b: 0/2 → tie, then by turns; b takes two for each of a's.
        #expect(active == [2, 4], "\(picks)")
        #expect(picks.filter { $0 == "b" }.count == 4, "\(picks)")
        // After a's first, b is below a (0/2 < 1/1), and so on: never two in a row for a.
        #expect(!picks.joined().contains("aa"), "\(picks)")
    }
}

final class PoolsBox: @unchecked Sendable { var pools: [UpstreamPool] = [] }

@Suite("Passive health: failures in a row eject, ejections double, a success clears (injected clock)")
struct PassiveHealthTests {
    @Test("max_fails failures in a row eject for fail_timeout; failures while ejected change nothing")
    func ejection() {
        var h = PassiveHealth(policy: .init(maxFails: 3, failTimeoutMillis: 10_000, maxFailTimeoutMillis: 300_000))
        #expect(h.failure(now: 0) == nil)
        #expect(h.failure(now: 10) == nil)
        #expect(h.failure(now: 20) == .ejected(forMillis: 10_000, ejections: 1))
        #expect(h.isEjected(now: 10_019) && !h.isEjected(now: 10_020))
        // Requests that were under way fail too: no longer ejection, only the last failure noted.
        #expect(h.failure(now: 30) == nil && h.failure(now: 40) == nil && h.failure(now: 50) == nil)
        #expect(h.ejectedUntil == 10_020 && h.lastFailure == 50)
    }

    @Test("on probation after an ejection one failure ejects again for twice as long, up to max_fail_timeout")
    func doubling() {
        var h = PassiveHealth(policy: .init(maxFails: 2, failTimeoutMillis: 1000, maxFailTimeoutMillis: 5000))
        _ = h.failure(now: 0)
        #expect(h.failure(now: 0) == .ejected(forMillis: 1000, ejections: 1))
        #expect(h.failure(now: 1000) == .ejected(forMillis: 2000, ejections: 2))
        #expect(h.failure(now: 3000) == .ejected(forMillis: 4000, ejections: 3))
        #expect(h.failure(now: 7000) == .ejected(forMillis: 5000, ejections: 4))  // capped
        #expect(h.failure(now: 12_000) == .ejected(forMillis: 5000, ejections: 5))
        // A success ends it all: the next ejection takes max_fails failures and lasts fail_timeout.
        #expect(h.success() == .recovered)
        #expect(!h.isEjected(now: 12_001) && h.ejections == 0)
        #expect(h.failure(now: 20_000) == nil)
        #expect(h.failure(now: 20_001) == .ejected(forMillis: 1000, ejections: 1))
    }

    @Test("a success resets the count of failures in a row; max_fails 0 never ejects")
    func successResets() {
        var h = PassiveHealth(policy: .init(maxFails: 3))
        _ = h.failure(now: 0)
        _ = h.failure(now: 1)
        #expect(h.needsSuccess)
        #expect(h.success() == nil)
        #expect(!h.needsSuccess)
        #expect(h.failure(now: 2) == nil && h.failure(now: 3) == nil)
        #expect(h.failure(now: 4) == .ejected(forMillis: 10_000, ejections: 1))
        var off = PassiveHealth(policy: .init(maxFails: 0))
        for t in 0..<100 { #expect(off.failure(now: Int64(t)) == nil) }
        #expect(!off.isEjected(now: 100) && off.lastFailure == 99)
    }

    @Test("the shared server: lock-free success while healthy, a recovery reported once, its address versioned")
    func sharedServer() throws {
        let s = UpstreamServer(
            upstream: "u", label: "a:1", host: "a", port: 1, address: try SocketAddress(host: "127.0.0.1", port: 1),
            policy: .init(maxFails: 1, failTimeoutMillis: 100, maxFailTimeoutMillis: 100))
        #expect(s.recordSuccess() == nil)
        #expect(s.recordFailure(now: 0) == .ejected(forMillis: 100, ejections: 1))
        #expect(!s.isAvailable(now: 99) && s.isAvailable(now: 100))
        #expect(s.recordSuccess() == .recovered)
        #expect(s.recordSuccess() == nil)
        let g = s.addressGeneration
        #expect(!s.updateAddress(try SocketAddress(host: "127.0.0.1", port: 1)))
        #expect(s.addressGeneration == g)
        #expect(s.updateAddress(try SocketAddress(host: "127.0.0.2", port: 1)))
        #expect(s.addressGeneration == g + 1 && s.address.description == "127.0.0.2:1")
    }
}
