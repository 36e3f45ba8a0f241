import AppAttest
import AppAttestSimulator
import Foundation
import GatewayCrypto
import GatewayTestSupport
import GatewayWire
import Testing

/// The CLI with the software device: a root named with --root is trusted next to Apple's, never
/// without it; iOS 27 values appear in the output.
@Suite("gatewayd verify-* with the simulator")
struct SimulatedDeviceCLITests {
    @Test("--root trusts the test CA; without it the chain is untrusted; iOS 27 values are printed") func roots() throws {
        let ca = try TestCA()
        let appID = try AppID("ABCDE12345.com.example.shop")
        let device = SimulatedDevice(appID: appID, environment: .production, ca: ca)
        let challenge = SecureRandom.bytes(32)
        let attestation = try device.attest(
            clientDataHash: SHA256.hash(challenge),
            extensions: SimulatedExtensions(validationCategory: .testFlight, bundleVersion: "4.2.1", setsExtensionDataFlag: false))
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("gw-cli-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let rootFile = dir.appendingPathComponent("test-root.pem")
        try ca.rootPEM.write(to: rootFile, atomically: true, encoding: .utf8)

        let args = [
            "verify-attestation", "--app-id", "ABCDE12345.com.example.shop.Clip", "--app-id", appID.description,
            "--key-id=" + Base64.encodeURL(device.keyID),  // "=": a URL-alphabet value may start with "-"
            "--attestation", Base64.encode(attestation),
            "--challenge", Base64.encode(challenge), "--environment", "production",
        ]
        let untrusted = try runProcess(gatewaydBinary, args)
        #expect(untrusted.status == 1)
        #expect(untrusted.json?["reason"] as? String == "chain_untrusted")

        let trusted = try runProcess(gatewaydBinary, args + ["--root", rootFile.path])
        #expect(trusted.status == 0, "\(trusted.stdout) \(trusted.stderr)")
        let json = try #require(trusted.json)
        #expect(json["appId"] as? String == appID.description)
        #expect(json["environment"] as? String == "production")
        #expect(json["validationCategory"] as? String == "testflight")
        #expect(json["bundleVersion"] as? String == "4.2.1")
        let publicKey = try #require(json["publicKey"] as? String)
        #expect(try Base64.decode(publicKey) == device.publicKey.x962)

        let development = try runProcess(gatewaydBinary, args.dropLast(2) + ["--environment", "development", "--root", rootFile.path])
        #expect(development.json?["reason"] as? String == "environment_mismatch")

        // The first assertion of the key, then a replay of it against the advanced counter.
        let clientData = Array("{\"challenge\":\"abc\",\"order\":42}".utf8)
        let assertion = device.assert(
            clientDataHash: SHA256.hash(clientData), extensions: SimulatedExtensions(validationCategory: .appStore))
        let assertArgs = [
            "verify-assertion", "--app-id", appID.description, "--public-key", publicKey,
            "--assertion=" + Base64.encodeURL(assertion), "--client-data", Base64.encode(clientData),
        ]
        let first = try runProcess(gatewaydBinary, assertArgs)
        #expect(first.status == 0, "\(first.stdout)")
        #expect(first.json?["counter"] as? Int == 1)
        #expect(first.json?["validationCategory"] as? String == "app_store")
        let replay = try runProcess(gatewaydBinary, assertArgs + ["--previous-counter", "1"])
        #expect(replay.status == 1)
        #expect(replay.json?["reason"] as? String == "counter_replay")
        let tampered = try runProcess(
            gatewaydBinary, Array(assertArgs.dropLast(2)) + ["--client-data", Base64.encode(clientData + [0x20])])
        #expect(tampered.json?["reason"] as? String == "bad_signature")
    }
}
