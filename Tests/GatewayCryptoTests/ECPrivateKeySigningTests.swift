import Dispatch
import GatewayCrypto
import Synchronization
import Testing

/// A P-256 key's one reused sign context (taken out of its slot per signature and put back): every
/// signature verifies, also when threads sign with one key at once; P-384 keys sign as before.
@Suite("ECPrivateKey: signatures with the reused context")
struct ECPrivateKeySigningTests {
    @Test("P-256 signatures from 4 threads at once, 200 each: all verify, each over its own message, none over another")
    func concurrent() throws {
        let key = ECPrivateKey(curve: .p256)
        let pub = try #require(key.p256PublicKey)
        let bad = Atomic<Int>(0)
        DispatchQueue.concurrentPerform(iterations: 4) { t in
            for i in 0..<200 {
                let message = Array("thread \(t) message \(i)".utf8)
                let sig = key.signature(for: message)
                if !pub.isValidSignature(sig, for: message) || pub.isValidSignature(sig, for: message + [0]) {
                    bad.add(1, ordering: .relaxed)
                }
            }
        }
        #expect(bad.load(ordering: .relaxed) == 0)
        // Two signatures of one message differ (a fresh nonce each), both verify.
        let a = key.signature(for: [1, 2, 3])
        let b = key.signature(for: [1, 2, 3])
        #expect(a != b && pub.isValidSignature(a, for: [1, 2, 3]) && pub.isValidSignature(b, for: [1, 2, 3]))
    }

    @Test("P-384 keys still sign (SHA-384, the per-call context): DER of two integers")
    func p384() {
        let sig = ECPrivateKey(curve: .p384).signature(for: Array("x".utf8))
        #expect(sig.first == 0x30 && sig.count > 64 && sig.count <= 104)
    }
}
