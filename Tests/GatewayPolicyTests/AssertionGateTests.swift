import AppAttest
import AppAttestSimulator
import Foundation
import GatewayConfig
import GatewayCrypto
import GatewayPolicy
import GatewayStore
import GatewayWire
import Testing

/// The assertion gate as a decision table: every code it can answer, each reached by a concrete
/// request from the simulator's device (mutated where the code needs it) against the memory store
/// (no data directory), with an inline executor; the store's failures and races through a stub in
/// front of it. Each refusal has the contract's status and action and changes nothing in the store.
@Suite("AssertionGate: every refusal, reached by a concrete request")
struct AssertionGateTests {
    static let shop = "ABCDE12345.com.example.shop"
    static let now: Int64 = 1_800_000_000_000
    static let ttl: Int64 = 300_000
    static let host = "api.example.com"

    /// The route kinds of the table (the gate does not read `mode`).
    static let request = RoutePolicy(mode: .enforce)
    static let bodyRequired = RoutePolicy(mode: .enforce, bind: .body, challenge: .required)
    static let bodyOptional = RoutePolicy(mode: .enforce, bind: .body, challenge: .optional)
    static let bodyOff = RoutePolicy(mode: .enforce, bind: .body, challenge: .off)

    /// A memory store holding the simulated device's key (its record edited by the row), the policy
    /// of one app (development only; categories app_store and testflight; bundle version 2.0 or later).
    final class Fixture: @unchecked Sendable {
        let ca: TestCA
        let policy: AttestPolicy
        let memory = MemoryAttestStore(shards: 4)
        let device: SimulatedDevice
        let keyID: KeyID
        let record: DeviceKeyRecord
        /// The device's stored counter and the request's challenge state just before the last
        /// `evaluate`, and just after it.
        private(set) var before: (counter: UInt32?, challenge: ChallengeState?) = (nil, nil)
        private(set) var after: (counter: UInt32?, challenge: ChallengeState?) = (nil, nil)

        init(record edit: (inout DeviceKeyRecord) -> Void = { _ in }) throws {
            ca = try TestCA()
            let app = AppPolicy(
                teamID: "ABCDE12345", bundleIDs: ["com.example.shop"], environments: [.development],
                validationCategories: ["app_store", "testflight"], minBundleVersion: BundleVersion("2.0"))
            policy = try AttestPolicy(apps: [app], extraRoots: [], challengeTTLMillis: AssertionGateTests.ttl)
            device = SimulatedDevice(appID: try AppID(AssertionGateTests.shop), ca: ca)
            guard let id = KeyID(device.keyID) else { throw TableError.setup("key id") }
            keyID = id
            var r = DeviceKeyRecord(
                keyID: id, publicKey: device.publicKey.x962, counter: 0, appID: AssertionGateTests.shop, environment: .development,
                validationCategory: nil, bundleVersion: nil, firstSeenMillis: AssertionGateTests.now,
                lastSeenMillis: AssertionGateTests.now)
            edit(&r)
            record = r
            let token = try issue(ChallengeRequest(purpose: .register, keyID: id, ttlMillis: AssertionGateTests.ttl))
            let answer = Answer<Result<RegistrationOutcome, StoreError>>()
            memory.register(Registration(record: r, receipt: [], challenge: token), nowMillis: AssertionGateTests.now) { answer.set($0) }
            guard case .registered = try answer.wait().get() else { throw TableError.setup("registration") }
        }

        func issue(_ request: ChallengeRequest) throws -> ChallengeToken {
            let answer = Answer<Result<IssuedChallenge, StoreError>>()
            memory.issueChallenge(request, nowMillis: AssertionGateTests.now) { answer.set($0) }
            return try answer.wait().get().token
        }

        /// A challenge as the endpoint issues it to this device's app (bound to its key, for assertions).
        func challenge(purpose: ChallengePurpose? = .assert, boundTo key: KeyID?? = .none) throws -> String {
            let bound: KeyID? = key ?? keyID
            return ChallengeText.encode(try issue(ChallengeRequest(purpose: purpose, keyID: bound, ttlMillis: AssertionGateTests.ttl)))
        }

