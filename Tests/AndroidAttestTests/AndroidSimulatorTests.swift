import AndroidAttest
import AppAttestSimulator
import Foundation
import GatewayCrypto
import GatewayWire
import Testing

/// Simulated devices under a test root: every verdict and policy code reached by a concrete chain.
@Suite("Simulated Android devices: verdict and policy")
struct AndroidSimulatorTests {
    static let ca = try! TestAndroidCA()
    static let package = "com.example.shop"
    static let signer = SHA256.hash(Array("the shop's signing certificate".utf8))
    static let challenge = Array("a challenge the gateway issued".utf8)
    static let verifier = AndroidAttestationVerifier(extraRoots: [ca.root])
    static let policy = AndroidAttestationPolicy(packageNames: [package], signingCertificateSHA256: [signer])

    static func device(_ level: SecurityLevel = .trustedEnvironment) -> SimulatedAndroidDevice {
        try! SimulatedAndroidDevice(ca: ca, securityLevel: level)
    }

    static func attest(
        _ device: SimulatedAndroidDevice, challenge: [UInt8] = challenge, edit: (inout SimulatedKeyDescription) -> Void = { _ in }
    ) throws -> AndroidAttestation {
        var d = device.keyDescription(packageName: package, signingCertificateSHA256: signer)
        edit(&d)
        let chain = try device.attest(challenge: Self.challenge, keyDescription: d)
        return try verifier.verify(chain: chain, challenge: challenge, at: Date())
    }

    /// The policy's code for a device whose KeyDescription `edit` changes, or nil when accepted.
    static func policyCode(
        _ policy: AndroidAttestationPolicy = policy, _ level: SecurityLevel = .trustedEnvironment,
        edit: (inout SimulatedKeyDescription) -> Void = { _ in }
    ) throws -> AndroidAttestError.Code? {
        let a = try attest(device(level), edit: edit)
        do {
            try policy.check(a)
            return nil
        } catch {
            #expect(!error.detail.isEmpty)
            return error.code
        }
    }

    @Test("a TEE device: valid, every field as the device wrote it, accepted by the default policy")
    func valid() throws {
        let device = Self.device()
        let a = try Self.attest(device)
        #expect(a.attestationVersion == 300 && a.keyMintVersion == 300)
        #expect(a.securityLevel == .trustedEnvironment && a.attestationSecurityLevel == .trustedEnvironment)
        #expect(a.packageNames == [Self.package])
        #expect(a.signingCertificateDigests == [Self.signer])
        #expect(a.rootOfTrust?.deviceLocked == true && a.rootOfTrust?.verifiedBootState == .verified)
        #expect(a.osVersion == 150_000 && a.osPatchLevel == 202_501 && a.vendorPatchLevel == 20_250_105 && a.bootPatchLevel == 20_250_105)
        #expect(a.key == KeyCharacteristics(algorithm: 3, ecCurve: 1, keySize: 256, purposes: [2, 3]))
        #expect(a.publicKey?.x962 == device.publicKey.x962)
        #expect(a.keyID == device.keyID)
        #expect(a.attestKeyCertificateCount == 0)
        #expect(a.anchor == AndroidTrustAnchor(certificate: Self.ca.root))
        try Self.policy.check(a)
    }

    @Test("StrongBox: reported, and the only level a strongbox policy accepts")
    func strongBox() throws {
        let a = try Self.attest(Self.device(.strongBox))
        #expect(a.securityLevel == .strongBox)
        var strict = Self.policy
        strict.minSecurityLevel = .strongBox
        try strict.check(a)
        #expect(try Self.policyCode(strict, .trustedEnvironment) == .securityLevelTooLow)
    }

