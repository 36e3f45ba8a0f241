import AppAttest
import AppAttestSimulator
import Foundation
import GatewayConfig
import GatewayCrypto
import GatewayPolicy
import GatewayStore
import GatewayWire
import Testing

/// Registration as a decision table: every code `Registrar.register` can answer, each reached by a
/// concrete body: the simulator's device attesting (mutated where the code needs it) against the
/// memory store (no data directory) and its key bounds, the store's failures through a stub in
/// front of it. Each refusal has the contract's status and action, and changes nothing in the store.
@Suite("Registrar: every refusal, reached by a concrete registration")
struct RegistrarTests {
    static let shop = "ABCDE12345.com.example.shop"
    static let clip = "ABCDE12345.com.example.shop.Clip"
    static let now: Int64 = 1_800_000_000_000
    static let instant = Date(timeIntervalSince1970: Double(now) / 1000)
    static let ttl: Int64 = 300_000
    static let maxReceipt = 16 * 1024

    /// The test CA trusted; two development apps (categories app_store and testflight, bundle
    /// version 2.0 or later) and a production-only one, so that the attestation verifier accepts both
    /// environments and the app's own rule decides.
    final class Fixture: @unchecked Sendable {
        let ca: TestCA
        let policy: AttestPolicy
        let memory: MemoryAttestStore
        private(set) var before: (keys: Int, challenge: ChallengeState?) = (0, nil)
        private(set) var after: (keys: Int, challenge: ChallengeState?) = (0, nil)

        init(limits: KeyLimits = KeyLimits()) throws {
            ca = try TestCA()
            memory = MemoryAttestStore(shards: 4, limits: limits)
            let shop = AppPolicy(
                teamID: "ABCDE12345", bundleIDs: ["com.example.shop", "com.example.shop.Clip"], environments: [.development],
                validationCategories: ["app_store", "testflight"], minBundleVersion: BundleVersion("2.0"))
            let production = AppPolicy(teamID: "ABCDE12345", bundleIDs: ["com.example.wallet"], environments: [.production])
            let mac = AppPolicy(
                teamID: "ABCDE12345", bundleIDs: ["com.example.mac"], environments: [.development], requiresMacOSSecurity: true)
            policy = try AttestPolicy(
                apps: [shop, production, mac], extraRoots: [ca.root], extraReceiptRoots: [ca.receiptRoot],
                challengeTTLMillis: RegistrarTests.ttl, maxReceiptBytes: RegistrarTests.maxReceipt)
        }

        func device(_ app: String = RegistrarTests.shop, _ environment: AttestEnvironment = .development, key: ECPrivateKey? = nil) throws
            -> SimulatedDevice
        {
            try SimulatedDevice(appID: try AppID(app), environment: environment, ca: ca, key: key ?? ECPrivateKey(curve: .p256), counter: 0)
        }

        /// A challenge as the endpoint issues it for a registration of `device`.
        func challenge(purpose: ChallengePurpose? = .register, boundTo key: [UInt8]? = nil, at nowMillis: Int64 = RegistrarTests.now)
            throws -> String
        {
            let answer = Answer<Result<IssuedChallenge, StoreError>>()
            memory.issueChallenge(
                ChallengeRequest(purpose: purpose, keyID: key.flatMap(KeyID.init), ttlMillis: RegistrarTests.ttl), nowMillis: nowMillis
            ) { answer.set($0) }
            return ChallengeText.encode(try answer.wait().get().token)
        }

        /// `{"keyId","attestation","challenge"}` as the app sends it: the device attests over the
        /// challenge (or over `attestedChallenge`).
        func body(
            _ device: SimulatedDevice, challenge: String, attestedChallenge: String? = nil, keyID: String? = nil,
            mutations: AttestationMutations = .none, extensions: SimulatedExtensions? = nil
        ) throws -> [UInt8] {
            let attestation = try device.attest(
                clientDataHash: SHA256.hash(Array((attestedChallenge ?? challenge).utf8)), at: RegistrarTests.instant,
                extensions: extensions, mutations: mutations)
            return Self.json(keyID: keyID ?? Base64.encode(device.keyID), attestation: Base64.encode(attestation), challenge: challenge)
        }

