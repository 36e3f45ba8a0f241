/// The signed verdict (`verdict:`): the key the gateway signs the `X-App-Attest-Verdict` token of
/// routes with `assertion.verdict_header` with, the token's lifetime and issuer, and whether the
/// public key set is also served on the listeners (docs/configuration.md, "verdict"). The key file
/// is read at start, by `gatewayd check` and on reload, and never logged.
public struct VerdictConfig: Sendable, Equatable {
    /// An EC P-256 private key, PEM (PKCS#8 `BEGIN PRIVATE KEY` or SEC 1 `BEGIN EC PRIVATE KEY`),
    /// resolved against the config file's directory.
    public var key: String
    /// `exp` − `iat` of every token. Default 60s, 1s…1h.
    public var ttl: Duration
    /// `iss` of every token. Default `attest-gateway`.
    public var issuer: String
    /// `GET /.well-known/jwks.json` is also answered on the listeners (the public keys, no
    /// authentication); the admin listener always answers it. Default false.
    public var publish: Bool

    public init(key: String, ttl: Duration = .seconds(60), issuer: String = VerdictConfig.defaultIssuer, publish: Bool = false) {
        self.key = key
        self.ttl = ttl
        self.issuer = issuer
        self.publish = publish
    }

    public static let defaultIssuer = "attest-gateway"
    public static let ttlRange = Duration.seconds(1)...Duration.seconds(3600)
    /// The path of the public key set, on the admin listener and (with `publish`) the listeners.
    public static let jwksPath = "/.well-known/jwks.json"
}
