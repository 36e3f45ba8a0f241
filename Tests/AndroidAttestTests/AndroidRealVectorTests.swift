import AndroidAttest
import Foundation
import GatewayCrypto
import GatewayWire
import Testing

@Suite("Real Android key attestation chains")
struct AndroidRealVectorTests {
    static let verifier = AndroidAttestationVerifier()

    static func verify(_ v: AndroidVector, statusList: AttestationStatusList? = AndroidVector.statusList) -> Result<
        AndroidAttestation, AndroidAttestError
    > {
        Result { () throws(AndroidAttestError) in
            try verifier.verify(chain: v.chain, challenge: v.challenge, at: v.instant, statusList: statusList)
        }
    }

    @Test("the vectors are all here: 101 cases, 79 valid, 21 invalid, 1 skip")
    func inventory() {
        let byExpect = Dictionary(grouping: AndroidVector.all, by: \.expect).mapValues(\.count)
        #expect(byExpect == ["valid": 79, "invalid": 21, "skip": 1], "\(byExpect)")
        let versions = Set(AndroidVector.valid.compactMap { $0.int("attestation_version") })
        #expect(versions.isSuperset(of: [1, 2, 3, 100, 200, 300, 400, 500]), "\(versions.sorted())")
    }

    @Test("every case gets its verdict at its verification time", arguments: AndroidVector.all)
    func verdict(_ v: AndroidVector) throws {
        let result = Self.verify(v)
        switch (v.expect, result) {
        case ("valid", .success(let a)):
            Self.checkFields(v, a)
        case ("valid", .failure(let e)):
            Issue.record("\(v.testDescription) must verify but failed: \(e)")
        case ("invalid", .failure(let e)):
            #expect(e.code == v.expectedCode, "\(v.testDescription): \(e)")
            #expect(!e.detail.isEmpty)
        case ("invalid", .success):
            Issue.record("\(v.testDescription) verified but must fail with \(v.reason ?? "?")")
        default:
            // skip: recorded only; a verdict either way, never a trap.
            if case .failure(let e) = result { #expect(!e.detail.isEmpty) }
        }
    }

    /// The fields the vector records, as the verdict parsed them.
    static func checkFields(_ v: AndroidVector, _ a: AndroidAttestation) {
        let name = v.testDescription
        #expect(Int(a.attestationVersion) == v.int("attestation_version"), "\(name)")
        #expect(a.attestationSecurityLevel.name == v.string("attestation_security_level"), "\(name)")
        #expect(a.keyMintSecurityLevel.name == v.string("keymint_security_level"), "\(name)")
        #expect(a.key.algorithmName == v.string("key_algorithm"), "\(name): \(a.key)")
        #expect(a.challenge == v.challenge)
        #expect(a.packageNames == v.strings("package_names"), "\(name): \(a.packageNames)")
        #expect(a.signingCertificateDigests.map { Hex.encode($0) } == v.strings("signing_cert_sha256_hex"), "\(name)")
        #expect(a.rootOfTrust?.verifiedBootState.name == v.rootOfTrust.state, "\(name)")
        #expect(a.rootOfTrust?.deviceLocked == v.rootOfTrust.locked, "\(name)")
        #expect(a.osVersion.map(Int.init) == v.int("os_version"), "\(name)")
        #expect(a.osPatchLevel.map(Int.init) == v.int("os_patch_level"), "\(name)")
        #expect(a.keyID == SHA256.hash(a.subjectPublicKeyInfo.der))
        // The SubjectPublicKeyInfo hashed is the certificate's own bytes (also for ML-DSA keys).
        #expect(v.chain[0].firstRange(of: a.subjectPublicKeyInfo.der) != nil, "\(name)")
        #expect((a.attestKeyCertificateCount > 0) == v.quirks.contains("attest_key_chain"), "\(name)")
        if v.string("key_algorithm") == "EC" {
            #expect(a.publicKey != nil && a.subjectPublicKeyInfo.algorithm == "EC P-256", "\(name): \(a.subjectPublicKeyInfo.algorithm)")
        } else {
            #expect(a.publicKey == nil)
        }
    }

    @Test("the ML-DSA leaves: valid, their key reported, never usable for requests")
    func mlDSA() throws {
        let cases = AndroidVector.valid.filter { $0.quirks.contains("mldsa_key") }
        #expect(cases.count == 2)
        for v in cases {
            let a = try Self.verify(v).get()
            #expect(a.subjectPublicKeyInfo.algorithm == "ML-DSA-65")
            #expect(a.publicKey == nil)
            #expect(throws: AndroidAttestError(.unsupportedKey, "")) {
                try AndroidAttestationPolicy.init(requireLockedBootloader: false, requireVerifiedBoot: false).check(a)
            }
        }
    }

