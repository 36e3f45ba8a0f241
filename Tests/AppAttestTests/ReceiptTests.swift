import AppAttest
import AppAttestSimulator
import Foundation
import GatewayCrypto
import GatewayWire
import Testing

/// Apple's receipts: the 30 distinct real ones (17 inside real attestations, 13 `RECEIPT`s from
/// Apple's data service) verified under the pinned Apple Root CA - G3, and every way one must fail.
@Suite("Receipts: real vectors under Apple Root CA - G3")
struct ReceiptTests {
    static let verifier = ReceiptVerifier()

    static func attestationObject(_ v: VectorCase) throws -> AttestationObject { try AttestationObject.parse(v.bytes("attestation_b64")) }

    /// The attestation case of the key a receipts-file case belongs to (the file gives the
    /// attestation itself for most receipts, not for all: the key id finds it for every one).
    static func attestationCase(for r: VectorCase) -> VectorCase? {
        VectorCase.attestations.first { $0.expect == "valid" && $0.string("key_id_b64") == r.string("key_id_b64") }
    }

    /// The receipt's own creation time plus one second, the instant its chain verifies at.
    static func creationInstant(_ receipt: [UInt8]) throws -> Date {
        let r = try AppAttestReceipt.parseStored(receipt)
        return Date(timeIntervalSince1970: Double(r.creationTime.millis / 1000 + 1))
    }

    @Test("Apple Root CA - G3 is built in, byte for byte the vectors' PEM, with its published fingerprint")
    func g3IsPinned() throws {
        let root = try #require(ReceiptVerifier.appleRoot.first)
        #expect(ReceiptVerifier.appleRoot.count == 1)
        #expect(Hex.encode(SHA256.hash(root.der)).uppercased() == AppleRootCAG3.sha256Fingerprint)
        #expect(AppleRootCAG3.sha256Fingerprint == "63343ABFB89A6A03EBB57E9B3F5FA7BE7C4F5C756F3017B3A8C488C3653E9179")
        let file = try String(contentsOf: vectorsDirectory.appendingPathComponent("apple-root-ca-g3.pem"), encoding: .utf8)
        #expect(try X509Certificate.parsePEM(file).map(\.der) == [root.der])
        #expect(root.subject == "C=US,O=Apple Inc.,OU=Apple Certification Authority,CN=Apple Root CA - G3")
        // Not the App Attest root: each root is trusted for its own job only.
        #expect(root.der != AttestationVerifier.appleRoot[0].der)
    }

    @Test("the receipt vectors are all here") func inventory() {
        let receipts = VectorCase.receipts
        #expect(receipts.count == 20)
        #expect(receipts.filter { $0.string("receipt_type") == "ATTEST" }.count == 7)
        #expect(receipts.filter { $0.string("receipt_type") == "RECEIPT" }.count == 13)
        #expect(VectorCase.attestationsWithReceipts.count == 17)
    }

