import Dispatch
import Foundation
import GatewayStore
import Synchronization
import Testing

/// The DeviceCheck token claims every store keeps (`AttestStore.claimToken`/`releaseToken`):
/// claimed once per ttl, a replay refused, another token independent, a release gives the token
/// back, a claim expires with its ttl, sixteen racing claims of one token give one `.claimed`, a
/// digest that is not a SHA-256 is refused. Real time (Redis expires claims by its own clock).
extension AttestStore {
    public func claim(_ digest: [UInt8], ttl: Int64, now: Int64 = realMillis()) throws -> TokenClaimOutcome {
        try wait { claimToken(digest, ttlMillis: ttl, nowMillis: now, completion: $0) }.get()
    }

    public func release(_ digest: [UInt8]) throws {
        try wait { releaseToken(digest, completion: $0) }.get()
    }
}

public func realMillis() -> Int64 { Int64(Date().timeIntervalSince1970 * 1000) }

/// A random 32-byte digest.
public func tokenDigest(_ rng: inout SeededRandom) -> [UInt8] { (0..<32).map { _ in UInt8.random(in: 0...255, using: &rng) } }

public func checkTokenClaims(_ store: any AttestStore, rng: inout SeededRandom) throws {
    let a = tokenDigest(&rng)
    let b = tokenDigest(&rng)
    #expect(try store.claim(a, ttl: 60_000) == .claimed)
    #expect(try store.claim(a, ttl: 60_000) == .alreadyClaimed)
    #expect(try store.claim(a, ttl: 1) == .alreadyClaimed)  // a replay does not shorten the claim
    #expect(try store.claim(b, ttl: 60_000) == .claimed)

    // A release gives the token back (DeviceCheck could not judge it); the other stays claimed.
    try store.release(a)
    #expect(try store.claim(b, ttl: 60_000) == .alreadyClaimed)
    #expect(try store.claim(a, ttl: 60_000) == .claimed)
    #expect(try store.claim(a, ttl: 60_000) == .alreadyClaimed)
    try store.release(tokenDigest(&rng))  // a token never claimed: nothing to give back

    // Expiry: refused within the ttl, claimable after it.
    let c = tokenDigest(&rng)
    #expect(try store.claim(c, ttl: 400) == .claimed)
    #expect(try store.claim(c, ttl: 400) == .alreadyClaimed)
    usleep(700_000)
    #expect(try store.claim(c, ttl: 60_000) == .claimed)
    #expect(try store.claim(c, ttl: 60_000) == .alreadyClaimed)

    // Sixteen threads claim one token at once: exactly one is accepted.
    let d = tokenDigest(&rng)
    let claimed = Atomic<Int>(0)
    DispatchQueue.concurrentPerform(iterations: 16) { _ in
        if (try? store.claim(d, ttl: 60_000)) == .claimed { claimed.wrappingAdd(1, ordering: .relaxed) }
    }
    #expect(claimed.load(ordering: .relaxed) == 1)

    // Not a SHA-256: refused, nothing claimed.
    let short = wait { store.claimToken([1, 2, 3], ttlMillis: 60_000, nowMillis: realMillis(), completion: $0) }
    #expect(throws: StoreError.self) { try short.get() }
}
