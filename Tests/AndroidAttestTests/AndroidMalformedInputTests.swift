import AndroidAttest
import AppAttestSimulator
import Foundation
import GatewayCrypto
import GatewayWire
import SimulatorPKI
import Testing

/// Hostile bytes: every refusal is `malformed` (or, for a chain, another code) with a reason, never a trap.
@Suite("Android: malformed input")
struct AndroidMalformedInputTests {
    typealias D = AndroidDER

    /// The KeyDescription values of a few real leaves: Keymaster 2 and 3, KeyMint 100, 300 and 500.
    static let realDescriptions: [[UInt8]] = {
        let names = [
            "signum:1B3NIWFO0Q6NJYXHCRDDYN5S9UL.json:chain#0", "keyattestation:TEE_RSA_NONE.pem", "keyattestation:TEE_EC_RKP.pem",
            "keyattestation:TEE_MLDSA_RKP.pem", "android-key-attestation:cert_chain_with_attest_keys.pem",
        ]
        return names.map { n in
            let v = AndroidVector.valid.first { $0.name == n }!
            guard case .present(let value, _) = try! X509Certificate(der: v.chain[0]).extension(oid: KeyDescription.oid) else {
                fatalError(n)
            }
            return value
        }
    }()

    static func parse(_ bytes: [UInt8]) -> Result<KeyDescription, AndroidAttestError> {
        Result { () throws(AndroidAttestError) in try KeyDescription.parse(bytes) }
    }

    static func expectMalformed(_ bytes: [UInt8], _ comment: Comment? = nil, sourceLocation: SourceLocation = #_sourceLocation) {
        switch parse(bytes) {
        case .success: Issue.record("parsed: \(comment?.rawValue ?? "")", sourceLocation: sourceLocation)
        case .failure(let e):
            #expect(e.code == .malformed && !e.detail.isEmpty, comment, sourceLocation: sourceLocation)
        }
    }

    @Test("the real KeyDescriptions parse; every truncation of them is malformed")
    func truncation() {
        for d in Self.realDescriptions {
            #expect((try? Self.parse(d).get()) != nil)
            for cut in 0..<d.count { Self.expectMalformed(Array(d.prefix(cut)), "cut at \(cut)") }
            Self.expectMalformed(d + [0x00], "a trailing byte")
        }
    }

