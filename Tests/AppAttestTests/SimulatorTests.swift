import AppAttest
import AppAttestSimulator
import Foundation
import GatewayCrypto
import GatewayWire
import SimulatorPKI
import Testing

/// Shared set-up of the simulator and mutation tests: one trusted test CA, one look-alike CA that is
/// never trusted, fixed instants (nothing here reads the clock).
enum SimFixture {
    static let appID = try! AppID("ABCDE12345.com.example.attestgateway")
    static let otherAppID = try! AppID("ZYXWV98765.com.example.other")
    /// The CA the verifiers trust through `extraRoots`.
    static let ca = try! TestCA()
    /// Same names as `ca`, other keys; never trusted.
    static let rogueCA = try! TestCA()
    /// 2025-06-01T00:00:00Z: the credential certificates' notBefore.
    static let issuedAt = Date(timeIntervalSince1970: 1_748_736_000)
    /// One hour after issuing: inside every certificate's validity.
    static let instant = issuedAt.addingTimeInterval(3600)

    static func device(_ environment: AttestEnvironment = .development, appID: AppID = appID) -> SimulatedDevice {
        SimulatedDevice(appID: appID, environment: environment, ca: ca)
    }

    static func clientDataHash(_ text: String = UUID().uuidString) -> [UInt8] { SHA256.hash(text) }

    static func attestationVerifier(
        appIDs: [AppID] = [appID], environments: Set<AttestEnvironment> = [.development], trustTestRoot: Bool = true
    ) -> AttestationVerifier {
        AttestationVerifier(
            policy: .init(appIDs: appIDs, environments: environments), extraRoots: trustTestRoot ? [ca.root] : [])
    }

    /// Attests a fresh device and verifies the attestation, as a gateway would before assertions.
    static func attested(
        _ device: SimulatedDevice, extensions: SimulatedExtensions? = nil, environments: Set<AttestEnvironment> = [.development]
    ) throws -> VerifiedAttestation {
        let hash = clientDataHash()
        let bytes = try device.attest(clientDataHash: hash, at: issuedAt, extensions: extensions)
        return try attestationVerifier(appIDs: [device.appID], environments: environments).verify(
            attestation: bytes, keyID: device.keyID, clientDataHash: hash, at: instant)
    }
}

/// Runs `body` and expects it to fail with an `AppAttestError` of exactly `code`.
func expectAppAttestFailure<T>(
    _ code: AppAttestError.Code, _ comment: Comment? = nil, sourceLocation: SourceLocation = #_sourceLocation,
    _ body: () throws -> T
) {
    let note = comment.map { "\($0): " } ?? ""
    do {
        _ = try body()
        Issue.record("\(note)verified, but must fail with \(code.rawValue)", sourceLocation: sourceLocation)
    } catch let error as AppAttestError {
        #expect(error.code == code, "\(note)got \(error)", sourceLocation: sourceLocation)
    } catch {
        Issue.record("\(note)failed with \(error), not an AppAttestError \(code.rawValue)", sourceLocation: sourceLocation)
    }
}

@Suite("Simulator: test CA, software device and their round trip through the verifiers")
struct SimulatorTests {
    typealias F = SimFixture

