import AppAttest
import AppAttestSimulator
import Dispatch
import Foundation
import GatewayConfig
import GatewayCrypto
import GatewayPolicy
import GatewayStore
import GatewayTestSupport
import GatewayWire
import Testing

/// Registration verifies the attestation's receipt (`apps[].receipts: verify`, the default) and
/// applies the macOS 27 key policy (`apps[].require_macos_security`): real vectors through
/// `Registrar.check`, simulated devices through the whole `Registrar.register`.
@Suite("Registration: receipts and the macOS key policy")
struct ReceiptRegistrationTests {
    // MARK: Real attestations

    static func policy(for v: VectorCase, verifiesReceipts receipts: Bool = true) throws -> AttestPolicy {
        let env: AppPolicy.KeyEnvironmentName = v.string("verifier_environment") == "production" ? .production : .development
        let app = v.appID
        return try AttestPolicy(
            apps: [AppPolicy(teamID: app.teamID, bundleIDs: [app.bundleID], environments: [env], verifiesReceipts: receipts)],
            extraRoots: [],
            challengeTTLMillis: 300_000)
    }

    /// The instant registration runs at: the receipt's creation plus one second (every real leaf is
    /// valid then, and so is every receipt signer).
    static func instant(_ v: VectorCase) throws -> Date {
        let r = try AppAttestReceipt.parseStored(try AttestationObject.parse(v.bytes("attestation_b64")).receipt)
        return Date(timeIntervalSince1970: Double(r.creationTime.millis / 1000 + 1))
    }

    static func check(_ v: VectorCase, attestation: [UInt8]? = nil, policy: AttestPolicy, at: Date) throws
        -> Result<Registrar.CheckedAttestation, Explanation>
    {
        Registrar.check(
            attestation: attestation ?? v.bytes("attestation_b64"), keyID: try #require(KeyID(v.bytes("key_id_b64"))),
            clientDataHash: v.bytes("client_data_hash_b64"), policy: policy, at: at)
    }

    /// The attestation object with `receipt` in place of its own.
    static func withReceipt(_ attestation: [UInt8], _ receipt: [UInt8]) throws -> [UInt8] {
        let object = try AttestationObject.parse(attestation)
        let map = CBORMap([
            (.text("fmt"), .text(object.format)),
            (
                .text("attStmt"),
                .map(CBORMap([(.text("x5c"), .array(object.x5c.map { .bytes($0) })), (.text("receipt"), .bytes(receipt))]))
            ),
            (.text("authData"), .bytes(object.authenticatorData.bytes)),
        ])
        return CBOREncoder.encode(.map(map))
    }

    static func refusal(_ r: Result<Registrar.CheckedAttestation, Explanation>) -> Explanation? {
        if case .failure(let e) = r { return e }
        return nil
    }

    static func field(_ e: Explanation?, _ name: String) -> String? { e?.fields.first { $0.0 == name }?.1 }

    @Test("every distinct real attestation registers with its real receipt verified", arguments: VectorCase.attestationsWithReceipts)
    func realRegistration(_ v: VectorCase) throws {
        let result = try Self.check(v, policy: try Self.policy(for: v), at: try Self.instant(v))
        guard case .success(let ok) = result else {
            Issue.record("\(v.name) refused: \(String(describing: Self.refusal(result)?.fields))")
            return
        }
        #expect(ok.receipt?.kind == .attest)
        #expect(ok.receipt?.attestedCertificate == ok.attestation.credentialCertificate.der)
    }