        /// A request as the app sends it to a `route`: signed by `signer` (the device) over the
        /// client data the route binds, of `signedBody` (the body sent, unless told).
        func request(
            route: RoutePolicy = AssertionGateTests.request, challenge: String?, body: [UInt8] = Array("{\"sku\":\"A-1\"}".utf8),
            signedBody: [UInt8]? = nil, signer: SimulatedDevice? = nil, mutations: AssertionMutations = .none,
            extensions: SimulatedExtensions? = nil
        ) -> GateRequest {
            let device = signer ?? self.device
            let target = "/api/purchase"
            let signed = signedBody ?? body
            let clientData =
                route.bind == .request
                ? ClientData.forRequest(
                    .v2, challenge: challenge ?? "", method: "POST", target: target,
                    authority: RequestAuthority.normalize(AssertionGateTests.host, scheme: "http") ?? "", body: signed)
                : signed
            let assertion = device.assert(clientDataHash: SHA256.hash(clientData), extensions: extensions, mutations: mutations)
            return GateRequest(
                method: "POST", target: target, body: body, keyID: Base64.encode(device.keyID), challenge: challenge,
                assertion: Base64.encode(assertion), host: AssertionGateTests.host, scheme: "http")
        }

        func evaluate(
            _ request: GateRequest, route: RoutePolicy = AssertionGateTests.request, store: (any AttestStore)? = nil,
            at nowMillis: Int64 = AssertionGateTests.now
        ) throws -> GateOutcome {
            let token = request.challenge.flatMap(ChallengeText.decode)
            before = (storedCounter, token.flatMap { challengeState($0, at: nowMillis) })
            let gate = AssertionGate(store: store ?? memory, executor: InlineExecutor())
            let answer = Answer<GateOutcome>()
            gate.evaluate(request, route: route, policy: policy, nowMillis: nowMillis) { answer.set($0) }
            let outcome = try answer.wait()
            after = (storedCounter, token.flatMap { challengeState($0, at: nowMillis) })
            return outcome
        }

        /// Sends a good request: accepted or the test fails.
        func accepted(_ request: GateRequest, route: RoutePolicy = AssertionGateTests.request) throws -> AcceptedAssertion {
            guard case .accepted(let a) = try evaluate(request, route: route) else { throw TableError.setup("a good request was refused") }
            return a
        }

        var storedCounter: UInt32? {
            let answer = Answer<Result<DeviceKeyRecord?, StoreError>>()
            memory.deviceKey(keyID) { answer.set($0) }
            return (try? answer.wait().get())??.counter
        }

        func challengeState(_ token: ChallengeToken, at nowMillis: Int64) -> ChallengeState? {
            memory.waitedChallengeState(token, at: nowMillis)
        }
    }

    /// One row: a request that the gate refuses with `code` at `step`, with these details among the
    /// explanation's.
    struct Row: Sendable, CustomTestStringConvertible {
        let name: String
        let code: String
        let step: String
        let details: [String: String]
        let record: @Sendable (inout DeviceKeyRecord) -> Void
        let run: @Sendable (Fixture) throws -> GateOutcome

        init(
            _ name: String, _ code: String, _ step: String, details: [String: String] = [:],
            record: @escaping @Sendable (inout DeviceKeyRecord) -> Void = { _ in }, run: @escaping @Sendable (Fixture) throws -> GateOutcome
        ) {
            self.name = name
            self.code = code
            self.step = step
            self.details = details
            self.record = record
            self.run = run
        }

        var testDescription: String { "\(code): \(name)" }
    }

