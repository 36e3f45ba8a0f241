import Foundation
import GatewayConfig
import GatewayCrypto
import Glibc

/// Who may use the admin listener, compiled from `admin` (docs/configuration.md, `admin`): with
/// `token_file`, every path but `/healthz`, `/readyz` and (unless `protect_metrics`) `/metrics`
/// requires `Authorization: Bearer <token>`. The token is read when a configuration is compiled
/// (start, reload, `gatewayd check`), kept only as its SHA-256, compared in constant time, and never
/// logged or printed.
///
/// With `allow`, only clients in those networks may connect at all: any other connection is closed
/// when it is accepted, before a byte is read (`admits`).
public struct AdminAccess: Sendable {
    /// SHA-256 of the token; nil: no token configured (every path open).
    let tokenDigest: [UInt8]?
    let protectMetrics: Bool
    /// `admin.allow`; empty: every address may connect.
    let allow: [IPNetwork]

    /// Shorter tokens are refused: a bearer token must not be guessable.
    public static let minimumTokenLength = 16
    /// Larger files are refused before reading (a token is one short line).
    public static let maximumFileSize = 4096

    public struct LoadError: Error, CustomStringConvertible {
        public let description: String
    }

    public init(_ config: AdminConfig) throws(LoadError) {
        protectMetrics = config.protectMetrics
        allow = config.allow
        guard let path = config.tokenFile else {
            tokenDigest = nil
            return
        }
        tokenDigest = SHA256.hash(try Self.readToken(path))
    }

    init(token: String?, protectMetrics: Bool = false, allow: [IPNetwork] = []) {
        tokenDigest = token.map { SHA256.hash(Array($0.utf8)) }
        self.protectMetrics = protectMetrics
        self.allow = allow
    }

    /// Whether a client at `address` (4 or 16 bytes, network order) may connect: always without
    /// `allow`, else when one of its networks contains it (an IPv4-mapped IPv6 peer of a dual-stack
    /// listener is matched as its IPv4 address).
    func admits(address: some Collection<UInt8>) -> Bool {
        allow.isEmpty || allow.contains { $0.contains(address) }
    }

    /// The token in `path`: one line of visible ASCII (a trailing newline is ignored), at least
    /// `minimumTokenLength` characters, in a regular file that other users cannot read or write (mode
    /// `0400`, `0600` or `0440`; a group may read it, as Kubernetes' `fsGroup` needs). Errors name the
    /// file and what is wrong, never the content.
    static func readToken(_ path: String) throws(LoadError) -> [UInt8] {
        func fail(_ why: String) -> LoadError { LoadError(description: "admin.token_file \(path): \(why)") }
        var bytes: [UInt8]
        do {
            bytes = try SecretFile.read(path, holding: "the token", maximumSize: maximumFileSize, oneWhat: "one token")
        } catch {
            throw fail(error.why)
        }
        while let last = bytes.last, last == 0x0a || last == 0x0d { bytes.removeLast() }
        guard !bytes.isEmpty else { throw fail("is empty; put a token in it, e.g. `openssl rand -hex 32`") }
        guard bytes.allSatisfy({ $0 > 0x20 && $0 < 0x7f }) else {
            throw fail("must hold one line of visible ASCII characters (no spaces, no second line)")
        }
        guard bytes.count >= minimumTokenLength else {
            throw fail("the token is shorter than \(minimumTokenLength) characters; generate one with `openssl rand -hex 32`")
        }
        return bytes
    }

    public var requiresToken: Bool { tokenDigest != nil }

    /// Whether `path` needs the token (health endpoints never do).
    func guards(path: String) -> Bool {
        guard tokenDigest != nil else { return false }
        switch path {
        case "/healthz", "/readyz": return false
        case "/metrics": return protectMetrics
        default: return true
        }
    }

    /// Whether an `Authorization` field value carries the token: `Bearer <token>` (scheme without
    /// case, one or more spaces). The presented token is hashed, so the comparison takes the same
    /// time whatever its length or content.
    func authorizes(_ authorization: String?) -> Bool {
        guard let digest = tokenDigest else { return true }
        guard let value = authorization else { return false }
        let bytes = Array(value.utf8)
        let scheme = Array("bearer".utf8)
        guard bytes.count > scheme.count,
            zip(bytes, scheme).allSatisfy({ ($0 | 0x20) == $1 }),
            bytes[scheme.count] == 0x20
        else { return false }
        let token = bytes[scheme.count...].drop { $0 == 0x20 }
        return ConstantTime.equals(SHA256.hash(token), digest)
    }
}

extension String {
    fileprivate func leftPadded(_ width: Int) -> String { String(repeating: "0", count: max(0, width - count)) + self }
}
