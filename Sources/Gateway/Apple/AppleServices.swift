import Foundation
import GatewayConfig
import GatewayCrypto
import GatewayIO
import GatewayPolicy
import GatewayStore
import GatewayWire
import Glibc
import Synchronization

/// The `apple` section compiled: the team's key (the `.p8` file, read and checked now), the tokens
/// made with it, the TLS client context for Apple's hosts (or the configured CA), and where each
/// service is. Shared by every call to Apple: the App Attest data service now, DeviceCheck's
/// endpoints later (docs/verification.md, "The Apple client"). Immutable but for the token cache.
final class AppleServices: Sendable {
    /// Where one of Apple's services is reached (or the local stand-in).
    struct Endpoint: Sendable, Hashable {
        var host: String
        var port: UInt16
        /// The request-target of the call (`/v1/attestationData`, under the configured base path).
        var target: String
        /// `Host`, with the port when it is not 443.
        var authority: String { port == 443 ? host : (host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)") }
    }

    /// How a service wants the token (issue 14's trap): the App Attest data service takes the bare
    /// token in `Authorization`, as Apple's own example does; DeviceCheck takes `Bearer <token>`.
    enum TokenStyle: Sendable {
        case bare
        case bearer
    }

    let teamID: String
    let keyID: String
    let privateKey: ECPrivateKey
    let tls: TLSClientContext
    let development: Endpoint
    let production: Endpoint
    /// DeviceCheck's base (`apple.devicecheck_url`, else the host of `apple.devicecheck_environment`):
    /// its target is the base path, each call's path is appended (`deviceCheck(_:)`).
    let deviceCheckBase: Endpoint
    let connectTimeoutMillis: Int64
    let responseTimeoutMillis: Int64
    /// The configuration and the bytes of the key and CA files: a reload that changes none of them
    /// keeps this object (its token, its TLS sessions and its pools).
    let fingerprint: [UInt8]
    private let token = Mutex<(text: String, issuedAt: Int64)?>(nil)

    /// A token is made again after this long (Apple takes one up to an hour old; APNs asks for a
    /// new one at most every 20 minutes).
    static let tokenLifetimeSeconds: Int64 = 30 * 60
    /// The key file is a few hundred bytes; anything much larger is not one.
    static let maximumKeyFileSize = 16 * 1024

    struct LoadError: Error, CustomStringConvertible {
        let path: String
        let description: String
    }

    init(_ config: AppleConfig) throws(LoadError) {
        teamID = config.teamID
        keyID = config.keyID
        let keyBytes = try Self.readKeyFile(config.privateKey)
        do {
            privateKey = try ECPrivateKey(pem: String(decoding: keyBytes, as: UTF8.self))
        } catch {
            throw LoadError(
                path: "apple.private_key",
                description: "apple.private_key \(config.privateKey): is not the .p8 key Apple hands out "
                    + "(an unencrypted PKCS#8 EC P-256 private key in PEM): \(Self.reason(error))")
        }
        guard privateKey.curve == .p256 else {
            throw LoadError(
                path: "apple.private_key",
                description: "apple.private_key \(config.privateKey): is a \(privateKey.curve.rawValue) key; Apple's keys are P-256 (ES256)"
            )
        }
        do {
            tls = try TLSClientContext(configuration: TLSClientConfiguration(caFile: config.caFile))
        } catch {
            throw LoadError(path: config.caFile == nil ? "apple" : "apple.ca_file", description: "apple.ca_file: \(error.message)")
        }
        func endpoint(_ url: UpstreamURL) -> Endpoint {
            Endpoint(host: url.host, port: url.port, target: url.path + AppleConfig.attestDataPath)
        }
        development = endpoint(config.attestDataURL ?? AppleConfig.developmentAttestData)
        production = endpoint(config.attestDataURL ?? AppleConfig.productionAttestData)
        let dc = config.deviceCheckBase
        deviceCheckBase = Endpoint(host: dc.host, port: dc.port, target: dc.path)
        connectTimeoutMillis = config.connectTimeout.millis
        responseTimeoutMillis = config.responseTimeout.millis
        let hasher = SHA256.Hasher()
        hasher.update(Array("\(config)".utf8))
        hasher.update([0])
        hasher.update(keyBytes)
        hasher.update([0])
        if let ca = config.caFile, let data = FileManager.default.contents(atPath: ca) { hasher.update([UInt8](data)) }
        fingerprint = hasher.finalize()
    }

    /// The App Attest data service of a key's environment.
    func attestData(_ environment: KeyEnvironment) -> Endpoint { environment == .production ? production : development }

    /// One of DeviceCheck's endpoints (`/v1/validate_device_token`, …) under the base.
    func deviceCheck(_ call: DeviceCheck.Call) -> Endpoint {
        var e = deviceCheckBase
        e.target = deviceCheckBase.target + call.path
        return e
    }

    /// `Authorization`'s value: a token made at most `tokenLifetimeSeconds` ago (made again after).
    func authorization(_ style: TokenStyle, nowSeconds: Int64) throws -> String {
        let text = try token.withLock { cached -> String in
            if let c = cached, nowSeconds >= c.issuedAt, nowSeconds - c.issuedAt < Self.tokenLifetimeSeconds { return c.text }
            let made = try ES256JWT.apple(keyID: keyID, teamID: teamID, issuedAt: nowSeconds, key: privateKey)
            cached = (made, nowSeconds)
            return made
        }
        switch style {
        case .bare: return text
        case .bearer: return "Bearer " + text
        }
    }

    /// The key file, with the checks a secret gets: a regular file no other user may read or change,
    /// of a plausible size. Messages name the file, never its contents.
    static func readKeyFile(_ path: String) throws(LoadError) -> [UInt8] {
        func fail(_ why: String) -> LoadError { LoadError(path: "apple.private_key", description: "apple.private_key \(path): \(why)") }
        let bytes: [UInt8]
        do {
            bytes = try SecretFile.read(path, holding: "the team's private key", maximumSize: maximumKeyFileSize, oneWhat: "one key")
        } catch {
            throw fail(error.why)
        }
        guard !bytes.isEmpty else { throw fail("is empty") }
        return bytes
    }

    private static func reason(_ e: ECPrivateKey.Error) -> String {
        switch e {
        case .invalidKey(let why): why
        }
    }
}

/// The addresses of Apple's hosts as one caller (the risk refresher, the DeviceCheck service)
/// resolved them, each kept for `keepMillis` (five minutes) and forgotten after a failed call so
/// that the next one resolves again. Confined to its owner's queue, never an event loop (name
/// resolution blocks).
final class AppleHostAddresses {
    static let keepMillis: Int64 = 300_000
    private var known: [String: (address: SocketAddress, at: Int64)] = [:]

    /// `endpoint`'s host's address, resolved now when not known or too old; nil when it does not resolve.
    func address(_ endpoint: AppleServices.Endpoint, nowMillis: Int64) -> SocketAddress? {
        if let k = known[endpoint.host], nowMillis - k.at < Self.keepMillis { return k.address }
        guard let address = try? SocketAddress.resolve(host: endpoint.host, port: endpoint.port) else { return nil }
        known[endpoint.host] = (address, nowMillis)
        return address
    }

    /// Resolved again before the next call (after a failed one).
    func forget(_ endpoint: AppleServices.Endpoint) { known[endpoint.host] = nil }
}
