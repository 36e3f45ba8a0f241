import GatewayCrypto
import GatewayStore
import GatewayWire

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
        var copy = text
        return copy.withUTF8 { utf8 in
            if utf8.count == 64, utf8.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x61 && $0 <= 0x66) || ($0 >= 0x41 && $0 <= 0x46) })
            {
                if let bytes = Hex.decode(text) { return (bytes, .hex) }
            }
            // It decoded, so it holds one alphabet: a '-' or '_' names the URL one.
            guard let (bytes, url) = try? Base64.decodeNotingAlphabet(utf8: utf8) else { return (nil, .invalid) }
            return (bytes, url ? .base64URL : .base64Standard)
        }
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