    @Test("a simulated attestation verifies with the test root, then assertions verify with increasing counters")
    func roundTrip() throws {
        let device = F.device()
        let hash = F.clientDataHash("challenge-1")
        let made = try device.makeAttestation(clientDataHash: hash, at: F.issuedAt)
        let verified = try F.attestationVerifier().verify(
            attestation: made.bytes, keyID: device.keyID, clientDataHash: hash, at: F.instant)
        #expect(verified.keyID == device.keyID)
        #expect(verified.keyID == SHA256.hash(device.publicKey.x962))
        #expect(verified.publicKey.x962 == device.publicKey.x962)
        #expect(verified.appID == F.appID)
        #expect(verified.environment == .development)
        #expect(verified.signCount == 0)
        #expect(verified.receipt == made.receipt)
        #expect(try AppAttestReceipt.parseStored(verified.receipt).attestedCertificate == made.credentialCertificate.der)
        #expect(verified.validationCategory == nil)
        #expect(verified.bundleVersion == nil)
        #expect(verified.leafNotAfter == Int64(F.issuedAt.timeIntervalSince1970) + Int64(TestCA.defaultLeafLifetime))
        #expect(verified.leafSerialHex == made.credentialCertificate.serialHex)

        let assertions = AssertionVerifier(appIDs: [verified.appID])
        var stored = verified.signCount
        for i in 1...5 {
            let clientData = Array("{\"challenge\":\"c\(i)\",\"path\":\"/v1/orders\"}".utf8)
            let assertion = device.assert(clientDataHash: SHA256.hash(clientData))
            let ok = try assertions.verify(
                assertion: assertion, publicKey: verified.publicKey, clientDataHash: SHA256.hash(clientData),
                previousCounter: stored)
            #expect(ok.signCount == UInt32(i))
            #expect(ok.signCount > stored)
            #expect(ok.appID == F.appID)
            #expect(ok.validationCategory == nil)
            stored = ok.signCount
        }
        #expect(device.counter == 5)
    }

    @Test("the same bytes are refused with chain_untrusted when only Apple's root is trusted")
    func appleRootAlone() throws {
        let device = F.device()
        let hash = F.clientDataHash()
        let bytes = try device.attest(clientDataHash: hash, at: F.issuedAt)
        _ = try F.attestationVerifier().verify(attestation: bytes, keyID: device.keyID, clientDataHash: hash, at: F.instant)
        let appleOnly = AttestationVerifier(policy: .init(appIDs: [F.appID], environments: [.development]))
        #expect(appleOnly.chainVerifier.roots.count == 1)
        expectAppAttestFailure(.chainUntrusted) {
            try appleOnly.verify(attestation: bytes, keyID: device.keyID, clientDataHash: hash, at: F.instant)
        }
        expectAppAttestFailure(.chainUntrusted, "explicit verifier without extra roots") {
            try F.attestationVerifier(trustTestRoot: false).verify(
                attestation: bytes, keyID: device.keyID, clientDataHash: hash, at: F.instant)
        }
    }

    @Test("production devices carry the production aaguid and verify under a production policy")
    func production() throws {
        let device = F.device(.production)
        let verified = try F.attested(device, environments: [.production])
        #expect(verified.environment == .production)
        let both = try F.attested(F.device(.production), environments: [.development, .production])
        #expect(both.environment == .production)
    }

    @Test("an app and its App Clip: the policy accepts either app id and reports the one that matched")
    func severalAppIDs() throws {
        let clip = try AppID("ABCDE12345.com.example.attestgateway.Clip")
        let device = F.device(appID: clip)
        let hash = F.clientDataHash()
        let bytes = try device.attest(clientDataHash: hash, at: F.issuedAt)
        let verified = try F.attestationVerifier(appIDs: [F.appID, clip]).verify(
            attestation: bytes, keyID: device.keyID, clientDataHash: hash, at: F.instant)
        #expect(verified.appID == clip)
        let ok = try AssertionVerifier(appIDs: [F.appID, clip]).verify(
            assertion: device.assert(clientDataHash: hash), publicKey: verified.publicKey, clientDataHash: hash,
            previousCounter: 0)
        #expect(ok.appID == clip)
    }

