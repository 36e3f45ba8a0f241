import AndroidAttest
import AppAttest
import AppAttestSimulator
import Foundation
import GatewayCrypto
import GatewayWire

/// The attacks of `attest-sim attack --platform android`. The gateway must refuse each one (and
/// `revoked` only when it checks Google's status list: `--expect-revocation`).
public enum AndroidAttackMode: String, Sendable, CaseIterable {
    case replay
    case wrongPackage = "wrong-package"
    case unlockedBootloader = "unlocked-bootloader"
    case softwareKey = "software-key"
    case revoked
    case wrongChallenge = "wrong-challenge"
    case otherKeySignature = "other-key-signature"
    case tamperedBody = "tampered-body"

    /// The refusal codes that prove the check this mode aims at (`revoked` with revocation expected).
    public var expectedCodes: [String] {
        switch self {
        case .replay: ["counter_replay", "challenge_consumed", "challenge_unknown"]
        case .wrongPackage: ["app_not_allowed"]
        case .unlockedBootloader: ["bootloader_unlocked"]
        case .softwareKey: ["software_key"]
        case .revoked: ["revoked"]
        case .wrongChallenge: ["challenge_mismatch"]
        case .otherKeySignature, .tamperedBody: ["bad_signature"]
        }
    }

    /// What a refusal of this attack proves.
    public var proves: String {
        switch self {
        case .replay: "an accepted Android request resent byte for byte is not accepted twice"
        case .wrongPackage: "only the configured package names register"
        case .unlockedBootloader: "a key attested on an unlocked device does not register (require_locked_bootloader)"
        case .softwareKey: "a key attested by software Keystore does not register"
        case .revoked: "a chain through an attestation certificate on Google's status list does not register"
        case .wrongChallenge: "the attested challenge must be the one presented"
        case .otherKeySignature: "only the registered key's signature is accepted"
        case .tamperedBody: "the Android assertion covers the body"
        }
    }

    /// Modes for `--mode` on Android: all of them, or the one named (nil: not an Android mode).
    public static func parse(_ text: String) -> [AndroidAttackMode]? {
        if text == "all" { return allCases }
        return AndroidAttackMode(rawValue: text).map { [$0] }
    }
}

/// The options `attest-sim attack` adds for Android devices.
public struct AndroidAttackOptions: Sendable {
    public var app: AndroidApp
    public var modes: [AndroidAttackMode]
    /// The gateway checks Google's status list (`android.status_url`, e.g. `attest-sim google`): the
    /// revoked batch must be refused with `revoked`. Without it, its registration is expected to be
    /// accepted, and the report says why.
    public var expectRevocation: Bool

    public init(app: AndroidApp, modes: [AndroidAttackMode] = AndroidAttackMode.allCases, expectRevocation: Bool = false) {
        self.app = app
        self.modes = modes
        self.expectRevocation = expectRevocation
    }
}

/// `attest-sim attack --platform android`: registers an Android control device and gets one
/// legitimate request accepted, runs each Android attack, then checks that the control device is
/// still accepted. Its steps are added to an `AttackReport` (platform `android`).
public final class AndroidAttackRunner {
    public let options: AttackOptions
    public let android: AndroidAttackOptions
    public let ca: TestAndroidCA
    public let revokedBatch: TestAndroidCA.RevokedBatch
    public var onProbe: ((Probe) -> Void)?

    let client: HTTPClient
    let session: GatewaySession
    var control: AndroidSimDevice!
    var acceptedRaw: [UInt8] = []

    public init(options: AttackOptions, android: AndroidAttackOptions, ca: TestAndroidCA, revokedBatch: TestAndroidCA.RevokedBatch) {
        self.options = options
        self.android = android
        self.ca = ca
        self.revokedBatch = revokedBatch
        client = HTTPClient(endpoint: options.endpoint, timeout: options.timeout)
        session = GatewaySession(client: client, paths: options.paths)
    }

    var o: AttackOptions { options }