    @Test("every receipt of the receipts file verifies at its time, every field as the file says", arguments: VectorCase.receipts)
    func receiptFile(_ v: VectorCase) throws {
        let kind = try #require(AppAttestReceipt.Kind(rawValue: v.string("receipt_type")!))
        let attestationCase = try #require(Self.attestationCase(for: v))
        let attestation = try Self.attestationObject(attestationCase)
        if let given = v.string("attestation_b64") { #expect(given == attestationCase.string("attestation_b64")) }
        if kind == .attest { #expect(attestation.receipt == v.bytes("receipt_b64")) }
        var expect = ReceiptVerifier.Expectation(
            appID: v.appID, attestedKey: .publicKey(v.bytes("attested_public_key_x962_b64")), kind: kind)
        if kind == .attest { expect.clientDataHash = attestationCase.bytes("client_data_hash_b64") }
        let ok = try Self.verifier.verify(v.bytes("receipt_b64"), expecting: expect, at: v.instant)
        let r = ok.receipt
        #expect(String(decoding: r.appID, as: UTF8.self) == v.string("app_id"))
        #expect(r.type == v.string("receipt_type"))
        #expect(r.attestedCertificate == attestation.x5c[0])
        #expect(r.environment == v.string("environment_field"))
        #expect(r.creationTime.text == v.string("creation_time"))
        #expect(Double(r.creationTime.millis) / 1000 == v.date("creation_time")!.timeIntervalSince1970)
        #expect(r.notBefore?.text == v.string("not_before"))
        #expect(r.expirationTime?.text == v.string("expiration_time"))
        #expect(r.riskMetric.map { Int($0) } == v.json["risk_metric"] as? Int)
        #expect(r.clientHash == v.bytes("client_hash_b64"))
        #expect(r.token?.isEmpty == false)
        // The same receipt verifies against the attestation's certificate itself.
        _ = try Self.verifier.verify(
            v.bytes("receipt_b64"), expecting: .init(attestedKey: .certificate(attestation.x5c[0])), at: v.instant)
        // Signed by Apple's receipt-signing certificate, through Application Integration CA 5 - G1, to G3.
        #expect(
            ok.chain.map(\.subject) == [
                "C=US,O=Apple Inc.,CN=Application Attestation Fraud Receipt Signing",
                "C=US,O=Apple Inc.,OU=Apple Certification Authority,CN=Apple Application Integration CA 5 - G1",
                "C=US,O=Apple Inc.,OU=Apple Certification Authority,CN=Apple Root CA - G3",
            ])
    }

    @Test(
        "every distinct real attestation's receipt verifies with its attestation at the receipt's creation time",
        arguments: VectorCase.attestationsWithReceipts)
    func attestationReceipt(_ v: VectorCase) throws {
        let object = try Self.attestationObject(v)
        let at = try Self.creationInstant(object.receipt)
        let env = AttestEnvironment(rawValue: v.string("verifier_environment")!)!
        // What registration does: the attestation, then its receipt, at one instant.
        let attested = try AttestationVerifier(policy: .init(appIDs: [v.appID], environments: [env])).verify(
            object, keyID: v.bytes("key_id_b64"), clientDataHash: v.bytes("client_data_hash_b64"), at: at)
        let ok = try Self.verifier.verify(
            attested.receipt, expecting: .attestation(attested, clientDataHash: v.bytes("client_data_hash_b64")), at: at)
        #expect(ok.receipt.kind == .attest)
        #expect(ok.receipt.riskMetric == nil && ok.receipt.notBefore == nil)
        #expect(ok.receipt.environment == (env == .production ? "production" : "sandbox"))
        #expect(ok.receipt.expirationTime.map { $0.millis - ok.receipt.creationTime.millis } == Int64(90 * 86_400_000))
        #expect(attested.keyAccessControl == nil)  // every real vector predates macOS 27
    }

    @Test("RECEIPTs: not-before one day and expiration 90 days after creation; field 4 is the ATTEST hash, garbled")
    func refreshedShape() throws {
        for v in VectorCase.receipts where v.string("receipt_type") == "RECEIPT" {
            let r = try AppAttestReceipt.parseStored(v.bytes("receipt_b64"))
            #expect(r.notBefore!.millis - r.creationTime.millis == 86_400_000)
            #expect(r.expirationTime!.millis - r.creationTime.millis == Int64(90 * 86_400_000))
            let attest = try #require(
                VectorCase.receipts.first {
                    $0.string("receipt_type") == "ATTEST" && $0.string("key_id_b64") == v.string("key_id_b64")
                })
            let hash = attest.bytes("client_hash_b64")
            #expect(r.clientHash != hash)
            #expect(r.clientHash == ReceiptContents.garbled(hash), "\(v.name)")
            #expect(String(decoding: r.clientHash!, as: UTF8.self).contains("\u{FFFD}"))
        }
    }

    // MARK: - Failures, each with its code

    /// veehaitch iOS 14.4: the ATTEST receipt, its attestation's certificate, and an instant at which both verify.
    struct Sample {
        let receipt: [UInt8]
        let certificate: [UInt8]
        let clientDataHash: [UInt8]
        let appID: AppID
        let at: Date
        var expectation: ReceiptVerifier.Expectation {
            .init(appID: appID, attestedKey: .certificate(certificate), kind: .attest, clientDataHash: clientDataHash)
        }
    }

