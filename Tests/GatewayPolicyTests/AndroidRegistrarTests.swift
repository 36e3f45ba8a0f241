import AndroidAttest
import AppAttestSimulator
import Foundation
import GatewayCrypto
import GatewayPolicy
import GatewayStore
import GatewayWire
import Testing

/// `Registrar.checkAndroid`: each Android code a registration answers, reached by a concrete chain
/// from the simulated device (docs/android.md); and the gate's status and action for each.
@Suite("Registrar: Android registrations, every refusal reached")
struct AndroidRegistrarTests {
    /// The codes only Android registrations answer (the rest are App Attest's codes too).
    static let androidCodes: Set<String> = [
        "revoked", "challenge_mismatch", "software_key", "signing_cert_not_allowed", "security_level_too_low", "bootloader_unlocked",
        "verified_boot_required", "patch_level_too_old", "key_not_for_signing", "unsupported_key",
    ]
    static let package = "com.example.shop"
    static let signer = SHA256.hash(Array("signer".utf8))
    static let challenge = Array("a-challenge-as-issued".utf8)

    let ca: TestAndroidCA
    let policy: AttestPolicy

    init() throws {
        ca = try TestAndroidCA()
        policy = try Self.policy(
            ca,
            android: AndroidAttestationPolicy(
                packageNames: [Self.package], signingCertificateSHA256: [Self.signer], minPatchLevel: PatchLevel("202501")))
    }

    static func policy(_ ca: TestAndroidCA, android: AndroidAttestationPolicy) throws -> AttestPolicy {
        try AttestPolicy(
            apps: [AppPolicy(teamID: "", bundleIDs: [], android: android)], extraRoots: [], challengeTTLMillis: 300_000,
            extraAndroidRoots: [ca.root])
    }

    /// The code `checkAndroid` answers for a device changed by `change` (nil: registered).
    func code(
        policy: AttestPolicy? = nil, securityLevel: SecurityLevel = .trustedEnvironment, challenge: [UInt8] = Self.challenge,
        statusList: AttestationStatusList? = nil, wrongKeyID: Bool = false, _ change: (inout SimulatedKeyDescription) -> Void = { _ in }
    ) throws -> String? {
        let device = try SimulatedAndroidDevice(ca: ca, securityLevel: securityLevel)
        var d = device.keyDescription(packageName: Self.package, signingCertificateSHA256: Self.signer)
        change(&d)
        let chain = try device.attest(challenge: challenge, keyDescription: d)
        let keyID = KeyID(wrongKeyID ? SHA256.hash([1]) : device.keyID)!
        switch Registrar.checkAndroid(
            chain: chain, keyID: keyID, challenge: Self.challenge, policy: policy ?? self.policy, statusList: statusList, at: Date())
        {
        case .success(let c):
            #expect(c.app.appID == "android:\(Self.package)")
            #expect(c.publicKey.x962 == device.publicKey.x962)
            return nil
        case .failure(let e):
            // Every Android refusal is the contract's (status and action), on the endpoint.
            Contract.check(e, on: .endpoint, e.error.code)
            return e.error.code
        }
    }

    @Test("a TEE device with a locked bootloader, green boot and a recent patch registers; StrongBox too")
    func accepted() throws {
        #expect(try code() == nil)
        #expect(try code(securityLevel: .strongBox) == nil)
    }

    @Test("each device or app rule refuses with its own code")
    func refusals() throws {
        let strongbox = try Self.policy(
            ca,
            android: AndroidAttestationPolicy(
                packageNames: [Self.package], signingCertificateSHA256: [Self.signer], minSecurityLevel: .strongBox))
        var reached: Set<String> = []
        func expect(_ got: String?, _ want: String, _ line: Int = #line) {
            #expect(got == want, "line \(line)")
            if let got { reached.insert(got) }
        }
        expect(try code(challenge: Array("another".utf8)), "challenge_mismatch")
        expect(try code(securityLevel: .software), "software_key")
        expect(try code { $0.packageName = "com.other.app" }, "app_not_allowed")
        expect(try code { $0.signingCertificateSHA256 = SHA256.hash([9]) }, "signing_cert_not_allowed")
        expect(try code(policy: strongbox), "security_level_too_low")
        expect(try code { $0.deviceLocked = false }, "bootloader_unlocked")
        expect(try code { $0.verifiedBootState = .selfSigned }, "verified_boot_required")
        expect(try code { $0.osPatchLevel = 202_412 }, "patch_level_too_old")
        expect(try code { $0.purposes = [KeyCharacteristics.Purpose.agreeKey] }, "key_not_for_signing")
        expect(try code { $0.algorithm = KeyCharacteristics.Algorithm.rsa }, "unsupported_key")
        expect(try code(wrongKeyID: true), "key_id_mismatch")
        let revoked = try AttestationStatusList.parse(json: TestAndroidCA.statusList(listing: [ca.intermediate]))
        expect(try code(statusList: revoked), "revoked")
        let untrusted = try Self.policy(
            try TestAndroidCA(name: "Other"),
            android: AndroidAttestationPolicy(packageNames: [Self.package], signingCertificateSHA256: [Self.signer]))
        expect(try code(policy: untrusted), "chain_untrusted")
        #expect(Self.androidCodes.isSubset(of: reached), "not reached: \(Self.androidCodes.subtracting(reached))")
    }

    @Test("yellow boot passes with allow_self_signed_boot; rules switched off pass")
    func relaxed() throws {
        let relaxed = try Self.policy(
            ca,
            android: AndroidAttestationPolicy(
                packageNames: [Self.package], signingCertificateSHA256: [Self.signer], requireLockedBootloader: false,
                allowSelfSignedBoot: true))
        #expect(try code(policy: relaxed) { $0.verifiedBootState = .selfSigned } == nil)
        #expect(try code(policy: relaxed) { $0.deviceLocked = false } == nil)
    }

    @Test("the header's assertion: an Android map reads as Android, App Attest's as App Attest, anything else is malformed")
    func readHeaders() {
        let route = RoutePolicy(mode: .enforce, bind: .body, challenge: .off)
        let key = Base64.encode([UInt8](repeating: 7, count: 32))
        let android = AndroidAssertion(counter: 3, signature: [1, 2, 3]).encoded
        guard case .success(let h) = AssertionGate.readHeaders(keyID: key, challenge: nil, assertion: Base64.encode(android), route: route),
            case .android(let a) = h.assertion
        else {
            Issue.record("an Android assertion must read as one")
            return
        }
        #expect(a.counter == 3)
        let junk = CBOREncoder.encode(.map(CBORMap([(.text("counter"), .text("3"))])))
        guard case .failure(let e) = AssertionGate.readHeaders(keyID: key, challenge: nil, assertion: Base64.encode(junk), route: route)
        else {
            Issue.record("a map of neither shape must be refused")
            return
        }
        #expect(e.error.code == "malformed")
    }
}
