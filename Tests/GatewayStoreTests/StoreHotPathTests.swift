import GatewayTestSupport
import Testing

@testable import GatewayStore

private let t0: Int64 = 1_700_000_000_000

/// The pieces a protected request's store calls go through (issue 30): each against a plain
/// reference, so a faster form cannot change what they answer.
@Suite("Memory store: the request path's pieces (CRC-32C, key rings, hashing, the key-bound budget)")
struct StoreHotPathTests {
    /// Bit by bit, as RFC 3720 defines CRC-32C.
    static func referenceCRC(_ bytes: [UInt8]) -> UInt32 {
        var c: UInt32 = 0xFFFF_FFFF
        for b in bytes {
            c ^= UInt32(b)
            for _ in 0..<8 { c = c & 1 != 0 ? (c >> 1) ^ 0x82F6_3B78 : c >> 1 }
        }
        return c ^ 0xFFFF_FFFF
    }

    @Test("CRC-32C (eight bytes a step) equals the bitwise definition at every length and alignment")
    func crcMatchesTheDefinition() {
        #expect(Array("123456789".utf8).withUnsafeBytes { CRC32C.checksum($0) } == 0xE306_9283)
        var rng = SeededRandom(seed: 30)
        let data = (0..<200).map { _ in UInt8.random(in: 0...255, using: &rng) }
        for start in 0..<9 {
            for length in 0...(data.count - start) {
                let slice = Array(data[start..<start + length])
                let fast = data.withUnsafeBytes { CRC32C.checksum(UnsafeRawBufferPointer(rebasing: $0[start..<start + length])) }
                #expect(fast == Self.referenceCRC(slice), "start \(start), length \(length)")
            }
        }
    }

    /// A ring as a plain array: (token, chained, consumed), oldest first.
    struct ModelRing {
        var slots: [(ChallengeBits, Bool, Bool)] = []

        func victim() -> Int {
            if let i = slots.firstIndex(where: { $0.2 }) { return i }
            if let i = slots.firstIndex(where: { !$0.1 }) { return i }
            return 0
        }
    }