    @Test("every bit flipped in a real KeyDescription: parsed or malformed, never a trap")
    func bitFlips() {
        for d in Self.realDescriptions.prefix(3) {
            for i in d.indices {
                for bit in 0..<8 {
                    var m = d
                    m[i] ^= 1 << bit
                    if case .failure(let e) = Self.parse(m) { #expect(e.code == .malformed && !e.detail.isEmpty) }
                }
            }
        }
    }

    @Test("bytes flipped in a real leaf never verify, and fail with a code")
    func leafFlips() throws {
        let v = try #require(AndroidVector.valid.first { $0.name == "keyattestation:TEE_EC_RKP.pem" })
        let verifier = AndroidAttestationVerifier()
        for i in v.chain[0].indices {
            for mask in [UInt8(0x01), 0x80] {
                var chain = v.chain
                chain[0][i] ^= mask
                let r = Result { () throws(AndroidAttestError) in try verifier.verify(chain: chain, challenge: v.challenge, at: v.instant) }
                guard case .failure(let e) = r else {
                    Issue.record("byte \(i) ^ \(mask) still verifies")
                    continue
                }
                #expect([.malformed, .badSignature].contains(e.code), "byte \(i): \(e)")
            }
        }
    }

    static let challenge = D.octets([1, 2, 3])
    static func description(software: [[UInt8]] = [], hardware: [[UInt8]], version: Int64 = 300, extra: [[UInt8]] = []) -> [UInt8] {
        D.sequence(
            [
                D.integer(version), D.enumerated(1), D.integer(version), D.enumerated(1), challenge, D.octets([]), D.sequence(software),
                D.sequence(hardware),
            ] + extra)
    }
    static let rootOfTrust = D.tagged(704, D.sequence([D.octets([0]), D.boolean(true), D.enumerated(0)]))

    @Test("a minimal hand-made KeyDescription parses, and an unknown tag is kept")
    func handMade() throws {
        let d = try KeyDescription.parse(
            Self.description(hardware: [D.tagged(2, D.integer(3)), Self.rootOfTrust, D.tagged(999, D.integer(7))]))
        #expect(d.hardwareEnforced.algorithm == 3)
        #expect(d.hardwareEnforced.rootOfTrust?.verifiedBootHash == nil)
        #expect(d.hardwareEnforced.unknownTags == [999])
    }

    @Test(
        "schema violations are malformed",
        arguments: [
            ("tags out of order", description(hardware: [D.tagged(2, D.integer(3)), D.tagged(1, D.set([D.integer(2)]))])),
            ("a tag twice", description(hardware: [D.tagged(2, D.integer(3)), D.tagged(2, D.integer(3))])),
            (
                "BOOLEAN 0x01 in the root of trust",
                description(hardware: [D.tagged(704, D.sequence([D.octets([0]), [0x01, 0x01, 0x01], D.enumerated(0)]))])
            ),
            (
                "an unknown verified boot state",
                description(hardware: [D.tagged(704, D.sequence([D.octets([0]), D.boolean(true), D.enumerated(4)]))])
            ),
            ("a root of trust of 2 fields", description(hardware: [D.tagged(704, D.sequence([D.octets([0]), D.boolean(true)]))])),
            (
                "a root of trust of 5 fields",
                description(hardware: [
                    D.tagged(704, D.sequence([D.octets([0]), D.boolean(true), D.enumerated(0), D.octets([]), D.octets([])]))
                ])
            ),
            (
                "an unknown security level",
                D.sequence([
                    D.integer(3), D.enumerated(3), D.integer(4), D.enumerated(1), challenge, D.octets([]), D.sequence([]), D.sequence([]),
                ])
            ),
            ("a ninth field", description(hardware: [], extra: [D.null])),
            (
                "seven fields",
                D.sequence([D.integer(3), D.enumerated(1), D.integer(4), D.enumerated(1), challenge, D.octets([]), D.sequence([])])
            ),
            ("version 0", description(hardware: [], version: 0)),
            ("an INTEGER where a SET is", description(hardware: [D.tagged(1, D.integer(2))])),
            ("a SET where an INTEGER is", description(hardware: [D.tagged(2, D.set([D.integer(3)]))])),
            ("NULL with contents", description(hardware: [D.tagged(503, [0x05, 0x01, 0x00])])),
            ("two elements under one tag", description(hardware: [D.tagged(2, D.integer(3) + D.integer(3))])),
            ("an IMPLICIT (primitive) tag", description(hardware: [[0x82, 0x01, 0x03]])),
            ("a universal element in the list", description(hardware: [D.integer(3)])),
            ("a non-minimal INTEGER", description(hardware: [D.tagged(2, [0x02, 0x02, 0x00, 0x03])])),
            (
                "an INTEGER beyond 64 bits",
                description(hardware: [D.tagged(705, D.element([0x02], [0x01] + [UInt8](repeating: 0, count: 8)))])
            ),
            ("an empty INTEGER", description(hardware: [D.tagged(705, [0x02, 0x00])])),
            ("a tag number in the long form below 31", description(hardware: [D.element([0xbf, 0x02], D.integer(3))])),
            ("a tag number with a leading zero digit", description(hardware: [D.element([0xbf, 0x80, 0x85, 0x40], Self.rootOfTrust)])),
            ("a tag number of 5 digits", description(hardware: [D.element([0xbf, 0x81, 0x81, 0x81, 0x81, 0x01], D.integer(1))])),
            ("an application id that is not DER", description(software: [D.tagged(709, D.octets([0x30, 0x05, 0x31]))], hardware: [])),
            (
                "a package name not UTF-8",
                description(
                    software: [
                        D.tagged(709, D.octets(D.sequence([D.set([D.sequence([D.octets([0xff, 0xfe]), D.integer(1)])]), D.set([])])))
                    ], hardware: [])
            ),
            (
                "a constructed OCTET STRING",
                D.sequence([
                    D.integer(3), D.enumerated(1), D.integer(4), D.enumerated(1), [0x24, 0x03, 0x04, 0x01, 0x00], D.octets([]),
                    D.sequence([]), D.sequence([]),
                ])
            ),
        ])
    func schema(_ c: (String, [UInt8])) {
        Self.expectMalformed(c.1, "\(c.0)")
    }

    @Test(
        "lengths that lie: huge, indefinite, non-minimal, running past the end",
        arguments: [
            [0x30, 0x84, 0xff, 0xff, 0xff, 0xff, 0x02, 0x01, 0x03],
            [0x30, 0x85, 0x01, 0x00, 0x00, 0x00, 0x00],
            [0x30, 0x80, 0x02, 0x01, 0x03, 0x00, 0x00],
            [0x30, 0x81, 0x03, 0x02, 0x01, 0x03],
            [0x30, 0x82, 0x00, 0x03, 0x02, 0x01, 0x03],
            [0x30, 0x7f, 0x02, 0x01, 0x03],
            [0x30],
            [],
            [0x1f],
        ] as [[UInt8]])
    func lengths(_ bytes: [UInt8]) {
        Self.expectMalformed(bytes)
    }

    @Test("deep nesting is never recursed into: under an unknown tag, kept; where the schema is, malformed")
    func deepNesting() throws {
        var nested: [UInt8] = D.null
        for _ in 0..<2_000 { nested = D.sequence([nested]) }
        let d = try KeyDescription.parse(Self.description(hardware: [D.tagged(999, nested)]))
        #expect(d.hardwareEnforced.unknownTags == [999])
        Self.expectMalformed(Self.description(hardware: [D.tagged(704, nested)]))
        Self.expectMalformed(Self.description(software: [D.tagged(709, D.octets(nested))], hardware: []))
        Self.expectMalformed(nested)
    }

    @Test("an oversized KeyDescription is refused before it is read")
    func oversized() {
        Self.expectMalformed(Self.description(hardware: [D.tagged(999, D.octets([UInt8](repeating: 0, count: KeyDescription.maxSize)))]))
    }

    @Test("chains of a shape no Keystore makes are malformed")
    func chainShapes() throws {
        let v = try #require(AndroidVector.valid.first { $0.name == "keyattestation:TEE_EC_RKP.pem" })
        let verifier = AndroidAttestationVerifier()
        func code(_ chain: [[UInt8]]) -> AndroidAttestError.Code? {
            do {
                _ = try verifier.verify(chain: chain, challenge: v.challenge, at: v.instant)
                return nil
            } catch { return error.code }
        }
        #expect(code([]) == .malformed)
        #expect(code(Array(v.chain.prefix(1))) == .malformed)
        #expect(code(Array(v.chain.prefix(2))) == .malformed)
        #expect(code(v.chain + Array(repeating: v.chain[4], count: 6)) == .malformed)
        #expect(code([[0x30, 0x00]] + v.chain.dropFirst()) == .malformed)
        #expect(code([v.chain[0] + [0]] + v.chain.dropFirst()) == .malformed)
        #expect(
            code([[UInt8](repeating: 0x30, count: AndroidAttestationVerifier.maxCertificateSize + 1)] + v.chain.dropFirst()) == .malformed)
        // Without the leaf, the chain starts at a CA certificate: no KeyDescription.
        #expect(code(Array(v.chain.dropFirst())) == .malformed)
    }