    @Test("Google's roots are pinned by key: the published PEM's five certificates, two keys")
    func googleRootsArePinned() throws {
        let roots = AndroidVector.googleRoots
        #expect(roots.count == 5)
        let pins = Set(roots.map { Hex.encode(SHA256.hash($0.subjectPublicKeyInfoDER)) })
        #expect(pins == Set(AndroidTrustAnchor.google.map { Hex.encode($0.spkiSHA256) }))
        #expect(
            Set(roots.map { AndroidStatusListTests.hexSerial($0) }) == [
                "e8fa196314d2fa18", "d50ff25ba3f2d6b3", "c36b7c44b9ae1831", "f1c172a699eaf51d", "84a9d0297b0eb58ae7ff0e80de760605",
            ])
    }

    @Test("a chain still ends at the 2016 root after that certificate expired (the key is pinned)")
    func expiredRootCertificate() throws {
        let v = try #require(AndroidVector.valid.first { $0.string("root") == "e8fa196314d2fa18" && $0.name.hasPrefix("keyattestation:") })
        #expect(v.chain.count >= 3)
        // Every CA below the root is still valid in 2027; the root certificate expired in 2026.
        let later = ISO8601DateFormatter().date(from: "2026-06-01T00:00:00Z")!
        let r = Result { () throws(AndroidAttestError) in try Self.verifier.verify(chain: v.chain, challenge: v.challenge, at: later) }
        switch r {
        case .success: break
        case .failure(let e): #expect(e.code == .certificateExpired && !e.detail.contains("f92009e853b6b045"), "\(e)")
        }
    }

    @Test("without Google's roots, every valid chain is chain_untrusted", arguments: AndroidVector.valid.prefix(5))
    func noRoots(_ v: AndroidVector) {
        let r = Result { () throws(AndroidAttestError) in
            try AndroidAttestationVerifier(anchors: []).verify(chain: v.chain, challenge: v.challenge, at: v.instant)
        }
        #expect(throws: AndroidAttestError(.chainUntrusted, "")) { try r.get() }
    }

    @Test("a valid chain with another challenge is challenge_mismatch", arguments: AndroidVector.valid.prefix(5))
    func wrongChallenge(_ v: AndroidVector) {
        #expect(throws: AndroidAttestError(.challengeMismatch, "")) {
            try Self.verifier.verify(chain: v.chain, challenge: v.challenge + [0], at: v.instant)
        }
    }

    @Test("outside the CAs' validity: expired after, not yet valid before")
    func validityBounds() throws {
        let v = try #require(AndroidVector.valid.first { $0.name == "keyattestation:TEE_EC_RKP.pem" })
        #expect(throws: AndroidAttestError(.certificateExpired, "")) {
            try Self.verifier.verify(chain: v.chain, challenge: v.challenge, at: v.instant.addingTimeInterval(400 * 86_400))
        }
        #expect(throws: AndroidAttestError(.certificateNotYetValid, "")) {
            try Self.verifier.verify(chain: v.chain, challenge: v.challenge, at: v.instant.addingTimeInterval(-40 * 86_400))
        }
    }
}
