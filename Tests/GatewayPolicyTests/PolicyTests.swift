import AppAttest
import GatewayConfig
import GatewayCrypto
import GatewayPolicy
import GatewayStore
import GatewayWire
import Testing

@Suite("Policy: the client contract's pure parts")
struct PolicyTests {
    @Test func clientDataBindsChallengeMethodTargetAndBodyHash() {
        let cd = ClientData.forRequest(challenge: "abc", method: "POST", target: "/api/purchase?x=1", body: Array("{}".utf8))
        #expect(
            String(decoding: cd, as: UTF8.self)
                == "abc\nPOST\n/api/purchase?x=1\n44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a")
        // An empty body hashes the empty string.
        #expect(
            String(decoding: ClientData.forRequest(challenge: "c", method: "GET", target: "/", body: []), as: UTF8.self)
                .hasSuffix("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"))
    }

    @Test func keyIDEncodingsAreDetected() {
        let raw = (0..<32).map { UInt8($0 * 7 % 256) }
        #expect(BinaryEncoding.decode(Base64.encode(raw)) == (raw, .base64Standard))
        let url = Base64.encodeURL([UInt8](repeating: 0xfb, count: 32))
        #expect(BinaryEncoding.decode(url).encoding == .base64URL)
        #expect(BinaryEncoding.decode(url).bytes == [UInt8](repeating: 0xfb, count: 32))
        #expect(BinaryEncoding.decode(Hex.encode(raw)) == (raw, .hex))
        #expect(BinaryEncoding.decode("not base64!").encoding == .invalid)
    }

    @Test func challengesTravelAsUnpaddedBase64URL() throws {
        let token = try #require(ChallengeToken([UInt8](repeating: 0xff, count: 16)))
        let text = ChallengeText.encode(token)
        #expect(text == "_____________________w")
        #expect(ChallengeText.decode(text) == token)
        #expect(ChallengeText.decode("AAAA") == nil)  // 3 bytes: too short to be ours
        #expect(ChallengeText.decode(String(repeating: "A", count: 200)) == nil)
    }

    @Test func challengeRequestBodies() throws {
        #expect(
            try ChallengeEndpoint.request(body: [], ttlMillis: 1000).get() == ChallengeRequest(purpose: nil, keyID: nil, ttlMillis: 1000))
        let key = Base64.encode([UInt8](repeating: 1, count: 32))
        let bound = try? ChallengeEndpoint.request(body: Array("{\"purpose\":\"assert\",\"keyId\":\"\(key)\"}".utf8), ttlMillis: 5).get()
        #expect(bound == ChallengeRequest(purpose: .assert, keyID: KeyID([UInt8](repeating: 1, count: 32)), ttlMillis: 5))
        for (body, code) in [
            ("{\"purpose\":\"x\"}", GateError.badJSON), ("{\"purpose\":1}", .badJSON), ("[]", .badJSON),
            ("{\"keyId\":\"AAAA\"}", .malformed), ("{", .badJSON),
        ] {
            guard case .failure(let e) = ChallengeEndpoint.request(body: Array(body.utf8), ttlMillis: 5) else {
                Issue.record("\(body) accepted")
                continue
            }
            #expect(e.error == code, "\(body)")
        }
    }

    @Test func errorsMapToStatusAndAction() {
        #expect(GateError.keyUnknown.status == 401 && GateError.keyUnknown.action == .reattest)
        #expect(GateError.challengeConsumed.action == .rechallenge)
        #expect(GateError.verification(.badSignature).action == ClientAction.none)
        #expect(GateError.appNotAllowed.status == 403)
        #expect(GateError.environmentNotAllowed.status == 403 && GateError.environmentNotAllowed.action == .reattest)
        #expect(GateError.storeUnavailable.status == 503)
        #expect(GateError.badJSON.status == 400)
        // Every verifier code has a gateway code of the same spelling.
        for code in AppAttestError.Code.allCases { #expect(GateError(rawValue: code.rawValue) != nil, "\(code)") }
        for r in ChallengeRejection.allCases { #expect(GateError(r).rawValue == r.rawValue) }
    }

    @Test func rolloutIsStableAndProportional() {
        var rng = SystemRandomNumberGenerator()
        let keys = (0..<4000).map { _ in (0..<32).map { _ in UInt8.random(in: 0...255, using: &rng) } }
        let enforced = keys.filter { Rollout.enforces(keyID: $0, basisPoints: 2500) }.count
        #expect((800...1200).contains(enforced))
        for k in keys.prefix(50) { #expect(Rollout.enforces(keyID: k, basisPoints: 2500) == Rollout.enforces(keyID: k, basisPoints: 2500)) }
        #expect(Rollout.enforces(keyID: nil, basisPoints: 10_000))
        #expect(!Rollout.enforces(keyID: nil, basisPoints: 9_999))
        #expect(keys.allSatisfy { !Rollout.enforces(keyID: $0, basisPoints: 0) })
    }

    @Test("RFC3339.Cached: the same text as format(millis:) within a second, across seconds, backwards, out of range")
    func rfc3339Cached() {
        var cached = RFC3339.Cached()
        var rng = SystemRandomNumberGenerator()
        var t: Int64 = 1_795_442_709_000
        for _ in 0..<5_000 {
            // Mostly forward by a few milliseconds (a loop's requests), sometimes a jump either way.
            switch Int.random(in: 0..<20, using: &rng) {
            case 0: t = Int64.random(in: 0...253_402_300_799_999, using: &rng)
            case 1: t -= Int64.random(in: 0...5_000, using: &rng)
            default: t += Int64.random(in: 0...400, using: &rng)
            }
            t = max(0, t)
            #expect(cached.format(millis: t) == RFC3339.format(millis: t), "\(t)")
        }
        for millis: Int64 in [-1, -86_400_001, 253_402_300_799_999, 253_402_300_800_000, 0, 999, 1000] {
            #expect(cached.format(millis: millis) == RFC3339.format(millis: millis), "\(millis)")
        }
    }

    @Test func rfc3339() {
        #expect(RFC3339.format(millis: 0) == "1970-01-01T00:00:00.000Z")
        #expect(RFC3339.format(millis: 1_795_442_709_123) == "2026-11-23T14:05:09.123Z")
        #expect(RFC3339.format(millis: 951_782_400_999) == "2000-02-29T00:00:00.999Z")
        #expect(RFC3339.format(millis: 253_402_300_799_999) == "9999-12-31T23:59:59.999Z")
        #expect(RFC3339.format(millis: 253_402_300_800_000) == "10000-01-01T00:00:00.000Z")
        // Every field's digits, against the calendar arithmetic done here independently.
        var rng = SystemRandomNumberGenerator()
        for _ in 0..<2_000 {
            let millis = Int64.random(in: 0...253_402_300_799_999, using: &rng)
            let text = RFC3339.format(millis: millis)
            let days = Int(millis / 86_400_000), ofDay = Int(millis % 86_400_000)
            // Howard Hinnant's civil_from_days.
            let z = days + 719_468, era = z / 146_097, doe = z - era * 146_097
            let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365
            let doy = doe - (365 * yoe + yoe / 4 - yoe / 100), mp = (5 * doy + 2) / 153
            let d = doy - (153 * mp + 2) / 5 + 1, m = mp < 10 ? mp + 3 : mp - 9, y = yoe + era * 400 + (m <= 2 ? 1 : 0)
            func p(_ v: Int, _ w: Int) -> String { String(repeating: "0", count: max(0, w - String(v).count)) + String(v) }
            let expected =
                "\(p(y, 4))-\(p(m, 2))-\(p(d, 2))T\(p(ofDay / 3_600_000, 2)):\(p(ofDay / 60_000 % 60, 2)):"
                + "\(p(ofDay / 1000 % 60, 2)).\(p(ofDay % 1000, 3))Z"
            #expect(text == expected)
        }
    }

    @Test func appPolicyChecksEnvironmentCategoryAndBundleVersion() throws {
        let config = AppPolicy(
            teamID: "ABCDE12345", bundleIDs: ["com.example.shop"], environments: [.production],
            validationCategories: ["app_store", "testflight"], minBundleVersion: BundleVersion("4.2"))
        let policy = try AttestPolicy(apps: [config], extraRoots: [], challengeTTLMillis: 300_000)
        let app = try #require(policy.apps["ABCDE12345.com.example.shop"])
        #expect(policy.refusal(app: app, environment: .production, validationCategory: nil, bundleVersion: nil) == nil)
        #expect(
            policy.refusal(app: app, environment: .development, validationCategory: nil, bundleVersion: nil)?.error
                == .environmentNotAllowed)
        #expect(policy.refusal(app: app, environment: .production, validationCategory: 4, bundleVersion: "4.10") == nil)
        #expect(
            policy.refusal(app: app, environment: .production, validationCategory: 3, bundleVersion: nil)?.error
                == .validationCategoryNotAllowed)
        #expect(
            policy.refusal(app: app, environment: .production, validationCategory: 2, bundleVersion: "4.1.9")?.error == .bundleVersionTooOld
        )
        #expect(
            policy.refusal(app: app, environment: .production, validationCategory: nil, bundleVersion: "garbage")?.error
                == .bundleVersionTooOld)
    }
}
