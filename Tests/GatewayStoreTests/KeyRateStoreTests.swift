import Dispatch
import GatewayTestSupport
import Synchronization
import Testing

@testable import GatewayStore

/// Issue 27: `assertion.key_rate` in the memory store's commit (`KeyRateBuckets`).
@Suite("MemoryAttestStore: key_rate buckets in the commit")
struct KeyRateStoreTests {
    static let t0: Int64 = 1_800_000_000_000

    @Test("the store contract's key rate, memory only and with a data directory", arguments: [1, 64])
    func contract(shards: Int) throws {
        var rng = SeededRandom(seed: 2701)
        try checkKeyRate(MemoryAttestStore(shards: shards), rng: &rng, t0: Self.t0)
        let dir = TempDirectory()
        defer { dir.remove() }
        let store = try MemoryAttestStore.open(directory: dir.path, shards: shards)
        try checkKeyRate(store, rng: &rng, t0: Self.t0)
        try store.close()
    }

    @Test("16 threads commit one key's counters at one instant: exactly the burst is accepted, the rest limited")
    func racingTheBurst() throws {
        var rng = SeededRandom(seed: 2702)
        let store = MemoryAttestStore(shards: 4)
        let record = makeRecord(&rng)
        try store.registerFresh(record, now: Self.t0)
        let limit = KeyRateLimit(count: 1, periodMillis: 60_000, burst: 5, scope: "race")
        let wins = Atomic<Int>(0)
        let limited = Atomic<Int>(0)
        DispatchQueue.concurrentPerform(iterations: 16) { i in
            let commit = AssertionCommit(keyID: record.keyID, counter: UInt32(i + 1), challenge: nil, counterWindow: 64, keyRate: limit)
            switch wait({ store.commitAssertion(commit, nowMillis: Self.t0, completion: $0) }) {
            case .success(.committed): wins.wrappingAdd(1, ordering: .relaxed)
            case .success(.keyRateLimited): limited.wrappingAdd(1, ordering: .relaxed)
            default: break
            }
        }
        #expect(wins.load(ordering: .relaxed) == 5)
        #expect(limited.load(ordering: .relaxed) == 11)
    }

    @Test("the memory bound: 262,144 buckets of 64 bytes (16 MiB) whatever the keys; a forgotten bucket starts full")
    func bounded() {
        #expect(KeyRateBuckets.slotBytes == 64)
        #expect(KeyRateBuckets.capacity * KeyRateBuckets.slotBytes == 16 << 20)
        let buckets = KeyRateBuckets()
        #expect(buckets.count == 0)
        let limit = KeyRateLimit(count: 1, periodMillis: 3_600_000, burst: 1, scope: "bound")
        let first = KeyBits(w0: 1, w1: 1, w2: 1, w3: 1)
        buckets.take(first, limit, nowMillis: Self.t0)
        #expect(buckets.refusal(first, limit, nowMillis: Self.t0) == 3_600)
        // A million keys: about 30 per set of 8, so every set overflows (the table is full, never larger).
        for i in 0..<UInt64(1_000_000) {
            buckets.take(KeyBits(w0: i, w1: i &* 0x9E37_79B9_7F4A_7C15, w2: 0, w3: 0), limit, nowMillis: Self.t0 + 1)
        }
        #expect(buckets.count <= KeyRateBuckets.capacity && buckets.count >= KeyRateBuckets.capacity * 99 / 100)
        // The oldest bucket went first: the key is let through again (full), never held back longer.
        #expect(buckets.refusal(first, limit, nowMillis: Self.t0 + 1) == nil)
    }

    @Test("a restart with a data directory starts every bucket full (buckets are not journaled); keys and counters survive")
    func restartStartsFull() throws {
        var rng = SeededRandom(seed: 2703)
        let dir = TempDirectory()
        defer { dir.remove() }
        let record = makeRecord(&rng)
        let limit = KeyRateLimit(count: 1, periodMillis: 3_600_000, burst: 1, scope: "restart")
        func commit(_ store: MemoryAttestStore, _ counter: UInt32) throws -> CommitOutcome {
            try wait {
                store.commitAssertion(
                    AssertionCommit(keyID: record.keyID, counter: counter, challenge: nil, keyRate: limit), nowMillis: Self.t0,
                    completion: $0)
            }.get()
        }
        let first = try MemoryAttestStore.open(directory: dir.path, shards: 4)
        try first.registerFresh(record, now: Self.t0)
        #expect(try commit(first, 1) == .committed(previousCounter: 0))
        #expect(try commit(first, 2) == .keyRateLimited(retryAfterSeconds: 3_600))
        try first.close()
        let second = try MemoryAttestStore.open(directory: dir.path, shards: 4)
        #expect(try commit(second, 1) == .counterReplay(stored: 1))
        #expect(try commit(second, 2) == .committed(previousCounter: 1))
        try second.close()
    }
}