    @Test("a chain whose every certificate carries a KeyDescription, its trusted root too, is malformed")
    func keyDescriptionEverywhere() throws {
        let d = SimulatedKeyDescription(packageName: "p", signingCertificateSHA256: [1])
        var attestKey = d
        attestKey.purposes = [KeyCharacteristics.Purpose.attestKey]
        let keys = (0..<3).map { _ in ECPrivateKey(curve: .p256) }
        let names = (0..<3).map { CertificateBuilder.Name(commonName: "Android Keystore Key \($0)") }
        var certs: [X509Certificate] = []
        for i in 0..<3 {
            let issuer = min(i + 1, 2)
            certs.append(
                try CertificateBuilder(
                    subject: names[i], issuer: names[issuer], serialNumber: [1], notBefore: 0, notAfter: 2_461_449_600, subjectKey: keys[i],
                    includesKeyIdentifiers: false,
                    extensions: [.init(oid: KeyDescription.oid, critical: false, value: (i == 0 ? d : attestKey).encoded(challenge: [1]))]
                ).sign(with: keys[issuer]))
        }
        #expect(throws: AndroidAttestError(.malformed, "")) {
            try AndroidAttestationVerifier(extraRoots: [certs[2]]).verify(chain: certs.map(\.der), challenge: [1], at: Date())
        }
    }

    @Test("a leaf carrying the KeyDescription twice is malformed")
    func extensionPlacement() throws {
        let ca = AndroidSimulatorTests.ca
        let device = try SimulatedAndroidDevice(ca: ca)
        let d = device.keyDescription(packageName: "p", signingCertificateSHA256: [1]).encoded(challenge: [1])
        let twice = try CertificateBuilder(
            subject: .init(commonName: "Android Keystore Key"),
            issuer: TestAndroidCA.attestationName(for: device.attestationKey, securityLevel: .trustedEnvironment),
            serialNumber: [1], notBefore: 0, notAfter: 2_461_449_600, subjectKey: device.privateKey, includesKeyIdentifiers: false,
            extensions: [
                .init(oid: KeyDescription.oid, critical: false, value: d), .init(oid: KeyDescription.oid, critical: false, value: d),
            ]
        ).sign(with: device.attestationKey)
        let verifier = AndroidAttestationVerifier(extraRoots: [ca.root])
        #expect(throws: AndroidAttestError(.malformed, "")) {
            try verifier.verify(
                chain: [twice.der, device.attestationCertificate.der, ca.intermediate.der, ca.root.der], challenge: [1], at: Date())
        }
    }
}
