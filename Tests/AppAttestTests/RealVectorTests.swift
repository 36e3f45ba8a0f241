import AppAttest
import Foundation
import GatewayCrypto
@_exported import GatewayTestSupport
import GatewayWire
import Testing

@Suite("Real device vectors")
struct RealVectorTests {
    @Test("the vectors are all here") func inventory() {
        #expect(VectorCase.attestations.count >= 40)
        #expect(VectorCase.assertions.count >= 25)
        let realAttestations = Set(VectorCase.attestations.filter { $0.expect == "valid" }.map { $0.string("attestation_b64")! })
        #expect(realAttestations.count == 18)
    }

    @Test("attestation verdict at the pinned instant", arguments: VectorCase.attestations)
    func attestation(_ v: VectorCase) throws {
        let env = AttestEnvironment(rawValue: v.string("verifier_environment")!)!
        let verifier = AttestationVerifier(policy: .init(appIDs: [v.appID], environments: [env]))
        let result = Result { () throws(AppAttestError) in
            try verifier.verify(
                attestation: v.bytes("attestation_b64"), keyID: v.bytes("key_id_b64"),
                clientDataHash: v.bytes("client_data_hash_b64"), at: v.instant)
        }
        switch (result, v.expectedCode) {
        case (.success(let ok), nil):
            #expect(ok.publicKey.x962 == v.bytes("expected_public_key_x962_b64"))
            #expect(ok.keyID == v.bytes("key_id_b64"))
            #expect(ok.environment == env)
            #expect(ok.appID == v.appID)
            #expect(ok.signCount == 0)
            #expect(ok.receipt.count == v.json["receipt_length"] as! Int)
        case (.failure(let e), let code?):
            #expect(e.code == code, "\(v.name): \(e)")
        case (.success, let code?):
            Issue.record("\(v.name) verified but must fail with \(code)")
        case (.failure(let e), nil):
            Issue.record("\(v.name) must verify but failed: \(e)")
        }
    }

    @Test("assertion verdict", arguments: VectorCase.assertions)
    func assertion(_ v: VectorCase) throws {
        let key = try P256PublicKey(x962: v.bytes("public_key_x962_b64"))
        let verifier = AssertionVerifier(appIDs: [v.appID])
        let previous = (v.json["previous_counter"] as? Int).map { UInt32($0) }
        let result = Result { () throws(AppAttestError) in
            try verifier.verify(
                assertion: v.bytes("assertion_b64"), publicKey: key, clientDataHash: v.bytes("client_data_hash_b64"),
                previousCounter: previous)
        }
        switch (result, v.expectedCode) {
        case (.success(let ok), nil):
            #expect(Int(ok.signCount) == v.json["expected_counter"] as! Int)
        case (.failure(let e), let code?):
            #expect(e.code == code, "\(v.name): \(e)")
        case (.success, let code?):
            Issue.record("\(v.name) verified but must fail with \(code)")
        case (.failure(let e), nil):
            Issue.record("\(v.name) must verify but failed: \(e)")
        }
    }

    @Test("an assertion verifies with the key its own attestation yields", arguments: VectorCase.assertions.filter { $0.expect == "valid" })
    func assertionWithAttestedKey(_ v: VectorCase) throws {
        guard let attName = v.string("attestation_case"), let att = VectorCase.attestationCase(named: attName) else { return }
        let env = AttestEnvironment(rawValue: att.string("verifier_environment")!)!
        let attested = try AttestationVerifier(policy: .init(appIDs: [att.appID], environments: [env])).verify(
            attestation: att.bytes("attestation_b64"), keyID: att.bytes("key_id_b64"),
            clientDataHash: att.bytes("client_data_hash_b64"), at: att.instant)
        let ok = try AssertionVerifier(appIDs: [attested.appID]).verify(
            assertion: v.bytes("assertion_b64"), publicKey: attested.publicKey,
            clientDataHash: v.bytes("client_data_hash_b64"), previousCounter: attested.signCount)
        #expect(ok.signCount > 0)
    }

    @Test("every real assertion sets AT with no credential data after the counter")
    func assertionATFlag() throws {
        for v in VectorCase.assertions where v.expect == "valid" {
            let obj = try AssertionObject.parse(v.bytes("assertion_b64"))
            #expect(obj.authenticatorData.flags.contains(.attestedCredentialData))
            #expect(obj.authenticatorData.bytes.count == 37)
            #expect(obj.authenticatorData.extensions == nil)
        }
    }

    @Test("the nonce is the message, not a prehashed digest (checked on every real assertion)")
    func nonceIsTheMessage() throws {
        for v in VectorCase.assertions where v.expect == "valid" {
            let key = try P256PublicKey(x962: v.bytes("public_key_x962_b64"))
            let obj = try AssertionObject.parse(v.bytes("assertion_b64"))
            let nonce = SHA256.hash(obj.authenticatorData.bytes, v.bytes("client_data_hash_b64"))
            #expect(key.isValidSignature(obj.signature, for: nonce))
            #expect(!key.isValidSignature(obj.signature, for: SHA256.hash(nonce)))
        }
    }
}

extension VectorCase: CustomTestStringConvertible {
    public var testDescription: String { description }
}
