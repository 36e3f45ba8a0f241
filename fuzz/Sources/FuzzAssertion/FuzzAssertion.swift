// libFuzzer target: AssertionVerifier.verify on arbitrary bytes (the gateway's per-request path).
//
// Fixed context, from the real iOS 14.4 sample in
// Tests/AppAttestTests/Vectors/appattest-veehaitch-devicecheck-appattest.json
// (case veehaitch-ios-14.4-assertion), so the unmutated seed verifies as valid:
//   public key      the case's public_key_x962_b64 (parsed once)
//   app id          6MURL8TA57.de.vincent-haupert.apple-appattest-poc
//   clientDataHash  SHA256("wurzelpfropf")
//   previousCounter 0
//
// Properties checked (a violation traps):
//   1. Nothing crashes; every failure is an AppAttestError with an assertion code
//      (malformed, bad_signature, app_id_mismatch, counter_replay) and a detail.
//   2. verify(assertion: bytes) and AssertionObject.parse + verify(object) agree.
//   3. On success: counter > 0, the app id is the configured one, and the signature also verifies
//      directly with P256PublicKey over SHA256(authData ‖ clientDataHash).
//   4. The assertion's direct reader (`AssertionObject.twoByteStrings`, the shape of every real
//      assertion) reads only what the general CBOR decoder reads the same: a map of exactly the two
//      byte strings, equal to the ones it returned.
@_spi(Fuzzing) import AppAttest
import Foundation
import FuzzSupport
import GatewayCrypto
import GatewayWire

let appID: AppID = {
    do { return try AppID("6MURL8TA57.de.vincent-haupert.apple-appattest-poc") } catch { fatalError("\(error)") }
}()
let verifier = AssertionVerifier(appIDs: [appID])
let publicKey: P256PublicKey = {
    do {
        return try P256PublicKey(
            x962: decode64("BIjANKGQqn28WgYVAcZUKAOUJYIZiz8cxUZzyjua0gtBUoJnpU9f26BGn6+0a7aZCjlr8E+UpJ1DIMgcerJAo5g="))
    } catch {
        fatalError("fixed public key does not parse: \(error)")
    }
}()
let clientDataHash = decode64("i+ZcylFa0JfJU5Z9GNY12G3XihQu09B3UmvtEca+xns=")

let assertionCodes: Set<AppAttestError.Code> = [.malformed, .badSignature, .appIDMismatch, .counterReplay]

/// FUZZ_PRINT=1 prints each input's outcome to stderr (to see which code a crasher or seed reaches).

func decode64(_ s: String) -> [UInt8] {
    do { return try Base64.decode(s) } catch { fatalError("fixed base64 does not decode: \(error)") }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))

    let direct: Result<VerifiedAssertion, AppAttestError>
    do {
        direct = .success(try verifier.verify(assertion: bytes, publicKey: publicKey, clientDataHash: clientDataHash, previousCounter: 0))
    } catch {
        direct = .failure(error)
    }

    var object: AssertionObject? = nil
    let staged: Result<VerifiedAssertion, AppAttestError>
    do {
        let o = try AssertionObject.parse(bytes)
        object = o
        staged = .success(try verifier.verify(o, publicKey: publicKey, clientDataHash: clientDataHash, previousCounter: 0))
    } catch {
        staged = .failure(error)
    }

    FuzzSupport.print(bytes.count, direct) { "counter \($0.signCount), \($0.appID)" }

    if let (signature, authData) = AssertionObject.twoByteStrings(bytes) {
        guard case .map(let m)? = try? CBORDecoder(limits: AssertionObject.cborLimits).decode(bytes), m.entries.count == 2,
            case .bytes(let s)? = m[text: "signature"], case .bytes(let a)? = m[text: "authenticatorData"],
            s == signature, a == authData
        else { fatalError("the direct reader read an assertion the CBOR decoder reads otherwise") }
    }

    switch (direct, staged) {
    case (.failure(let a), .failure(let b)):
        FuzzSupport.checkFailures(a, b, allowed: assertionCodes, what: "verify(assertion:)")
    case (.success(let v), .success(let w)):
        guard v == w else { fatalError("the two verify paths returned different results") }
        guard v.signCount > 0 else { fatalError("accepted counter \(v.signCount) over previous 0") }
        guard v.appID == appID else { fatalError("accepted app id \(v.appID)") }
        guard let object else { fatalError("unreachable: staged success without an object") }
        let nonce = SHA256.hash(object.authenticatorData.bytes, clientDataHash)
        guard publicKey.isValidSignature(object.signature, for: nonce) else {
            fatalError("accepted an assertion whose signature does not verify on its own")
        }
    default:
        fatalError("verify(assertion:) and parse + verify disagree: \(direct) vs \(staged)")
    }
    return 0
}
