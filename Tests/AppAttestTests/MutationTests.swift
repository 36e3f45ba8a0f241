import AppAttest
import AppAttestSimulator
import Foundation
import GatewayCrypto
import GatewayWire
import SimulatorPKI
import Testing

/// Each check of the verifiers, broken on its own by one simulator mutation: the verification must
/// fail with exactly that check's code. Where a mutation cannot help breaking a later check too, the
/// earlier check (Apple's order) must be the one reported, and the comment says so.
@Suite("Mutations: attestation checks fail with exactly their code")
struct AttestationMutationTests {
    typealias F = SimFixture

    /// A fresh device's attestation with `mutations`, verified at `instant` by a verifier trusting the
    /// test root (development, the fixture's app id) unless told otherwise.
    func verify(
        _ mutations: AttestationMutations = .none, extensions: SimulatedExtensions? = nil,
        device: SimulatedDevice = F.device(), verifier: AttestationVerifier = F.attestationVerifier(),
        keyID: [UInt8]? = nil, verifyClientDataHash: [UInt8]? = nil, at instant: Date = F.instant
    ) throws -> VerifiedAttestation {
        let hash = F.clientDataHash()
        let bytes = try device.attest(clientDataHash: hash, at: F.issuedAt, extensions: extensions, mutations: mutations)
        return try verifier.verify(
            attestation: bytes, keyID: keyID ?? device.keyID, clientDataHash: verifyClientDataHash ?? hash, at: instant)
    }

    func expectAttestation(
        _ code: AppAttestError.Code, _ comment: Comment, sourceLocation: SourceLocation = #_sourceLocation,
        _ mutations: AttestationMutations = .none, extensions: SimulatedExtensions? = nil, device: SimulatedDevice = F.device(),
        verifier: AttestationVerifier = F.attestationVerifier(), keyID: [UInt8]? = nil, verifyClientDataHash: [UInt8]? = nil,
        at instant: Date = F.instant
    ) throws {
        let hash = F.clientDataHash()
        let bytes = try device.attest(clientDataHash: hash, at: F.issuedAt, extensions: extensions, mutations: mutations)
        expectAppAttestFailure(code, comment, sourceLocation: sourceLocation) {
            try verifier.verify(
                attestation: bytes, keyID: keyID ?? device.keyID, clientDataHash: verifyClientDataHash ?? hash, at: instant)
        }
    }

    @Test("the unmutated control verifies (so every failure below is the mutation's doing)")
    func control() throws {
        let ok = try verify()
        #expect(ok.signCount == 0)
        _ = try verify(.none, extensions: SimulatedExtensions(validationCategory: .testFlight, bundleVersion: "1"))
    }

    // MARK: 1. certificate chain

    @Test("chain_untrusted: leaf issued by a look-alike CA with the same names")
    func untrustedIssuer() throws {
        try expectAttestation(.chainUntrusted, "rogue CA and its intermediate", .init(issuingCA: F.rogueCA))
        // The trusted intermediate sent along with a leaf the rogue intermediate signed.
        let device = F.device()
        let rogue = try device.makeAttestation(
            clientDataHash: F.clientDataHash(), at: F.issuedAt, mutations: .init(issuingCA: F.rogueCA))
        try expectAttestation(
            .chainUntrusted, "rogue leaf with the trusted intermediate",
            .init(issuingCA: F.rogueCA, x5c: [rogue.credentialCertificate.der, F.ca.intermediate.der]))
        // The rogue CA's own chain verifies only where its root is trusted.
        let trustsRogue = AttestationVerifier(
            policy: .init(appIDs: [F.appID], environments: [.development]), extraRoots: [F.rogueCA.root])
        _ = try verify(.init(issuingCA: F.rogueCA), verifier: trustsRogue)
        try expectAttestation(.chainUntrusted, "trusted CA's leaf, rogue root trusted", verifier: trustsRogue)
    }

    @Test("chain_untrusted: a leaf the intermediate did not sign, and a leaf presented as its own issuer")
    func brokenChains() throws {
        let device = F.device()
        // x5c = [leaf, leaf]: the leaf is no CA.
        let made = try device.makeAttestation(clientDataHash: F.clientDataHash(), at: F.issuedAt)
        try expectAttestation(
            .chainUntrusted, "leaf as intermediate",
            .init(x5c: [made.credentialCertificate.der, made.credentialCertificate.der]))
        // The root itself in place of the intermediate does not sign leaves.
        let other = try device.makeAttestation(
            clientDataHash: F.clientDataHash(), at: F.issuedAt, mutations: .init(issuingCA: F.rogueCA))
        try expectAttestation(
            .chainUntrusted, "rogue leaf, trusted root as intermediate",
            .init(x5c: [other.credentialCertificate.der, F.ca.root.der]))
    }

