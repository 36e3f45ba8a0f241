import AppAttest
import Foundation
import GatewayCrypto
import GatewayStore
import GatewayWire

/// `POST /v1/attest/challenge` with an optional body `{"purpose":"register"|"assert","keyId":"<base64>"}`.
public enum ChallengeEndpoint {
    public static let maxBody = 4 * 1024

    /// With `requireKeyID` (a Redis Cluster store, where a challenge must carry its key's hash tag) a
    /// request without `keyId` is refused with 400 `key_id_required`.
    public static func request(body: [UInt8], ttlMillis: Int64, requireKeyID: Bool = false) -> Result<ChallengeRequest, Explanation> {
        let keyRequired = Explanation(
            step: "body", error: .keyIDRequired,
            fields: [
                ("field", "keyId"), ("reason", "this gateway's store binds every challenge to a key: send {\"keyId\":\"<base64 key id>\"}"),
            ])
        if body.allSatisfy({ $0 == 0x20 || $0 == 0x0a || $0 == 0x0d || $0 == 0x09 }) {
            if requireKeyID { return .failure(keyRequired) }
            return .success(ChallengeRequest(purpose: nil, keyID: nil, ttlMillis: ttlMillis))
        }
        let fields: [String: String]
        switch JSONBody.strings(body, required: []) {
        case .failure(let e): return .failure(e)
        case .success(let f): fields = f
        }
        var purpose: ChallengePurpose? = nil
        if let p = fields["purpose"] {
            guard let parsed = ChallengePurpose(rawValue: p) else {
                return .failure(
                    Explanation(step: "body", error: .badJSON, fields: [("field", "purpose"), ("expected", "register or assert")]))
            }
            purpose = parsed
        }
        var keyID: KeyID? = nil
        if let k = fields["keyId"] {
            let (bytes, encoding) = BinaryEncoding.decode(k)
            guard let bytes, let id = KeyID(bytes) else {
                return .failure(
                    Explanation(
                        step: "body", error: .malformed,
                        fields: [("field", "keyId"), ("key_id_encoding", encoding.rawValue), ("expected", "base64 of the 32-byte key id")]))
            }
            keyID = id
        }
        if requireKeyID && keyID == nil { return .failure(keyRequired) }
        return .success(ChallengeRequest(purpose: purpose, keyID: keyID, ttlMillis: ttlMillis))
    }

    /// `{"challenge":"<base64url>","expiresAt":"<RFC 3339>"}`.
    public static func json(_ issued: IssuedChallenge) -> String {
        var o = JSONObject()
        o.set("challenge", ChallengeText.encode(issued.token))
        o.set("expiresAt", RFC3339.format(millis: issued.expiresAtMillis))
        return o.description
    }
}