        static func json(keyID: String, attestation: String, challenge: String) -> [UInt8] {
            Array("{\"keyId\":\"\(keyID)\",\"attestation\":\"\(attestation)\",\"challenge\":\"\(challenge)\"}".utf8)
        }

        func register(_ body: [UInt8], store: (any AttestStore)? = nil, at nowMillis: Int64 = RegistrarTests.now) throws
            -> RegistrationResult
        {
            let token = Registrar.presentedChallenge(body: body)
            before = (memory.statistics.keys, token.flatMap { challengeState($0, at: nowMillis) })
            let answer = Answer<RegistrationResult>()
            Registrar.register(body: body, policy: policy, store: store ?? memory, nowMillis: nowMillis) { answer.set($0) }
            let result = try answer.wait()
            after = (memory.statistics.keys, token.flatMap { challengeState($0, at: nowMillis) })
            return result
        }

        /// A fresh challenge, attested by `device`: registered or the test fails.
        @discardableResult
        func registered(_ device: SimulatedDevice, at nowMillis: Int64 = RegistrarTests.now) throws -> RegisteredKey {
            let body = try body(device, challenge: try challenge(at: nowMillis))
            guard case .registered(let key) = try register(body, at: nowMillis) else {
                throw TableError.setup("a good registration was refused")
            }
            return key
        }

        func challengeState(_ token: ChallengeToken, at nowMillis: Int64) -> ChallengeState? {
            memory.waitedChallengeState(token, at: nowMillis)
        }
    }

    struct Row: Sendable, CustomTestStringConvertible {
        let name: String
        let code: String
        let step: String
        let details: [String: String]
        let retryAfter: Int?
        let limits: KeyLimits
        let run: @Sendable (Fixture) throws -> RegistrationResult

        init(
            _ name: String, _ code: String, _ step: String, details: [String: String] = [:], retryAfter: Int? = nil,
            limits: KeyLimits = KeyLimits(), run: @escaping @Sendable (Fixture) throws -> RegistrationResult
        ) {
            self.name = name
            self.code = code
            self.step = step
            self.details = details
            self.retryAfter = retryAfter
            self.limits = limits
            self.run = run
        }

        var testDescription: String { "\(code): \(name)" }
    }