    static let rows: [Row] = [
        // 1. Headers, from the head alone.
        Row("no key id header", "assertion_missing", "headers", details: ["missing": AttestHeaders.keyID]) { f in
            var r = f.request(challenge: try f.challenge())
            r.keyID = nil
            return try f.evaluate(r)
        },
        Row("no assertion header", "assertion_missing", "headers", details: ["missing": AttestHeaders.assertion]) { f in
            var r = f.request(challenge: try f.challenge())
            r.assertion = nil
            return try f.evaluate(r)
        },
        Row("bind: request without a challenge header", "assertion_missing", "headers", details: ["missing": AttestHeaders.challenge]) {
            f in
            try f.evaluate(f.request(challenge: nil))
        },
        Row("bind: body, challenge: required, without a challenge header", "challenge_missing", "headers") { f in
            try f.evaluate(f.request(route: bodyRequired, challenge: nil), route: bodyRequired)
        },
        Row("a key id of 3 bytes", "malformed", "headers", details: ["key_id_bytes": "3"]) { f in
            var r = f.request(challenge: try f.challenge())
            r.keyID = "AAAA"
            return try f.evaluate(r)
        },
        Row("an assertion that is not base64", "malformed", "headers") { f in
            var r = f.request(challenge: try f.challenge())
            r.assertion = "not base64!"
            return try f.evaluate(r)
        },
        Row("an assertion that is not CBOR", "malformed", "headers") { f in
            var r = f.request(challenge: try f.challenge())
            r.assertion = Base64.encode([0xff, 0x00, 0x01])
            return try f.evaluate(r)
        },
        Row("a challenge header that is not base64url of 16 to 64 bytes", "challenge_unknown", "headers") { f in
            try f.evaluate(f.request(challenge: "AAAA"))
        },
        // 1. Headers, with the body and the request.
        Row("bind: body, a challenge the signed body does not contain", "challenge_not_bound", "headers") { f in
            try f.evaluate(f.request(route: bodyRequired, challenge: try f.challenge()), route: bodyRequired)
        },
        Row("client data v2 without a Host", "malformed", "headers", details: ["detail": "the request has no Host"]) { f in
            var r = f.request(challenge: try f.challenge())
            r.host = nil
            return try f.evaluate(r)
        },
        // 2. The key.
        Row("a key never registered", "key_unknown", "key_lookup") { f in
            let stranger = SimulatedDevice(appID: f.device.appID, ca: f.ca)
            return try f.evaluate(f.request(challenge: try f.challenge(boundTo: .some(nil)), signer: stranger))
        },
        // 3. The app's policy, on the stored record.
        Row(
            "the key's app is no longer in apps", "app_not_allowed", "app_policy", details: ["app_id": "ABCDE12345.com.example.gone"],
            record: { $0.appID = "ABCDE12345.com.example.gone" }
        ) { f in
            try f.evaluate(f.request(challenge: try f.challenge()))
        },
        Row(
            "a production key of a development-only app", "environment_not_allowed", "app_policy", details: ["environment": "production"],
            record: { $0.environment = .production }
        ) { f in
            try f.evaluate(f.request(challenge: try f.challenge()))
        },
        Row(
            "attested in a validation category not allowed", "validation_category_not_allowed", "app_policy",
            details: ["validation_category": "development"], record: { $0.validationCategory = ValidationCategory.development.rawValue }
        ) { f in
            try f.evaluate(f.request(challenge: try f.challenge()))
        },
        Row(
            "attested with a bundle version below the minimum", "bundle_version_too_old", "app_policy", details: ["bundle_version": "1.9"],
            record: { $0.bundleVersion = "1.9" }
        ) { f in
            try f.evaluate(f.request(challenge: try f.challenge()))
        },
        Row(
            "a stored public key that is not a P-256 point", "invalid_public_key", "key_lookup",
            record: { $0.publicKey = [0x04] + [UInt8](repeating: 0, count: 64) }
        ) { f in
            try f.evaluate(f.request(challenge: try f.challenge()))
        },
        // 4. Apple's assertion algorithm.
        Row(
            "the body changed after signing", "bad_signature", "verify",
            details: ["bound": "challenge, method, target, sha256(body), authority"]
        ) { f in
            try f.evaluate(
                f.request(challenge: try f.challenge(), body: Array("{\"sku\":\"A-9\"}".utf8), signedBody: Array("{\"sku\":\"A-1\"}".utf8)))
        },
        Row("signed by another key", "bad_signature", "verify") { f in
            try f.evaluate(f.request(challenge: try f.challenge(), mutations: AssertionMutations(signingKey: ECPrivateKey(curve: .p256))))
        },
        Row("bind: body, the body changed after signing", "bad_signature", "verify", details: ["bound": "body"]) { f in
            try f.evaluate(
                f.request(route: bodyOff, challenge: nil, body: Array("{\"n\":2}".utf8), signedBody: Array("{\"n\":1}".utf8)),
                route: bodyOff)
        },
        Row("the rpIdHash of another app", "app_id_mismatch", "verify") { f in
            let other = try AppID("ABCDE12345.com.example.other")
            return try f.evaluate(f.request(challenge: try f.challenge(), mutations: AssertionMutations(rpIDHash: other.rpIDHash)))
        },
        Row("a counter not above the stored one", "counter_replay", "verify", details: ["counter_presented": "0", "counter_stored": "0"]) {
            f in
            try f.evaluate(f.request(challenge: try f.challenge(), mutations: AssertionMutations(counter: 0)))
        },
        // 5. The iOS 27 signals of the assertion.
        Row("asserted in a validation category not allowed", "validation_category_not_allowed", "app_policy") { f in
            try f.evaluate(f.request(challenge: try f.challenge(), extensions: SimulatedExtensions(validationCategory: .development)))
        },
        Row("asserted with a bundle version below the minimum", "bundle_version_too_old", "app_policy", details: ["bundle_version": "1.0"])
        { f in
            try f.evaluate(f.request(challenge: try f.challenge(), extensions: SimulatedExtensions(bundleVersion: "1.0")))
        },
        // 6. The commit: the challenge and the counter, atomically.
        Row("a challenge never issued", "challenge_unknown", "commit") { f in
            try f.evaluate(f.request(challenge: ChallengeText.encode(ChallengeToken(SecureRandom.bytes(16))!)))
        },
        Row("a challenge past its expiry", "challenge_expired", "commit") { f in
            try f.evaluate(f.request(challenge: try f.challenge()), at: AssertionGateTests.now + AssertionGateTests.ttl)
        },
        Row("a challenge already used by a verified request", "challenge_consumed", "commit") { f in
            let challenge = try f.challenge()
            _ = try f.accepted(f.request(challenge: challenge))
            return try f.evaluate(f.request(challenge: challenge))
        },
        Row("a challenge issued for registration", "challenge_wrong_purpose", "commit") { f in
            try f.evaluate(f.request(challenge: try f.challenge(purpose: .register)))
        },
        Row("a challenge issued for another key", "challenge_wrong_key", "commit") { f in
            try f.evaluate(f.request(challenge: try f.challenge(boundTo: KeyID(SHA256.hash([1, 2, 3])))))
        },
        Row("the key removed between its lookup and the commit", "key_unknown", "commit") { f in
            // The lookup read the stranger's record before it was evicted; the store no longer has it.
            let stranger = SimulatedDevice(appID: f.device.appID, ca: f.ca)
            var read = f.record
            read.keyID = KeyID(stranger.keyID)!
            read.publicKey = stranger.publicKey.x962
            let store = StubStore(f.memory, snapshot: [read.keyID: read])
            return try f.evaluate(f.request(challenge: try f.challenge(boundTo: .some(nil)), signer: stranger), store: store)
        },
        Row(
            "the counter advanced by another request between the lookup and the commit", "counter_replay", "commit",
            details: ["counter_presented": "3", "counter_stored": "0", "counter_stored_at_commit": "5"]
        ) { f in
            let store = StubStore(f.memory, snapshot: [f.keyID: f.record])  // read at counter 0
            for _ in 0..<5 { _ = try f.accepted(f.request(challenge: try f.challenge())) }
            return try f.evaluate(f.request(challenge: try f.challenge(), mutations: AssertionMutations(counter: 3)), store: store)
        },
        // The store.
        Row("the store cannot answer the key lookup", "store_unavailable", "store") { f in
            try f.evaluate(
                f.request(challenge: try f.challenge()), store: StubStore(f.memory, failing: [.deviceKey: StubStore.unreachable]))
        },
        Row("the store cannot commit", "store_unavailable", "store", details: ["counter_presented": "1"]) { f in
            try f.evaluate(
                f.request(challenge: try f.challenge()), store: StubStore(f.memory, failing: [.commitAssertion: StubStore.unreachable]))
        },
        Row("the store answers challenge_capacity", "challenge_capacity", "store") { f in
            let full = StoreError(.challengeCapacity, "too many live challenges (test)")
            return try f.evaluate(f.request(challenge: try f.challenge()), store: StubStore(f.memory, failing: [.deviceKey: full]))
        },
        // The key's budget on the route (issue 27), checked in the commit.
        Row(
            "a verified request of a key over its route's key_rate", "key_rate_limited", "commit",
            details: ["key_rate": "1/m", "key_rate_burst": "2", "retry_after": "60", "counter_presented": "3"]
        ) { f in
            let route = AssertionGateKeyRateTests.limited
            for _ in 0..<2 { _ = try f.accepted(f.request(route: route, challenge: try f.challenge()), route: route) }
            return try f.evaluate(f.request(route: route, challenge: try f.challenge()), route: route)
        },
    ]

