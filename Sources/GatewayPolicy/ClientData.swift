import GatewayCrypto
import GatewayStore
import GatewayWire

/// What an assertion's client data covers, as the README's client contract states it.
public enum ClientData {
    /// `bind: request`: the UTF-8 bytes of `challenge "\n" METHOD "\n" request-target "\n"
    /// lowercase-hex(SHA256(body))`, with the challenge exactly as issued and the request-target
    /// exactly as in the request line.
    public static func forRequest(challenge: String, method: String, target: String, body: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(challenge.utf8.count + method.utf8.count + target.utf8.count + 67)
        out += challenge.utf8
        out.append(0x0a)
        out += method.utf8
        out.append(0x0a)
        out += target.utf8
        out.append(0x0a)
        out += Hex.encode(SHA256.hash(body)).utf8
        return out
    }
}

/// The three request headers of the client contract, and the one the gateway sets upstream.
public enum AttestHeaders {
    public static let keyID = "X-App-Attest-Key-Id"
    public static let challenge = "X-App-Attest-Challenge"
    public static let assertion = "X-App-Assertion"
    public static let nextChallenge = "X-App-Attest-Next-Challenge"
    public static let nextChallengeExpires = "X-App-Attest-Next-Challenge-Expires"
    public static let requestID = "X-Request-Id"
}

/// How a client encoded a binary value: what `explain` shows when a key id does not decode as
/// expected (a very common integration mistake is hex, or URL-safe base64, where base64 was meant).
public enum BinaryEncoding: String, Sendable {
    case base64Standard = "base64"
    case base64URL = "base64url"
    case hex
    case invalid

    /// The bytes of `text`: base64 in either alphabet (padding optional), or, for a 64-character
    /// hex string, hex (some client libraries print key ids that way).
    public static func decode(_ text: String) -> (bytes: [UInt8]?, encoding: BinaryEncoding) {
        let utf8 = text.utf8
        if utf8.count == 64, utf8.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x61 && $0 <= 0x66) || ($0 >= 0x41 && $0 <= 0x46) }) {
            if let bytes = Hex.decode(text) { return (bytes, .hex) }
        }
        let url = utf8.contains(UInt8(ascii: "-")) || utf8.contains(UInt8(ascii: "_"))
        guard let bytes = try? Base64.decode(text) else { return (nil, .invalid) }
        return (bytes, url ? .base64URL : .base64Standard)
    }
}

/// Challenges travel as unpadded base64url of their bytes.
public enum ChallengeText {
    public static func encode(_ token: ChallengeToken) -> String { Base64.encodeURL(token.bytes) }

    public static func decode(_ text: String) -> ChallengeToken? {
        guard text.utf8.count <= 128, let bytes = try? Base64.decode(text) else { return nil }
        return ChallengeToken(bytes)
    }
}