    @Test("real attestations: another key's receipt, a flipped receipt byte, a receipt from the future, no receipt at all")
    func realRefusals() throws {
        let v = try #require(VectorCase.attestationCase(named: "veehaitch-ios-14.4-attestation"))
        let other = try #require(VectorCase.attestationCase(named: "veehaitch-ios-14.4-beta-2-attestation"))
        let policy = try Self.policy(for: v)
        let at = try Self.instant(v)
        let original = v.bytes("attestation_b64")
        let receipt = try AttestationObject.parse(original).receipt

        // The attestation verifies with another key's receipt inside: only the receipt check sees it.
        let swapped = try Self.withReceipt(original, try AttestationObject.parse(other.bytes("attestation_b64")).receipt)
        let stolen = Self.refusal(try Self.check(v, attestation: swapped, policy: policy, at: at))
        #expect(stolen?.error == .receiptInvalid && stolen?.step == "receipt")
        #expect(Self.field(stolen, "reason") == "attested_key_mismatch")
        #expect(stolen.map { GateError.receiptInvalid.status(on: .endpoint) == 401 && $0.error.action == .none } == true)

        var flipped = receipt
        flipped[flipped.count / 3] ^= 0x01
        let broken = Self.refusal(try Self.check(v, attestation: try Self.withReceipt(original, flipped), policy: policy, at: at))
        #expect(broken?.error == .receiptInvalid)
        #expect(Self.field(broken, "detail")?.isEmpty == false)

        // Registering before the receipt's creation (a clock two minutes behind Apple's) refuses it.
        let early = Self.refusal(try Self.check(v, policy: policy, at: at.addingTimeInterval(-122)))
        #expect(Self.field(early, "reason") == "creation_time_invalid")

        let none = Self.refusal(try Self.check(v, attestation: try Self.withReceipt(original, []), policy: policy, at: at))
        #expect(none?.error == .receiptInvalid && Self.field(none, "reason") == "malformed")

        // `receipts: ignore` registers all of them, the receipt kept unverified.
        let lax = try Self.policy(for: v, verifiesReceipts: false)
        for bytes in [swapped, try Self.withReceipt(original, flipped), try Self.withReceipt(original, [])] {
            guard case .success(let ok) = try Self.check(v, attestation: bytes, policy: lax, at: at) else {
                Issue.record("receipts: ignore refused a receipt")
                continue
            }
            #expect(ok.receipt == nil)
        }
        // The vector whose receipt was never published registers only where receipts are ignored.
        let bare = try #require(VectorCase.attestationCase(named: "oliver-binns-dev-attestation"))
        #expect(
            Self.field(Self.refusal(try Self.check(bare, policy: try Self.policy(for: bare), at: bare.instant)), "reason") == "malformed")
        #expect(throws: Never.self) {
            try Self.check(bare, policy: try Self.policy(for: bare, verifiesReceipts: false), at: bare.instant).get()
        }
    }

    // MARK: Simulated devices through Registrar.register

    static let appID = "ABCDE12345.com.example.shop"
    static let macAppID = "ABCDE12345.com.example.mac"

    final class Harness: @unchecked Sendable {
        let store = MemoryAttestStore(shards: 1)
        let ca: TestCA
        let policy: AttestPolicy
        static let now: Int64 = 1_800_000_000_000

        init(ca: TestCA? = nil, verifiesReceipts receipts: Bool = true, trustReceiptRoot: Bool = true) throws {
            let ca = try ca ?? TestCA()
            self.ca = ca
            policy = try AttestPolicy(
                apps: [
                    AppPolicy(
                        teamID: "ABCDE12345", bundleIDs: ["com.example.shop"], environments: [.development], verifiesReceipts: receipts),
                    AppPolicy(
                        teamID: "ABCDE12345", bundleIDs: ["com.example.mac"], environments: [.development], requiresMacOSSecurity: true),
                ],
                extraRoots: [ca.root], extraReceiptRoots: trustReceiptRoot ? [ca.receiptRoot] : [], challengeTTLMillis: 300_000)
        }

        func register(_ device: SimulatedDevice, mutations: AttestationMutations = .none) throws -> RegistrationResult {
            let issued = Box<Result<IssuedChallenge, StoreError>>()
            store.issueChallenge(ChallengeRequest(purpose: .register, keyID: nil, ttlMillis: 300_000), nowMillis: Self.now) {
                issued.set($0)
            }
            let challenge = ChallengeText.encode(try issued.wait().get().token)
            let attestation = try device.attest(
                clientDataHash: SHA256.hash(Array(challenge.utf8)), at: Date(timeIntervalSince1970: Double(Self.now) / 1000 - 5),
                mutations: mutations)
            let body =
                "{\"keyId\":\"\(Base64.encode(device.keyID))\",\"attestation\":\"\(Base64.encode(attestation))\",\"challenge\":\"\(challenge)\"}"
            let result = Box<RegistrationResult>()
            Registrar.register(body: Array(body.utf8), policy: policy, store: store, nowMillis: Self.now) { result.set($0) }
            return try result.wait()
        }
    }

    final class Box<T>: @unchecked Sendable {
        private var value: T?
        private let done = DispatchSemaphore(value: 0)
        func set(_ v: T) {
            value = v
            done.signal()
        }
        func wait() throws -> T {
            guard done.wait(timeout: .now() + 5) == .success, let value else { throw CancellationError() }
            return value
        }
    }

    static func registered(_ r: RegistrationResult) -> RegisteredKey? {
        if case .registered(let k) = r { return k }
        return nil
    }

    static func refused(_ r: RegistrationResult) -> Explanation? {
        if case .refused(let e) = r { return e }
        return nil
    }

    @Test("a simulated device registers with its receipt verified under the listed test receipt root")
    func simulatedRegistration() throws {
        let h = try Harness()
        let phone = SimulatedDevice(appID: try AppID(Self.appID), ca: h.ca)
        let result = try h.register(phone)
        let key = try #require(Self.registered(result), "\(String(describing: Self.refused(result)?.fields))")
        #expect(key.receipt?.kind == .attest)
        #expect(key.receipt?.environment == "sandbox")
        #expect(key.receipt.map { String(decoding: $0.appID, as: UTF8.self) } == Self.appID)
        #expect(key.keyAccessControl == nil)
    }

    @Test("bad receipts refuse the registration with receipt_invalid and say why; receipts: ignore admits them")
    func simulatedRefusals() throws {
        let h = try Harness()
        let app = try AppID(Self.appID)
        let cases: [(String, AttestationMutations)] = [
            ("app_id_mismatch", AttestationMutations(receiptEdit: { $0.appID = "ABCDE12345.com.example.other" })),
            (
                "type_mismatch",
                AttestationMutations(receiptEdit: {
                    $0.type = "RECEIPT"
                    $0.riskMetric = 1
                })
            ),
            ("client_hash_mismatch", AttestationMutations(receiptEdit: { $0.clientHash = SHA256.hash(Array("another challenge".utf8)) })),
            ("attested_key_mismatch", AttestationMutations(receiptEdit: { $0.attestedCertificate = h.ca.root.der })),
            ("creation_time_invalid", AttestationMutations(receiptEdit: { $0.creationTime = $0.creationTime.addingTimeInterval(3600) })),
            ("malformed", AttestationMutations(receipt: Array("not a receipt".utf8))),
            ("chain_untrusted", AttestationMutations(receipt: try TestCA().issueReceipt(payload: [0x31, 0x00]))),
        ]
        for (reason, mutations) in cases {
            let e = try #require(Self.refused(try h.register(SimulatedDevice(appID: app, ca: h.ca), mutations: mutations)), "\(reason)")
            #expect(e.error == .receiptInvalid, "\(reason): \(e.error)")
            #expect(e.step == "receipt")
            #expect(Self.field(e, "reason") == reason, "\(reason): \(e.fields)")
            #expect(e.fields.first?.0 == "key_id")
        }
        // Without the test receipt root listed, the simulator's genuine receipts are untrusted.
        let untrusting = try Harness(ca: h.ca, trustReceiptRoot: false)
        let e = Self.refused(try untrusting.register(SimulatedDevice(appID: app, ca: h.ca)))
        #expect(Self.field(e, "reason") == "chain_untrusted")
        // receipts: ignore stores whatever came, unverified.
        let lax = try Harness(ca: h.ca, verifiesReceipts: false, trustReceiptRoot: false)
        for (reason, mutations) in cases {
            let key = Self.registered(try lax.register(SimulatedDevice(appID: app, ca: h.ca), mutations: mutations))
            #expect(key != nil && key?.receipt == nil, "\(reason)")
        }
    }

    @Test("require_macos_security: a Mac's key registers; an iPhone's or a weaker policy is refused with 403, explain shows it")
    func macOSPolicy() throws {
        let h = try Harness()
        let mac = SimulatedDevice(appID: try AppID(Self.macAppID), ca: h.ca)
        mac.keyAccessControl = SimulatedDevice.macOSKeyAccessControl
        let key = try #require(Self.registered(try h.register(mac)))
        #expect(key.keyAccessControl?.requiresMacOSFullSecurity == true)
        #expect(key.receipt != nil)

        let phone = SimulatedDevice(appID: try AppID(Self.macAppID), ca: h.ca)
        let e = try #require(Self.refused(try h.register(phone)))
        #expect(e.error == .macOSSecurityRequired && e.step == "app_policy")
        #expect(e.error.status(on: .endpoint) == 403 && e.error.action == .none)
        #expect(Self.field(e, "key_access_control")?.hasPrefix("absent") == true)

        let weak = SimulatedDevice(appID: try AppID(Self.macAppID), ca: h.ca)
        weak.keyAccessControl = Hex.decode("30200c023131301a300b0c046f73676ea1030101ff300b0c046f64656ca1030101ff")!
        let w = try #require(Self.refused(try h.register(weak)))
        #expect(w.error == .macOSSecurityRequired)
        #expect(Self.field(w, "key_access_control") == "v11: osgn odel")

        // An app without the requirement registers a Mac's key and records its policy.
        let macOnShop = SimulatedDevice(appID: try AppID(Self.appID), ca: h.ca)
        macOnShop.keyAccessControl = SimulatedDevice.macOSKeyAccessControl
        #expect(Self.registered(try h.register(macOnShop))?.keyAccessControl?.requiresMacOSFullSecurity == true)
        // Any later refusal of such a key shows its policy in explain.
        let refusedMac = try #require(Self.refused(try h.register(macOnShop, mutations: AttestationMutations(receipt: [1]))))
        #expect(Self.field(refusedMac, "key_access_control")?.hasPrefix("macos_full_security") == true)
    }

    @Test("the new codes: receipt_invalid 401 none, macos_security_required 403 none")
    func codes() {
        #expect(GateError.receiptInvalid.status == 401 && GateError.receiptInvalid.routeStatus == 401)
        #expect(GateError.receiptInvalid.action == .none)
        #expect(GateError.macOSSecurityRequired.status == 403 && GateError.macOSSecurityRequired.action == .none)
        #expect(GateError(rawValue: "receipt_invalid") == .receiptInvalid)
        #expect(GateError(rawValue: "macos_security_required") == .macOSSecurityRequired)
    }
}