    @Test("certificate_expired / certificate_not_yet_valid just outside the leaf's validity; both bounds inclusive")
    func leafValidityBounds() throws {
        let device = F.device()
        let hash = F.clientDataHash()
        let made = try device.makeAttestation(clientDataHash: hash, at: F.issuedAt)
        let leaf = made.credentialCertificate
        let verifier = F.attestationVerifier()
        func at(_ t: Double) throws(AppAttestError) -> VerifiedAttestation {
            try verifier.verify(attestation: made.bytes, keyID: device.keyID, clientDataHash: hash, at: Date(timeIntervalSince1970: t))
        }
        let notBefore = Double(leaf.notBefore)
        let notAfter = Double(leaf.notAfter)
        #expect(notBefore == F.issuedAt.timeIntervalSince1970)
        _ = try at(notBefore)
        _ = try at(notAfter)
        _ = try at(notBefore + 0.5)
        _ = try at(notAfter - 0.5)
        expectAppAttestFailure(.certificateNotYetValid, "one second before notBefore") { try at(notBefore - 1) }
        expectAppAttestFailure(.certificateNotYetValid, "half a second before notBefore") { try at(notBefore - 0.5) }
        expectAppAttestFailure(.certificateExpired, "one second after notAfter") { try at(notAfter + 1) }
        expectAppAttestFailure(.certificateExpired, "half a second after notAfter") { try at(notAfter + 0.5) }
        expectAppAttestFailure(.certificateExpired, "a year later") { try at(notAfter + 365 * 86_400) }
    }

    @Test("certificate_expired / certificate_not_yet_valid from a leaf validity chosen by the mutation")
    func leafValidityMutation() throws {
        let expired = TestCA.Validity(notBefore: F.instant.addingTimeInterval(-7200), notAfter: F.instant.addingTimeInterval(-1))
        try expectAttestation(.certificateExpired, "leaf ended 1 s before", .init(leafValidity: expired))
        let future = TestCA.Validity(notBefore: F.instant.addingTimeInterval(1), notAfter: F.instant.addingTimeInterval(7200))
        try expectAttestation(.certificateNotYetValid, "leaf starts 1 s after", .init(leafValidity: future))
        let exact = TestCA.Validity(notBefore: F.instant, notAfter: F.instant)
        _ = try verify(.init(leafValidity: exact))
    }

    @Test("certificate_expired / certificate_not_yet_valid for the intermediate and the root too")
    func caValidity() throws {
        let shortIntermediate = try TestCA(
            intermediateValidity: .init(notBefore: TestCA.defaultValidity.notBefore, notAfter: F.instant.addingTimeInterval(-1)))
        let lateIntermediate = try TestCA(
            intermediateValidity: .init(notBefore: F.instant.addingTimeInterval(1), notAfter: TestCA.defaultValidity.notAfter))
        let shortRoot = try TestCA(
            rootValidity: .init(notBefore: TestCA.defaultValidity.notBefore, notAfter: F.instant.addingTimeInterval(-1)),
            intermediateValidity: TestCA.defaultValidity)
        for (ca, code) in [
            (shortIntermediate, AppAttestError.Code.certificateExpired), (lateIntermediate, .certificateNotYetValid),
            (shortRoot, .certificateExpired),
        ] {
            let device = SimulatedDevice(appID: F.appID, ca: ca)
            let verifier = AttestationVerifier(
                policy: .init(appIDs: [F.appID], environments: [.development]), extraRoots: [ca.root])
            try expectAttestation(code, "CA validity", device: device, verifier: verifier)
        }
    }

    // MARK: 4. nonce

