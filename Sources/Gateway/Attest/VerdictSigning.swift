import GatewayConfig
import GatewayCrypto
import GatewayHTTP
import GatewayPolicy
import GatewayProxy
import GatewayWire

/// The `verdict` section compiled: the key file read and checked (like `apple.private_key`), and
/// the key set the JWKS publishes (`VerdictKeySet`: a reload that changes the key keeps the old
/// public key for its tokens' ttl).
struct VerdictSigning: Sendable {
    let keys: VerdictKeySet
    let issuer: String
    let publish: Bool

    struct LoadError: Error, CustomStringConvertible {
        let description: String
    }

    /// A key file is a few hundred bytes; anything much larger is not one.
    static let maximumKeyFileSize = 16 * 1024

    init(_ config: VerdictConfig, previous: VerdictSigning?, nowMillis: Int64) throws(LoadError) {
        let signing = try Self.readKey(config.key)
        let (seconds, _) = config.ttl.components
        keys = VerdictKeySet(current: signing, ttlSeconds: seconds, previous: previous?.keys, nowMillis: nowMillis)
        issuer = config.issuer
        publish = config.publish
    }

    /// The key file, with the checks a secret gets (`SecretFile`), then an EC P-256 private key in
    /// PEM. Messages name the file, never its contents.
    static func readKey(_ path: String) throws(LoadError) -> VerdictSigningKey {
        func fail(_ why: String) -> LoadError { LoadError(description: "verdict.key \(path): \(why)") }
        let bytes: [UInt8]
        do {
            bytes = try SecretFile.read(path, holding: "the verdict's private key", maximumSize: maximumKeyFileSize, oneWhat: "one key")
        } catch {
            throw fail(error.why)
        }
        guard !bytes.isEmpty else { throw fail("is empty") }
        let key: ECPrivateKey
        do {
            key = try ECPrivateKey(pem: String(decoding: bytes, as: UTF8.self))
        } catch {
            let why: String =
                switch error {
                case .invalidKey(let why): why
                }
            throw fail(
                "is not an EC P-256 private key in PEM (unencrypted PKCS#8 or SEC 1; make one with "
                    + "openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256): \(why)")
        }
        guard let signing = VerdictSigningKey(key) else {
            throw fail("is a \(key.curve.rawValue) key; the verdict is signed with ES256, which needs a P-256 key")
        }
        return signing
    }

    /// `GET /.well-known/jwks.json`: the public keys, JSON, cacheable for a minute (a backend's JWKS
    /// client fetches again on a `kid` it does not know, after a reload changed the key).
    func jwksResponse(nowMillis: Int64) -> LocalResponse {
        LocalResponse(
            status: 200, headers: Self.jwksFields, body: Array(keys.jwks(nowMillis: nowMillis).utf8))
    }

    static let jwksFields = HTTPFields([
        ("Content-Type", "application/jwk-set+json"), ("Cache-Control", "public, max-age=60"),
    ])
}

extension GatewayServer {
    /// A reload that changed the verdict's signing key says so, with the key kept in the JWKS and
    /// until when (a key file rotated in place changes no configuration key).
    static func logVerdictKey(previous: VerdictSigning?, _ next: VerdictSigning?) {
        guard let next, let previous, previous.keys.current.kid != next.keys.current.kid else { return }
        var fields = [("kid", next.keys.current.kid), ("previous_kid", previous.keys.current.kid)]
        if let kept = next.keys.retired.first(where: { $0.jwk.thumbprint == previous.keys.current.kid }) {
            fields.append(("previous_kept_until", RFC3339.format(millis: kept.untilMillis)))
        }
        GatewayEvents.log("info", "verdict key replaced; the previous public key stays in the JWKS until its tokens expire", fields)
    }
}

/// What the verdict token says of the request besides the route's verdict: who the gate verified.
struct VerdictSubject {
    var keyID: String?
    var appID: String?
    var environment: String?
    var riskMetric: UInt32?
    var deviceCheck: String?
    var deviceCheckBits: String?

    static let none = VerdictSubject()

    init(
        keyID: String? = nil, appID: String? = nil, environment: String? = nil, riskMetric: UInt32? = nil, deviceCheck: String? = nil,
        deviceCheckBits: String? = nil
    ) {
        self.keyID = keyID
        self.appID = appID
        self.environment = environment
        self.riskMetric = riskMetric
        self.deviceCheck = deviceCheck
        self.deviceCheckBits = deviceCheckBits
    }

    /// A verified assertion's key: its id (base64url), app, environment and risk metric.
    init(_ a: AcceptedAssertion) {
        self.init(
            keyID: Base64.encodeURL(a.keyID.bytes), appID: a.appID, environment: a.environment?.name, riskMetric: a.risk?.metric ?? nil)
    }
}

extension GatewayRouter {
    /// `edit` with the route's signed verdict added (`X-App-Attest-Verdict`), on a route with
    /// `assertion.verdict_header` (else `edit` as it is): one ES256 signature per forwarded request.
    /// `body`: the body as read and forwarded (nil: forwarded from the head, not read).
    func addingVerdict(
        _ edit: HeaderEdit, _ verdict: RouteVerdict, subject: VerdictSubject, method: String, target: String, requestID: String,
        body: [UInt8]?, route r: GatewayRuntime.CompiledRoute, runtime rt: GatewayRuntime
    ) -> HeaderEdit {
        guard r.verdictHeader, let signing = rt.verdict else { return edit }
        let (iat, exp) = signing.keys.times(nowMillis: AttestContext.nowMillis())
        let claims = VerdictClaims(
            issuer: signing.issuer, audience: r.name, issuedAt: iat, expiresAt: exp, id: requestID, subject: subject.keyID,
            appID: subject.appID, environment: subject.environment, verdict: verdict.verdict.rawValue, mode: verdict.mode.rawValue,
            method: method, target: target, bodySHA256: body.map { Hex.encode(SHA256.hash($0)) },
            riskMetric: subject.riskMetric, deviceCheck: subject.deviceCheck, deviceCheckBits: subject.deviceCheckBits)
        guard let token = VerdictToken.sign(claims, with: signing.keys.current) else {
            GatewayEvents.log(
                "error", "the verdict could not be signed; forwarded without it", [("route", r.name), ("request_id", requestID)])
            return edit
        }
        return edit.adding(VerdictToken.field, token)
    }
}
