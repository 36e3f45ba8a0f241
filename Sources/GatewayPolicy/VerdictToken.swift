import GatewayCrypto
import GatewayWire

/// The signed verdict a route with `assertion.verdict_header` hands its upstream
/// (docs/client-contract.md, "Verifying the gateway's verdict in your backend"): an ES256 JWT in
/// `X-App-Attest-Verdict` that says which route, which request (method, target, body hash, request
/// id) and what the gateway decided of it, signed with the `verdict.key`, so that a backend can tell
/// a request that came through the gateway from one that reached it another way. Pure: the caller
/// gives the time and the facts; signing draws OpenSSL's nonce.
public enum VerdictToken {
    /// The request field that carries the token (an `X-App-Attest-*` field: a client's copy never
    /// reaches an upstream, `GatewayOwnedFields`).
    public static let field = "X-App-Attest-Verdict"

    /// `claims` signed with `key`: `base64url(header).base64url(claims).base64url(r ‖ s)`; nil only
    /// if OpenSSL's signature were not a P-256 ECDSA signature (the caller then sends no token).
    public static func sign(_ claims: VerdictClaims, with key: VerdictSigningKey) -> String? {
        try? ES256JWT.sign(encodedHeader: key.encodedHeader, claims: claims.json, key: key.key)
    }
}

/// What one verdict token says (its claims, in this order). `iat` and `exp` in Unix seconds.
public struct VerdictClaims: Sendable, Equatable {
    /// `iss`: `verdict.issuer`.
    public var issuer: String
    /// `aud`: the route's name.
    public var audience: String
    public var issuedAt: Int64
    /// `exp`: `issuedAt` + `verdict.ttl`.
    public var expiresAt: Int64
    /// `jti`: the request id (`X-Request-Id`, the explain log's key).
    public var id: String
    /// `sub`: the verified key id (base64url); nil when no assertion verified (a shadowed refusal, a
    /// fail-open, a DeviceCheck request).
    public var subject: String?
    /// `app_id` and `environment` of the verified key.
    public var appID: String?
    public var environment: String?
    /// `verdict`: the route verdict's label (`RouteVerdict.Label`): `accepted`, `flagged`,
    /// `would_refuse` (shadowed, or outside an enforce route's rollout) or `fail_open`.
    public var verdict: String
    /// `mode`: `enforce`, or `shadow` (the route shadows, or its rollout leaves the key out).
    public var mode: String
    public var method: String
    /// `target`: as forwarded (origin-form: an absolute-form HTTP/1.1 target was made origin-form
    /// when its head was read, `HeadBytes.takeAuthority`; HTTP/2's `:path` is one).
    public var target: String
    /// `body_sha256`: lowercase hex of the body the gateway read and forwarded; nil when it did not
    /// read it (a request forwarded from its head).
    public var bodySHA256: String?
    /// `risk_metric`: the key's latest risk metric, as `X-App-Attest-Risk-Metric`; nil while none.
    public var riskMetric: UInt32?
    /// `device_check`: `valid` for a request the DeviceCheck fallback accepted, as `X-Device-Check`;
    /// `device_check_bits` as `X-Device-Check-Bits` on a `bits` route.
    public var deviceCheck: String?
    public var deviceCheckBits: String?

    public init(
        issuer: String, audience: String, issuedAt: Int64, expiresAt: Int64, id: String, subject: String? = nil,
        appID: String? = nil, environment: String? = nil, verdict: String, mode: String, method: String, target: String,
        bodySHA256: String? = nil, riskMetric: UInt32? = nil, deviceCheck: String? = nil, deviceCheckBits: String? = nil
    ) {
        self.issuer = issuer
        self.audience = audience
        self.issuedAt = issuedAt
        self.expiresAt = expiresAt
        self.id = id
        self.subject = subject
        self.appID = appID
        self.environment = environment
        self.verdict = verdict
        self.mode = mode
        self.method = method
        self.target = target
        self.bodySHA256 = bodySHA256
        self.riskMetric = riskMetric
        self.deviceCheck = deviceCheck
        self.deviceCheckBits = deviceCheckBits
    }