    static func sample(_ name: String = "veehaitch-ios-14.4-attestation") throws -> Sample {
        let v = try #require(VectorCase.attestationCase(named: name))
        let object = try attestationObject(v)
        return Sample(
            receipt: object.receipt, certificate: object.x5c[0], clientDataHash: v.bytes("client_data_hash_b64"), appID: v.appID,
            at: try creationInstant(object.receipt))
    }

    /// The receipt error `body` throws, nil when it verifies (any other error fails the test).
    static func failure(_ body: () throws -> VerifiedReceipt) -> ReceiptError? {
        do {
            _ = try body()
            return nil
        } catch let e as ReceiptError {
            return e
        } catch {
            Issue.record("unexpected error \(error)")
            return nil
        }
    }

    @Test("flipped bytes: in the payload and in the signature the signature fails; nowhere does the receipt verify")
    func flippedBytes() throws {
        let s = try Self.sample()
        #expect(Self.failure { try Self.verifier.verify(s.receipt, expecting: s.expectation, at: s.at) } == nil)
        // A byte of the app id inside the payload.
        let appIDAt = try #require(Self.find(Array("6MURL8TA57".utf8), in: s.receipt))
        var payload = s.receipt
        payload[appIDAt] ^= 0x01
        #expect(Self.failure { try Self.verifier.verify(payload, expecting: s.expectation, at: s.at) }?.code == .badSignature)
        // The last byte of the signature value.
        var signature = s.receipt
        let end = try #require(signature.lastIndex { $0 != 0 })  // before the indefinite-length end-of-contents octets
        signature[end] ^= 0x01
        #expect(Self.failure { try Self.verifier.verify(signature, expecting: s.expectation, at: s.at) }?.code == .badSignature)
        // A byte inside the signer's certificate (its signature by the intermediate no longer verifies).
        let signerAt = try #require(Self.find(Array("Fraud Receipt Signing".utf8), in: s.receipt))
        var cert = s.receipt
        cert[signerAt] ^= 0x20
        let certFailure = Self.failure { try Self.verifier.verify(cert, expecting: s.expectation, at: s.at) }?.code
        #expect(certFailure == .chainUntrusted || certFailure == .badSignature, "\(String(describing: certFailure))")
        // Every 37th byte: none of the altered receipts verifies, and none crashes the parser. Only
        // the copy of G3 that Apple puts in the message is skipped: it counts for nothing (the
        // pinned root is the anchor), so a flip there may leave the receipt valid.
        let rootCopy = try #require(Self.find(ReceiptVerifier.appleRoot[0].der, in: s.receipt))
        let skipped = rootCopy..<(rootCopy + ReceiptVerifier.appleRoot[0].der.count)
        for i in stride(from: 0, to: s.receipt.count, by: 37) where !skipped.contains(i) {
            var b = s.receipt
            b[i] ^= 0x80
            #expect(Self.failure { try Self.verifier.verify(b, expecting: s.expectation, at: s.at) } != nil, "byte \(i)")
        }
        // Cut short, or not a receipt at all.
        #expect(
            Self.failure { try Self.verifier.verify(Array(s.receipt.prefix(500)), expecting: s.expectation, at: s.at) }?.code == .malformed)
        #expect(Self.failure { try Self.verifier.verify([], expecting: s.expectation, at: s.at) }?.code == .malformed)
        #expect(Self.failure { try Self.verifier.verify(s.certificate, expecting: s.expectation, at: s.at) }?.code == .malformed)
    }

    @Test("a wrong root: the App Attest root, or a test receipt root, does not vouch for Apple's receipts")
    func wrongRoot() throws {
        let s = try Self.sample()
        let appAttestRootOnly = ReceiptVerifier(roots: AttestationVerifier.appleRoot)
        #expect(Self.failure { try appAttestRootOnly.verify(s.receipt, expecting: s.expectation, at: s.at) }?.code == .chainUntrusted)
        let ca = try TestCA()
        let testRootOnly = ReceiptVerifier(roots: [ca.receiptRoot])
        #expect(Self.failure { try testRootOnly.verify(s.receipt, expecting: s.expectation, at: s.at) }?.code == .chainUntrusted)
        // And Apple's root alone refuses the test CA's receipts.
        let simulated = try ca.issueReceipt(
            ReceiptContents.attest(
                appID: s.appID, certificate: s.certificate, clientDataHash: s.clientDataHash, environment: .development, at: s.at))
        #expect(Self.failure { try Self.verifier.verify(simulated, expecting: s.expectation, at: s.at) }?.code == .chainUntrusted)
        #expect(
            Self.failure { try ReceiptVerifier(extraRoots: [ca.receiptRoot]).verify(simulated, expecting: s.expectation, at: s.at) } == nil)
    }

    @Test("the chain is checked at the instant: Apple's receipt signers expire after about a year")
    func chainValidity() throws {
        let s = try Self.sample()
        let today = Date(timeIntervalSince1970: 1_790_000_000)  // 2026
        #expect(Self.failure { try Self.verifier.verify(s.receipt, expecting: s.expectation, at: today) }?.code == .certificateExpired)
        let before = Date(timeIntervalSince1970: 1_577_836_800)  // 2020-01-01, before the 2020 signer's notBefore
        #expect(Self.failure { try Self.verifier.verify(s.receipt, expecting: s.expectation, at: before) }?.code == .certificateNotYetValid)
    }

    @Test("another key's receipt, a wrong app id, a RECEIPT where an ATTEST is due, another challenge")
    func fieldChecks() throws {
        let s = try Self.sample()
        let other = try Self.sample("veehaitch-ios-14.4-beta-2-attestation")  // same app, another key, three days earlier
        // The other key's receipt presented with this attestation's certificate.
        #expect(Self.failure { try Self.verifier.verify(other.receipt, expecting: s.expectation, at: s.at) }?.code == .attestedKeyMismatch)
        var byKey = s.expectation
        byKey.attestedKey = .publicKey(try X509Certificate(der: other.certificate).p256PublicKey()!.x962)
        #expect(Self.failure { try Self.verifier.verify(s.receipt, expecting: byKey, at: s.at) }?.code == .attestedKeyMismatch)
        // Field 2 is another app.
        var app = s.expectation
        app.appID = try AppID("6MURL8TA57.de.vincent-haupert.other")
        #expect(Self.failure { try Self.verifier.verify(s.receipt, expecting: app, at: s.at) }?.code == .appIDMismatch)
        // A RECEIPT of the same key where the attestation's ATTEST receipt is expected.
        let refreshed = try #require(VectorCase.receipts.first { $0.name == "veehaitch-ios-14.4-receipt-db4be8c9" })
        let refreshedAt = refreshed.instant
        #expect(
            Self.failure { try Self.verifier.verify(refreshed.bytes("receipt_b64"), expecting: s.expectation, at: refreshedAt) }?.code
                == .typeMismatch)
        // Field 4 of the ATTEST receipt is another clientDataHash (the attestation was made for another challenge).
        var challenge = s.expectation
        challenge.clientDataHash = SHA256.hash(Array("another challenge".utf8))
        #expect(Self.failure { try Self.verifier.verify(s.receipt, expecting: challenge, at: s.at) }?.code == .clientHashMismatch)
        // Never compared in a RECEIPT, whose field 4 Apple garbles.
        var receiptExpectation = challenge
        receiptExpectation.kind = .receipt
        #expect(
            Self.failure { try Self.verifier.verify(refreshed.bytes("receipt_b64"), expecting: receiptExpectation, at: refreshedAt) } == nil
        )
    }

    @Test("creation time: not in the future (a minute of clock skew allowed); a maximum age when asked")
    func creationTime() throws {
        let s = try Self.sample()
        let created = try AppAttestReceipt.parseStored(s.receipt).creationTime
        let createdAt = Date(timeIntervalSince1970: Double(created.millis) / 1000)
        #expect(
            Self.failure { try Self.verifier.verify(s.receipt, expecting: s.expectation, at: createdAt.addingTimeInterval(-120)) }?.code
                == .creationTimeInvalid)
        #expect(
            Self.failure { try Self.verifier.verify(s.receipt, expecting: s.expectation, at: createdAt.addingTimeInterval(-30)) } == nil)
        var fresh = s.expectation
        fresh.maxAgeMillis = 300_000
        #expect(Self.failure { try Self.verifier.verify(s.receipt, expecting: fresh, at: createdAt.addingTimeInterval(299)) } == nil)
        #expect(
            Self.failure { try Self.verifier.verify(s.receipt, expecting: fresh, at: createdAt.addingTimeInterval(301)) }?.code
                == .creationTimeInvalid)
    }

    static func find(_ needle: [UInt8], in hay: [UInt8]) -> Int? {
        guard needle.count <= hay.count else { return nil }
        for i in 0...(hay.count - needle.count) where hay[i..<i + needle.count].elementsEqual(needle) { return i }
        return nil
    }
}

