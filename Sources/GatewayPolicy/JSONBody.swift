import AppAttest
import Foundation
import GatewayCrypto
import GatewayStore
import GatewayWire

/// The endpoints' JSON bodies: one object whose listed members are strings. Unknown members are
/// ignored (clients may send more); a wrong type is an error that names the member.
enum JSONBody {
    static func strings(_ body: [UInt8], required: [String]) -> Result<[String: String], Explanation> {
        let object: Any
        do {
            object = try JSONSerialization.jsonObject(with: Data(body), options: [])
        } catch {
            return .failure(Explanation(step: "body", error: .badJSON, fields: [("detail", "the body is not JSON")]))
        }
        guard let dict = object as? [String: Any] else {
            return .failure(Explanation(step: "body", error: .badJSON, fields: [("detail", "the body is not a JSON object")]))
        }
        var out: [String: String] = [:]
        for (k, v) in dict {
            guard ["keyId", "attestation", "challenge", "purpose"].contains(k) else { continue }
            guard let s = v as? String else {
                return .failure(Explanation(step: "body", error: .badJSON, fields: [("field", k), ("expected", "a string")]))
            }
            out[k] = s
        }
        for r in required where out[r] == nil {
            return .failure(Explanation(step: "body", error: .missingField, fields: [("field", r)]))
        }
        return .success(out)
    }
}
