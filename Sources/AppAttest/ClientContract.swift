import GatewayCrypto
import GatewayWire

// The bytes an app signs and the headers it sends, per docs/client-contract.md: one definition for
// the gateway (GatewayPolicy) and for the device simulator (AttestSim).

/// The format of a `bind: request` client data (docs/client-contract.md, "Client data versions").
/// A route states the one it expects (`assertion.client_data`); the client never chooses it, so
/// nothing a client sends can downgrade a route to an older format.
public enum ClientDataVersion: String, Sendable, CaseIterable {
    /// `challenge \n METHOD \n request-target \n hex(SHA256(body))`: not bound to the host.
    case v1
    /// v1, then `\n` and the request's normalised authority (`RequestAuthority`).
    case v2
}

/// What an assertion's client data covers, as the README's client contract states it.
public enum ClientData {
    /// `bind: request`, version 1: the UTF-8 bytes of `challenge "\n" METHOD "\n" request-target "\n"
    /// lowercase-hex(SHA256(body))`, with the challenge exactly as issued and the request-target
    /// exactly as in the request line.
    public static func forRequest(challenge: String, method: String, target: String, body: [UInt8]) -> [UInt8] {
        forRequest(.v1, challenge: challenge, method: method, target: target, authority: "", body: body)
    }

    /// `bind: request` in `version`: version 2 appends `"\n" authority`, where `authority` is already
    /// in its normal form (`RequestAuthority.normalize`); version 1 ignores it.
    public static func forRequest(
        _ version: ClientDataVersion, challenge: String, method: String, target: String, authority: String, body: [UInt8]
    ) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(challenge.utf8.count + method.utf8.count + target.utf8.count + authority.utf8.count + 68)
        func put(_ text: String) {
            var t = text
            t.withUTF8 { out.append(contentsOf: $0) }
        }
        put(challenge)
        out.append(0x0a)
        put(method)
        out.append(0x0a)
        put(target)
        out.append(0x0a)
        Hex.append(SHA256.hash(body), to: &out)
        if version == .v2 {
            out.append(0x0a)
            put(authority)
        }
        return out
    }

    /// A registration's clientDataHash: SHA256 of the UTF-8 bytes of the challenge exactly as issued.
    public static func registrationHash(challenge: String) -> [UInt8] { SHA256.hash(challenge) }
}

/// The authority a version-2 client data binds (docs/client-contract.md, "The authority"): the
/// host a request is addressed to, in one normal form so that spellings that name the same host
/// (`A.Example`, `a.example.`, `a.example:443` over https) sign the same bytes.
public enum RequestAuthority {
    /// Why a request has no authority to bind.
    public struct Problem: Error, Sendable, Equatable, CustomStringConvertible {
        public let description: String
        init(_ description: String) { self.description = description }
    }

    /// The longest authority accepted (a DNS name is at most 253 characters, plus a port).
    public static let maxLength = 262

    /// The default port of a scheme (`http` 80, `https` 443; ASCII case ignored), else nil.
    public static func defaultPort(of scheme: String) -> Int? {
        switch scheme.lowercased() {
        case "http": 80
        case "https": 443
        default: nil
        }
    }

    /// The normal form of `host [":" port]`:
    /// - the host: a name or IPv4 address of letters, digits, `-`, `.`, `_`, `~`, lowercased (ASCII),
    ///   with one trailing `.` removed; or an IPv6 address in brackets (hex digits, `:` and `.`),
    ///   lowercased and otherwise kept as written;
    /// - the port: decimal digits (at most 65535) written without leading zeros; omitted when it is
    ///   `scheme`'s default port (80 for http, 443 for https) or when the authority ends in a bare `:`.
    ///
    /// Nil when `authority` is not of that form (empty, userinfo `@`, percent-encoding, a zone id,
    /// an empty host, two trailing dots, a port that is not a number up to 65535).
    public static func normalize(_ authority: some StringProtocol, scheme: String) -> String? {
        let bytes = Array(authority.utf8)
        guard !bytes.isEmpty, bytes.count <= maxLength else { return nil }
        var host: [UInt8] = []
        var rest: ArraySlice<UInt8>
        if bytes[0] == UInt8(ascii: "[") {
            guard let close = bytes.firstIndex(of: UInt8(ascii: "]")), close > 1 else { return nil }
            let inner = bytes[1..<close]
            guard inner.contains(UInt8(ascii: ":")),
                inner.allSatisfy({ isHexDigit($0) || $0 == UInt8(ascii: ":") || $0 == UInt8(ascii: ".") })
            else { return nil }
            host = [UInt8(ascii: "[")] + inner.map(lower) + [UInt8(ascii: "]")]
            rest = bytes[(close + 1)...]
        } else {
            let end = bytes.firstIndex(of: UInt8(ascii: ":")) ?? bytes.count
            var name = bytes[..<end]
            guard name.allSatisfy(isNameByte) else { return nil }
            if name.last == UInt8(ascii: "."), name.count > 1 { name = name.dropLast() }
            guard !name.isEmpty, name.last != UInt8(ascii: ".") else { return nil }
            host = name.map(lower)
            rest = bytes[end...]
        }
        guard let colon = rest.first else { return String(decoding: host, as: UTF8.self) }
        guard colon == UInt8(ascii: ":") else { return nil }
        let digits = rest.dropFirst()
        if digits.isEmpty { return String(decoding: host, as: UTF8.self) }
        var port = 0
        for d in digits {
            guard d >= 0x30 && d <= 0x39 else { return nil }
            port = port * 10 + Int(d - 0x30)
            guard port <= 65535 else { return nil }
        }
        if port == defaultPort(of: scheme) { return String(decoding: host, as: UTF8.self) }
        return String(decoding: host, as: UTF8.self) + ":" + String(port)
    }