    @Test("nonce_mismatch: another nonce in the certificate, no nonce extension, other clientDataHash, authData changed after issuing")
    func nonce() throws {
        try expectAttestation(.nonceMismatch, "random certificate nonce", .init(certificateNonce: SecureRandom.bytes(32)))
        try expectAttestation(.nonceMismatch, "short certificate nonce", .init(certificateNonce: SecureRandom.bytes(16)))
        try expectAttestation(.nonceMismatch, "empty certificate nonce", .init(certificateNonce: []))
        try expectAttestation(.nonceMismatch, "missing nonce extension", .init(omitNonceExtension: true))
        try expectAttestation(.nonceMismatch, "other clientDataHash", verifyClientDataHash: F.clientDataHash("other"))
        try expectAttestation(.nonceMismatch, "empty clientDataHash", verifyClientDataHash: [])
        // The last byte of the bundle version: covered by nothing but the nonce.
        let ext = SimulatedExtensions(bundleVersion: "1.0.0")
        let device = F.device()
        let len = try device.makeAttestation(clientDataHash: [], at: F.issuedAt, extensions: ext).authenticatorData.count
        try expectAttestation(
            .nonceMismatch, "authData tampered after issuing", .init(tamperedAuthenticatorDataByte: len - 1), extensions: ext,
            device: device)
    }

    @Test("malformed: a nonce extension that is not SEQUENCE { [1] EXPLICIT OCTET STRING }, or twice")
    func malformedNonceExtension() throws {
        let nonce = [UInt8](repeating: 0xaa, count: 32)
        let D = CertificateBuilder.DER.self
        let bad: [(String, [UInt8])] = [
            ("bare octet string", D.octetString(nonce)),
            ("[0] instead of [1]", D.sequence([D.explicit(0, D.octetString(nonce))])),
            ("[1] holds an integer", D.sequence([D.explicit(1, D.integer(5))])),
            ("trailing bytes", D.sequence([D.explicit(1, D.octetString(nonce))]) + [0x00]),
            ("not DER", [0xff, 0x00]),
        ]
        for (what, value) in bad {
            try expectAttestation(.malformed, "\(what)", .init(nonceExtensionValue: value))
        }
        let duplicate = CertificateBuilder.Extension(
            oid: TestCA.nonceExtensionOID, critical: false, value: TestCA.nonceExtensionValue(nonce))
        try expectAttestation(.malformed, "nonce extension twice", .init(extraLeafExtensions: [duplicate]))
    }

    // MARK: 5. key id and credential public key

    @Test("key_id_mismatch: the credential id and the reported key id are not SHA256 of the leaf key")
    func keyID() throws {
        // Only the key id check breaks: credentialId = reported key id, COSE key = leaf key.
        let other = SHA256.hash(SecureRandom.bytes(32))
        try expectAttestation(.keyIDMismatch, "consistent foreign key id", .init(credentialID: other), keyID: other)
        // The client reports another key id (the credential id check would fail too; key id comes first).
        try expectAttestation(.keyIDMismatch, "wrong reported key id", keyID: other)
        // SHA256 of the DER SubjectPublicKeyInfo is not the key id.
        let device = F.device()
        let spkiPrefix: [UInt8] = [
            0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a,
            0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
        ]
        try expectAttestation(
            .keyIDMismatch, "SHA256 of the SubjectPublicKeyInfo", device: device,
            keyID: SHA256.hash(spkiPrefix + device.publicKey.x962))
    }

    @Test("key_id_mismatch: the leaf certifies another key than the device's")
    func leafOtherKey() throws {
        let stranger = try #require(ECPrivateKey(curve: .p256).p256PublicKey)
        // The COSE key is the device's, the leaf's is not: the key id check (first) fails.
        try expectAttestation(.keyIDMismatch, "leaf for another key", .init(leafPublicKey: stranger))
    }

    @Test("public_key_mismatch: the COSE key in authData is not the leaf's key")
    func publicKey() throws {
        let stranger = ECPrivateKey(curve: .p256).publicKeyX962
        try expectAttestation(.publicKeyMismatch, "COSE key of another device", .init(credentialPublicKey: stranger))
        // The device's own point with one bit of y flipped.
        let device = F.device()
        var flipped = device.publicKey.x962
        flipped[64] ^= 0x01
        try expectAttestation(.publicKeyMismatch, "one bit of y flipped", .init(credentialPublicKey: flipped), device: device)
    }

    @Test("malformed: a COSE key that is not EC2 P-256")
    func malformedCOSE() throws {
        try expectAttestation(.malformed, "31-byte y", .init(credentialPublicKey: [0x04] + [UInt8](repeating: 1, count: 63)))
    }

    // MARK: 6. app id