/// The payload parser and the simulator's receipts, against the shape of the real ones.
@Suite("Receipts: payload and simulated receipts")
struct ReceiptPayloadTests {
    static let appID = try! AppID("ABCDE12345.com.example.shop")
    static let at = Date(timeIntervalSince1970: 1_780_000_000.25)

    static func contents(_ ca: TestCA) throws -> (ReceiptContents, SimulatedAttestation) {
        let device = SimulatedDevice(appID: appID, ca: ca)
        let a = try device.makeAttestation(clientDataHash: SHA256.hash(Array("challenge".utf8)), at: at)
        return (
            ReceiptContents.attest(
                appID: appID, certificate: a.credentialCertificate.der, clientDataHash: a.clientDataHash, environment: .development, at: at),
            a
        )
    }

    static func verify(_ ca: TestCA, _ receipt: [UInt8], _ a: SimulatedAttestation, at: Date = at) throws(ReceiptError) -> VerifiedReceipt {
        try ReceiptVerifier(extraRoots: [ca.receiptRoot]).verify(
            receipt,
            expecting: .init(
                appID: appID, attestedKey: .certificate(a.credentialCertificate.der), kind: .attest, clientDataHash: a.clientDataHash),
            at: at)
    }

    @Test("a simulated attestation carries an ATTEST receipt of the real shape, verifying under the test receipt root only")
    func simulatedShape() throws {
        let ca = try TestCA()
        let (_, a) = try Self.contents(ca)
        let ok = try Self.verify(ca, a.receipt, a)
        #expect(ok.receipt.fields.map(\.type) == [2, 3, 4, 5, 6, 7, 12, 21])  // Apple's ATTEST order
        #expect(ok.receipt.fields.allSatisfy { $0.version == 1 })
        #expect(ok.receipt.environment == "sandbox")
        #expect(ok.receipt.creationTime.text == "2026-05-28T20:26:40.25Z")  // trailing zero trimmed, as Apple writes
        #expect(ok.receipt.token?.utf8.count == 88)
        #expect(ok.chain.count == 3)
        #expect(ok.chain[0].subject.hasSuffix("CN=Attest Gateway TEST Fraud Receipt Signing"))
        #expect(ok.chain[1].subject.hasSuffix("CN=Attest Gateway TEST Integration CA 5 - G1"))
        #expect(ok.chain[2].der == ca.receiptRoot.der)
        // BER with indefinite lengths, like Apple's: SEQUENCE (0x30 0x80) { OID signedData, [0] (0xa0 0x80) … }.
        #expect(Array(a.receipt.prefix(2)) == [0x30, 0x80])
        #expect(Array(a.receipt.suffix(2)) == [0x00, 0x00])
        let real = try #require(VectorCase.receipts.first { $0.string("receipt_type") == "ATTEST" })
        #expect(Array(real.bytes("receipt_b64").prefix(2)) == [0x30, 0x80])
        // The verifier of a production gateway (G3 only) refuses it.
        #expect(
            ReceiptTests.failure {
                try ReceiptVerifier().verify(a.receipt, expecting: .init(), at: Self.at)
            }?.code == .chainUntrusted)
    }

    @Test("the RECEIPT builder reproduces Apple's refreshed receipts: order, dates, metric, garbled field 4 byte for byte")
    func refreshedBuilder() throws {
        let ca = try TestCA()
        let (attest, a) = try Self.contents(ca)
        let later = Self.at.addingTimeInterval(3 * 86_400 + 0.46)
        let receipt = try ca.issueReceipt(attest.refreshed(riskMetric: 7, at: later))
        let ok = try ReceiptVerifier(extraRoots: [ca.receiptRoot]).verify(
            receipt,
            expecting: .init(appID: Self.appID, attestedKey: .publicKey(a.credentialCertificate.p256PublicKey()!.x962), kind: .receipt),
            at: later.addingTimeInterval(1))
        let r = ok.receipt
        #expect(r.fields.map(\.type) == [17, 6, 2, 3, 4, 5, 7, 12, 19, 21])  // the real RECEIPTs' order
        // DER, like Apple's data service (0x30 0x82 …), where an ATTEST receipt is BER (0x30 0x80).
        #expect(Array(receipt.prefix(2)) == [0x30, 0x82])
        let real = try #require(VectorCase.receipts.first { $0.string("receipt_type") == "RECEIPT" })
        #expect(Array(real.bytes("receipt_b64").prefix(2)) == [0x30, 0x82])
        #expect(r.riskMetric == 7)
        #expect(r.creationTime.millis == Int64((later.timeIntervalSince1970 * 1000).rounded()))
        #expect(r.notBefore!.millis - r.creationTime.millis == 86_400_000)
        #expect(r.expirationTime!.millis - r.creationTime.millis == Int64(90 * 86_400_000))
        #expect(r.token == String(decoding: attest.token.utf8, as: UTF8.self))
        // Apple's garbling, checked on the real pair: the real ATTEST hash becomes the real RECEIPT's field 4.
        let realAttest = try #require(VectorCase.receipts.first { $0.name == "veehaitch-ios-14.2-attest-e849bf13" })
        let realReceipt = try #require(VectorCase.receipts.first { $0.name == "veehaitch-ios-14.2-receipt-ed4d4bf4" })
        #expect(ReceiptContents.garbled(realAttest.bytes("client_hash_b64")) == realReceipt.bytes("client_hash_b64"))
    }

    @Test(
        "refreshing a real receipt with the builder gives Apple's RECEIPT payload byte for byte",
        arguments: VectorCase.receipts.filter {
            $0.string("receipt_type") == "RECEIPT"
        })
    func refreshedMatchesApple(_ v: VectorCase) throws {
        let attest = try #require(
            VectorCase.receipts.first {
                $0.string("receipt_type") == "ATTEST" && $0.string("key_id_b64") == v.string("key_id_b64")
            })
        let real = try AppAttestReceipt.parseStored(v.bytes("receipt_b64"))
        let previous = ReceiptContents(try AppAttestReceipt.parseStored(attest.bytes("receipt_b64")))
        let built = previous.refreshed(
            riskMetric: try #require(real.riskMetric), at: Date(timeIntervalSince1970: Double(real.creationTime.millis) / 1000))
        #expect(built.payload == (try CMSSignedDataVerifier.unverifiedContent(v.bytes("receipt_b64"))), "\(v.name)")
        // And a RECEIPT refreshed again keeps its (already garbled) field 4 and its token.
        #expect(ReceiptContents(real).refreshed(riskMetric: 9, at: Date()).clientHash == real.clientHash)
    }

    @Test("unknown fields are kept and ignored; documented ones twice, missing, or of the wrong form are malformed")
    func parserRules() throws {
        let ca = try TestCA()
        let (base, a) = try Self.contents(ca)
        var unknown = base
        unknown.extraFields = [.init(type: 99, value: [1, 2, 3]), .init(type: 99, value: [4]), .init(type: 1000, value: [])]
        let kept = try Self.verify(ca, try ca.issueReceipt(unknown), a).receipt
        #expect(kept.fields.filter { $0.type == 99 }.map(\.value) == [[1, 2, 3], [4]])
        #expect(kept.fields.contains { $0.type == 1000 })

        func code(_ edit: (inout ReceiptContents) -> Void) throws -> ReceiptError.Code? {
            var c = base
            edit(&c)
            let signed = try ca.issueReceipt(c)
            return ReceiptTests.failure { try Self.verify(ca, signed, a) }?.code
        }
        #expect(try code { $0.extraFields = [.init(type: 2, value: Array(Self.appID.description.utf8))] } == .malformed)
        #expect(try code { $0.omittedFields = [2] } == .malformed)
        #expect(try code { $0.omittedFields = [3] } == .malformed)
        #expect(try code { $0.omittedFields = [6] } == .malformed)
        #expect(try code { $0.omittedFields = [12] } == .malformed)
        #expect(try code { $0.omittedFields = [4] } == .clientHashMismatch)
        #expect(try code { $0.timeTextOverrides = [12: "2026-05-28 20:26:40Z"] } == .malformed)
        #expect(try code { $0.timeTextOverrides = [21: "tomorrow"] } == .malformed)
        #expect(try code { $0.type = "RECEIPT" } == .malformed)  // a RECEIPT without a risk metric
        #expect(
            try code {
                $0.type = "RECEIPT"
                $0.riskMetric = 3
            } == .typeMismatch)
        #expect(try code { $0.extraFields = [.init(type: 17, value: Array("3x".utf8))] } == .malformed)
        #expect(try code { $0.type = "SOMETHING" } == .typeMismatch)
        // Text fields are UTF-8 or malformed, the token too (fuzz/FailCases/FuzzReceipt: it was decoded
        // lossily, its bytes replaced by U+FFFD).
        for type in [5, 7] {
            #expect(
                try code {
                    $0.omittedFields = [type]
                    $0.extraFields = [.init(type: type, value: [0x61, 0xff, 0x62])]
                } == .malformed, "field \(type)")
        }
        #expect(try code { $0.appID = "ABCDE12345.com.example.other" } == .appIDMismatch)
        #expect(try code { $0.creationTime = Self.at.addingTimeInterval(600) } == .creationTimeInvalid)
        // Not Apple's field set at all: fields that are not SEQUENCE {INTEGER, INTEGER, OCTET STRING}.
        for payload: [UInt8] in [
            [0x30, 0x00], [0x31, 0x03, 0x02, 0x01, 0x02], [0x31, 0x05, 0x30, 0x03, 0x02, 0x01, 0x02], [0x31, 0x00, 0x00],
        ] {
            let signed = try ca.issueReceipt(payload: payload)
            #expect(ReceiptTests.failure { try Self.verify(ca, signed, a) }?.code == .malformed, "\(payload)")
        }
    }

    @Test("RFC 3339 times as receipts write them: 0 to 9 fraction digits, Z or an offset; anything else refused")
    func times() {
        #expect(ReceiptTime("2020-11-27T22:41:40.46Z")?.millis == 1_606_516_900_460)
        #expect(ReceiptTime("2020-11-27T22:41:40.4Z")?.millis == 1_606_516_900_400)
        #expect(ReceiptTime("2020-11-27T22:41:40.466Z")?.millis == 1_606_516_900_466)
        #expect(ReceiptTime("2020-11-27T22:41:40.466999999Z")?.millis == 1_606_516_900_466)
        #expect(ReceiptTime("2020-11-27T22:41:40Z")?.millis == 1_606_516_900_000)
        #expect(ReceiptTime("2020-11-27T23:41:40.46+01:00")?.millis == 1_606_516_900_460)
        #expect(ReceiptTime("2024-02-29T00:00:00Z") != nil)
        for bad in [
            "2023-02-29T00:00:00Z", "2020-11-27T22:41:40.Z", "2020-11-27T22:41:40.1234567890Z", "2020-11-27T22:41:40",
            "2020-11-27 22:41:40Z", "2020-13-01T00:00:00Z", "2020-11-27T24:00:00Z", "2020-11-27T22:41:40Zjunk", "",
        ] {
            #expect(ReceiptTime(bad) == nil, "\(bad)")
        }
        #expect(ReceiptContents.timeText(Date(timeIntervalSince1970: 1_606_516_900.46)) == "2020-11-27T22:41:40.46Z")
        #expect(ReceiptContents.timeText(Date(timeIntervalSince1970: 1_606_516_900)) == "2020-11-27T22:41:40Z")
    }
}