    @Test("the test CA is shaped like Apple's and cannot be mistaken for it")
    func caShape() throws {
        let ca = F.ca
        #expect(ca.root.subject.contains("CN=Attest Gateway TEST Root CA"))
        #expect(ca.intermediate.subject.contains("CN=Attest Gateway TEST CA 1"))
        #expect(!ca.root.subject.contains("Apple"))
        #expect(ca.rootKey.curve == .p384)
        #expect(ca.intermediateKey.curve == .p384)
        #expect(ca.rootKey.publicKeyX962.count == 97)
        #expect(ca.root.notBefore == 1_577_836_800)
        #expect(ca.root.notAfter == 2_840_140_800)
        #expect(ca.root.p256PublicKey() == nil)
        #expect(ca.root.der != AttestationVerifier.appleRoot[0].der)

        // The root PEM is what `gatewayd --root FILE` reads.
        let parsed = try X509Certificate.parsePEM(ca.rootPEM)
        #expect(parsed.count == 1)
        #expect(parsed[0].der == ca.root.der)
        #expect(ca.rootPEM.hasPrefix("-----BEGIN CERTIFICATE-----\n"))
        #expect(ca.rootPEM.hasSuffix("-----END CERTIFICATE-----\n"))
        #expect(ca.rootPEM.split(separator: "\n").allSatisfy { $0.count <= 64 })

        // basicConstraints and keyUsage: critical, as in Apple's certificates.
        guard case .present(let bc, let bcCritical) = ca.intermediate.extension(oid: "2.5.29.19") else {
            Issue.record("intermediate lacks basicConstraints")
            return
        }
        #expect(bc == [0x30, 0x06, 0x01, 0x01, 0xff, 0x02, 0x01, 0x00])
        #expect(bcCritical)
        guard case .present(let ku, true) = ca.root.extension(oid: "2.5.29.15") else {
            Issue.record("root lacks a critical keyUsage")
            return
        }
        #expect(ku == [0x03, 0x02, 0x01, 0x06])

        // Chain: leaf → intermediate → root, verified by the same code the gateway uses.
        let device = F.device()
        let made = try device.makeAttestation(clientDataHash: F.clientDataHash(), at: F.issuedAt)
        let leaf = made.credentialCertificate
        let chain = try X509ChainVerifier(roots: [ca.root]).verify(
            leaf: leaf, intermediates: [ca.intermediate], at: F.instant.timeIntervalSince1970)
        #expect(chain.map(\.der) == [leaf.der, ca.intermediate.der, ca.root.der])
        #expect(leaf.p256PublicKey()?.x962 == device.publicKey.x962)
        #expect(leaf.subject.contains("CN=\(Hex.encode(device.keyID))"))
        #expect(leaf.notBefore == Int64(F.issuedAt.timeIntervalSince1970))
        #expect(leaf.notAfter - leaf.notBefore == Int64(TestCA.defaultLeafLifetime))
        guard case .present(let nonceValue, let critical) = leaf.extension(oid: TestCA.nonceExtensionOID) else {
            Issue.record("leaf lacks the nonce extension")
            return
        }
        #expect(!critical)
        #expect(nonceValue == [0x30, 0x24, 0xa1, 0x22, 0x04, 0x20] + made.nonce)
        #expect(nonceValue == TestCA.nonceExtensionValue(made.nonce))
        #expect(made.nonce == SHA256.hash(made.authenticatorData, made.clientDataHash))
    }

    @Test("configurable validity: CA and leaf lifetimes")
    func validity() throws {
        let start = Date(timeIntervalSince1970: 1_700_000_000)
        let ca = try TestCA(
            name: "Attest Gateway TEST Short", rootValidity: .init(from: start, lifetime: 86_400 * 365),
            intermediateValidity: .init(from: start, lifetime: 86_400 * 30), leafLifetime: 86_400 * 200)
        #expect(ca.root.notBefore == 1_700_000_000)
        #expect(ca.root.notAfter == 1_700_000_000 + 86_400 * 365)
        #expect(ca.intermediate.notAfter == 1_700_000_000 + 86_400 * 30)
        #expect(ca.root.subject.contains("CN=Attest Gateway TEST Short Root CA"))
        let v = ca.leafValidity(issuedAt: Date(timeIntervalSince1970: 1_700_000_100.75))
        #expect(v.notBefore.timeIntervalSince1970 == 1_700_000_100)
        #expect(v.notAfter.timeIntervalSince1970 == 1_700_000_100 + 86_400 * 200)
    }

