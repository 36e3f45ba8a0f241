import AppAttest
import Foundation
import GatewayCrypto
import GatewayStore
import GatewayWire

/// The endpoints' JSON bodies: one object whose listed members are strings. Unknown members are
/// ignored (clients may send more); a wrong type is an error that names the member.
enum JSONBody {
    static func strings(_ body: [UInt8], required: [String]) -> Result<[String: String], Explanation> {
        object(body).flatMap { strings($0, required: required) }
    }

    /// The body as one JSON object.
    static func object(_ body: [UInt8]) -> Result<[String: Any], Explanation> {
        let object: Any
        do {
            object = try JSONSerialization.jsonObject(with: Data(body), options: [])
        } catch {
            return .failure(Explanation(step: "body", error: .badJSON, fields: [("detail", "the body is not JSON")]))
        }
        guard let dict = object as? [String: Any] else {
            return .failure(Explanation(step: "body", error: .badJSON, fields: [("detail", "the body is not a JSON object")]))
        }
        return .success(dict)
    }

    /// The listed members of `dict` that must be strings (`except`: read otherwise by the caller).
    static func strings(_ dict: [String: Any], required: [String], except: Set<String> = []) -> Result<[String: String], Explanation> {
        var out: [String: String] = [:]
        for (k, v) in dict {
            guard ["keyId", "attestation", "challenge", "purpose", "platform"].contains(k), !except.contains(k) else { continue }
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
