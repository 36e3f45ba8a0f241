import AndroidAttest
import AppAttestSimulator
import Foundation
import GatewayCrypto
import GatewayTestSupport
import GatewayWire
import Testing

/// A software Android device (`SimulatedAndroidDevice` under a test root) speaking the client
/// contract to a real `gatewayd`: registration with its Keystore chain, then requests signed over
/// `counter ‖ SHA256(clientData)` (docs/android.md).
final class AndroidContractDevice: @unchecked Sendable {
    let device: SimulatedAndroidDevice
    let port: UInt16
    var description: SimulatedKeyDescription
    var keyID: String { Base64.encode(device.keyID) }

    init(ca: TestAndroidCA, port: UInt16, package: String = AndroidGatewayTests.package, securityLevel: SecurityLevel = .trustedEnvironment)
        throws
    {
        device = try SimulatedAndroidDevice(ca: ca, securityLevel: securityLevel)
        self.port = port
        description = device.keyDescription(packageName: package, signingCertificateSHA256: AndroidGatewayTests.signer)
    }

    func challenge(purpose: String? = nil, keyID: String? = nil) throws -> String {
        var fields: [String] = []
        if let purpose { fields.append("\"purpose\":\"\(purpose)\"") }
        if let keyID { fields.append("\"keyId\":\"\(keyID)\"") }
        let r = try HTTPCall.send(
            port: port, method: "POST", target: "/v1/attest/challenge", body: Array("{\(fields.joined(separator: ","))}".utf8))
        guard r.status == 201, let c = r.json?["challenge"] as? String else { throw POSIXError(.EPROTO) }
        return c
    }

    /// The chain made with `attested` as the Keystore's attestation challenge (default: the
    /// challenge's UTF-8 bytes, as the contract says), posted with `challenge`.
    func register(challenge c: String? = nil, attested: [UInt8]? = nil, keyID: String? = nil) throws -> HTTPCall {
        let c = try c ?? challenge(purpose: "register")
        let chain = try device.attest(challenge: attested ?? Array(c.utf8), keyDescription: description)
        let items = chain.map { "\"\(Base64.encode($0))\"" }.joined(separator: ",")
        let body = "{\"platform\":\"android\",\"keyId\":\"\(keyID ?? self.keyID)\",\"attestation\":[\(items)],\"challenge\":\"\(c)\"}"
        return try HTTPCall.send(port: port, method: "POST", target: "/v1/attest/register", body: Array(body.utf8))
    }

    /// A `bind: request` (v2) request signed with the device's key (or `signer`'s) and next counter.
    func sign(target: String, body: [UInt8], challenge: String, counter: UInt32? = nil, signer: ECPrivateKey? = nil)
        -> ContractDevice.Signed
    {
        let authority = "127.0.0.1:\(port)"
        let cd = ContractDevice.clientData(challenge: challenge, method: "POST", target: target, authority: authority, body: body)
        let assertion: [UInt8]
        if counter != nil || signer != nil {
            assertion =
                device.makeAssertion(clientDataHash: SHA256.hash(cd), counter: counter ?? device.counter + 1, signingKey: signer).encoded
        } else {
            assertion = device.assert(clientDataHash: SHA256.hash(cd))
        }
        return ContractDevice.Signed(
            method: "POST", target: target, body: body,
            headers: [
                ("X-App-Attest-Key-Id", keyID), ("X-App-Attest-Challenge", challenge), ("X-App-Assertion", Base64.encode(assertion)),
            ],
            authority: authority)
    }

    func send(_ s: ContractDevice.Signed) throws -> HTTPCall {
        try HTTPCall.send(port: port, method: s.method, target: s.target, headers: s.headers, body: s.body, host: s.authority)
    }
}

@Suite("Android apps behind the gate (real gatewayd, software Android devices)", .serialized, .timeLimit(.minutes(5)))
struct AndroidGatewayTests {
    static let package = "com.example.shop"
    static let signer = SHA256.hash(Array("the shop's signing certificate".utf8))
    let apple: TestCA
    let android: TestAndroidCA
    let dir: URL

