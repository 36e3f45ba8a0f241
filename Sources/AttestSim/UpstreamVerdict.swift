import Foundation
import GatewayWire

/// `attest-sim run --show-verdict`: the signed verdict (`X-App-Attest-Verdict`) the upstream got
/// for an accepted request, as the in-process `demo` upstream echoes it (its answer lists the
/// fields it was sent), decoded for the operator: header and claims. Decoded, not verified (the
/// simulator holds no gateway key; a backend verifies it with the gateway's JWKS).
public struct UpstreamVerdict: Sendable, Equatable {
    /// The header and claims JSON, keys sorted.
    public let header: String
    public let claims: String

    /// The token the demo upstream echoed in `body` (`{"headers":{"X-App-Attest-Verdict":…}}`),
    /// decoded; nil when there is none (a route without `verdict_header`, another upstream).
    public init?(demoAnswer body: [UInt8]) {
        guard let answer = (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any],
            let headers = answer["headers"] as? [String: Any],
            let token = headers.first(where: { $0.key.lowercased() == "x-app-attest-verdict" })?.value as? String
        else { return nil }
        self.init(token: token)
    }

    /// A compact JWS's header and claims; nil when it is not one.
    public init?(token: String) {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let header = Self.json(parts[0]), let claims = Self.json(parts[1]) else { return nil }
        self.header = header
        self.claims = claims
    }

    private static func json(_ part: Substring) -> String? {
        // GatewayWire's decoder reads the URL alphabet without padding, as JWS writes it.
        guard let bytes = try? Base64.decode(String(part)), let object = try? JSONSerialization.jsonObject(with: Data(bytes)),
            let sorted = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])
        else { return nil }
        return String(decoding: sorted, as: UTF8.self)
    }
}
