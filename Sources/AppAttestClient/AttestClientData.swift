import Foundation

// The bytes an app signs, per docs/client-contract.md ("Client data versions", "The authority").
// The gateway's own definition (AppAttest.ClientData, AppAttest.RequestAuthority) links OpenSSL and
// cannot go into an app; this is the client's side of the same contract, written for a URL, and
// Tests/AppAttestClientTests holds it byte for byte to the gateway's code.

/// The client data of the client contract, computed from what a `URLRequest` will send.
public enum AttestClientData {
    /// `bind: request`: the UTF-8 bytes of `challenge \n METHOD \n request-target \n
    /// lowercase-hex(SHA256(body))`, then, in version 2, `\n authority` (already in its normal form).
    public static func request(
        _ version: AppAttestClient.ClientDataVersion, challenge: String, method: String, target: String, authority: String,
        body: Data
    ) -> Data {
        request(version, challenge: challenge, method: method, target: target, authority: authority, bodySHA256: Digest.sha256(body))
    }

    /// The same with the body's SHA-256 already computed (32 bytes).
    public static func request(
        _ version: AppAttestClient.ClientDataVersion, challenge: String, method: String, target: String, authority: String,
        bodySHA256: [UInt8]
    ) -> Data {
        var out = Data()
        out.reserveCapacity(challenge.utf8.count + method.utf8.count + target.utf8.count + authority.utf8.count + 68)
        out.append(contentsOf: Array(challenge.utf8))
        out.append(0x0a)
        out.append(contentsOf: Array(method.utf8))
        out.append(0x0a)
        out.append(contentsOf: Array(target.utf8))
        out.append(0x0a)
        out.append(contentsOf: Array(Digest.hex(bodySHA256).utf8))
        if version == .v2 {
            out.append(0x0a)
            out.append(contentsOf: Array(authority.utf8))
        }
        return out
    }

    /// A registration's clientDataHash: SHA-256 of the UTF-8 bytes of the challenge exactly as issued.
    public static func registrationHash(challenge: String) -> Data {
        Data(Digest.sha256(Data(challenge.utf8)))
    }

    /// SHA-256, as the contract uses it (CryptoKit on Apple platforms, OpenSSL through the package's
    /// GatewayCrypto on Linux).
    public static func sha256(_ data: Data) -> Data { Data(Digest.sha256(data)) }

    // MARK: - What a URL sends

    /// The authority version 2 binds, from the URL the request goes to (contract, "The authority"):
    /// the host, ASCII-lowercased, one trailing `.` removed, an IPv6 address in brackets; then
    /// `:port` only when the URL names a port other than its scheme's default (80 for http, 443 for
    /// https). Hosts the gateway would refuse (not ASCII letters, digits, `-`, `.`, `_`, `~`; an IPv6
    /// zone; percent-encoding) are refused here, before anything is signed.
    public static func authority(of url: URL) throws(AppAttestClientError) -> String {
        guard let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https" else {
            throw .invalidRequest("the URL's scheme must be http or https: \(url.absoluteString)")
        }
        guard let rawHost = url.host, !rawHost.isEmpty else { throw .invalidRequest("the URL has no host: \(url.absoluteString)") }
        var host = Array(rawHost.utf8)
        if host.contains(UInt8(ascii: ":")) {
            // An IPv6 address (Foundation reports it without brackets on some platforms).
            if host.first == UInt8(ascii: "[") && host.last == UInt8(ascii: "]") { host = Array(host.dropFirst().dropLast()) }
            guard host.contains(UInt8(ascii: ":")),
                host.allSatisfy({ isHexDigit($0) || $0 == UInt8(ascii: ":") || $0 == UInt8(ascii: ".") })
            else { throw .invalidRequest("the URL's IPv6 host is not hex digits, ':' and '.' only (a zone id?): \(rawHost)") }
            host = [UInt8(ascii: "[")] + host.map(lower) + [UInt8(ascii: "]")]
        } else {
            guard host.allSatisfy(isNameByte) else {
                throw .invalidRequest(
                    "the URL's host must be ASCII letters, digits, '-', '.', '_' or '~' (an A-label for an IDN): \(rawHost)")
            }
            if host.last == UInt8(ascii: "."), host.count > 1 { host.removeLast() }
            guard !host.isEmpty, host.last != UInt8(ascii: ".") else { throw .invalidRequest("the URL's host is not a name: \(rawHost)") }
            host = host.map(lower)
        }
        var authority = String(decoding: host, as: UTF8.self)
        if let port = url.port {
            guard (0...65535).contains(port) else { throw .invalidRequest("the URL's port is out of range: \(port)") }
            let defaultPort = scheme == "https" ? 443 : 80
            if port != defaultPort { authority += ":\(port)" }
        }
        return authority
    }

    /// The request-target an HTTP client sends for `url`: its path (percent-encoded exactly as in the
    /// URL; `/` when empty) and `?query` when the URL has a query. A fragment is not sent. Paths with
    /// `.` or `..` segments are refused: HTTP clients (libcurl, CFNetwork) remove them before sending,
    /// so what would be signed is not what would be sent.
    public static func requestTarget(of url: URL) throws(AppAttestClientError) -> String {
        guard let c = URLComponents(url: url, resolvingAgainstBaseURL: true) else {
            throw .invalidRequest("the URL cannot be parsed: \(url.absoluteString)")
        }
        var path = c.percentEncodedPath
        if path.isEmpty { path = "/" }
        guard path.hasPrefix("/") else { throw .invalidRequest("the URL's path is not absolute: \(url.absoluteString)") }
        for segment in path.split(separator: "/", omittingEmptySubsequences: false) {
            let s = segment.lowercased()
            if s == "." || s == ".." || s == "%2e" || s == "%2e%2e" || s == ".%2e" || s == "%2e." {
                throw .invalidRequest("the URL's path has a '.' or '..' segment (clients remove them before sending): \(path)")
            }
        }
        if let q = c.percentEncodedQuery, !q.isEmpty { return path + "?" + q }
        return path
    }

    /// `url` as it is sent: without its fragment and without an empty `?`, so that the request-target
    /// the client sends is exactly `requestTarget(of:)`.
    static func sendableURL(_ url: URL) throws(AppAttestClientError) -> URL {
        guard var c = URLComponents(url: url, resolvingAgainstBaseURL: true) else {
            throw .invalidRequest("the URL cannot be parsed: \(url.absoluteString)")
        }
        guard c.fragment != nil || c.percentEncodedQuery == "" else { return url.absoluteURL }
        c.fragment = nil
        if c.percentEncodedQuery == "" { c.percentEncodedQuery = nil }
        guard let u = c.url else { throw .invalidRequest("the URL cannot be rebuilt: \(url.absoluteString)") }
        return u
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