    @Test("each policy refusal, from a device that differs in that one respect")
    func policyRefusals() throws {
        var other = Self.policy
        other.packageNames = ["com.example.other"]
        #expect(try Self.policyCode(other) == .packageNotAllowed)
        other = Self.policy
        other.signingCertificateSHA256 = [SHA256.hash([1])]
        #expect(try Self.policyCode(other) == .signingCertNotAllowed)
        #expect(
            try Self.policyCode {
                $0.deviceLocked = false; $0.verifiedBootState = .unverified
            } == .bootloaderUnlocked)
        #expect(try Self.policyCode { $0.verifiedBootState = .selfSigned } == .verifiedBootRequired)
        #expect(try Self.policyCode { $0.verifiedBootState = .failed } == .verifiedBootRequired)
        var yellow = Self.policy
        yellow.allowSelfSignedBoot = true
        #expect(try Self.policyCode(yellow) { $0.verifiedBootState = .selfSigned } == nil)
        #expect(try Self.policyCode(yellow) { $0.verifiedBootState = .unverified } == .verifiedBootRequired)
        var patched = Self.policy
        patched.minPatchLevel = PatchLevel("202502")
        #expect(try Self.policyCode(patched) == .patchLevelTooOld)
        patched.minPatchLevel = PatchLevel("202501")
        #expect(try Self.policyCode(patched) == nil)
        patched.minPatchLevel = PatchLevel("20250106")
        #expect(try Self.policyCode(patched) == .patchLevelTooOld)  // vendor and boot: 20250105
        patched.minPatchLevel = PatchLevel("20250105")
        #expect(try Self.policyCode(patched) == nil)
        #expect(try Self.policyCode(patched) { $0.vendorPatchLevel = 0 } == nil)  // 0: not a date, not counted
        #expect(try Self.policyCode { $0.purposes = [KeyCharacteristics.Purpose.agreeKey] } == .keyNotForSigning)
        #expect(try Self.policyCode { $0.ecCurve = KeyCharacteristics.Curve.p384 } == .unsupportedKey)
        #expect(try Self.policyCode { $0.algorithm = KeyCharacteristics.Algorithm.rsa } == .unsupportedKey)
        // An unlocked device under the CLI's allow-list policy: only the lists count.
        #expect(
            try Self.policyCode(.allowList(packageNames: [Self.package], signingCertificateSHA256: [])) { $0.deviceLocked = false } == nil)
    }

    @Test("software keys never pass the verdict, whichever level says Software")
    func softwareKey() throws {
        #expect(throws: AndroidAttestError(.softwareKey, "")) { try Self.attest(Self.device()) { $0.securityLevel = .software } }
        #expect(throws: AndroidAttestError(.softwareKey, "")) { try Self.attest(Self.device()) { $0.keyMintSecurityLevel = .software } }
    }

    @Test("another challenge is challenge_mismatch")
    func wrongChallenge() {
        #expect(throws: AndroidAttestError(.challengeMismatch, "")) { try Self.attest(Self.device(), challenge: Array("another".utf8)) }
    }

    @Test("the test root is trusted only where listed: Google's roots alone refuse it")
    func untrustedRoot() throws {
        let device = Self.device()
        let chain = try device.attest(
            challenge: Self.challenge,
            keyDescription: device.keyDescription(packageName: Self.package, signingCertificateSHA256: Self.signer))
        #expect(throws: AndroidAttestError(.chainUntrusted, "")) {
            try AndroidAttestationVerifier().verify(chain: chain, challenge: Self.challenge, at: Date())
        }
        let otherCA = try TestAndroidCA(name: "Another TEST")
        #expect(throws: AndroidAttestError(.chainUntrusted, "")) {
            try AndroidAttestationVerifier(extraRoots: [otherCA.root]).verify(chain: chain, challenge: Self.challenge, at: Date())
        }
    }

    @Test("a revoked intermediate, or a suspended device certificate, in the stand-in status list")
    func revoked() throws {
        let device = Self.device()
        let chain = try device.attest(
            challenge: Self.challenge,
            keyDescription: device.keyDescription(packageName: Self.package, signingCertificateSHA256: Self.signer))
        for (listed, status) in [(Self.ca.intermediate, "REVOKED"), (device.attestationCertificate, "SUSPENDED")] {
            let list = try AttestationStatusList.parse(json: TestAndroidCA.statusList(listing: [listed], status: status))
            #expect(throws: AndroidAttestError(.revoked, "")) {
                try Self.verifier.verify(chain: chain, challenge: Self.challenge, at: Date(), statusList: list)
            }
        }
        let unrelated = try AttestationStatusList.parse(
            json: TestAndroidCA.statusList(listing: [try TestAndroidCA(name: "Other").intermediate]))
        _ = try Self.verifier.verify(chain: chain, challenge: Self.challenge, at: Date(), statusList: unrelated)
    }

    @Test("links: a leaf under another device's certificate, a flipped signature byte")
    func badLinks() throws {
        let a = Self.device(), b = Self.device()
        let d = a.keyDescription(packageName: Self.package, signingCertificateSHA256: Self.signer)
        var chain = try a.attest(challenge: Self.challenge, keyDescription: d)
        chain[1] = b.attestationCertificate.der
        #expect(throws: AndroidAttestError(.badSignature, "")) {
            try Self.verifier.verify(chain: chain, challenge: Self.challenge, at: Date())
        }
        chain = try a.attest(challenge: Self.challenge, keyDescription: d)
        chain[0][chain[0].count - 3] ^= 0x01
        #expect(throws: AndroidAttestError(.badSignature, "")) {
            try Self.verifier.verify(chain: chain, challenge: Self.challenge, at: Date())
        }
    }

    @Test("the CAs' validity bounds the instant; the leaf's 1970–2048 dates are the device's and never checked")
    func validity() throws {
        let device = Self.device()
        let chain = try device.attest(
            challenge: Self.challenge,
            keyDescription: device.keyDescription(packageName: Self.package, signingCertificateSHA256: Self.signer))
        let v = TestCA.defaultValidity
        _ = try Self.verifier.verify(chain: chain, challenge: Self.challenge, at: v.notBefore)
        _ = try Self.verifier.verify(chain: chain, challenge: Self.challenge, at: v.notAfter)
        #expect(throws: AndroidAttestError(.certificateNotYetValid, "")) {
            try Self.verifier.verify(chain: chain, challenge: Self.challenge, at: v.notBefore.addingTimeInterval(-1))
        }
        #expect(throws: AndroidAttestError(.certificateExpired, "")) {
            try Self.verifier.verify(chain: chain, challenge: Self.challenge, at: v.notAfter.addingTimeInterval(0.5))
        }
        // 2055: after the leaf's notAfter (2048), within the CA's: still valid.
        _ = try Self.verifier.verify(chain: chain, challenge: Self.challenge, at: Date(timeIntervalSince1970: 2_682_374_400))
    }

    @Test("a leaf whose CRL distribution point extension is malformed still verifies (real leaves carry one)")
    func unparsableExtension() throws {
        let device = Self.device()
        let chain = try device.attest(
            challenge: Self.challenge,
            keyDescription: device.keyDescription(packageName: Self.package, signingCertificateSHA256: Self.signer),
            extraLeafExtensions: [.init(oid: "2.5.29.31", critical: false, value: [0x30, 0x03, 0xa0, 0x01])])
        let a = try Self.verifier.verify(chain: chain, challenge: Self.challenge, at: Date())
        try Self.policy.check(a)
    }

    @Test("tags out of order are malformed, even in a chain that verifies")
    func unorderedTags() {
        #expect(throws: AndroidAttestError(.malformed, "")) { try Self.attest(Self.device()) { $0.unorderedTags = true } }
    }

    @Test("every attestation version's number is read and reported", arguments: KeyDescription.documentedVersions)
    func versions(_ version: Int64) throws {
        let a = try Self.attest(Self.device()) {
            $0.attestationVersion = version; $0.keyMintVersion = version < 100 ? 4 : version
        }
        #expect(a.attestationVersion == version)
    }
}

