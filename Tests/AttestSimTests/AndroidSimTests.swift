import AndroidAttest
import AppAttest
import AppAttestSimulator
import AttestSim
import Foundation
import GatewayCrypto
import GatewayTestSupport
import GatewayWire
import Testing

/// The simulator's Android requests, byte for byte through the pure verifiers (no gateway): the
/// registration verifies under the CA's root for the challenge's UTF-8 bytes, the assertion over
/// `counter ‖ SHA256(clientData)`; the stand-in's list makes the verifier refuse the revoked batch;
/// the Android options; the binary's usage errors.
@Suite("attest-sim: Android devices, their requests and options", .serialized, .timeLimit(.minutes(3)))
struct AndroidSimTests {
    static let appID = try! AppID("ABCDE12345.com.example.shop")

    @Test("registration: {platform, keyId, attestation[], challenge}; the chain verifies for the challenge's UTF-8 bytes")
    func registration() throws {
        let ca = try TestAndroidCA()
        let app = try AndroidApp.parse(package: nil, appID: Self.appID, signingCertSHA256: nil)
        #expect(app.packageName == "com.example.shop" && app.signingCertificateSHA256 == AndroidApp.defaultSigningCertificateSHA256)
        let device = try AndroidSimDevice(ca: ca, app: app)
        let challenge = "Zm9vYmFy-challenge_text"
        let request = try GatewayRequests.registerAndroid(paths: GatewayPaths(), device: device, challenge: challenge)
        #expect(request.method == "POST" && request.target == "/v1/attest/register")
        let json = try #require((try JSONSerialization.jsonObject(with: Data(request.body))) as? [String: Any])
        #expect(json["platform"] as? String == "android" && json["challenge"] as? String == challenge)
        #expect(json["keyId"] as? String == Base64.encode(device.keyID))
        let chain = try (json["attestation"] as? [String] ?? []).map { try Base64.decode($0) }
        #expect(chain.count == 4)
        let verifier = AndroidAttestationVerifier(extraRoots: [ca.root])
        let verified = try verifier.verify(chain: chain, challenge: Array(challenge.utf8), at: Date())
        #expect(verified.keyID == device.keyID)
        #expect(verified.applicationID?.packages.map(\.name) == ["com.example.shop"])
        #expect(verified.applicationID?.signatureDigests == [AndroidApp.defaultSigningCertificateSHA256])
        // Another challenge is not the one attested.
        #expect { _ = try verifier.verify(chain: chain, challenge: Array("other".utf8), at: Date()) } throws: {
            ($0 as? AndroidAttestError)?.code == .challengeMismatch
        }
    }

    @Test("the stand-in's list, parsed as the gateway will, refuses the revoked batch with revoked and nothing else")
    func revokedBatch() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("android-sim-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let appleCA = try TestCA()
        let ca = try TestAndroidCA()
        let batch = try ca.issueRevokedBatch()
        let google = try GoogleStandIn(ca: appleCA, listing: [batch.serial], workDirectory: dir)
        defer { google.stop() }
        let list = try AttestationStatusList.parse(json: google.current.body)
        let app = AndroidApp(packageName: "com.example.shop")
        let verifier = AndroidAttestationVerifier(extraRoots: [ca.root])
        func chain(_ device: AndroidSimDevice) throws -> [[UInt8]] {
            let r = try GatewayRequests.registerAndroid(paths: GatewayPaths(), device: device, challenge: "c")
            let json = (try JSONSerialization.jsonObject(with: Data(r.body))) as? [String: Any]
            return try (json?["attestation"] as? [String] ?? []).map { try Base64.decode($0) }
        }
        let revoked = try chain(AndroidSimDevice(device: batch.device(ca: ca), app: app))
        #expect { _ = try verifier.verify(chain: revoked, challenge: Array("c".utf8), at: Date(), statusList: list) } throws: {
            ($0 as? AndroidAttestError)?.code == .revoked
        }
        // Without the list the same chain verifies (what a gateway without android.status_url does).
        _ = try verifier.verify(chain: revoked, challenge: Array("c".utf8), at: Date())
        let healthy = try chain(AndroidSimDevice(ca: ca, app: app))
        _ = try verifier.verify(chain: healthy, challenge: Array("c".utf8), at: Date(), statusList: list)
        // Revoking the healthy device's attestation certificate later refuses it too.
        let attestation = try X509Certificate(der: healthy[1])
        try google.revoke(serial: TestAndroidCA.statusListSerial(attestation))
        let newer = try AttestationStatusList.parse(json: google.current.body)
        #expect { _ = try verifier.verify(chain: healthy, challenge: Array("c".utf8), at: Date(), statusList: newer) } throws: {
            ($0 as? AndroidAttestError)?.code == .revoked
        }
    }

    @Test("protected requests: the same headers and client data as an iPhone's, the assertion over counter ‖ SHA256(clientData)")
    func protectedRequest() throws {
        let ca = try TestAndroidCA()
        let device = try AndroidSimDevice(ca: ca, app: AndroidApp(packageName: "com.example.shop"))
        let host = RequestHost(endpoint: try HTTPEndpoint(url: "http://127.0.0.1:8080"))
        let body = Array("{\"sku\":1}".utf8)
        let r = GatewayRequests.protected(
            android: device, challenge: "ch", method: "POST", target: "/api/purchase?x=1", body: body, binding: .request, host: host)
        func header(_ name: String) -> String? { r.headers.first { $0.0 == name }?.1 }
        #expect(header("X-App-Attest-Key-Id") == Base64.encode(device.keyID) && header("X-App-Attest-Challenge") == "ch")
        let assertion = try AndroidAssertion.parse(try Base64.decode(try #require(header("X-App-Assertion"))))
        #expect(assertion.counter == 1 && device.counter == 1)
        let clientData = Binding.request.clientData(
            challenge: "ch", method: "POST", target: "/api/purchase?x=1", body: body, authority: "127.0.0.1:8080")
        _ = try AndroidAssertionVerifier().verify(
            assertion, publicKey: device.device.publicKey, clientDataHash: SHA256.hash(clientData), previousCounter: 0)
        // Another body under that signature does not verify.
        let tampered = Binding.request.clientData(
            challenge: "ch", method: "POST", target: "/api/purchase?x=1", body: Array("{\"sku\":9}".utf8), authority: "127.0.0.1:8080")
        #expect(throws: AndroidAttestError.self) {
            _ = try AndroidAssertionVerifier().verify(
                assertion, publicKey: device.device.publicKey, clientDataHash: SHA256.hash(tampered), previousCounter: 0)
        }
        // A forged counter or signer leaves the device's counter alone.
        _ = GatewayRequests.protected(
            android: device, challenge: "ch", method: "POST", target: "/", body: [], binding: .request, host: host, counter: 9,
            signer: ECPrivateKey(curve: .p256))
        #expect(device.counter == 1)
    }

    @Test("options: --platform, --package, --signing-cert-sha256, and what Android devices cannot do")
    func options() throws {
        #expect(try PlatformChoice.parse("both").platforms == [.ios, .android])
        #expect(throws: AttestSimError.self) { try PlatformChoice.parse("windows") }
        let signer = String(repeating: "Ab", count: 32)
        let app = try AndroidApp.parse(package: "com.example.app_2", appID: Self.appID, signingCertSHA256: signer)
        #expect(app.packageName == "com.example.app_2" && Hex.encode(app.signingCertificateSHA256) == signer.lowercased())
        for (package, cert) in [
            ("shop", nil), ("com.1example", nil), ("com..x", nil), ("com.example", "abc"),
            ("com.example", String(repeating: "g", count: 64)),
        ] {
            #expect(throws: AttestSimError.self, "\(package) \(cert ?? "")") {
                try AndroidApp.parse(package: package, appID: Self.appID, signingCertSHA256: cert)
            }
        }
        let endpoint = try HTTPEndpoint(url: "http://127.0.0.1:1")
        let both = try RunOptions(
            endpoint: endpoint, appID: Self.appID, devices: 3, requests: 3, concurrency: 1, platforms: [.ios, .android], androidApp: app)
        #expect((0..<3).map(both.platform(ofDevice:)) == [.ios, .android, .ios])
        #expect(throws: AttestSimError.self) {
            try RunOptions(
                endpoint: endpoint, appID: Self.appID, devices: 2, requests: 2, concurrency: 1, unsupported: 1, platforms: [.android],
                androidApp: app)
        }
        #expect(throws: AttestSimError.self) {
            try RunOptions(endpoint: endpoint, appID: Self.appID, devices: 2, requests: 2, concurrency: 1, platforms: [.android])
        }
        #expect(AndroidAttackMode.parse("all") == AndroidAttackMode.allCases && AndroidAttackMode.parse("wrong-host") == nil)
    }

    @Test("the binary: Android usage errors exit 2; `ca` writes the Android CA, and --reuse adds it to an older CA")
    func binary() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("android-cli-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: dir) }
        let made = try runProcess(attestSimBinary, ["ca", "--out", dir.path])
        #expect(made.status == 0 && made.stdout.contains("extra_android_roots") && made.stdout.contains("android: {package_names: "))
        _ = try TestAndroidCA.load(from: dir)
        let base = ["--gateway", "http://127.0.0.1:1", "--ca", dir.path, "--app-id", "ABCDE12345.com.example.shop"]
        let cases: [([String], String)] = [
            (["run"] + base + ["--platform", "windows"], "--platform must be ios, android or both"),
            (["run"] + base + ["--platform", "android", "--signing-cert-sha256", "abc"], "--signing-cert-sha256 must be 64 hex digits"),
            (["run"] + base + ["--platform", "android", "--package", "shop"], "--package must be an Android package name"),
            (["run"] + base + ["--platform", "android", "--unsupported", "1"], "--unsupported plays iPhones"),
            (["attack"] + base + ["--mode", "wrong-package"], "--mode must be all or one of"),
            (["attack"] + base + ["--platform", "android", "--mode", "wrong-host"], "--mode must be all or one of: replay, wrong-package"),
            (["presign"] + base + ["--platform", "both", "--out", "/dev/null", "--package", "x"], "--package must be"),
        ]
        for (args, message) in cases {
            let r = try runProcess(attestSimBinary, args)
            #expect(r.status == 2 && r.stderr.contains(message), "\(args): \(r.stderr)")
        }
        // A CA directory made before Android support: named, with the way out; --reuse adds the Android CA and keeps the rest.
        let root = try Data(contentsOf: dir.appendingPathComponent("root.pem"))
        for f in try FileManager.default.contentsOfDirectory(atPath: dir.path) where f.hasPrefix("android-") {
            try FileManager.default.removeItem(at: dir.appendingPathComponent(f))
        }
        let old = try runProcess(attestSimBinary, ["run"] + base + ["--platform", "android"])
        #expect(old.status == 2 && old.stderr.contains("android-root.pem") && old.stderr.contains("--reuse"), "\(old.stderr)")
        let reused = try runProcess(attestSimBinary, ["ca", "--out", dir.path, "--reuse"])
        #expect(reused.status == 0 && reused.stdout.contains("extra_android_roots"), "\(reused.stderr)")
        #expect(try Data(contentsOf: dir.appendingPathComponent("root.pem")) == root)
        _ = try TestAndroidCA.load(from: dir)
    }
}
