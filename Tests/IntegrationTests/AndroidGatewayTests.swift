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

    convenience init(
        ca: TestAndroidCA, port: UInt16, package: String = AndroidGatewayTests.package, securityLevel: SecurityLevel = .trustedEnvironment
    ) throws {
        self.init(device: try SimulatedAndroidDevice(ca: ca, securityLevel: securityLevel), port: port, package: package)
    }

    init(device: SimulatedAndroidDevice, port: UInt16, package: String = AndroidGatewayTests.package) {
        self.device = device
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

/// Revocation (docs/android.md, "Revocation"): the gateway fetches the attestation status list over
/// HTTPS (here a real nginx serving a file with ETags, under the test CA's certificate), refuses a
/// registration whose chain holds a listed certificate, follows the list's changes, and on Redis
/// shares one fetch with the fleet.
@Suite("Android revocation: the status list fetched, followed and shared", .serialized, .timeLimit(.minutes(5)))
struct AndroidRevocationTests {
    let android: AndroidGatewayTests
    let nginx: NginxProcess
    let statusFile: URL

    init() throws {
        android = try AndroidGatewayTests()
        let dir = android.dir
        let key = ECPrivateKey(curve: .p256)
        let certificate = try android.apple.issueTLSServerCertificate(for: ["127.0.0.1"], key: key, validity: TestCA.defaultValidity)
        let chainPath = dir.appendingPathComponent("status-tls.pem").path
        let keyPath = dir.appendingPathComponent("status-tls.key").path
        try X509Certificate.pem([certificate, android.apple.intermediate]).write(toFile: chainPath, atomically: true, encoding: .utf8)
        try key.pkcs8PEM.write(toFile: keyPath, atomically: true, encoding: .utf8)
        nginx = try NginxProcess(tls: (chainPath, keyPath))
        try FileManager.default.createDirectory(at: nginx.html.appendingPathComponent("attestation"), withIntermediateDirectories: true)
        statusFile = nginx.html.appendingPathComponent("attestation/status")
    }

    func list(_ devices: [SimulatedAndroidDevice]) throws {
        // Written whole and renamed: nginx never serves half a file, and a new file is a new ETag.
        try Data(TestAndroidCA.statusList(listing: devices.map(\.attestationCertificate))).write(to: statusFile, options: .atomic)
    }

    func config(store: String = "{kind: memory, shards: 4}") -> String {
        android.config(store: store) + """

            android: {status_url: "https://127.0.0.1:\(nginx.port)/attestation/status", refresh: 1s, ca_file: \(android.dir.appendingPathComponent("root.pem").path)}
            """
    }

    static func metric(_ text: String, _ series: String) -> Double? {
        text.split(separator: "\n").first { $0.hasPrefix(series + " ") }.flatMap { Double($0.split(separator: " ").last ?? "") }
    }

    static func waitForMetric(_ gw: GatewayProcess, _ series: String, seconds: Double = 15, _ ok: (Double) -> Bool) throws -> Double {
        let deadline = Date().addingTimeInterval(seconds)
        var last: Double? = nil
        while Date() < deadline {
            last = Self.metric(try curl([gw.url("admin", "/metrics")]).1, series)
            if let v = last, ok(v) { return v }
            usleep(100_000)
        }
        throw HTTPTestError("\(series) is \(last.map { String($0) } ?? "absent") after \(seconds) s")
    }

    @Test("a listed certificate refuses the registration (revoked, reattest); a changed list is followed; 304 when unchanged")
    func revocation() throws {
        guard NginxProcess.testsEnabled else { return }
        defer { nginx.stop() }
        let revoked = try SimulatedAndroidDevice(ca: android.android)
        try list([revoked])
        let gw = try GatewayProcess(config: config())
        defer { gw.stop() }
        let port = HTTPCall.port(gw, "public")
        _ = try Self.waitForMetric(gw, "attest_gateway_android_status_list_entries") { $0 == 1 }

        let listed = AndroidContractDevice(device: revoked, port: port)
        let r = try listed.register()
        #expect(r.status == 401 && r.json?["error"] as? String == "revoked" && r.json?["action"] as? String == "reattest", "\(r.body)")
        let good = try AndroidContractDevice(ca: android.android, port: port)
        #expect(try good.register().status == 201)
        // Unchanged: the next fetches are 304s.
        _ = try Self.waitForMetric(gw, "attest_gateway_android_status_list_fetches_total{result=\"not_modified\"}") { $0 >= 1 }
        // The list changes: another device's batch certificate is listed, the gateway follows.
        let next = try AndroidContractDevice(ca: android.android, port: port)
        try list([revoked, next.device])
        _ = try Self.waitForMetric(gw, "attest_gateway_android_status_list_entries") { $0 == 2 }
        let refused = try next.register()
        #expect(refused.status == 401 && refused.json?["error"] as? String == "revoked", "\(refused.body)")
        // The list's origin goes away: the last list is kept, registrations still checked against it.
        nginx.stop()
        _ = try Self.waitForMetric(gw, "attest_gateway_android_status_list_fetches_total{result=\"failed\"}") { $0 >= 1 }
        #expect(try next.register().json?["error"] as? String == "revoked")
        #expect(waitForLog(gw, "Android attestation status list not fetched"))
    }

    @Test("two gateways on one Redis: one fetches, the other reads the fleet's copy; both refuse a listed certificate")
    func sharedOnRedis() throws {
        guard NginxProcess.testsEnabled else { return }
        defer { nginx.stop() }
        let revoked = try SimulatedAndroidDevice(ca: android.android)
        try list([revoked])
        let redis = try RedisProcess()
        defer { redis.stop() }
        let store = "{kind: redis, url: \(redis.url)}"
        let a = try GatewayProcess(config: config(store: store))
        defer { a.stop() }
        let b = try GatewayProcess(config: config(store: store))
        defer { b.stop() }
        for gw in [a, b] { _ = try Self.waitForMetric(gw, "attest_gateway_android_status_list_entries") { $0 == 1 } }
        // Over a few refresh periods at least one gateway took the fleet's copy instead of fetching.
        let deadline = Date().addingTimeInterval(15)
        var shared = 0.0
        while Date() < deadline, shared < 2 {
            shared = try [a, b].map {
                Self.metric(
                    try curl([$0.url("admin", "/metrics")]).1, "attest_gateway_android_status_list_fetches_total{result=\"shared\"}") ?? 0
            }.reduce(0, +)
            usleep(200_000)
        }
        #expect(shared >= 2, "the gateways read the fleet's copy \(shared) times")
        for gw in [a, b] {
            let r = try AndroidContractDevice(device: revoked, port: HTTPCall.port(gw, "public")).register()
            #expect(r.json?["error"] as? String == "revoked", "\(r.body)")
        }
        // An Android key registered through one gateway signs requests through the other: the key,
        // its counter and its challenges are the fleet's.
        let phone = try AndroidContractDevice(ca: android.android, port: HTTPCall.port(a, "public"))
        #expect(try phone.register().status == 201)
        let onB = AndroidContractDevice(device: phone.device, port: HTTPCall.port(b, "public"))
        let challenge = try onB.challenge(purpose: "assert", keyID: onB.keyID)
        let first = onB.sign(target: "/api/purchase", body: Array("{}".utf8), challenge: challenge)
        let ok = try onB.send(first)
        #expect(ok.status == 200, "\(ok.body)")
        let onA = AndroidContractDevice(device: phone.device, port: HTTPCall.port(a, "public"))
        let replay = try HTTPCall.send(
            port: onA.port, method: first.method, target: first.target, headers: first.headers, body: first.body,
            host: "127.0.0.1:\(onB.port)")
        #expect(replay.json?["error"] as? String == "counter_replay", "\(replay.body)")
    }
}