    static let rows: [Row] = [
        // The body.
        Row("a body that is not JSON", "bad_json", "body") { f in try f.register(Array("keyId=1".utf8)) },
        Row("a JSON array", "bad_json", "body") { f in try f.register(Array("[]".utf8)) },
        Row("a keyId that is not a string", "bad_json", "body", details: ["field": "keyId"]) { f in
            try f.register(Array("{\"keyId\":1,\"attestation\":\"AA==\",\"challenge\":\"x\"}".utf8))
        },
        Row("no attestation", "missing_field", "body", details: ["field": "attestation"]) { f in
            try f.register(Array("{\"keyId\":\"AA==\",\"challenge\":\"x\"}".utf8))
        },
        Row("a keyId of 3 bytes", "malformed", "body", details: ["field": "keyId"]) { f in
            try f.register(Fixture.json(keyID: "AAAA", attestation: "AA==", challenge: try f.challenge()))
        },
        Row("an attestation that is not base64", "malformed", "body", details: ["field": "attestation"]) { f in
            try f.register(Fixture.json(keyID: Base64.encode(SHA256.hash([1])), attestation: "not base64!", challenge: try f.challenge()))
        },
        Row("a challenge that is not base64url of 16 to 64 bytes", "challenge_unknown", "body") { f in
            try f.register(try f.body(try f.device(), challenge: "AAAA"))
        },
        // The attestation object.
        Row("an attestation that is not CBOR", "malformed", "attestation") { f in
            try f.register(
                Fixture.json(
                    keyID: Base64.encode(SHA256.hash([1])), attestation: Base64.encode([0xff, 0x00]), challenge: try f.challenge()))
        },
        Row("authenticator data with trailing bytes that are no extensions map", "malformed", "attestation") { f in
            try f.register(
                try f.body(try f.device(), challenge: try f.challenge(), mutations: AttestationMutations(trailingAuthenticatorData: [0xff]))
            )
        },
        Row("a receipt larger than limits.max_receipt", "receipt_too_large", "attestation", details: ["receipt_bytes": "16385"]) { f in
            try f.register(
                try f.body(
                    try f.device(), challenge: try f.challenge(),
                    mutations: AttestationMutations(receipt: [UInt8](repeating: 1, count: RegistrarTests.maxReceipt + 1))))
        },
        Row("a receipt that names another app id", "receipt_invalid", "receipt") { f in
            try f.register(
                try f.body(
                    try f.device(), challenge: try f.challenge(),
                    mutations: AttestationMutations(receiptEdit: { $0.appID = "ABCDE12345.com.example.other" })))
        },
        Row("a Mac app that requires macOS 27's key policy, attested without it", "macos_security_required", "app_policy") { f in
            try f.register(try f.body(try f.device("ABCDE12345.com.example.mac"), challenge: try f.challenge()))
        },
        Row("fmt packed", "unsupported_format", "attestation") { f in
            try f.register(try f.body(try f.device(), challenge: try f.challenge(), mutations: AttestationMutations(format: "packed")))
        },
        // Apple's attestation algorithm.
        Row("a credential certificate from a CA that is not trusted", "chain_untrusted", "attestation") { f in
            try f.register(
                try f.body(
                    try f.device(), challenge: try f.challenge(), mutations: AttestationMutations(issuingCA: try TestCA(name: "Rogue"))))
        },
        Row("a credential certificate that expired", "certificate_expired", "attestation") { f in
            let expired = TestCA.Validity(
                notBefore: RegistrarTests.instant.addingTimeInterval(-7200), notAfter: RegistrarTests.instant.addingTimeInterval(-1))
            return try f.register(
                try f.body(try f.device(), challenge: try f.challenge(), mutations: AttestationMutations(leafValidity: expired)))
        },
        Row("a credential certificate not valid yet", "certificate_not_yet_valid", "attestation") { f in
            let future = TestCA.Validity(
                notBefore: RegistrarTests.instant.addingTimeInterval(60), notAfter: RegistrarTests.instant.addingTimeInterval(7200))
            return try f.register(
                try f.body(try f.device(), challenge: try f.challenge(), mutations: AttestationMutations(leafValidity: future)))
        },
        Row("attested over another challenge than the one presented", "nonce_mismatch", "attestation") { f in
            try f.register(try f.body(try f.device(), challenge: try f.challenge(), attestedChallenge: try f.challenge()))
        },
        Row("a keyId that is another key's", "key_id_mismatch", "attestation") { f in
            try f.register(try f.body(try f.device(), challenge: try f.challenge(), keyID: Base64.encode(try f.device().keyID)))
        },
        Row("the credential public key of another device", "public_key_mismatch", "attestation") { f in
            let stranger = ECPrivateKey(curve: .p256).publicKeyX962
            return try f.register(
                try f.body(try f.device(), challenge: try f.challenge(), mutations: AttestationMutations(credentialPublicKey: stranger)))
        },
        Row("the rpIdHash of an app not in apps (so app_not_allowed is never reached here)", "app_id_mismatch", "attestation") { f in
            try f.register(try f.body(try f.device("ABCDE12345.com.example.gone"), challenge: try f.challenge()))
        },
        Row("a counter of 1", "counter_not_zero", "attestation") { f in
            try f.register(try f.body(try f.device(), challenge: try f.challenge(), mutations: AttestationMutations(counter: 1)))
        },
        Row("an aaguid of neither environment", "environment_mismatch", "attestation") { f in
            try f.register(
                try f.body(
                    try f.device(), challenge: try f.challenge(), mutations: AttestationMutations(aaguid: [UInt8](repeating: 0, count: 16)))
            )
        },
        Row("a credential id that is not the key id", "credential_id_mismatch", "attestation") { f in
            try f.register(
                try f.body(try f.device(), challenge: try f.challenge(), mutations: AttestationMutations(credentialID: SHA256.hash([7]))))
        },
        // The app's policy.
        Row("a production key of a development-only app", "environment_not_allowed", "app_policy", details: ["environment": "production"]) {
            f in
            try f.register(try f.body(try f.device(RegistrarTests.shop, .production), challenge: try f.challenge()))
        },
        Row(
            "attested in a validation category not allowed", "validation_category_not_allowed", "app_policy",
            details: ["validation_category": "development"]
        ) { f in
            try f.register(
                try f.body(try f.device(), challenge: try f.challenge(), extensions: SimulatedExtensions(validationCategory: .development)))
        },
        Row("attested with a bundle version below the minimum", "bundle_version_too_old", "app_policy", details: ["bundle_version": "1.0"])
        { f in
            try f.register(try f.body(try f.device(), challenge: try f.challenge(), extensions: SimulatedExtensions(bundleVersion: "1.0")))
        },
        // The store's atomic step: the challenge.
        Row("a challenge never issued", "challenge_unknown", "commit") { f in
            try f.register(try f.body(try f.device(), challenge: ChallengeText.encode(ChallengeToken(SecureRandom.bytes(16))!)))
        },
        Row("a challenge past its expiry", "challenge_expired", "commit") { f in
            try f.register(try f.body(try f.device(), challenge: try f.challenge()), at: RegistrarTests.now + RegistrarTests.ttl)
        },
        Row("a challenge already used by a registration", "challenge_consumed", "commit") { f in
            let challenge = try f.challenge()
            guard case .registered = try f.register(try f.body(try f.device(), challenge: challenge)) else {
                throw TableError.setup("first")
            }
            return try f.register(try f.body(try f.device(), challenge: challenge))
        },
        Row("a challenge issued for assertions", "challenge_wrong_purpose", "commit") { f in
            try f.register(try f.body(try f.device(), challenge: try f.challenge(purpose: .assert)))
        },
        Row("a challenge issued for another key", "challenge_wrong_key", "commit") { f in
            try f.register(try f.body(try f.device(), challenge: try f.challenge(boundTo: SHA256.hash([9]))))
        },
        // The store's atomic step: the key bounds.
        Row("a key registered to another app", "key_app_conflict", "store", details: ["registered_app_id": RegistrarTests.shop]) { f in
            let key = ECPrivateKey(curve: .p256)
            try f.registered(try f.device(RegistrarTests.shop, key: key))
            return try f.register(try f.body(try f.device(RegistrarTests.clip, key: key), challenge: try f.challenge()))
        },
        Row(
            "a key re-registered more often than its window allows", "reregistration_limited", "store", retryAfter: 599,
            limits: KeyLimits(maxReregistrations: 1, reregistrationWindowMillis: 600_000)
        ) { f in
            let device = try f.device()
            try f.registered(device, at: RegistrarTests.now)
            try f.registered(device, at: RegistrarTests.now + 1_000)
            return try f.register(
                try f.body(device, challenge: try f.challenge(at: RegistrarTests.now + 2_000)), at: RegistrarTests.now + 2_000)
        },
        Row(
            "a new key when the store holds store.max_keys", "key_capacity", "store", details: ["max_keys": "1"],
            retryAfter: Registrar.keyCapacityRetryAfterSeconds, limits: KeyLimits(maxKeys: 1)
        ) { f in
            try f.registered(try f.device())
            return try f.register(try f.body(try f.device(), challenge: try f.challenge()))
        },
        // The store's failures.
        Row("the store cannot register", "store_unavailable", "store") { f in
            try f.register(
                try f.body(try f.device(), challenge: try f.challenge()),
                store: StubStore(f.memory, failing: [.register: StubStore.unreachable]))
        },
        Row("the store answers challenge_capacity", "challenge_capacity", "store") { f in
            let full = StoreError(.challengeCapacity, "too many live challenges (test)")
            return try f.register(
                try f.body(try f.device(), challenge: try f.challenge()), store: StubStore(f.memory, failing: [.register: full]))
        },
    ]

