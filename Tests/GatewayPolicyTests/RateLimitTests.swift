import Dispatch
import Synchronization
import Testing

@testable import GatewayPolicy

private func key(_ bytes: [UInt8]) -> ClientKey? { bytes.withUnsafeBytes { ClientKey(addressBytes: $0) } }

@Suite("Admission: client keys and token buckets")
struct RateLimitTests {
    @Test("a client is an IPv4 address or an IPv6 /64; IPv4-mapped IPv6 is IPv4")
    func clientKeys() throws {
        let v4 = try #require(key([192, 0, 2, 7]))
        #expect(v4.description == "192.0.2.7")
        let mapped = try #require(key([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 192, 0, 2, 7]))
        #expect(mapped == v4)
        let a = try #require(key([0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 1] + [1, 2, 3, 4, 5, 6, 7, 8]))
        let b = try #require(key([0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 1] + [9, 9, 9, 9, 9, 9, 9, 9]))
        let c = try #require(key([0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 2] + [1, 2, 3, 4, 5, 6, 7, 8]))
        #expect(a == b)  // one /64
        #expect(a != c)
        #expect(a.description == "2001:db8:0:1::/64")
        #expect(key([1, 2, 3]) == nil)
        // ::c000:207 (not mapped) is IPv6, not 192.0.2.7.
        #expect(key([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 192, 0, 2, 7]) != v4)
    }

    @Test("a client gets its burst, then its rate; Retry-After says when the next token is there")
    func bucket() throws {
        let limiter = ClientRateLimiter(capacity: 1024)
        let k = try #require(key([10, 0, 0, 1]))
        let other = try #require(key([10, 0, 0, 2]))
        for _ in 0..<20 { #expect(limiter.admit(k, nowMillis: 1_000, ratePerSecond: 10, burst: 20) == .admitted) }
        #expect(limiter.admit(k, nowMillis: 1_000, ratePerSecond: 10, burst: 20) == .limited(retryAfterSeconds: 1))
        #expect(limiter.admit(other, nowMillis: 1_000, ratePerSecond: 10, burst: 20) == .admitted)  // its own bucket
        #expect(limiter.admit(k, nowMillis: 1_099, ratePerSecond: 10, burst: 20) != .admitted)
        #expect(limiter.admit(k, nowMillis: 1_100, ratePerSecond: 10, burst: 20) == .admitted)  // 100 ms = one token
        #expect(limiter.admit(k, nowMillis: 1_100, ratePerSecond: 10, burst: 20) != .admitted)
        // A slow rate: the wait is rounded up to whole seconds.
        let slow = ClientRateLimiter(capacity: 1024)
        #expect(slow.admit(k, nowMillis: 0, ratePerSecond: 0.1, burst: 1) == .admitted)
        #expect(slow.admit(k, nowMillis: 0, ratePerSecond: 0.1, burst: 1) == .limited(retryAfterSeconds: 10))
        #expect(slow.admit(k, nowMillis: 4_000, ratePerSecond: 0.1, burst: 1) == .limited(retryAfterSeconds: 6))
        // Idle for the burst's worth, the bucket is full again; never above it.
        #expect((0..<25).filter { _ in limiter.admit(k, nowMillis: 100_000, ratePerSecond: 10, burst: 20) == .admitted }.count == 20)
    }

    @Test("the table has a fixed size: many clients evict the least recently seen, never block anyone")
    func fixedTable() throws {
        let limiter = ClientRateLimiter(capacity: 1024)
        #expect(limiter.capacity == 1024)
        #expect(limiter.memoryBytes == 1024 * 24)
        let flooder = try #require(key([10, 9, 9, 9]))
        for _ in 0..<5 { _ = limiter.admit(flooder, nowMillis: 0, ratePerSecond: 1, burst: 5) }
        #expect(limiter.admit(flooder, nowMillis: 0, ratePerSecond: 1, burst: 5) != .admitted)
        // 100,000 other clients, each admitted on its first request, in a table of 1,024.
        var admitted = 0
        for i in 0..<100_000 {
            let k = try #require(key([11, UInt8(i >> 16 & 0xFF), UInt8(i >> 8 & 0xFF), UInt8(i & 0xFF)]))
            if limiter.admit(k, nowMillis: 1 + Int64(i / 1_000), ratePerSecond: 1, burst: 5) == .admitted { admitted += 1 }
        }
        #expect(admitted == 100_000)
        #expect(limiter.trackedClients <= 1024)
        // A client seen continuously stays tracked (and limited) among clients seen once.
        let busy = ClientRateLimiter(capacity: 128)
        var limited = 0
        for i in 0..<10_000 {
            if busy.admit(flooder, nowMillis: Int64(i), ratePerSecond: 1, burst: 5) != .admitted { limited += 1 }
            let k = try #require(key([12, 0, UInt8(i >> 8 & 0xFF), UInt8(i & 0xFF)]))
            _ = busy.admit(k, nowMillis: Int64(i), ratePerSecond: 1, burst: 5)
        }
        #expect(limited >= 9_980)
    }

    @Test("one table for every event loop: a client spread over threads is counted once")
    func sharedAcrossThreads() throws {
        let limiter = ClientRateLimiter(capacity: 4096)
        let k = try #require(key([10, 1, 2, 3]))
        let admitted = Mutex(0)
        DispatchQueue.concurrentPerform(iterations: 8) { _ in
            for _ in 0..<1_000 where limiter.admit(k, nowMillis: 5_000, ratePerSecond: 10, burst: 50) == .admitted {
                admitted.withLock { $0 += 1 }
            }
        }
        #expect(admitted.withLock { $0 } == 50)
    }

    @Test("the registration bucket starts full, refills at its rate, and keeps its state across rate changes")
    func processBucket() {
        let bucket = RateBucket()
        #expect((0..<10).filter { _ in bucket.take(nowMillis: 0, ratePerSecond: 5, burst: 5) == .admitted }.count == 5)
        #expect(bucket.take(nowMillis: 0, ratePerSecond: 5, burst: 5) == .limited(retryAfterSeconds: 1))
        #expect(bucket.take(nowMillis: 200, ratePerSecond: 5, burst: 5) == .admitted)
        // A reload to 1/s: still empty, now one token per second.
        #expect(bucket.take(nowMillis: 200, ratePerSecond: 1, burst: 1) == .limited(retryAfterSeconds: 1))
        #expect(bucket.take(nowMillis: 1_200, ratePerSecond: 1, burst: 1) == .admitted)
    }
}