/// macOS 27's key access-control property (extension 1.2.840.113635.100.8.6).
@Suite("Key access control (macOS 27)")
struct KeyAccessControlTests {
    @Test("Apple's documented macOS policy: Full Security mode and SIP, its operations readable")
    func documentedBlob() {
        let value = KeyAccessControl.extensionValue(blob: KeyAccessControl.macOSFullSecurityBlob)
        #expect(Hex.encode(Array(value.prefix(6))) == "3046a3440442")
        let acl = KeyAccessControl(extensionValue: value)
        #expect(acl.blob == KeyAccessControl.macOSFullSecurityBlob)
        #expect(acl.requiresMacOSFullSecurity)
        #expect(acl.summary == "macos_full_security (v11: ok oa odel osgn:rsec(6=1))")
    }

    @Test("other values are kept raw and do not count as the macOS policy")
    func otherValues() {
        // A policy without the signing requirement (signing always allowed).
        let ungated: [UInt8] = Hex.decode("30200c023131301a300b0c046f73676ea1030101ff300b0c046f64656ca1030101ff")!
        let weak = KeyAccessControl(extensionValue: KeyAccessControl.extensionValue(blob: ungated))
        #expect(weak.blob == ungated && !weak.requiresMacOSFullSecurity)
        #expect(weak.summary == "v11: osgn odel")
        let garbage = KeyAccessControl(extensionValue: [0x04, 0x02, 0x01, 0x02])
        #expect(garbage.blob == nil && !garbage.requiresMacOSFullSecurity)
        #expect(garbage.summary == "unrecognized (4 bytes)")
        let opaque = KeyAccessControl(extensionValue: KeyAccessControl.extensionValue(blob: [1, 2, 3]))
        #expect(opaque.blob == [1, 2, 3] && opaque.summary == "unrecognized blob (3 bytes)")
    }

