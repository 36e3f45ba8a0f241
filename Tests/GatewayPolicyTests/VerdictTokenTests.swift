import Foundation
import GatewayCrypto
import GatewayPolicy
import GatewayWire
import Testing

/// The signed verdict: its claims, its header, its signature (checked with `ES256JWT.verify` and
/// the JWK's public point), the forwarded target, and the key set a reload keeps (controlled time).
@Suite("The verdict token and its key set")
struct VerdictTokenTests {
    static func object(_ bytes: [UInt8]) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any])
    }

    static func claims(
        subject: String? = "3q2-7w", risk: UInt32? = 7, body: String? = String(repeating: "a", count: 64), dc: String? = nil
    ) -> VerdictClaims {
        VerdictClaims(
            issuer: "gw-1", audience: "purchase", issuedAt: 1_700_000_000, expiresAt: 1_700_000_060, id: "req-1", subject: subject,
            appID: subject == nil ? nil : "ABCDE12345.com.example.shop", environment: subject == nil ? nil : "production",
            verdict: "accepted", mode: "enforce", method: "POST", target: "/api/purchase?x=1", bodySHA256: body, riskMetric: risk,
            deviceCheck: dc, deviceCheckBits: dc == nil ? nil : "bit0=1; bit1=0")
    }

    @Test("claims in order; absent facts left out, never null")
    func claimsJSON() throws {
        #expect(
            String(decoding: Self.claims().json, as: UTF8.self)
                == "{\"iss\":\"gw-1\",\"aud\":\"purchase\",\"sub\":\"3q2-7w\",\"iat\":1700000000,\"exp\":1700000060,\"jti\":\"req-1\","
                + "\"app_id\":\"ABCDE12345.com.example.shop\",\"environment\":\"production\",\"verdict\":\"accepted\",\"mode\":\"enforce\","
                + "\"method\":\"POST\",\"target\":\"/api/purchase?x=1\",\"body_sha256\":\"\(String(repeating: "a", count: 64))\","
                + "\"risk_metric\":7}")
        let bare = try Self.object(Self.claims(subject: nil, risk: nil, body: nil, dc: "valid").json)
        #expect(bare["sub"] == nil && bare["app_id"] == nil && bare["environment"] == nil)
        #expect(bare["risk_metric"] == nil && bare["body_sha256"] == nil)
        #expect(bare["device_check"] as? String == "valid" && bare["device_check_bits"] as? String == "bit0=1; bit1=0")
    }

    @Test(
        "signed: header alg ES256, typ JWT, kid the key's thumbprint; the signature verifies with the JWK's point and not with another key")
    func signed() throws {
        let signing = try #require(VerdictSigningKey(ECPrivateKey(curve: .p256)))
        let token = try #require(VerdictToken.sign(Self.claims(), with: signing))
        let point = [0x04] + (try Base64.decode(signing.jwk.x)) + (try Base64.decode(signing.jwk.y))
        let (header, claims) = try ES256JWT.verify(token, publicKey: try P256PublicKey(x962: point))
        let h = try Self.object(header)
        #expect(h.count == 3 && h["alg"] as? String == "ES256" && h["typ"] as? String == "JWT")
        #expect(h["kid"] as? String == signing.kid && signing.kid == signing.jwk.thumbprint)
        #expect(claims == Self.claims().json)
        let other = try #require(ECPrivateKey(curve: .p256).p256PublicKey)
        #expect(throws: ES256JWT.Error.self) { try ES256JWT.verify(token, publicKey: other) }
        #expect(VerdictSigningKey(ECPrivateKey(curve: .p384)) == nil)
    }

    @Test(
        "the key set: a reload with a new key keeps the old public key for its ttl (and the grace), then drops it; the same key is listed once"
    )
    func retention() throws {
        let a = try #require(VerdictSigningKey(ECPrivateKey(curve: .p256)))
        let b = try #require(VerdictSigningKey(ECPrivateKey(curve: .p256)))
        let c = try #require(VerdictSigningKey(ECPrivateKey(curve: .p256)))
        func kids(_ set: VerdictKeySet, at ms: Int64) throws -> [String] {
            let doc = try Self.object(Array(set.jwks(nowMillis: ms).utf8))
            let keys = try #require(doc["keys"] as? [[String: Any]])
            for k in keys {
                #expect(k["kty"] as? String == "EC" && k["crv"] as? String == "P-256" && k["alg"] as? String == "ES256")
                #expect(k["use"] as? String == "sig" && k["d"] == nil)
            }
            return keys.compactMap { $0["kid"] as? String }
        }
        let t0: Int64 = 1_700_000_000_000
        let started = VerdictKeySet(current: a, ttlSeconds: 60, previous: nil, nowMillis: t0)
        #expect(try kids(started, at: t0) == [a.kid])
        #expect(started.times(nowMillis: t0 + 999) == (1_700_000_000, 1_700_000_060))
        // Same key again (a reload that changed something else): nothing retired.
        let same = VerdictKeySet(current: a, ttlSeconds: 30, previous: started, nowMillis: t0 + 1000)
        #expect(same.retired.isEmpty)
        #expect(try kids(same, at: t0 + 1000) == [a.kid])
        // Rotated at t1 with a 30 s ttl: a stays for the 30 s its tokens live (and the grace).
        let t1 = t0 + 10_000
        let rotated = VerdictKeySet(current: b, ttlSeconds: 120, previous: same, nowMillis: t1)
        let keep = 30_000 + VerdictKeySet.retentionGraceMillis
        #expect(try kids(rotated, at: t1) == [b.kid, a.kid])
        #expect(try kids(rotated, at: t1 + keep - 1) == [b.kid, a.kid])
        #expect(try kids(rotated, at: t1 + keep) == [b.kid])
        // Rotated again before a's time is up: both old keys listed, each until its own time.
        let t2 = t1 + 5000
        let again = VerdictKeySet(current: c, ttlSeconds: 60, previous: rotated, nowMillis: t2)
        #expect(try kids(again, at: t2) == [c.kid, b.kid, a.kid])
        #expect(try kids(again, at: t1 + keep) == [c.kid, b.kid])
        #expect(try kids(again, at: t2 + 120_000 + VerdictKeySet.retentionGraceMillis) == [c.kid])
        // Back to a retired key: it signs again and is listed once.
        let back = VerdictKeySet(current: b, ttlSeconds: 60, previous: again, nowMillis: t2 + 1000)
        #expect(try kids(back, at: t2 + 1000) == [b.kid, c.kid, a.kid])
        // A later reload drops what expired on the way.
        let late = VerdictKeySet(current: b, ttlSeconds: 60, previous: back, nowMillis: t2 + 600_000)
        #expect(try kids(late, at: t2 + 600_000) == [b.kid])
        #expect(late.retired.isEmpty)
    }
}