    @Test("app_id_mismatch: rpIdHash of another app, or a verifier for another app")
    func appID() throws {
        try expectAttestation(.appIDMismatch, "rpIdHash of another app", .init(rpIDHash: F.otherAppID.rpIDHash))
        try expectAttestation(.appIDMismatch, "rpIdHash of nothing", .init(rpIDHash: [UInt8](repeating: 0, count: 32)))
        try expectAttestation(
            .appIDMismatch, "SHA256 of the bundle id alone",
            .init(rpIDHash: SHA256.hash(F.appID.bundleID)))
        try expectAttestation(.appIDMismatch, "verifier for another app", verifier: F.attestationVerifier(appIDs: [F.otherAppID]))
        try expectAttestation(.appIDMismatch, "device of another app", device: F.device(appID: F.otherAppID))
    }

    // MARK: 7. counter

    @Test("counter_not_zero: an attestation with a counter", arguments: [UInt32(1), 2, 0x100, UInt32.max])
    func counter(_ value: UInt32) throws {
        try expectAttestation(.counterNotZero, "counter \(value)", .init(counter: value))
    }

    // MARK: 8. aaguid

    @Test("environment_mismatch: aaguid of the other environment, or of none")
    func environment() throws {
        try expectAttestation(
            .environmentMismatch, "development key, production policy",
            verifier: F.attestationVerifier(environments: [.production]))
        try expectAttestation(.environmentMismatch, "production key, development policy", device: F.device(.production))
        try expectAttestation(
            .environmentMismatch, "production aaguid on a development device",
            .init(aaguid: AttestEnvironment.productionAAGUID))
        for aaguid in [
            Array("appattestdevelox".utf8), [UInt8](repeating: 0, count: 16), Array("appattest".utf8) + [1, 0, 0, 0, 0, 0, 0],
        ] {
            try expectAttestation(
                .environmentMismatch, "aaguid \(Hex.encode(aaguid))", .init(aaguid: aaguid),
                verifier: F.attestationVerifier(environments: [.development, .production]))
        }
    }

    // MARK: 9. credential id

    @Test("credential_id_mismatch: the credential id is not the key id")
    func credentialID() throws {
        try expectAttestation(.credentialIDMismatch, "random 32 bytes", .init(credentialID: SecureRandom.bytes(32)))
        let device = F.device()
        try expectAttestation(
            .credentialIDMismatch, "key id with one bit flipped",
            .init(credentialID: device.keyID.enumerated().map { $0.offset == 31 ? $0.element ^ 1 : $0.element }), device: device)
        try expectAttestation(.credentialIDMismatch, "16-byte prefix", .init(credentialID: Array(device.keyID.prefix(16))), device: device)
        try expectAttestation(.credentialIDMismatch, "empty", .init(credentialID: []))
    }

    // MARK: format and structure

    @Test(
        "unsupported_format: any fmt but apple-appattest",
        arguments: ["packed", "none", "tpm", "apple", "apple-appattest ", "Apple-AppAttest", ""])
    func format(_ fmt: String) throws {
        try expectAttestation(.unsupportedFormat, "fmt \"\(fmt)\"", .init(format: fmt))
    }

    @Test("malformed: trailing bytes after the credential data that are not an extensions map")
    func trailing() throws {
        for junk: [UInt8] in [[0x00], [0xff], [0x01, 0x02, 0x03], [0x60], [0x80], [0xf6], [0xa1, 0x61]] {
            try expectAttestation(.malformed, "trailing \(Hex.encode(junk))", .init(trailingAuthenticatorData: junk))
        }
        try expectAttestation(.malformed, "trailing random bytes", .init(trailingAuthenticatorData: [0x42] + SecureRandom.bytes(40)))
    }

    @Test("malformed: x5c without an intermediate, AT flag cleared, receipt of the wrong type")
    func structure() throws {
        let device = F.device()
        let made = try device.makeAttestation(clientDataHash: F.clientDataHash(), at: F.issuedAt)
        try expectAttestation(.malformed, "leaf only", .init(x5c: [made.credentialCertificate.der]))
        try expectAttestation(.malformed, "garbage certificate", .init(x5c: [made.credentialCertificate.der, [0x30, 0x00]]))
        try expectAttestation(.malformed, "no AT flag", .init(flags: 0x00))
    }
}

@Suite("Mutations: assertion checks fail with exactly their code")
struct AssertionMutationTests {
    typealias F = SimFixture