    init() throws {
        (apple, dir) = try makeTrustedTestCADirectory("gw-android")
        android = try TestAndroidCA()
        try android.rootPEM.write(to: dir.appendingPathComponent("android-root.pem"), atomically: true, encoding: .utf8)
    }

    func config(store: String = "{kind: memory, shards: 4}", android policy: String = "") -> String {
        let base = TestGatewayYAML.base(caDir: dir)
        let apps = """
            apps:
              - team_id: ABCDE12345
                bundle_ids: [com.example.shop]
                environments: [development, production]
                android: {package_names: [\(Self.package)], signing_cert_sha256: ["\(Hex.encode(Self.signer))"]\(policy)}
            """
        let trust = "trust: {extra_roots: [\(dir.appendingPathComponent("root.pem").path)], "
        return
            base
            .replacingOccurrences(
                of: "apps:\n  - {team_id: ABCDE12345, bundle_ids: [com.example.shop], environments: [development, production]}", with: apps
            )
            .replacingOccurrences(
                of: trust, with: trust + "extra_android_roots: [\(dir.appendingPathComponent("android-root.pem").path)], ")
                + """

                attest: {challenge_rate: {per_client: off}}
                store: \(store)
                routes:
                  - name: purchase
                    match: {methods: [POST], path_prefix: /api/purchase}
                    upstream: demo
                    assertion: {mode: enforce}
                  - {name: default, match: {path_prefix: /}, upstream: demo}
                """
    }