    @Test("a simulated Mac's attestation carries the policy; the verifier reads it; twice is malformed")
    func simulatedMac() throws {
        let ca = try TestCA()
        let app = try AppID("ABCDE12345.com.example.mac")
        let verifier = AttestationVerifier(policy: .init(appIDs: [app], environments: [.development]), extraRoots: [ca.root])
        let mac = SimulatedDevice(appID: app, ca: ca)
        mac.keyAccessControl = SimulatedDevice.macOSKeyAccessControl
        let hash = SHA256.hash(Array("c".utf8))
        let ok = try verifier.verify(attestation: mac.attest(clientDataHash: hash), keyID: mac.keyID, clientDataHash: hash, at: Date())
        #expect(ok.keyAccessControl?.requiresMacOSFullSecurity == true)
        let phone = SimulatedDevice(appID: app, ca: ca)
        #expect(
            try verifier.verify(attestation: phone.attest(clientDataHash: hash), keyID: phone.keyID, clientDataHash: hash, at: Date())
                .keyAccessControl == nil)
        let twice = try mac.attest(
            clientDataHash: hash,
            mutations: AttestationMutations(extraLeafExtensions: [
                .init(oid: KeyAccessControl.oid, critical: false, value: KeyAccessControl.extensionValue(blob: [1]))
            ]))
        #expect(throws: AppAttestError(.malformed, "")) {
            try verifier.verify(attestation: twice, keyID: mac.keyID, clientDataHash: hash, at: Date())
        }
    }
}
