import GatewayCrypto
import GatewayWire

// The bytes an app signs and the headers it sends, per docs/client-contract.md: one definition for
// the gateway (GatewayPolicy) and for the device simulator (AttestSim).

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

    /// A registration's clientDataHash: SHA256 of the UTF-8 bytes of the challenge exactly as issued.
    public static func registrationHash(challenge: String) -> [UInt8] { SHA256.hash(challenge) }
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