    @Test("a key ring's append, remove, victim, slot and consumed marks follow a plain array's")
    func keyRingMatchesAModel() {
        var rng = SeededRandom(seed: 31)
        var ring = KeyRing()
        var model = ModelRing()
        var next: UInt64 = 1
        for _ in 0..<20_000 {
            switch UInt8.random(in: 0...3, using: &rng) {
            case 0 where model.slots.count < KeyRing.maxSlots, 1 where model.slots.count < KeyRing.maxSlots:
                let token = ChallengeBits(a: next, b: next &* 0x9E37_79B9)
                next += 1
                let chained = Bool.random(using: &rng)
                let consumed = UInt8.random(in: 0...3, using: &rng) == 0
                ring.append(token, chained: chained, consumed: consumed)
                model.slots.append((token, chained, consumed))
            case 2 where !model.slots.isEmpty:
                let i = Int.random(in: 0..<model.slots.count, using: &rng)
                ring.markConsumed(model.slots[i].0)
                model.slots[i].2 = true
            default:
                guard !model.slots.isEmpty else { continue }
                let i = Bool.random(using: &rng) ? ring.victim() : Int.random(in: 0..<model.slots.count, using: &rng)
                #expect(ring.remove(at: i) == model.slots.count - 1)
                model.slots.remove(at: i)
            }
            #expect(Int(ring.count) == model.slots.count)
            if !model.slots.isEmpty { #expect(ring.victim() == model.victim()) }
            for (i, slot) in model.slots.enumerated() {
                #expect(ring[i] == slot.0 && ring.isChained(i) == slot.1 && ring.isConsumed(i) == slot.2)
                #expect(ring.slot(of: slot.0) == i)
            }
            #expect(ring.slot(of: ChallengeBits(a: 0, b: 0)) == nil)
            // Bits past the count stay clear (`victim` relies on it).
            for i in model.slots.count..<KeyRing.maxSlots { #expect(!ring.isChained(i) && !ring.isConsumed(i)) }
        }
    }

    @Test("tokens and key ids equal in the hashed word are still told apart by every word")
    func hashingByOneWordKeepsEquality() {
        var tokens: [ChallengeBits: Int] = [:]
        for a in 0..<500 { tokens[ChallengeBits(a: UInt64(a), b: 7)] = a }
        #expect(tokens.count == 500)
        for a in 0..<500 { #expect(tokens[ChallengeBits(a: UInt64(a), b: 7)] == a) }
        #expect(tokens[ChallengeBits(a: 0, b: 8)] == nil)
        #expect(ChallengeBits(a: 1, b: 2) != ChallengeBits(a: 2, b: 1))
        var keys: [KeyBits: Int] = [:]
        for i in 0..<300 {
            let w = UInt64(i)
            keys[KeyBits(w0: w % 3, w1: 5, w2: w / 3 % 10, w3: w / 30)] = i
        }
        #expect(keys.count == 300)
        for i in 0..<300 {
            let w = UInt64(i)
            #expect(keys[KeyBits(w0: w % 3, w1: 5, w2: w / 3 % 10, w3: w / 30)] == i)
        }
        #expect(keys[KeyBits(w0: 0, w1: 6, w2: 0, w3: 0)] == nil)
        #expect(KeyBits(w0: 1, w1: 2, w2: 3, w3: 4) != KeyBits(w0: 1, w1: 2, w2: 4, w3: 3))
        #expect(KeyBits(w0: 1, w1: 2, w2: 3, w3: 4).hashValue == KeyBits(w0: 9, w1: 2, w2: 9, w3: 9).hashValue)
    }

    @Test("the key-bound budget evicting the key's own ring while a challenge is issued to it")
    func budgetEvictsTheRingBeingFilled() throws {
        // One key-bound challenge in all: each issue to the key evicts the previous one, which
        // empties (removes) the very ring the new challenge then joins.
        let store = MemoryAttestStore(shards: 1, challenges: ChallengeLimits(anonymous: 10, keyBound: 1, perKey: 8))
        var rng = SeededRandom(seed: 32)
        let a = makeRecord(&rng)
        let b = makeRecord(&rng)
        try store.registerFresh(a, now: t0)
        try store.registerFresh(b, now: t0)
        var last: ChallengeToken?
        for i in 0..<50 {
            let key = i % 3 == 2 ? b.keyID : a.keyID
            let token = try store.issueChallengeNow(
                ChallengeRequest(purpose: .assert, keyID: key, ttlMillis: 60_000, chained: true), nowMillis: t0
            ).get().token
            if let last { #expect(try store.state(last, now: t0) == .unknown) }
            #expect(try store.state(token, now: t0) != .unknown)
            last = token
            store.shards[0].state.withLock { s in
                #expect(s.boundCount == 1)
                #expect(s.rings.count == 1)
                #expect(s.rings[KeyBits(key)]?.count == 1)
            }
        }
        #expect(store.challengeEvictions.keyBound == 49)
        #expect(store.challengeCounts.keyBound == 1)
    }

    @Test("a chaining client's steady state: each commit consumes its challenge, the next one replaces the oldest consumed")
    func chainingSteadyState() throws {
        let store = MemoryAttestStore(shards: 4, challenges: ChallengeLimits(perKey: 8))
        var rng = SeededRandom(seed: 33)
        let record = makeRecord(&rng)
        try store.registerFresh(record, now: t0)
        func next() throws -> ChallengeToken {
            try store.issueChallengeNow(
                ChallengeRequest(purpose: .assert, keyID: record.keyID, ttlMillis: 60_000, chained: true), nowMillis: t0
            ).get().token
        }
        var live = try (0..<8).map { _ in try next() }
        for counter in 1...100 {
            let token = live.removeFirst()
            let commit = AssertionCommit(keyID: record.keyID, counter: UInt32(counter), challenge: token)
            let result = try #require(
                store.commitAssertionNow(
                    commit, checked: nil,
                    issuing: ChallengeRequest(purpose: .assert, keyID: record.keyID, ttlMillis: 60_000, chained: true),
                    nowMillis: t0))
            let done = try result.get()
            #expect(done.outcome == .committed(previousCounter: UInt32(counter - 1)))
            let issued = try #require(done.next)
            // The consumed one made room: the other seven stay valid, a replay reads unknown.
            #expect(try store.state(token, now: t0) == .unknown)
            for t in live { #expect(try store.state(t, now: t0) != .unknown) }
            live.append(issued.token)
            #expect(
                try store.commit(record.keyID, counter: UInt32(counter), challenge: live[0], now: t0)
                    == .counterReplay(stored: UInt32(counter)))
        }
        #expect(store.challengeEvictions.perKey == 0)
        #expect(store.challengeCounts.keyBound == 8)
    }
}
