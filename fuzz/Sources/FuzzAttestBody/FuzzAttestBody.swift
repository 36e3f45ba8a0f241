// libFuzzer target: the JSON bodies of the attest endpoints, as a client sends them:
// `POST /v1/attest/challenge` (ChallengeEndpoint.request, with and without a required key id) and
// `POST /v1/attest/register` (Registrar.presentedChallenge, then Registrar.register over a memory
// store: JSON, keyId, attestation base64, challenge, the attestation's parse and verification).
//
// Fixed context: no app allowed (no attestation can pass, so no store write), instant
// 2021-01-23T12:13:33Z, challenge TTL 120 s.
//
// Properties checked (a violation traps):
//   1. Nothing crashes; both endpoints answer the same way twice.
//   2. The challenge endpoint: a whitespace-only body asks for nothing; a success carries the TTL, a
//      32-byte key id when one was sent (and always with requireKeyID), the purpose the body names;
//      a refusal is a `body` step with bad_json, missing_field, malformed or key_id_required.
//   3. presentedChallenge names a challenge only when the body is an object whose "challenge" is a
//      string that decodes as one.
//   4. register answers exactly once, with a refusal (no app is allowed) at the body, attestation or
//      app policy step, with a code of that step; no field of the refusal holds the challenge as sent
//      (they are redacted) or the attestation's base64.
import AppAttest
import Foundation
import FuzzSupport
import GatewayPolicy
import GatewayStore

let ttl: Int64 = 120_000
let now: Int64 = 1_611_404_013_000
let policy: AttestPolicy = {
    do { return try AttestPolicy(apps: [], extraRoots: [], challengeTTLMillis: ttl) } catch { fuzzFail("policy: \(error)") }
}()
let store = MemoryAttestStore(shards: 1)
let bodyCodes: Set<String> = ["bad_json", "missing_field", "malformed", "key_id_required", "challenge_unknown"]

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let body = FuzzInput.bytes(data, size)
    let object = (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any]
    for requireKeyID in [false, true] { challenge(body, object, requireKeyID: requireKeyID) }
    presented(body, object)
    register(body, object)
    return 0
}

func challenge(_ body: [UInt8], _ object: [String: Any]?, requireKeyID: Bool) {
    let result = ChallengeEndpoint.request(body: body, ttlMillis: ttl, requireKeyID: requireKeyID)
    let again = ChallengeEndpoint.request(body: body, ttlMillis: ttl, requireKeyID: requireKeyID)
    switch (result, again) {
    case (.success(let r), .success(let s)):
        guard r == s else { fuzzFail("the challenge endpoint answers differently twice") }
        guard r.ttlMillis == ttl, !r.chained else { fuzzFail("a challenge request with ttl \(r.ttlMillis), chained \(r.chained)") }
        if requireKeyID && r.keyID == nil { fuzzFail("a challenge without the required key id") }
        if let k = r.keyID, k.bytes.count != 32 { fuzzFail("a key id of \(k.bytes.count) bytes") }
        let blank = body.allSatisfy { $0 == 0x20 || $0 == 0x0a || $0 == 0x0d || $0 == 0x09 }
        if blank {
            guard r.purpose == nil, r.keyID == nil else { fuzzFail("an empty body asked for a purpose or key") }
        } else {
            guard let object else { fuzzFail("a body that is not a JSON object was accepted") }
            guard r.purpose?.rawValue == object["purpose"] as? String else {
                fuzzFail("purpose \(String(describing: r.purpose)) from \(String(describing: object["purpose"]))")
            }
            guard (r.keyID != nil) == (object["keyId"] is String) else { fuzzFail("a key id taken from nothing, or dropped") }
        }
    case (.failure(let e), .failure(let f)):
        guard e.error.code == f.error.code, e.step == f.step else { fuzzFail("the challenge endpoint refuses differently twice") }
        guard e.step == "body", bodyCodes.contains(e.error.code) else { fuzzFail("challenge refusal \(e.step) \(e.error.code)") }
    default:
        fuzzFail("the challenge endpoint answers differently twice")
    }
}

func presented(_ body: [UInt8], _ object: [String: Any]?) {
    guard let token = Registrar.presentedChallenge(body: body) else { return }
    guard let text = object?["challenge"] as? String, ChallengeText.decode(text) == token else {
        fuzzFail("presentedChallenge found a challenge the body does not hold")
    }
}

final class Answers: @unchecked Sendable {
    var results: [RegistrationResult] = []
}

func register(_ body: [UInt8], _ object: [String: Any]?) {
    let answers = Answers()
    Registrar.register(body: body, policy: policy, store: store, nowMillis: now) { answers.results.append($0) }
    guard answers.results.count == 1, case .refused(let e) = answers.results[0] else {
        fuzzFail("register answered \(answers.results.count) times: \(answers.results)")
    }
    switch e.step {
    case "body": guard bodyCodes.contains(e.error.code) else { fuzzFail("body refusal \(e.error.code)") }
    case "attestation": guard e.error.code != "bad_json" else { fuzzFail("attestation refusal bad_json") }
    case "app_policy": guard e.error.code == "app_not_allowed" else { fuzzFail("app_policy refusal \(e.error.code)") }
    default: fuzzFail("register refused at step \(e.step) (\(e.error.code)) with no app allowed")
    }
    let secrets = [object?["challenge"] as? String, object?["attestation"] as? String].compactMap { $0 }.filter { $0.count > 16 }
    for (name, value) in e.fields where name != "key_id" && secrets.contains(where: { value.contains($0) }) {
        fuzzFail("the refusal's field \(name) holds what the client sent in full")
    }
}