    @Test("authenticator data layout of a simulated attestation and assertion")
    func layout() throws {
        let device = F.device()
        let made = try device.makeAttestation(clientDataHash: F.clientDataHash(), at: F.issuedAt)
        let a = made.authenticatorData
        #expect(Array(a[0..<32]) == F.appID.rpIDHash)
        #expect(a[32] == 0x40)
        #expect(Array(a[33..<37]) == [0, 0, 0, 0])
        #expect(Array(a[37..<53]) == Array("appattestdevelop".utf8))
        #expect(Array(a[53..<55]) == [0x00, 0x20])
        #expect(Array(a[55..<87]) == device.keyID)
        #expect(a.count == 87 + 77)  // COSE EC2 key: 5 entries, two 32-byte coordinates
        let cose = try CBORDecoder().decode(Array(a[87...]))
        #expect(cose.map?[int: 1]?.int == 2)
        #expect(cose.map?[int: 3]?.int == -7)
        #expect(cose.map?[int: -1]?.int == 1)
        #expect(cose.map?[int: -2]?.bytes == Array(device.publicKey.x962[1..<33]))
        #expect(cose.map?[int: -3]?.bytes == Array(device.publicKey.x962[33..<65]))

        let object = try CBORDecoder().decode(made.bytes)
        #expect(object.map?.entries.map(\.key) == [.text("fmt"), .text("attStmt"), .text("authData")])
        #expect(object.map?[text: "fmt"] == .text("apple-appattest"))
        #expect(object.map?[text: "attStmt"]?.map?[text: "x5c"]?.array?.count == 2)

        let parsed = try AttestationObject.parse(made.bytes)
        #expect(parsed.authenticatorData.attestedCredentialData?.credentialPublicKey == device.publicKey.x962)
        #expect(parsed.x5c == [made.credentialCertificate.der, F.ca.intermediate.der])

        let assertion = device.makeAssertion(clientDataHash: F.clientDataHash())
        #expect(assertion.authenticatorData.count == 37)
        #expect(assertion.authenticatorData[32] == 0x40)
        #expect(Array(assertion.authenticatorData[33..<37]) == [0, 0, 0, 1])
        let obj = try AssertionObject.parse(assertion.bytes)
        #expect(obj.signature == assertion.signature)
        #expect(obj.authenticatorData.signCount == 1)
    }

    @Test("the assertion signature is ECDSA-SHA256 over the nonce (the signed digest is SHA256(nonce))")
    func signatureOverNonce() throws {
        let device = F.device()
        let hash = F.clientDataHash()
        let assertion = device.makeAssertion(clientDataHash: hash)
        let nonce = SHA256.hash(assertion.authenticatorData, hash)
        #expect(device.publicKey.isValidSignature(assertion.signature, for: nonce))
        #expect(!device.publicKey.isValidSignature(assertion.signature, for: SHA256.hash(nonce)))
    }

    @Test("a device restored from its PEM key and counter continues where it stopped")
    func restoredDevice() throws {
        let device = F.device()
        let verified = try F.attested(device)
        _ = device.assert(clientDataHash: F.clientDataHash())
        _ = device.assert(clientDataHash: F.clientDataHash())
        let restored = try SimulatedDevice(
            appID: F.appID, ca: F.ca, key: ECPrivateKey(pem: device.privateKey.pkcs8PEM), counter: device.counter)
        #expect(restored.keyID == device.keyID)
        let hash = F.clientDataHash()
        let ok = try AssertionVerifier(appIDs: [F.appID]).verify(
            assertion: restored.assert(clientDataHash: hash), publicKey: verified.publicKey, clientDataHash: hash,
            previousCounter: 2)
        #expect(ok.signCount == 3)
        #expect(throws: SimulatedDevice.Error.keyNotP256) {
            try SimulatedDevice(appID: F.appID, ca: F.ca, key: ECPrivateKey(curve: .p384), counter: 0)
        }
    }
}