@Suite("Simulated Android devices: assertions")
struct AndroidAssertionTests {
    static let clientDataHash = SHA256.hash(Array("challenge\nPOST\n/api/purchase\nabc\napi.example.com".utf8))
    let device = try! SimulatedAndroidDevice(ca: AndroidSimulatorTests.ca)

    func verify(_ bytes: [UInt8], hash: [UInt8] = clientDataHash, previous: UInt32?) throws -> AndroidAssertion {
        try AndroidAssertionVerifier().verify(
            assertion: bytes, publicKey: device.publicKey, clientDataHash: hash, previousCounter: previous)
    }

    @Test("the device's assertions verify, each counter above the last")
    func valid() throws {
        var previous: UInt32 = 0
        for _ in 0..<3 {
            let a = try verify(device.assert(clientDataHash: Self.clientDataHash), previous: previous)
            #expect(a.counter == previous + 1)
            previous = a.counter
        }
        #expect(AndroidAssertion.signedMessage(counter: 0x0102_0304, clientDataHash: [9]) == [1, 2, 3, 4, 9])
    }

    @Test("a replayed or lower counter is counter_replay")
    func replay() throws {
        let bytes = device.assert(clientDataHash: Self.clientDataHash)
        _ = try verify(bytes, previous: 0)
        #expect(throws: AndroidAttestError(.counterReplay, "")) { try verify(bytes, previous: 1) }
        let lower = device.makeAssertion(clientDataHash: Self.clientDataHash, counter: 0).encoded
        #expect(throws: AndroidAttestError(.counterReplay, "")) { try verify(lower, previous: 0) }
        _ = try verify(lower, previous: nil)
    }