    @Test("an Android device registers and sends protected requests; iOS devices on the same route still pass")
    func flow() throws {
        let yaml = config()
        #expect(yaml.contains("extra_android_roots") && yaml.contains("android: {package_names"), "\(yaml)")
        let gw = try GatewayProcess(config: yaml)
        defer { gw.stop() }
        let port = HTTPCall.port(gw, "public")
        let phone = try AndroidContractDevice(ca: android, port: port)
        let reg = try phone.register()
        #expect(reg.status == 201, "\(reg.body)")
        #expect(reg.json?["keyId"] as? String == phone.keyID)
        #expect(reg.json?["appId"] as? String == "android:\(Self.package)")

        var challenge = try phone.challenge(purpose: "assert", keyID: phone.keyID)
        for i in 0..<3 {
            let body = Array("{\"sku\":\(i)}".utf8)
            let r = try phone.send(phone.sign(target: "/api/purchase?order=\(i)", body: body, challenge: challenge))
            #expect(r.status == 200, "request \(i): \(r.body)")
            let headers = try #require(r.json?["headers"] as? [String: String])
            #expect(headers["X-App-Attest-Verified-Key-Id"] == phone.keyID)
            challenge = try #require(r.headers["x-app-attest-next-challenge"])
        }
        // An iPhone on the same route.
        let iphone = try ContractDevice(ca: apple, appID: "ABCDE12345.com.example.shop", port: port)
        #expect(try iphone.register().status == 201)
        let c = try iphone.challenge(purpose: "assert", keyID: iphone.keyID)
        #expect(try iphone.send(iphone.sign(target: "/api/purchase", body: [], challenge: c)).status == 200)
        let metrics = try curl([gw.url("admin", "/metrics")]).1
        #expect(metrics.contains("attest_gateway_registrations_total{result=\"registered\",reason=\"new_key\"} 2"))
        #expect(
            metrics.contains(
                "attest_gateway_assertion_verdicts_total{route=\"purchase\",mode=\"enforce\",verdict=\"accepted\",reason=\"ok\"} 4"))
    }

    @Test("every attack the App Attest path refuses is refused for Android too, with its code; nothing is consumed")
    func attacks() throws {
        let gw = try GatewayProcess(config: config(android: ", min_patch_level: 202501"))
        defer { gw.stop() }
        let port = HTTPCall.port(gw, "public")
        func refused(_ r: HTTPCall, _ status: Int, _ code: String, _ line: Int = #line) {
            #expect(r.status == status && r.json?["error"] as? String == code, "line \(line): \(r.status) \(r.body)")
        }
        // Registration attacks.
        var wrongPackage = try AndroidContractDevice(ca: android, port: port, package: "com.evil.shop")
        refused(try wrongPackage.register(), 403, "app_not_allowed")
        wrongPackage = try AndroidContractDevice(ca: android, port: port)
        wrongPackage.description.signingCertificateSHA256 = SHA256.hash(Array("a repackaged build".utf8))
        refused(try wrongPackage.register(), 403, "signing_cert_not_allowed")
        let unlocked = try AndroidContractDevice(ca: android, port: port)
        unlocked.description.deviceLocked = false
        unlocked.description.verifiedBootState = .unverified
        refused(try unlocked.register(), 403, "bootloader_unlocked")
        let software = try AndroidContractDevice(ca: android, port: port, securityLevel: .software)
        refused(try software.register(), 401, "software_key")
        let old = try AndroidContractDevice(ca: android, port: port)
        old.description.osPatchLevel = 202_312
        refused(try old.register(), 403, "patch_level_too_old")
        let wrongChallenge = try AndroidContractDevice(ca: android, port: port)
        let issued = try wrongChallenge.challenge(purpose: "register")
        refused(try wrongChallenge.register(challenge: issued, attested: Array("another challenge".utf8)), 401, "challenge_mismatch")
        // The challenge was not consumed by the refused registration: the same one registers now.
        #expect(try wrongChallenge.register(challenge: issued).status == 201)
        let otherKeyID = try AndroidContractDevice(ca: android, port: port)
        refused(try otherKeyID.register(keyID: wrongChallenge.keyID), 401, "key_id_mismatch")
        let foreign = try TestAndroidCA(name: "Not Google")
        refused(try AndroidContractDevice(ca: foreign, port: port).register(), 401, "chain_untrusted")

        // Request attacks, against the registered device.
        let phone = wrongChallenge
        var challenge = try phone.challenge(purpose: "assert", keyID: phone.keyID)
        let first = phone.sign(target: "/api/purchase", body: Array("{}".utf8), challenge: challenge)
        let ok = try phone.send(first)
        #expect(ok.status == 200, "\(ok.body)")
        // Replay of the accepted request: its counter is the stored one (refused before the challenge is looked at).
        refused(try phone.send(first), 401, "counter_replay")
        // A new counter with the consumed challenge.
        refused(try phone.send(phone.sign(target: "/api/purchase", body: [], challenge: challenge, counter: 7)), 401, "challenge_consumed")
        // The same counter again with a fresh challenge: counter_replay.
        challenge = try #require(ok.headers["x-app-attest-next-challenge"])
        refused(try phone.send(phone.sign(target: "/api/purchase", body: [], challenge: challenge, counter: 1)), 401, "counter_replay")
        // Another key's signature (the counter and challenge are good).
        let stranger = ECPrivateKey(curve: .p256)
        refused(try phone.send(phone.sign(target: "/api/purchase", body: [], challenge: challenge, signer: stranger)), 401, "bad_signature")
        // A tampered body under a good signature.
        var tampered = phone.sign(target: "/api/purchase", body: Array("{\"sku\":1}".utf8), challenge: challenge, counter: 5)
        tampered = ContractDevice.Signed(
            method: tampered.method, target: tampered.target, body: Array("{\"sku\":9}".utf8), headers: tampered.headers,
            authority: tampered.authority)
        refused(try phone.send(tampered), 401, "bad_signature")
        // An App Attest assertion presented for the Android key.
        let iphone = try ContractDevice(ca: apple, appID: "ABCDE12345.com.example.shop", port: port)
        var appleShaped = iphone.sign(target: "/api/purchase", body: [], challenge: challenge)
        appleShaped = ContractDevice.Signed(
            method: "POST", target: "/api/purchase", body: [],
            headers: appleShaped.headers.map { $0.0 == "X-App-Attest-Key-Id" ? ($0.0, phone.keyID) : $0 }, authority: appleShaped.authority)
        refused(try phone.send(appleShaped), 401, "malformed")
        // None of the refusals consumed the challenge or moved the counter: the next honest request passes.
        let next = try phone.send(phone.sign(target: "/api/purchase", body: [], challenge: challenge, counter: 2))
        #expect(next.status == 200, "\(next.body)")
    }
}