    @Test("each row is refused with its code at its step, with the contract's status and action, and changes nothing", arguments: rows)
    func refusal(_ row: Row) throws {
        let f = try Fixture(record: row.record)
        guard case .refused(let e) = try row.run(f) else {
            Issue.record("\(row.name): accepted")
            return
        }
        #expect(e.error.code == row.code, "\(row.name)")
        #expect(e.step == row.step, "\(row.name)")
        Contract.check(e, on: .route, row.name)
        for (name, value) in row.details { #expect(e.detail(name) == value, "\(row.name): \(name)") }
        // Nothing changed: the counter stays, and a challenge that was usable still is.
        #expect(f.after.counter == f.before.counter, "\(row.name): the counter moved")
        #expect(f.after.challenge == f.before.challenge, "\(row.name): the challenge changed")
        // Never a byte of the assertion or a whole challenge in the explanation.
        for (_, value) in e.fields { #expect(value.utf8.count < 200, "\(row.name): \(value)") }
    }

    /// The codes the gate answers, each reached by a row above.
    static let gateCodes: Set<String> = [
        "assertion_missing", "challenge_missing", "malformed", "challenge_unknown", "challenge_not_bound", "key_unknown",
        "app_not_allowed", "environment_not_allowed", "validation_category_not_allowed", "bundle_version_too_old",
        "invalid_public_key", "bad_signature", "app_id_mismatch", "counter_replay", "challenge_expired", "challenge_consumed",
        "challenge_wrong_purpose", "challenge_wrong_key", "store_unavailable", "challenge_capacity", "key_rate_limited",
    ]

    @Test("the table reaches every code the gate answers")
    func everyGateCodeHasARow() {
        #expect(Set(Self.rows.map(\.code)) == Self.gateCodes)
    }

    // MARK: Accepted

    @Test("accepted: the counter advances, the challenge is consumed, a next challenge bound to the key is issued")
    func accepted() throws {
        let f = try Fixture()
        let challenge = try f.challenge()
        let a = try f.accepted(f.request(challenge: challenge))
        #expect(a.keyID == f.keyID && a.counter == 1 && a.appID == Self.shop)
        #expect(f.storedCounter == 1)
        #expect(f.after.challenge == .consumed)
        let next = try #require(a.nextChallenge)
        #expect(next.expiresAtMillis == Self.now + Self.ttl)
        guard case .valid(purpose: .assert, keyID: f.keyID, _)? = f.challengeState(next.token, at: Self.now) else {
            Issue.record("the next challenge is not an assertion challenge bound to the key")
            return
        }
        // The next challenge is usable for the next request.
        #expect(try f.accepted(f.request(challenge: ChallengeText.encode(next.token))).counter == 2)
    }

    @Test("accepted: bind: body with the challenge in the body, optional without one, off without one; allowed iOS 27 signals")
    func acceptedVariants() throws {
        let f = try Fixture()
        let challenge = try f.challenge()
        _ = try f.accepted(
            f.request(route: Self.bodyRequired, challenge: challenge, body: Array("{\"c\":\"\(challenge)\"}".utf8)),
            route: Self.bodyRequired)
        _ = try f.accepted(f.request(route: Self.bodyOptional, challenge: nil), route: Self.bodyOptional)
        _ = try f.accepted(f.request(route: Self.bodyOff, challenge: nil), route: Self.bodyOff)
        let signals = SimulatedExtensions(validationCategory: .appStore, bundleVersion: "2.1")
        #expect(try f.accepted(f.request(challenge: try f.challenge(), extensions: signals)).counter == 4)
    }

    @Test("the accepted key id's text is keyID.description however the request spelled it (padded base64 reused, others encoded)")
    func acceptedKeyIDText() throws {
        let f = try Fixture()
        let bytes = f.keyID.bytes
        let padded = Base64.encode(bytes)
        let spellings = [
            padded, String(padded.dropLast()), Base64.encodeURL(bytes), Base64.encode(bytes, alphabet: .url, padding: true),
            Hex.encode(bytes), Hex.encode(bytes).uppercased(),
        ]
        for spelling in spellings {
            var request = f.request(challenge: try f.challenge())
            request.keyID = spelling
            guard case .accepted(let a) = try f.evaluate(request) else {
                Issue.record("refused with key id \(spelling)")
                continue
            }
            #expect(a.keyIDText == f.keyID.description, "\(spelling)")
            #expect(a.keyIDText == padded)
        }
    }

    @Test("accepted without a next challenge when the store cannot issue one (the request still passes)")
    func acceptedWithoutNextChallenge() throws {
        let f = try Fixture()
        let request = f.request(challenge: try f.challenge())
        let store = StubStore(f.memory, failing: [.issueChallenge: StubStore.unreachable])
        guard case .accepted(let a) = try f.evaluate(request, store: store) else {
            Issue.record("refused")
            return
        }
        #expect(a.nextChallenge == nil && a.counter == 1)
        #expect(f.storedCounter == 1)
    }

    @Test("a refusal read from the head alone is the refusal the gate gives after the body")
    func headRefusalIsTheGatesRefusal() throws {
        let f = try Fixture()
        var r = f.request(challenge: try f.challenge())
        r.assertion = "not base64!"
        guard
            case .failure(let head) = AssertionGate.readHeaders(
                keyID: r.keyID, challenge: r.challenge, assertion: r.assertion, route: Self.request),
            case .refused(let gate) = try f.evaluate(r)
        else {
            Issue.record("not refused")
            return
        }
        #expect(head.error == gate.error && head.step == gate.step)
        #expect(head.fields.map(\.0) == gate.fields.map(\.0) && head.fields.map(\.1) == gate.fields.map(\.1))
    }
}