    /// Runs the control and the attacks, adding every step to `report`.
    public func run(into report: inout AttackReport) {
        defer { client.close() }
        report.androidPackage = android.app.packageName
        var steps: [Probe] = []
        defer { report.probes += steps }
        let record: (Probe) -> Void = { [onProbe] p in
            steps.append(p)
            onProbe?(p)
        }
        do {
            control = try AndroidSimDevice(ca: ca, app: android.app)
        } catch {
            report.aborted = (report.aborted.map { $0 + "; " } ?? "") + "android: \(error)"
            return
        }
        guard register("control", control, expectAccepted: true, codes: [], record) else {
            report.aborted =
                (report.aborted.map { $0 + "; " } ?? "") + "the Android control device could not register; no Android attack was tried"
            return
        }
        guard controlRequest("request", record) else {
            report.aborted =
                (report.aborted.map { $0 + "; " } ?? "") + "the Android control request was not accepted; no Android attack was tried"
            return
        }
        for mode in android.modes { attack(mode, record) }
        _ = controlRequest("request-after", record)
    }

    // MARK: Steps

    private func probe(
        _ name: String, _ step: String, _ response: Result<HTTPResponse, AttestSimError>, expectAccepted: Bool, codes: [String],
        note: String? = nil
    ) -> Probe {
        switch response {
        case .success(let r):
            Probe(
                name: name, step: step, expectAccepted: expectAccepted, expectedCodes: codes, verdict: Verdict(r), failure: nil, note: note,
                platform: .android)
        case .failure(let e):
            Probe(
                name: name, step: step, expectAccepted: expectAccepted, expectedCodes: codes, verdict: nil, failure: e.description,
                note: note, platform: .android)
        }
    }

    private func exchange(_ request: HTTPRequest? = nil, raw: [UInt8]? = nil) -> Result<HTTPResponse, AttestSimError> {
        do {
            if let raw { return .success(try client.send(raw: raw, method: o.method)) }
            return .success(try client.send(request!))
        } catch {
            return .failure(.transport(error))
        }
    }

    /// A challenge for `purpose` bound to the device's key; nil (the refusal recorded) when none is issued.
    private func challenge(
        _ name: String, _ step: String, _ purpose: ChallengePurpose, _ device: AndroidSimDevice, expectAccepted: Bool, codes: [String],
        _ record: (Probe) -> Void
    ) -> String? {
        // Bound to the key; when the gateway refuses that (a key it does not know), an unbound one.
        var last: Result<HTTPResponse, AttestSimError> = .failure(.usage("no challenge"))
        for keyed in [true, false] {
            do {
                let (resp, c) = try session.fetchChallenge(purpose: keyed ? purpose : nil, keyID: keyed ? device.keyID : nil)
                if let c { return c.value }
                last = .success(resp)
            } catch {
                last = .failure(.transport(error))
            }
        }
        record(probe(name, step, last, expectAccepted: expectAccepted, codes: codes, note: "the challenge request was refused"))
        return nil
    }

    /// Registers `device` (its chain attesting `attested` instead of the challenge when given); true when accepted.
    private func register(
        _ name: String, _ device: AndroidSimDevice, attested: [UInt8]? = nil, expectAccepted: Bool, codes: [String], note: String? = nil,
        _ record: (Probe) -> Void
    ) -> Bool {
        guard let c = challenge(name, "register", .register, device, expectAccepted: expectAccepted, codes: codes, record) else {
            return false
        }
        let result: Result<HTTPResponse, AttestSimError>
        do {
            result = exchange(try GatewayRequests.registerAndroid(paths: o.paths, device: device, challenge: c, attested: attested))
        } catch {
            result = .failure(error)
        }
        record(probe(name, "register", result, expectAccepted: expectAccepted, codes: codes, note: note))
        if case .success(let r) = result { return Verdict(r).accepted }
        return false
    }

    private func request(_ device: AndroidSimDevice, challenge: String, body: [UInt8], counter: UInt32? = nil, signer: ECPrivateKey? = nil)
        -> HTTPRequest
    {
        GatewayRequests.protected(
            android: device, challenge: challenge, method: o.method, target: o.path, body: body, binding: .request, version: o.clientData,
            host: o.host, counter: counter, signer: signer)
    }