@Suite("GatewayCrypto: EC keys and certificate builder")
struct KeyAndCertificateSimulatorTests {
    @Test("key generation, point export and ECDSA signatures", arguments: ECPrivateKey.Curve.allCases)
    func keys(_ curve: ECPrivateKey.Curve) throws {
        let key = ECPrivateKey(curve: curve)
        #expect(key.curve == curve)
        #expect(key.publicKeyX962.count == curve.uncompressedPointByteCount)
        #expect(key.publicKeyX962[0] == 0x04)
        #expect(ECPrivateKey(curve: curve).publicKeyX962 != key.publicKeyX962)
        let message = Array("message".utf8)
        let s1 = key.signature(for: message)
        let s2 = key.signature(for: message)
        #expect(s1.first == 0x30)
        #expect(s1 != s2, "ECDSA draws a fresh k per signature")
        let restored = try ECPrivateKey(pem: key.pkcs8PEM)
        #expect(restored.curve == curve)
        #expect(restored.publicKeyX962 == key.publicKeyX962)
        #expect(key.pkcs8PEM.hasPrefix("-----BEGIN PRIVATE KEY-----"))
        switch curve {
        case .p256:
            let pub = try #require(key.p256PublicKey)
            #expect(pub.x962 == key.publicKeyX962)
            #expect(pub.isValidSignature(s1, for: message))
            #expect(pub.isValidSignature(restored.signature(for: message), for: message))
            #expect(!pub.isValidSignature(s1, for: Array("other".utf8)))
            #expect(!pub.isValidSignature(ECPrivateKey(curve: .p256).signature(for: message), for: message))
        case .p384:
            #expect(key.p256PublicKey == nil)
        }
    }

    @Test("a PEM that is not an EC private key is refused")
    func badPEM() {
        #expect(throws: ECPrivateKey.Error.self) { try ECPrivateKey(pem: "not a key") }
        #expect(throws: ECPrivateKey.Error.self) { try ECPrivateKey(pem: AppleAppAttestRoot.pem) }
    }

    @Test("certificates: names, serial, validity, arbitrary extensions, self-signed P-256")
    func builder() throws {
        let key = ECPrivateKey(curve: .p256)
        let name = CertificateBuilder.Name(commonName: "Builder TEST", organization: "Attest Gateway TEST", state: "Test")
        let custom = CertificateBuilder.Extension(oid: "1.3.6.1.4.1.55555.1", critical: false, value: [0x04, 0x02, 0xca, 0xfe])
        let cert = try CertificateBuilder(
            subject: name, issuer: name, serialNumber: [0x00, 0x01, 0x02, 0x03], notBefore: 1_000_000_000,
            notAfter: 2_600_000_000, subjectKey: key, basicConstraints: .certificateAuthority(pathLength: nil),
            keyUsage: [.keyCertSign], extensions: [custom]
        ).sign(with: key)
        #expect(cert.subject == "ST=Test,O=Attest Gateway TEST,CN=Builder TEST")
        #expect(cert.serialHex == "010203")
        #expect(cert.notBefore == 1_000_000_000)
        #expect(cert.notAfter == 2_600_000_000)  // 2052: GeneralizedTime
        #expect(cert.p256PublicKey()?.x962 == key.publicKeyX962)
        #expect(cert.extension(oid: "1.3.6.1.4.1.55555.1") == .present(value: [0x04, 0x02, 0xca, 0xfe], critical: false))
        #expect(
            cert.extension(oid: "2.5.29.14")
                == .present(value: [0x04, 0x14] + CertificateBuilder.keyIdentifier(x962: key.publicKeyX962), critical: false))
        #expect(cert.extension(oid: "1.2.3.4") == .absent)
        _ = try X509ChainVerifier(roots: [cert]).verify(leaf: cert, intermediates: [], at: 1_500_000_000)
        #expect(try X509Certificate.parsePEM(X509Certificate.pem([cert, cert])).map(\.der) == [cert.der, cert.der])

        let endEntity = try CertificateBuilder(
            subject: .init(commonName: "leaf"), issuer: name, serialNumber: [0x05], notBefore: 1_000_000_000,
            notAfter: 2_000_000_000, subjectKey: try #require(ECPrivateKey(curve: .p256).p256PublicKey),
            basicConstraints: .endEntity, keyUsage: [.digitalSignature], includesKeyIdentifiers: false
        ).sign(with: key)
        #expect(endEntity.extension(oid: "2.5.29.19") == .present(value: [0x30, 0x00], critical: true))
        #expect(endEntity.extension(oid: "2.5.29.15") == .present(value: [0x03, 0x02, 0x07, 0x80], critical: true))
        #expect(endEntity.extension(oid: "2.5.29.35") == .absent)
        _ = try X509ChainVerifier(roots: [cert]).verify(leaf: endEntity, intermediates: [], at: 1_500_000_000)

