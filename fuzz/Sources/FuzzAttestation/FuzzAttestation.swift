// libFuzzer target: AttestationObject.parse and a full AttestationVerifier.verify on arbitrary bytes.
//
// Fixed context, from the real iOS 14.4 sample in
// Tests/AppAttestTests/Vectors/appattest-veehaitch-devicecheck-appattest.json
// (case veehaitch-ios-14.4-attestation), so the unmutated seed of that case verifies as valid and the
// mutations explore every failure path around it:
//   app ids       6MURL8TA57.de.vincent-haupert.apple-appattest-poc (+ Apple's documentation sample app)
//   environments  development and production
//   instant       2021-01-23T12:13:33Z (the case's verification_time)
//   keyID         the case's key id (fixed)
//   clientData    the case's clientDataHash, SHA256("wurzelpfropf") (fixed)
//
// Properties checked (a violation traps):
//   1. Nothing crashes; every failure is an AppAttestError (typed throws) with an attestation code.
//   2. verify(attestation: bytes) and parse + verify(object) agree (same code, or both succeed).
//   3. On success the result is consistent: SHA256(public key) == keyID, counter 0, an allowed app id.
import AppAttest
import Foundation
import FuzzSupport
import GatewayCrypto
import GatewayWire

let appIDs: [AppID] = {
    do {
        return [try AppID("6MURL8TA57.de.vincent-haupert.apple-appattest-poc"), try AppID("0352187391.com.apple.example_app_attest")]
    } catch {
        fatalError("fixed app ids do not parse: \(error)")
    }
}()
let verifier = AttestationVerifier(policy: .init(appIDs: appIDs, environments: [.development, .production]))
let instant = Date(timeIntervalSince1970: 1_611_404_013)  // 2021-01-23T12:13:33Z
let keyID = decode64("YmbJO4x5nEHUvncp9zdWuVZjNBEMgJn3cdSToAXQe3M=")
let clientDataHash = decode64("i+ZcylFa0JfJU5Z9GNY12G3XihQu09B3UmvtEca+xns=")

/// Codes an attestation may fail with (badSignature, counterReplay, invalidPublicKey belong to assertions).
let attestationCodes: Set<AppAttestError.Code> = [
    .malformed, .unsupportedFormat, .chainUntrusted, .certificateExpired, .certificateNotYetValid, .nonceMismatch,
    .keyIDMismatch, .publicKeyMismatch, .appIDMismatch, .counterNotZero, .environmentMismatch, .credentialIDMismatch,
]

/// FUZZ_PRINT=1 prints each input's outcome to stderr (to see which code a crasher or seed reaches).

func decode64(_ s: String) -> [UInt8] {
    do { return try Base64.decode(s) } catch { fatalError("fixed base64 does not decode: \(error)") }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))

    // Path 1: the one-call API the gateway uses.
    let direct: Result<VerifiedAttestation, AppAttestError>
    do {
        direct = .success(try verifier.verify(attestation: bytes, keyID: keyID, clientDataHash: clientDataHash, at: instant))
    } catch {
        direct = .failure(error)
    }

    // Path 2: parse, then verify the parsed object.
    let staged: Result<VerifiedAttestation, AppAttestError>
    do {
        let object = try AttestationObject.parse(bytes)
        guard object.format == AttestationObject.format else { fatalError("parse accepted fmt \(object.format)") }
        guard (2...4).contains(object.x5c.count) else { fatalError("parse accepted \(object.x5c.count) certificates") }
        guard object.authenticatorData.attestedCredentialData != nil else { fatalError("parse accepted authData without credential data") }
        staged = .success(try verifier.verify(object, keyID: keyID, clientDataHash: clientDataHash, at: instant))
    } catch {
        staged = .failure(error)
    }

    FuzzSupport.print(bytes.count, direct) { "counter \($0.signCount), \($0.appID)" }

    switch (direct, staged) {
    case (.failure(let a), .failure(let b)):
        FuzzSupport.checkFailures(a, b, allowed: attestationCodes, what: "verify(attestation:)")
    case (.success(let v), .success(let w)):
        for r in [v, w] {
            guard ConstantTime.equals(SHA256.hash(r.publicKey.x962), keyID), r.keyID == keyID else {
                fatalError("accepted an attestation whose key does not hash to the key id")
            }
            guard r.signCount == 0 else { fatalError("accepted an attestation with counter \(r.signCount)") }
            guard appIDs.contains(r.appID) else { fatalError("accepted app id \(r.appID) outside the policy") }
        }
    default:
        fatalError("verify(attestation:) and parse + verify disagree: \(direct) vs \(staged)")
    }
    return 0
}