    /// A device attested through the verifier, and an assertion verifier for its app.
    func attestedDevice() throws -> (SimulatedDevice, VerifiedAttestation, AssertionVerifier) {
        let device = F.device()
        let verified = try F.attested(device)
        return (device, verified, AssertionVerifier(appIDs: [verified.appID]))
    }

    @Test("the unmutated control verifies")
    func control() throws {
        let (device, verified, verifier) = try attestedDevice()
        let hash = F.clientDataHash()
        let ok = try verifier.verify(
            assertion: device.assert(clientDataHash: hash), publicKey: verified.publicKey, clientDataHash: hash, previousCounter: 0)
        #expect(ok.signCount == 1)
    }

    @Test("bad_signature: tampered client data")
    func tamperedClientData() throws {
        let (device, verified, verifier) = try attestedDevice()
        let clientData = Array("{\"challenge\":\"abc\",\"amount\":100}".utf8)
        let assertion = device.assert(clientDataHash: SHA256.hash(clientData))
        var tampered = clientData
        tampered[tampered.count - 2] = UInt8(ascii: "9")
        expectAppAttestFailure(.badSignature, "client data changed") {
            try verifier.verify(
                assertion: assertion, publicKey: verified.publicKey, clientDataHash: SHA256.hash(tampered), previousCounter: 0)
        }
        expectAppAttestFailure(.badSignature, "raw client data instead of its hash") {
            try verifier.verify(assertion: assertion, publicKey: verified.publicKey, clientDataHash: clientData, previousCounter: 0)
        }
        let signedOther = device.assert(
            clientDataHash: SHA256.hash(clientData), mutations: .init(signedClientDataHash: SHA256.hash(tampered)))
        expectAppAttestFailure(.badSignature, "device signed other client data") {
            try verifier.verify(
                assertion: signedOther, publicKey: verified.publicKey, clientDataHash: SHA256.hash(clientData), previousCounter: 0)
        }
        // The untampered one still verifies.
        _ = try verifier.verify(
            assertion: assertion, publicKey: verified.publicKey, clientDataHash: SHA256.hash(clientData), previousCounter: 0)
    }

    @Test("bad_signature: authenticatorData changed after signing", arguments: [32, 33, 36])
    func tamperedAuthData(byte: Int) throws {
        // 32: flags (0x40 → 0x41), 33 and 36: the counter. None of these breaks another check.
        let (device, verified, verifier) = try attestedDevice()
        let hash = F.clientDataHash()
        let assertion = device.makeAssertion(
            clientDataHash: hash, mutations: .init(counter: 0x0100_0005, tamperedAuthenticatorDataByte: byte))
        expectAppAttestFailure(.badSignature, "byte \(byte)") {
            try verifier.verify(assertion: assertion.bytes, publicKey: verified.publicKey, clientDataHash: hash, previousCounter: 0)
        }
    }

    @Test("bad_signature: tampered extensions, another key, another device, a corrupted signature")
    func otherSignatures() throws {
        let (device, verified, verifier) = try attestedDevice()
        let hash = F.clientDataHash()
        let ext = SimulatedExtensions(validationCategory: .appStore, bundleVersion: "27.0")
        let made = device.makeAssertion(clientDataHash: hash, extensions: ext)
        let tampered = device.assert(
            clientDataHash: hash, extensions: ext, mutations: .init(tamperedAuthenticatorDataByte: made.authenticatorData.count - 1))
        expectAppAttestFailure(.badSignature, "bundle version changed") {
            try verifier.verify(assertion: tampered, publicKey: verified.publicKey, clientDataHash: hash, previousCounter: 0)
        }
        let foreign = device.assert(clientDataHash: hash, mutations: .init(signingKey: ECPrivateKey(curve: .p256)))
        expectAppAttestFailure(.badSignature, "signed by another key") {
            try verifier.verify(assertion: foreign, publicKey: verified.publicKey, clientDataHash: hash, previousCounter: 0)
        }
        let other = F.device()
        expectAppAttestFailure(.badSignature, "another device's key") {
            try verifier.verify(
                assertion: other.assert(clientDataHash: hash), publicKey: verified.publicKey, clientDataHash: hash, previousCounter: 0)
        }
        var corrupted = device.makeAssertion(clientDataHash: hash).signature
        corrupted[corrupted.count - 1] ^= 0x01
        expectAppAttestFailure(.badSignature, "last signature byte flipped") {
            try verifier.verify(
                assertion: device.assert(clientDataHash: hash, mutations: .init(signature: corrupted)), publicKey: verified.publicKey,
                clientDataHash: hash, previousCounter: 0)
        }
        // The digest signed directly (no second SHA-256) is not what App Attest signs.
        let made2 = device.makeAssertion(clientDataHash: hash)
        let nonce = SHA256.hash(made2.authenticatorData, hash)
        expectAppAttestFailure(.badSignature, "signature over SHA256(nonce) treated as message") {
            try verifier.verify(
                assertion: device.assert(
                    clientDataHash: hash,
                    mutations: .init(counter: made2.counter, signature: device.privateKey.signature(for: SHA256.hash(nonce)))),
                publicKey: verified.publicKey, clientDataHash: hash, previousCounter: 0)
        }
    }