        // An unknown extension marked critical: written as asked, and refused by OpenSSL's chain check.
        var critical = CertificateBuilder(
            subject: name, issuer: name, serialNumber: [0x06], notBefore: 1_000_000_000, notAfter: 2_000_000_000,
            subjectKey: key, basicConstraints: .certificateAuthority(pathLength: nil), keyUsage: [.keyCertSign])
        critical.extensions = [CertificateBuilder.Extension(oid: "1.3.6.1.4.1.55555.2", critical: true, value: [0x05, 0x00])]
        let criticalCert = try critical.sign(with: key)
        #expect(criticalCert.extension(oid: "1.3.6.1.4.1.55555.2") == .present(value: [0x05, 0x00], critical: true))
        #expect(throws: X509ChainVerifier.Failure.self) {
            try X509ChainVerifier(roots: [criticalCert]).verify(leaf: criticalCert, intermediates: [], at: 1_500_000_000)
        }
    }

    @Test("builder input errors are thrown, not crashed on")
    func builderErrors() {
        let key = ECPrivateKey(curve: .p256)
        func build(_ name: CertificateBuilder.Name, serial: [UInt8] = [1], extensions: [CertificateBuilder.Extension] = [])
            throws(CertificateBuilder.Error) -> X509Certificate
        {
            try CertificateBuilder(
                subject: name, issuer: name, serialNumber: serial, notBefore: 0, notAfter: 1, subjectKey: key,
                extensions: extensions
            ).sign(with: key)
        }
        #expect(throws: CertificateBuilder.Error.self) { try build(.init(commonName: "")) }
        #expect(throws: CertificateBuilder.Error.self) { try build(.init(commonName: "x"), serial: []) }
        #expect(throws: CertificateBuilder.Error.self) { try build(.init(commonName: "x"), serial: [UInt8](repeating: 1, count: 21)) }
        #expect(throws: CertificateBuilder.Error.self) {
            try build(.init(commonName: "x"), extensions: [.init(oid: "commonName", critical: false, value: [0x05, 0x00])])
        }
        #expect(throws: CertificateBuilder.Error.self) {
            try build(.init(commonName: "x"), extensions: [.init(oid: "1..2", critical: false, value: [0x05, 0x00])])
        }
    }

    @Test("DER helpers encode minimally")
    func der() {
        typealias D = CertificateBuilder.DER
        #expect(D.integer(0) == [0x02, 0x01, 0x00])
        #expect(D.integer(127) == [0x02, 0x01, 0x7f])
        #expect(D.integer(128) == [0x02, 0x02, 0x00, 0x80])
        #expect(D.integer(256) == [0x02, 0x02, 0x01, 0x00])
        #expect(D.namedBitString(CertificateBuilder.KeyUsage.digitalSignature.rawValue) == [0x03, 0x02, 0x07, 0x80])
        #expect(D.namedBitString(CertificateBuilder.KeyUsage([.keyCertSign, .cRLSign]).rawValue) == [0x03, 0x02, 0x01, 0x06])
        #expect(D.namedBitString(CertificateBuilder.KeyUsage.decipherOnly.rawValue) == [0x03, 0x03, 0x07, 0x00, 0x80])
        #expect(D.octetString([UInt8](repeating: 7, count: 200)).prefix(3) == [0x04, 0x81, 0xc8])
        #expect(D.octetString([UInt8](repeating: 7, count: 300)).prefix(4) == [0x04, 0x82, 0x01, 0x2c])
    }
}

@Suite("iOS 27 authenticator data extensions, end to end through the simulator")
struct ExtensionsSimulatorTests {
    typealias F = SimFixture