    /// The claims JSON (absent facts are left out, never `null`).
    public var json: [UInt8] {
        var o = JSONObject()
        o.set("iss", issuer)
        o.set("aud", audience)
        if let subject { o.set("sub", subject) }
        o.set("iat", issuedAt)
        o.set("exp", expiresAt)
        o.set("jti", id)
        if let appID { o.set("app_id", appID) }
        if let environment { o.set("environment", environment) }
        o.set("verdict", verdict)
        o.set("mode", mode)
        o.set("method", method)
        o.set("target", target)
        if let bodySHA256 { o.set("body_sha256", bodySHA256) }
        if let riskMetric { o.set("risk_metric", riskMetric) }
        if let deviceCheck { o.set("device_check", deviceCheck) }
        if let deviceCheckBits { o.set("device_check_bits", deviceCheckBits) }
        return Array(o.description.utf8)
    }
}

/// The verdict's signing key (`verdict.key`, EC P-256): the key, its JWK, its `kid` (the RFC 7638
/// thumbprint) and the token header, made once.
public final class VerdictSigningKey: Sendable {
    public let key: ECPrivateKey
    public let jwk: P256JWK
    /// The JOSE header `{"alg":"ES256","typ":"JWT","kid":…}`.
    let header: [UInt8]
    /// `header` in base64url, made once: every token starts with it.
    let encodedHeader: String

    public var kid: String { jwk.thumbprint }

    /// nil unless `key` is on P-256.
    public init?(_ key: ECPrivateKey) {
        guard let jwk = P256JWK(key) else { return nil }
        self.key = key
        self.jwk = jwk
        var h = JSONObject()
        h.set("alg", "ES256")
        h.set("typ", "JWT")
        h.set("kid", jwk.thumbprint)
        header = Array(h.description.utf8)
        encodedHeader = Base64.encodeURL(header)
    }
}

/// The keys `/.well-known/jwks.json` publishes: the current signing key, and each key a reload
/// replaced until the last token it signed has expired (its `ttl` after the reload, and a little
/// more for requests still being verified under the old configuration), so that a backend
/// verifying an in-flight token still finds its key.
public struct VerdictKeySet: Sendable {
    public struct Retired: Sendable {
        public let jwk: P256JWK
        /// Published until then (Unix milliseconds).
        public let untilMillis: Int64
    }

    public let current: VerdictSigningKey
    /// Newest first.
    public let retired: [Retired]
    public let ttlSeconds: Int64

    /// A replaced key stays published for its tokens' ttl after the reload and this much more.
    public static let retentionGraceMillis: Int64 = 5_000

    /// The set after a start (`previous` nil) or a reload at `nowMillis`: `current` signs; the
    /// previous current key, when it differs, is kept until `nowMillis` + its ttl (+ the grace); keys
    /// retired before are kept until their own time, and one that signs again is not listed twice.
    public init(current: VerdictSigningKey, ttlSeconds: Int64, previous: VerdictKeySet?, nowMillis: Int64) {
        self.current = current
        self.ttlSeconds = ttlSeconds
        var retired: [Retired] = []
        if let p = previous {
            if p.current.kid != current.kid {
                retired.append(Retired(jwk: p.current.jwk, untilMillis: nowMillis + p.ttlSeconds * 1000 + Self.retentionGraceMillis))
            }
            for r in p.retired where r.untilMillis > nowMillis && r.jwk.thumbprint != current.kid {
                if !retired.contains(where: { $0.jwk.thumbprint == r.jwk.thumbprint }) { retired.append(r) }
            }
        }
        self.retired = retired
    }

    /// The JWKS document at `nowMillis`: `{"keys":[current, retired still published…]}`.
    public func jwks(nowMillis: Int64) -> String {
        var keys: [JSONObject.Value] = [.object(current.jwk.json)]
        for r in retired where r.untilMillis > nowMillis { keys.append(.object(r.jwk.json)) }
        var o = JSONObject()
        o.set("keys", .array(keys))
        return o.description
    }

    /// The claims' `iat` and `exp` for a token made at `nowMillis`.
    public func times(nowMillis: Int64) -> (issuedAt: Int64, expiresAt: Int64) {
        let iat = nowMillis / 1000
        return (iat, iat + ttlSeconds)
    }
}
