import Foundation
import GatewayConfig
import GatewayCrypto
import GatewayRedis
import Glibc

/// `store` credentials and TLS compiled for the Redis connections when a configuration is compiled
/// (start, reload, `gatewayd check`): the password (from the url or `password_file`, which is read
/// and checked now), and the TLS context (CA and client files read and checked now). Errors name
/// the key and the file, never the password.
enum RedisAccess {
    struct LoadError: Error, CustomStringConvertible {
        let description: String
    }

    static func security(_ r: StoreConfig.Redis) throws(LoadError) -> RedisSecurity {
        var security = RedisSecurity(username: r.url.username, password: r.url.password?.bytes)
        if let path = r.passwordFile { security.password = try readPassword(path) }
        if let tls = r.tls {
            let configuration = TLSClientConfiguration(
                caFile: tls.caFile, verify: true, clientCertificatePath: tls.clientCertificate, clientKeyPath: tls.clientKey,
                alpnProtocols: [])
            do {
                security.tls = try TLSClientContext(configuration: configuration)
            } catch {
                throw LoadError(description: "store.tls: \(error.message)")
            }
            security.tlsServerName = tls.serverName
        }
        return security
    }

    /// Larger files are refused before reading (a password is one line).
    static let maximumFileSize = 4096

    /// The password in `path`: one line (a trailing newline is ignored), not empty, no control
    /// characters, in a regular file that other users cannot read or write (mode `0400`, `0600` or
    /// `0440`: a group may read it, as Kubernetes' `fsGroup` needs).
    static func readPassword(_ path: String) throws(LoadError) -> [UInt8] {
        func fail(_ why: String) -> LoadError { LoadError(description: "store.password_file \(path): \(why)") }
        var bytes: [UInt8]
        do {
            bytes = try SecretFile.read(path, holding: "the password", maximumSize: maximumFileSize, oneWhat: "one password")
        } catch {
            throw fail(error.why)
        }
        if bytes.last == 0x0a { bytes.removeLast() }
        if bytes.last == 0x0d { bytes.removeLast() }
        guard !bytes.isEmpty else { throw fail("is empty; put the Redis password in it") }
        guard bytes.allSatisfy({ $0 >= 0x20 && $0 != 0x7f }) else {
            throw fail("must hold one line without control characters (no second line)")
        }
        return bytes
    }
}
