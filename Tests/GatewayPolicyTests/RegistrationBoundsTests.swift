import AppAttest
import AppAttestSimulator
import Dispatch
import Foundation
import GatewayConfig
import GatewayCrypto
import GatewayPolicy
import GatewayStore
import GatewayWire
import Synchronization
import Testing

/// Issue 19 at the registration endpoint's policy: the receipt's size is checked before any
/// certificate work, and the store's key bounds become refusals with their code, status, action
/// and `Retry-After`.
@Suite("Policy: registration bounds")
struct RegistrationBoundsTests {
    static let shop = "ABCDE12345.com.example.shop"
    static let clip = "ABCDE12345.com.example.shop.Clip"
    let ca: TestCA
    let policy: AttestPolicy
    let now = Int64(Date().timeIntervalSince1970) * 1000

    init() throws {
        ca = try TestCA()
        let app = AppPolicy(
            teamID: "ABCDE12345", bundleIDs: ["com.example.shop", "com.example.shop.Clip"], environments: [.development],
            verifiesReceipts: false)  // the receipts here are sized filler, not CMS
        policy = try AttestPolicy(apps: [app], extraRoots: [ca.root], challengeTTLMillis: 300_000, maxReceiptBytes: 16 * 1024)
    }

    func register(_ device: SimulatedDevice, store: any AttestStore, receipt: [UInt8]? = nil, issuer: TestCA? = nil, at time: Int64? = nil)
        throws -> RegistrationResult
    {
        let at = time ?? now
        let issued = Mutex<IssuedChallenge?>(nil)
        store.issueChallenge(ChallengeRequest(purpose: .register, keyID: KeyID(device.keyID), ttlMillis: 60_000), nowMillis: at) { r in
            issued.withLock { $0 = try? r.get() }
        }
        let challenge = ChallengeText.encode(try #require(issued.withLock { $0 }).token)
        // Attested at the instant it is verified: a credential certificate issued at `Date()` would
        // not be valid yet at `now` (whole seconds, taken earlier) once a second boundary passed.
        let attestation = try device.attest(
            clientDataHash: SHA256.hash(Array(challenge.utf8)), at: Date(timeIntervalSince1970: Double(at) / 1000),
            mutations: AttestationMutations(issuingCA: issuer, receipt: receipt))
        let body =
            "{\"keyId\":\"\(Base64.encode(device.keyID))\",\"attestation\":\"\(Base64.encode(attestation))\",\"challenge\":\"\(challenge)\"}"
        let answer = Mutex<RegistrationResult?>(nil)
        let done = DispatchSemaphore(value: 0)
        Registrar.register(body: Array(body.utf8), policy: policy, store: store, nowMillis: at) { result in
            answer.withLock { $0 = result }
            done.signal()
        }
        #expect(done.wait(timeout: .now() + 30) == .success)
        return try #require(answer.withLock { $0 })
    }

    func refusal(_ result: RegistrationResult) -> Explanation? {
        if case .refused(let e) = result { return e }
        return nil
    }

    @Test func theReceiptSizeIsCheckedBeforeTheCertificateChain() throws {
        #expect(GateError.receiptTooLarge.status == 413 && GateError.receiptTooLarge.action == ClientAction.none)
        let store = MemoryAttestStore(shards: 2)
        let device = SimulatedDevice(appID: try AppID(Self.shop), ca: ca)
        // An untrusted issuer would be chain_untrusted: the size is refused before the chain is looked at.
        let rogue = try TestCA(name: "Rogue")
        let big = try #require(
            refusal(try register(device, store: store, receipt: [UInt8](repeating: 1, count: 16 * 1024 + 1), issuer: rogue)))
        #expect(big.error == .receiptTooLarge)
        #expect(big.fields.contains { $0 == ("receipt_bytes", "16385") })
        #expect(
            refusal(try register(device, store: store, receipt: [UInt8](repeating: 1, count: 16 * 1024), issuer: rogue))?.error
                == .verification(.chainUntrusted))
        #expect(store.statistics.keys == 0)
        // At the limit, with a trusted chain: registered.
        guard case .registered = try register(device, store: store, receipt: [UInt8](repeating: 1, count: 16 * 1024)) else {
            Issue.record("a 16 KiB receipt was refused")
            return
        }
    }

    @Test func keyBoundsBecomeRefusalsWithStatusActionAndRetryAfter() throws {
        #expect(GateError.keyAppConflict.status == 409 && GateError.keyAppConflict.action == .reattest)
        #expect(GateError.reregistrationLimited.status == 429 && GateError.reregistrationLimited.action == ClientAction.none)
        #expect(GateError.keyCapacity.status == 503 && GateError.keyCapacity.action == ClientAction.none)
        let store = MemoryAttestStore(shards: 2, limits: KeyLimits(maxKeys: 1, maxReregistrations: 1, reregistrationWindowMillis: 600_000))
        let key = ECPrivateKey(curve: .p256)
        let phone = try SimulatedDevice(appID: try AppID(Self.shop), ca: ca, key: key, counter: 0)
        guard case .registered(let first) = try register(phone, store: store, at: now), !first.existing else {
            Issue.record("the first registration was refused")
            return
        }
        guard case .registered(let again) = try register(phone, store: store, at: now + 1_000), again.existing else {
            Issue.record("the first re-registration was refused")
            return
        }
        let limited = try #require(refusal(try register(phone, store: store, at: now + 2_000)))
        #expect(limited.error == .reregistrationLimited)
        #expect(limited.retryAfterSeconds == 599)
        // The same key attested by another allowed app: refused, the key stays with its app.
        let clip = try SimulatedDevice(appID: try AppID(Self.clip), ca: ca, key: key, counter: 0)
        let conflict = try #require(refusal(try register(clip, store: store, at: now + 3_000)))
        #expect(conflict.error == .keyAppConflict)
        #expect(conflict.fields.contains { $0 == ("registered_app_id", Self.shop) })
        #expect(conflict.retryAfterSeconds == nil)
        // The cap (one key): a new device is refused, with Retry-After.
        let other = SimulatedDevice(appID: try AppID(Self.shop), ca: ca)
        let full = try #require(refusal(try register(other, store: store, at: now + 4_000)))
        #expect(full.error == .keyCapacity)
        #expect(full.retryAfterSeconds == Registrar.keyCapacityRetryAfterSeconds)
        #expect(store.statistics.keys == 1)
    }
}