    @Test("attestation and assertions with the extensions map verify and expose category and version", arguments: [false, true])
    func extensionsVerify(edFlag: Bool) throws {
        let ext = SimulatedExtensions(validationCategory: .appStore, bundleVersion: "27.0.1", setsExtensionDataFlag: edFlag)
        let device = F.device()
        let hash = F.clientDataHash()
        let made = try device.makeAttestation(clientDataHash: hash, at: F.issuedAt, extensions: ext)
        #expect(made.authenticatorData[32] == (edFlag ? 0xc0 : 0x40))
        let verified = try F.attestationVerifier().verify(
            attestation: made.bytes, keyID: device.keyID, clientDataHash: hash, at: F.instant)
        #expect(verified.validationCategory == .appStore)
        #expect(verified.validationCategory?.name == "app_store")
        #expect(verified.bundleVersion == "27.0.1")
        let parsed = try AttestationObject.parse(made.bytes)
        #expect(parsed.authenticatorData.flags.contains(.extensionData) == edFlag)
        #expect(parsed.authenticatorData.extensions?.unknownKeys == [])

        let verifier = AssertionVerifier(appIDs: [F.appID])
        var stored = verified.signCount
        for version in ["27.0.1", "27.1"] {
            let e = SimulatedExtensions(validationCategory: .appStore, bundleVersion: version, setsExtensionDataFlag: edFlag)
            let assertion = device.makeAssertion(clientDataHash: hash, extensions: e)
            #expect(assertion.authenticatorData[32] == (edFlag ? 0xc0 : 0x40))
            let ok = try verifier.verify(
                assertion: assertion.bytes, publicKey: verified.publicKey, clientDataHash: hash, previousCounter: stored)
            #expect(ok.validationCategory == .appStore)
            #expect(ok.validationCategory?.name == "app_store")
            #expect(ok.bundleVersion == version)
            stored = ok.signCount
        }
        // A later assertion without the map still verifies.
        let plain = try verifier.verify(
            assertion: device.assert(clientDataHash: hash), publicKey: verified.publicKey, clientDataHash: hash, previousCounter: stored)
        #expect(plain.validationCategory == nil)
    }

    @Test("every validation category round-trips with its name", arguments: ValidationCategory.knownNames)
    func categories(name: String) throws {
        let category = try #require(ValidationCategory(name: name))
        let device = F.device()
        let verified = try F.attested(device, extensions: SimulatedExtensions(validationCategory: category))
        #expect(verified.validationCategory == category)
        #expect(verified.validationCategory?.name == name)
        #expect(verified.bundleVersion == nil)
    }

    @Test("a category Apple may add later is kept as unknown_<n>")
    func unknownCategory() throws {
        let verified = try F.attested(F.device(), extensions: SimulatedExtensions(validationCategory: .init(rawValue: 0x0102_0304)))
        #expect(verified.validationCategory?.rawValue == 0x0102_0304)
        #expect(verified.validationCategory?.name == "unknown_16909060")
    }

    @Test("unknown extension keys do not fail verification")
    func unknownKeys() throws {
        let map = CBORMap([
            (.text(AppleExtensions.bundleVersionKey), .text("27.0")),
            (.text("apple_future_02"), .array([.unsigned(1)])),
        ])
        let device = F.device()
        let hash = F.clientDataHash()
        let bytes = try device.attest(clientDataHash: hash, at: F.issuedAt, extensions: SimulatedExtensions(map: map))
        let verified = try F.attestationVerifier().verify(attestation: bytes, keyID: device.keyID, clientDataHash: hash, at: F.instant)
        #expect(verified.bundleVersion == "27.0")
        #expect(try AttestationObject.parse(bytes).authenticatorData.extensions?.unknownKeys == ["apple_future_02"])
    }

    static let wrongTypes: [(String, CBORValue)] = [
        (AppleExtensions.validationCategoryKey, .text("app_store")),
        (AppleExtensions.validationCategoryKey, .bytes([4, 0, 0])),
        (AppleExtensions.validationCategoryKey, .bytes([4, 0, 0, 0, 0])),
        (AppleExtensions.validationCategoryKey, .negative(3)),
        (AppleExtensions.bundleVersionKey, .bytes(Array("27.0".utf8))),
        (AppleExtensions.bundleVersionKey, .unsigned(27)),
        (AppleExtensions.bundleVersionKey, .null),
    ]