    @Test(
        "each row is refused with its code at its step, with the contract's status, action and Retry-After, and changes nothing",
        arguments: rows)
    func refusal(_ row: Row) throws {
        let f = try Fixture(limits: row.limits)
        guard case .refused(let e) = try row.run(f) else {
            Issue.record("\(row.name): registered")
            return
        }
        #expect(e.error.code == row.code, "\(row.name)")
        #expect(e.step == row.step, "\(row.name)")
        Contract.check(e, on: .endpoint, row.name)
        #expect(e.retryAfterSeconds == row.retryAfter, "\(row.name)")
        for (name, value) in row.details { #expect(e.detail(name) == value, "\(row.name): \(name)") }
        #expect(f.after.keys == f.before.keys, "\(row.name): a key was stored")
        #expect(f.after.challenge == f.before.challenge, "\(row.name): the challenge changed")
    }

    /// The codes registration answers, each reached by a row above.
    static let registrarCodes: Set<String> = [
        "bad_json", "missing_field", "malformed", "challenge_unknown", "receipt_too_large", "unsupported_format", "chain_untrusted",
        "certificate_expired", "certificate_not_yet_valid", "nonce_mismatch", "key_id_mismatch", "public_key_mismatch",
        "app_id_mismatch", "counter_not_zero", "environment_mismatch", "credential_id_mismatch", "environment_not_allowed",
        "validation_category_not_allowed", "bundle_version_too_old", "challenge_expired", "challenge_consumed",
        "challenge_wrong_purpose", "challenge_wrong_key", "key_app_conflict", "reregistration_limited", "key_capacity",
        "store_unavailable", "challenge_capacity", "receipt_invalid", "macos_security_required",
    ]

    @Test("the table reaches every code registration answers")
    func everyRegistrarCodeHasARow() {
        #expect(Set(Self.rows.map(\.code)) == Self.registrarCodes)
    }

    @Test("every code is in the contract table and reached by the gate's or the registrar's table, or is the endpoints' own")
    func everyCodeIsReached() {
        let all = Set(GateError.allCases.map(\.code))
        #expect(Set(Contract.codes.keys) == all)
        // The endpoints' own refusals, decided before the gate or the registrar (KeyIDRequiredTests,
        // RateLimitTests, the integration tests).
        let endpoints: Set<String> = ["method_not_allowed", "key_id_required", "rate_limited"]
        // The route's verdict after a verified assertion (RouteVerdictTests: max_risk_metric;
        // AccountVerdictTests: max_keys_per_account).
        let verdict: Set<String> = ["risk_metric_exceeded", "account_key_limit"]
        // The DeviceCheck fallback's own refusals (DeviceCheckTests, FallbackTests with a real gatewayd).
        let fallback: Set<String> = ["device_token_invalid", "device_token_replayed", "fallback_share_exceeded", "devicecheck_unavailable"]
        // Android registrations' own refusals (AndroidRegistrarTests).
        let android = AndroidRegistrarTests.androidCodes
        #expect(
            AssertionGateTests.gateCodes.union(Self.registrarCodes).union(endpoints).union(verdict).union(fallback).union(android) == all)
    }

    // MARK: Registered

    @Test("registered: a new key, then the same key again (existing, its counter kept)")
    func registered() throws {
        let f = try Fixture()
        let device = try f.device()
        let first = try f.registered(device)
        #expect(!first.existing && first.appID == Self.shop && first.environment == .development)
        #expect(first.keyID == KeyID(device.keyID))
        #expect(f.after.challenge == .consumed)
        #expect(f.memory.statistics.keys == 1)
        let again = try f.registered(device, at: Self.now + 1_000)
        #expect(again.existing)
        #expect(f.memory.statistics.keys == 1)
        // A challenge of no purpose, and allowed iOS 27 signals, register too.
        let body = try f.body(
            try f.device(), challenge: try f.challenge(purpose: nil),
            extensions: SimulatedExtensions(validationCategory: .appStore, bundleVersion: "2.0"))
        guard case .registered = try f.register(body) else {
            Issue.record("refused")
            return
        }
        // The production app's production key.
        _ = try f.registered(try f.device("ABCDE12345.com.example.wallet", .production))
        #expect(f.memory.statistics.keys == 3)
    }
}
