import Foundation
import GatewayIO
import GatewayProxy
import Synchronization
import Testing

@testable import Gateway

/// Re-resolution of server names with an injected lookup and clock: due on the interval, off the
/// calling thread, new addresses swapped in, failures keeping the last good one.
@Suite("Upstream names re-resolved (injected resolver and clock)")
struct UpstreamResolverTests {
    static let queueKey = DispatchSpecificKey<String>()

    final class FakeDNS: Sendable {
        let answers = Mutex<[Result<String, SocketAddress.ParseError>]>([])
        /// Host, port, and whether the lookup ran on the resolver's queue.
        let calls = Mutex<[(String, UInt16, Bool)]>([])

        func resolve(_ host: String, _ port: UInt16) throws -> SocketAddress {
            let onQueue = DispatchQueue.getSpecific(key: UpstreamResolverTests.queueKey) == "dns"
            calls.withLock { $0.append((host, port, onQueue)) }
            let next = answers.withLock { $0.isEmpty ? .failure(.invalid("no answer")) : $0.removeFirst() }
            switch next {
            case .success(let ip): return try SocketAddress(host: ip, port: port)
            case .failure(let e): throw e
            }
        }
    }

    static func server(_ host: String = "backend.internal") throws -> UpstreamServer {
        UpstreamServer(
            upstream: "api", label: "\(host):8081", host: host, port: 8081, address: try SocketAddress(host: "10.0.0.1", port: 8081))
    }

    @Test("due every interval; a new address is swapped in; a failure keeps the last one; each reported once")
    func reResolves() throws {
        let dns = FakeDNS()
        let outcomes = Mutex<[UpstreamResolver.Outcome]>([])
        let queue = DispatchQueue(label: "test-dns")
        queue.setSpecific(key: Self.queueKey, value: "dns")
        let resolver = UpstreamResolver(resolve: { try dns.resolve($0, $1) }, queue: queue) { _, o in outcomes.withLock { $0.append(o) } }
        let s = try Self.server()
        resolver.watch([(s, 30_000)], now: 1000)
        // Not due before one interval has passed.
        resolver.tick(now: 1000)
        resolver.tick(now: 30_999)
        resolver.waitIdle()
        #expect(dns.calls.withLock { $0.count } == 0)

        dns.answers.withLock { $0 = [.success("10.0.0.2")] }
        let generation = s.addressGeneration
        resolver.tick(now: 31_000)
        resolver.waitIdle()
        #expect(s.address.description == "10.0.0.2:8081" && s.addressGeneration == generation + 1)
        #expect(dns.calls.withLock { $0.map { "\($0.0):\($0.1)" } } == ["backend.internal:8081"])
        #expect(dns.calls.withLock { $0.allSatisfy { $0.2 } }, "looked up on the resolver's queue, not the caller's")

        // Failures keep the address; only the first of a streak says so.
        dns.answers.withLock {
            $0 = [.failure(.invalid("cannot resolve host \"backend.internal\": Temporary failure")), .failure(.invalid("again"))]
        }
        resolver.tick(now: 61_000)
        resolver.waitIdle()
        resolver.tick(now: 91_000)
        resolver.waitIdle()
        #expect(s.address.description == "10.0.0.2:8081" && s.addressGeneration == generation + 1)
        dns.answers.withLock { $0 = [.success("10.0.0.2"), .success("10.0.0.2")] }
        resolver.tick(now: 121_000)
        resolver.waitIdle()
        resolver.tick(now: 151_000)
        resolver.waitIdle()
        let a2 = try SocketAddress(host: "10.0.0.2", port: 8081)
        #expect(
            outcomes.withLock { $0 } == [
                .changed(from: try SocketAddress(host: "10.0.0.1", port: 8081), to: a2),
                .failed("cannot resolve host \"backend.internal\": Temporary failure", first: true),
                .failed("again", first: false),
                .recovered(a2),
                .unchanged,
            ])
    }

    @Test("a lookup still running is not started twice; watch replaces the set and keeps a kept server's schedule")
    func watchAndInFlight() throws {
        let gate = DispatchSemaphore(value: 0)
        let started = Mutex(0)
        let resolver = UpstreamResolver(resolve: { _, port in
            started.withLock { $0 += 1 }
            gate.wait()
            return try SocketAddress(host: "10.0.0.9", port: port)
        }) { _, _ in }
        let a = try Self.server("a.internal")
        let b = try Self.server("b.internal")
        resolver.watch([(a, 1000)], now: 0)
        resolver.tick(now: 1000)
        resolver.tick(now: 5000)  // a's lookup is still running
        resolver.watch([(a, 1000), (b, 2000)], now: 5000)
        #expect(resolver.watchedCount == 2)
        gate.signal()
        resolver.waitIdle()
        #expect(started.withLock { $0 } == 1)
        gate.signal()
        gate.signal()
        resolver.tick(now: 7000)  // a due again (5000 + 1000 < 7000), b due at 7000
        resolver.waitIdle()
        #expect(started.withLock { $0 } == 3)
        resolver.watch([], now: 8000)
        #expect(resolver.watchedCount == 0)
    }

    @Test("the loops take a new address within their next maintenance: new connections go there")
    func poolTakesNewAddress() throws {
        let s = try Self.server()
        let loop = EventLoop(index: 30)
        defer { loop.shutdownAndWait() }
        let (before, changed, after, again) = try loop.queue.sync {
            let pool = UpstreamPool(
                target: UpstreamTarget(name: "api", address: try SocketAddress(host: "10.0.0.1", port: 8081)), loop: loop, server: s)
            let before = pool.address.description
            s.updateAddress(try SocketAddress(host: "10.0.0.3", port: 8081))
            let changed = pool.syncAddress()
            return (before, changed, pool.address.description, pool.syncAddress())
        }
        #expect(before == "10.0.0.1:8081" && changed && after == "10.0.0.3:8081" && !again)
    }
}