    @Test("an extension with a wrong value type is malformed, in attestations and assertions", arguments: 0..<wrongTypes.count)
    func wrongValueType(index: Int) throws {
        let (key, value) = Self.wrongTypes[index]
        for edFlag in [false, true] {
            let ext = SimulatedExtensions(map: CBORMap([(.text(key), value)]), setsExtensionDataFlag: edFlag)
            let device = F.device()
            let hash = F.clientDataHash()
            let bytes = try device.attest(clientDataHash: hash, at: F.issuedAt, extensions: ext)
            expectAppAttestFailure(.malformed, "attestation \(key) = \(value)") {
                try F.attestationVerifier().verify(attestation: bytes, keyID: device.keyID, clientDataHash: hash, at: F.instant)
            }
            let assertion = device.assert(clientDataHash: hash, extensions: ext)
            expectAppAttestFailure(.malformed, "assertion \(key) = \(value)") {
                try AssertionVerifier(appIDs: [F.appID]).verify(
                    assertion: assertion, publicKey: device.publicKey, clientDataHash: hash, previousCounter: 0)
            }
        }
    }

    @Test("an extension key that is not text is malformed")
    func nonTextKey() throws {
        let ext = SimulatedExtensions(map: CBORMap([(.unsigned(1), .text("x"))]))
        let device = F.device()
        let hash = F.clientDataHash()
        let bytes = try device.attest(clientDataHash: hash, at: F.issuedAt, extensions: ext)
        expectAppAttestFailure(.malformed) {
            try F.attestationVerifier().verify(attestation: bytes, keyID: device.keyID, clientDataHash: hash, at: F.instant)
        }
    }

    /// Random bytes whose first byte does not start a CBOR map (major type 5: 0xa0…0xbf).
    static func randomNonMap(_ count: Int) -> [UInt8] {
        var bytes = SecureRandom.bytes(count)
        while (0xa0...0xbf).contains(bytes[0]) { bytes[0] = SecureRandom.bytes(1)[0] }
        return bytes
    }

    @Test("random trailing bytes that are not a CBOR map are malformed", arguments: [1, 2, 7, 33, 100])
    func randomTrailing(count: Int) throws {
        for _ in 0..<8 {
            let junk = Self.randomNonMap(count)
            let device = F.device()
            let hash = F.clientDataHash()
            let bytes = try device.attest(clientDataHash: hash, at: F.issuedAt, mutations: .init(trailingAuthenticatorData: junk))
            expectAppAttestFailure(.malformed, "attestation trailing \(Hex.encode(junk))") {
                try F.attestationVerifier().verify(attestation: bytes, keyID: device.keyID, clientDataHash: hash, at: F.instant)
            }
            let assertion = device.assert(clientDataHash: hash, mutations: .init(trailingAuthenticatorData: junk))
            expectAppAttestFailure(.malformed, "assertion trailing \(Hex.encode(junk))") {
                try AssertionVerifier(appIDs: [F.appID]).verify(
                    assertion: assertion, publicKey: device.publicKey, clientDataHash: hash, previousCounter: 0)
            }
        }
    }

    @Test("bytes after a valid extensions map are malformed")
    func afterMap() throws {
        let ext = SimulatedExtensions(validationCategory: .appStore, bundleVersion: "27.0", setsExtensionDataFlag: true)
        let device = F.device()
        let hash = F.clientDataHash()
        let bytes = try device.attest(
            clientDataHash: hash, at: F.issuedAt, extensions: ext, mutations: .init(trailingAuthenticatorData: [0x00]))
        expectAppAttestFailure(.malformed) {
            try F.attestationVerifier().verify(attestation: bytes, keyID: device.keyID, clientDataHash: hash, at: F.instant)
        }
        let second = try device.attest(
            clientDataHash: hash, at: F.issuedAt, extensions: ext, mutations: .init(trailingAuthenticatorData: ext.encoded))
        expectAppAttestFailure(.malformed, "two maps") {
            try F.attestationVerifier().verify(attestation: second, keyID: device.keyID, clientDataHash: hash, at: F.instant)
        }
        let assertion = device.assert(clientDataHash: hash, extensions: ext, mutations: .init(trailingAuthenticatorData: [0xa0]))
        expectAppAttestFailure(.malformed) {
            try AssertionVerifier(appIDs: [F.appID]).verify(
                assertion: assertion, publicKey: device.publicKey, clientDataHash: hash, previousCounter: 0)
        }
    }
}