    /// The normalised authority of a request: for an absolute-form request-target
    /// (`http://a.example/p`, HTTP/1.1) the target's own, with the target's scheme; otherwise
    /// `host` (HTTP/1.1 `Host`, HTTP/2 `:authority` or else `host`) with `scheme`, the scheme the
    /// request arrived with (`https` on a TLS listener, else `http`). An absolute-form request whose
    /// `Host` names another authority is a problem: the request would be routed by one and signed
    /// for the other.
    public static func of(target: String, host: String?, scheme: String) -> Result<String, Problem> {
        let t = target.utf8
        guard let first = t.first, first != UInt8(ascii: "/"), first != UInt8(ascii: "*") else {
            guard let host, !host.isEmpty else { return .failure(Problem("the request has no Host")) }
            guard let a = normalize(host, scheme: scheme) else { return .failure(Problem("the Host is not a valid authority")) }
            return .success(a)
        }
        let bytes = Array(t)
        guard let colon = bytes.firstIndex(of: UInt8(ascii: ":")), colon > 0, bytes.count >= colon + 3,
            bytes[colon + 1] == UInt8(ascii: "/"), bytes[colon + 2] == UInt8(ascii: "/")
        else { return .failure(Problem("the request-target is neither origin- nor absolute-form")) }
        let targetScheme = String(decoding: bytes[..<colon], as: UTF8.self)
        let authorityBytes = bytes[(colon + 3)...].prefix { $0 != UInt8(ascii: "/") && $0 != UInt8(ascii: "?") && $0 != UInt8(ascii: "#") }
        let authorityText = String(decoding: authorityBytes, as: UTF8.self)
        guard let a = normalize(authorityText, scheme: targetScheme) else {
            return .failure(Problem("the absolute-form target's authority is not valid"))
        }
        if let host, normalize(host, scheme: targetScheme) != a {
            return .failure(Problem("the Host differs from the absolute-form target's authority"))
        }
        return .success(a)
    }

    private static func lower(_ c: UInt8) -> UInt8 { c >= 0x41 && c <= 0x5a ? c | 0x20 : c }

    private static func isHexDigit(_ c: UInt8) -> Bool {
        (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x46) || (c >= 0x61 && c <= 0x66)
    }

    private static func isNameByte(_ c: UInt8) -> Bool {
        (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a) || c == 0x2d || c == 0x2e
            || c == 0x5f || c == 0x7e
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
    /// Set upstream on a verified request whose key has a risk metric (Apple's data service, issue
    /// 13); a client's copy never reaches an upstream (`X-App-Attest-*` is the gateway's).
    public static let riskMetric = "X-App-Attest-Risk-Metric"
    /// The DeviceCheck fallback (issue 14): a device without App Attest sends `DCDevice`'s token,
    /// base64, here (read by the gateway on a route with a fallback, never forwarded).
    public static let deviceToken = "X-Apple-Device-Token"
    /// Sent by apps whose device says App Attest is unsupported (`DCAppAttestService.isSupported`
    /// false), with or without a fallback: counted per route (`attest_gateway_unsupported_claims_total`).
    public static let unsupported = "X-App-Attest-Unsupported"
    /// Set upstream on a request the fallback accepted: `valid` (a client's copy never reaches an upstream).
    public static let deviceCheck = "X-Device-Check"
    /// Set upstream on a `bits: read`/`write` route: the device's two bits (`bit0=1; bit1=0; updated=2026-11`, or `unset`).
    public static let deviceCheckBits = "X-Device-Check-Bits"
    /// Set by an upstream of a `bits: write` route: the bits to write (`bit0=1`); removed before the client sees the response.
    public static let deviceCheckUpdate = "X-Device-Check-Update"
    /// Keys per account (issue 27): set by an upstream on the response to a verified request, the
    /// account the key belongs to (read by the gateway, never sent to a client).
    public static let account = "X-App-Attest-Account"
    /// Set upstream on a verified request whose key's account is known: its distinct keys within
    /// `accounts.window` (a client's copy never reaches an upstream).
    public static let accountKeys = "X-App-Attest-Account-Keys"
}