    @Test("another key's signature, or other client data, is bad_signature")
    func badSignature() throws {
        let forged = device.makeAssertion(clientDataHash: Self.clientDataHash, counter: 5, signingKey: ECPrivateKey(curve: .p256)).encoded
        #expect(throws: AndroidAttestError(.badSignature, "")) { try verify(forged, previous: 0) }
        let bytes = device.assert(clientDataHash: Self.clientDataHash)
        #expect(throws: AndroidAttestError(.badSignature, "")) { try verify(bytes, hash: SHA256.hash([0]), previous: 0) }
        // The counter is signed: the same signature under another counter does not verify.
        let a = try AndroidAssertion.parse(bytes)
        #expect(throws: AndroidAttestError(.badSignature, "")) {
            try verify(AndroidAssertion(counter: a.counter + 1, signature: a.signature).encoded, previous: 0)
        }
    }

    @Test(
        "what is not {counter, signature} is malformed",
        arguments: [
            CBORValue.array([]),
            .map(CBORMap([(.text("counter"), .unsigned(1))])),
            .map(CBORMap([(.text("signature"), .bytes([1]))])),
            .map(CBORMap([(.text("counter"), .unsigned(1 << 32)), (.text("signature"), .bytes([1]))])),
            .map(CBORMap([(.text("counter"), .negative(0)), (.text("signature"), .bytes([1]))])),
            .map(CBORMap([(.text("counter"), .unsigned(1)), (.text("signature"), .bytes([]))])),
            .map(CBORMap([(.text("counter"), .unsigned(1)), (.text("signature"), .text("sig"))])),
            .map(CBORMap([(.text("counter"), .unsigned(1)), (.text("signature"), .bytes([1])), (.text("x"), .null)])),
            .map(CBORMap([(.unsigned(1), .unsigned(1)), (.text("signature"), .bytes([1]))])),
            .map(CBORMap([(.text("counter"), .unsigned(1)), (.text("signature"), .array([.array([.array([])])]))])),
        ])
    func malformed(_ value: CBORValue) {
        #expect(throws: AndroidAttestError(.malformed, "")) { try verify(CBOREncoder.encode(value), previous: 0) }
    }

    @Test("bytes that are not CBOR, oversized, truncated: malformed")
    func malformedBytes() {
        let good = device.assert(clientDataHash: Self.clientDataHash)
        for cut in 0..<good.count {
            #expect(throws: AndroidAttestError(.malformed, "")) { try verify(Array(good.prefix(cut)), previous: 0) }
        }
        #expect(throws: AndroidAttestError(.malformed, "")) { try verify(good + [0], previous: 0) }
        #expect(throws: AndroidAttestError(.malformed, "")) { try verify([UInt8](repeating: 0xa1, count: 600), previous: 0) }
        #expect(throws: AndroidAttestError(.malformed, "")) { try verify([0xbf, 0xff], previous: 0) }
    }
}