    /// A legitimate request of the control device on a fresh challenge; remembered when accepted.
    private func controlRequest(_ step: String, _ record: (Probe) -> Void) -> Bool {
        guard let c = challenge("control", step, .assert, control, expectAccepted: true, codes: [], record) else { return false }
        let raw = request(control, challenge: c, body: Array("{\"control\":true}".utf8)).serialized(host: o.endpoint.hostHeader)
        let result = exchange(raw: raw)
        record(probe("control", step, result, expectAccepted: true, codes: []))
        guard case .success(let r) = result, Verdict(r).accepted else { return false }
        acceptedRaw = raw
        return true
    }

    // MARK: Attacks

    private func attack(_ mode: AndroidAttackMode, _ record: (Probe) -> Void) {
        let name = mode.rawValue
        let codes = mode.expectedCodes
        /// Registration refused, then an assertion of the refused key: `key_unknown`.
        func refusedThenUnknown(_ device: AndroidSimDevice, attested: [UInt8]? = nil) {
            guard !register(name, device, attested: attested, expectAccepted: false, codes: codes, record) else { return }
            guard let c = challenge(name, "assert", .assert, device, expectAccepted: false, codes: ["key_unknown"], record) else { return }
            record(
                probe(
                    name, "assert", exchange(request(device, challenge: c, body: Array("{\"attack\":true}".utf8))), expectAccepted: false,
                    codes: ["key_unknown"]))
        }
        func fresh(_ securityLevel: SecurityLevel = .trustedEnvironment, _ app: AndroidApp? = nil) -> AndroidSimDevice? {
            do {
                return try AndroidSimDevice(ca: ca, app: app ?? android.app, securityLevel: securityLevel)
            } catch {
                record(probe(name, "register", .failure(error), expectAccepted: false, codes: codes))
                return nil
            }
        }
        switch mode {
        case .replay:
            record(probe(name, "resend", exchange(raw: acceptedRaw), expectAccepted: false, codes: codes))

        case .wrongPackage:
            var app = android.app
            app.packageName += ".attestsimwrong"
            if let d = fresh(.trustedEnvironment, app) { refusedThenUnknown(d) }

        case .unlockedBootloader:
            guard let d = fresh() else { return }
            d.keyDescription.deviceLocked = false
            d.keyDescription.verifiedBootState = .unverified
            refusedThenUnknown(d)

        case .softwareKey:
            if let d = fresh(.software) { refusedThenUnknown(d) }

        case .revoked:
            let d = AndroidSimDevice(device: revokedBatch.device(ca: ca), app: android.app)
            if android.expectRevocation {
                refusedThenUnknown(d)
            } else {
                _ = register(
                    name, d, expectAccepted: true, codes: [],
                    note:
                        "revoked batch \(revokedBatch.serial): accepted is expected without --expect-revocation (a gateway without android.status_url); give it when the gateway fetches a status list listing the batch (attest-sim google)",
                    record)
            }

        case .wrongChallenge:
            if let d = fresh() { refusedThenUnknown(d, attested: Array("attest-sim: not the challenge presented".utf8)) }

        case .otherKeySignature:
            guard let c = challenge(name, "assert", .assert, control, expectAccepted: false, codes: codes, record) else { return }
            let r = request(
                control, challenge: c, body: Array("{\"attack\":true}".utf8), counter: control.counter + 1,
                signer: ECPrivateKey(curve: .p256))
            record(probe(name, "assert", exchange(r), expectAccepted: false, codes: codes, note: "signed by a key the gateway never saw"))

        case .tamperedBody:
            guard let c = challenge(name, "assert", .assert, control, expectAccepted: false, codes: codes, record) else { return }
            var r = request(control, challenge: c, body: Array("{\"amount\":1}".utf8), counter: control.counter + 1)
            r.body = Array("{\"amount\":9}".utf8)
            record(probe(name, "assert", exchange(r), expectAccepted: false, codes: codes))
        }
    }
}