    @Test("app_id_mismatch: rpIdHash of another app (signed), or a verifier for another app")
    func appID() throws {
        let (device, verified, verifier) = try attestedDevice()
        let hash = F.clientDataHash()
        let assertion = device.assert(clientDataHash: hash, mutations: .init(rpIDHash: F.otherAppID.rpIDHash))
        expectAppAttestFailure(.appIDMismatch, "rpIdHash of another app") {
            try verifier.verify(assertion: assertion, publicKey: verified.publicKey, clientDataHash: hash, previousCounter: 0)
        }
        let good = device.assert(clientDataHash: hash)
        expectAppAttestFailure(.appIDMismatch, "verifier for another app") {
            try AssertionVerifier(appIDs: [F.otherAppID]).verify(
                assertion: good, publicKey: verified.publicKey, clientDataHash: hash, previousCounter: 0)
        }
    }

    @Test("counter_replay: equal and lower counters, and the same assertion twice")
    func counterReplay() throws {
        let (device, verified, verifier) = try attestedDevice()
        let hash = F.clientDataHash()
        var stored: UInt32 = 0
        for _ in 0..<3 {
            stored = try verifier.verify(
                assertion: device.assert(clientDataHash: hash), publicKey: verified.publicKey, clientDataHash: hash,
                previousCounter: stored
            ).signCount
        }
        #expect(stored == 3)
        let equal = device.assert(clientDataHash: hash, mutations: .init(counter: stored))
        expectAppAttestFailure(.counterReplay, "equal counter") {
            try verifier.verify(assertion: equal, publicKey: verified.publicKey, clientDataHash: hash, previousCounter: stored)
        }
        for lower: UInt32 in [0, 1, stored - 1] {
            let assertion = device.assert(clientDataHash: hash, mutations: .init(counter: lower))
            expectAppAttestFailure(.counterReplay, "lower counter \(lower)") {
                try verifier.verify(assertion: assertion, publicKey: verified.publicKey, clientDataHash: hash, previousCounter: stored)
            }
        }
        #expect(device.counter == 3, "mutated counters leave the device's counter alone")
        let next = device.assert(clientDataHash: hash)
        let ok = try verifier.verify(assertion: next, publicKey: verified.publicKey, clientDataHash: hash, previousCounter: stored)
        #expect(ok.signCount == 4)
        expectAppAttestFailure(.counterReplay, "the same assertion again") {
            try verifier.verify(assertion: next, publicKey: verified.publicKey, clientDataHash: hash, previousCounter: ok.signCount)
        }
        let high = device.assert(clientDataHash: hash, mutations: .init(counter: UInt32.max))
        expectAppAttestFailure(.counterReplay, "nothing follows UInt32.max") {
            try verifier.verify(assertion: high, publicKey: verified.publicKey, clientDataHash: hash, previousCounter: UInt32.max)
        }
    }

    @Test("malformed: assertion authenticatorData shorter than 37 bytes")
    func short() throws {
        let (device, verified, verifier) = try attestedDevice()
        let hash = F.clientDataHash()
        let made = device.makeAssertion(clientDataHash: hash)
        let object = CBORMap([
            (.text("signature"), .bytes(made.signature)), (.text("authenticatorData"), .bytes(Array(made.authenticatorData.prefix(36)))),
        ])
        expectAppAttestFailure(.malformed) {
            try verifier.verify(
                assertion: CBOREncoder.encode(.map(object)), publicKey: verified.publicKey, clientDataHash: hash, previousCounter: 0)
        }
    }
}
