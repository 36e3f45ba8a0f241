import AppAttest
import AppAttestSimulator
import Foundation
import GatewayCrypto
import GatewayWire

/// The attacks of `attest-sim attack`. The gateway must refuse each one.
public enum AttackMode: String, Sendable, CaseIterable {
    case replay
    case tamperedBody = "tampered-body"
    case tamperedTarget = "tampered-target"
    case wrongAppID = "wrong-app-id"
    case reusedChallenge = "reused-challenge"
    case counterRollback = "counter-rollback"
    case unknownKey = "unknown-key"
    case untrustedRoot = "untrusted-root"
    case expiredChallenge = "expired-challenge"
    /// Signed for another host than the one it is sent to (client data version 2 only).
    case wrongHost = "wrong-host"

    /// The refusal codes that prove the check this mode aims at (several where the gateway may
    /// reasonably check another property of the same request first).
    public var expectedCodes: [String] {
        switch self {
        case .replay: ["challenge_consumed", "counter_replay", "challenge_unknown"]
        case .tamperedBody, .tamperedTarget, .wrongHost: ["bad_signature"]
        case .wrongAppID: ["app_id_mismatch", "app_not_allowed"]
        case .reusedChallenge: ["challenge_consumed", "challenge_unknown"]
        case .counterRollback: ["counter_replay"]
        case .unknownKey: ["key_unknown"]
        case .untrustedRoot: ["chain_untrusted"]
        case .expiredChallenge: ["challenge_expired", "challenge_unknown"]
        }
    }

    /// What a refusal of this attack proves.
    public var proves: String {
        switch self {
        case .replay: "an accepted request resent byte for byte is not accepted twice"
        case .tamperedBody: "the assertion covers the body"
        case .tamperedTarget: "the assertion covers the request-target"
        case .wrongAppID: "only allowed app ids register"
        case .reusedChallenge: "a challenge is single-use, even with a fresh signature and higher counter"
        case .counterRollback: "the counter must grow, even with a fresh challenge"
        case .unknownKey: "only registered keys assert"
        case .untrustedRoot: "only attestations chaining to a trusted root register"
        case .expiredChallenge: "a challenge expires after its TTL"
        case .wrongHost: "the assertion covers the host (client data v2): a request signed for one host is refused on another"
        }
    }

    /// Parses `--mode`: one mode or `all` (without `wrong-host` on a version 1 route, which does not
    /// bind the host).
    public static func parse(_ text: String, clientData: ClientDataVersion = .v2) throws(AttestSimError) -> [AttackMode] {
        if text == "all" { return clientData == .v1 ? allCases.filter { $0 != .wrongHost } : allCases }
        guard let m = AttackMode(rawValue: text) else {
            throw .usage("--mode must be all or one of: \(allCases.map(\.rawValue).joined(separator: ", ")) (got \"\(text)\")")
        }
        return [m]
    }
}

/// The options of `attest-sim attack`, validated.
public struct AttackOptions: Sendable {
    public var endpoint: HTTPEndpoint
    public var paths: GatewayPaths
    public var appID: AppID
    public var environment: AttestEnvironment
    public var modes: [AttackMode]
    /// Seconds to wait for `expired-challenge`; nil: until the challenge's `expiresAt` plus 1.5 s.
    public var challengeWait: Double?
    public var method: String
    public var path: String
    public var timeout: Double
    /// The route's client data version (`assertion.client_data`).
    public var clientData: ClientDataVersion
    /// The Host sent and signed (`--host`; default the gateway's `HOST[:PORT]`).
    public var host: RequestHost

    public init(
        endpoint: HTTPEndpoint, paths: GatewayPaths = GatewayPaths(), appID: AppID, environment: AttestEnvironment = .production,
        modes: [AttackMode] = AttackMode.allCases, challengeWait: Double? = nil, method: String = "POST",
        path: String = "/api/purchase", timeout: Double = 10, clientData: ClientDataVersion = .v2, host: RequestHost? = nil
    ) throws(AttestSimError) {
        guard !modes.isEmpty else { throw .usage("no attack mode given") }
        if clientData == .v1, modes.contains(.wrongHost) {
            throw .usage("--mode wrong-host needs --client-data v2: version 1 client data does not cover the host")
        }
        if let challengeWait, !(0...3600).contains(challengeWait) {
            throw .usage("--challenge-wait must be 0…3600 seconds (got \(challengeWait))")
        }
        guard !method.isEmpty, method.utf8.allSatisfy({ (0x41...0x5A).contains($0) }) else {
            throw .usage("--method must be an upper-case token such as POST (got \"\(method)\")")
        }
        guard path.hasPrefix("/"), !path.utf8.contains(where: { $0 <= 0x20 || $0 >= 0x7F }) else {
            throw .usage("--path must be an origin-form target starting with / without spaces (got \"\(path)\")")
        }
        guard timeout > 0 else { throw .usage("--timeout must be more than 0 seconds") }
        self.endpoint = endpoint
        self.paths = paths
        self.appID = appID
        self.environment = environment
        self.modes = modes
        self.challengeWait = challengeWait
        self.method = method
        self.path = path
        self.timeout = timeout
        self.clientData = clientData
        self.host = host ?? RequestHost(endpoint: endpoint)
    }

    /// The authority the `wrong-host` attack signs for: one the gateway is not addressed as.
    public var elsewhere: String { "attest-sim-elsewhere.invalid" }

    /// The app id of the `wrong-app-id` device: the configured one with `.attestsimwrong` appended.
    public var wrongAppID: AppID {
        (try? AppID("\(appID.description).attestsimwrong")) ?? appID
    }

    /// `path` with `attest-sim=<value>` added to its query.
    public func target(query value: String) -> String {
        path + (path.contains("?") ? "&" : "?") + "attest-sim=\(value)"
    }
}

/// One step of a run: what was expected, what came back, and whether that is a pass.
public struct Probe: Sendable {
    /// `control` or an attack mode's name.
    public let name: String
    /// `register`, `request`, `assert`…
    public let step: String
    /// Accepted (2xx), or refused with one of these codes.
    public let expectAccepted: Bool
    public let expectedCodes: [String]
    /// The gateway's answer, or nil after a transport failure.
    public let verdict: Verdict?
    public let failure: String?
    public let note: String?
    /// The platform of the device that made the step.
    public var platform: Platform = .ios

    /// `name/step`, with `android:` before Android steps.
    public var label: String { (platform == .ios ? "" : "\(platform.rawValue):") + "\(name)/\(step)" }

    public var passed: Bool {
        guard let verdict else { return false }
        if expectAccepted { return verdict.accepted }
        return (verdict.status == 401 || verdict.status == 403) && expectedCodes.contains(verdict.error ?? "")
    }

    public var expectedText: String {
        expectAccepted ? "2xx" : "401/403 " + expectedCodes.joined(separator: "|")
    }

    public var actualText: String {
        if let verdict { return verdict.description }
        return "no response (\(failure ?? "?"))"
    }
}

/// What `attest-sim attack` found.
public struct AttackReport: Sendable {
    public var gateway: String
    public var appID: String
    public var probes: [Probe] = []
    /// Set when the run had to stop (the control device could not register, say).
    public var aborted: String?
    /// The platforms attacked (`--platform`), and the Android package when Android was.
    public var platforms: [Platform] = [.ios]
    public var androidPackage: String?

    public init(gateway: String, appID: String) {
        self.gateway = gateway
        self.appID = appID
    }

    public var attacks: [Probe] { probes.filter { $0.name != "control" } }
    public var controls: [Probe] { probes.filter { $0.name == "control" } }
    public var passed: Bool {
        aborted == nil && !controls.isEmpty && probes.allSatisfy(\.passed)
    }

    public var text: String {
        var out = "attest-sim attack → \(gateway) (app \(appID)\(androidPackage.map { ", Android package \($0)" } ?? ""))\n"
        let rows = probes.map { p in
            [p.label, "expect \(p.expectedText)", "got \(p.actualText)", p.passed ? "PASS" : "FAIL"]
        }
        let w0 = rows.map { $0[0].count }.max() ?? 0
        let w1 = rows.map { $0[1].count }.max() ?? 0
        let w2 = rows.map { $0[2].count }.max() ?? 0
        for (p, r) in zip(probes, rows) {
            out += r[0].padding(toLength: w0 + 2, withPad: " ", startingAt: 0)
            out += r[1].padding(toLength: w1 + 2, withPad: " ", startingAt: 0)
            out += r[2].padding(toLength: w2 + 2, withPad: " ", startingAt: 0) + r[3]
            if let n = p.note { out += "  (\(n))" }
            out += "\n"
        }
        if let aborted { out += "aborted: \(aborted)\n" }
        if platforms != [.ios] {
            for p in platforms {
                let mine = attacks.filter { $0.platform == p }
                out += "\(p.rawValue): \(mine.filter(\.passed).count)/\(mine.count) attack steps as expected\n"
            }
        }
        // Steps expected to be accepted (Android's revoked without --expect-revocation) are counted apart.
        let acceptedSteps = attacks.filter(\.expectAccepted)
        let refusing = attacks.filter { !$0.expectAccepted }
        let refused = refusing.filter(\.passed).count
        let also =
            acceptedSteps.isEmpty ? "" : ", \(acceptedSteps.filter(\.passed).count)/\(acceptedSteps.count) accepted as expected (see notes)"
        out +=
            passed
            ? "result: PASS (\(refused)/\(refusing.count) attack steps refused as expected\(also), control accepted)\n"
            : "result: FAIL (\(refused)/\(refusing.count) attack steps refused as expected\(also); \(controls.filter(\.passed).count)/\(controls.count) control steps accepted)\n"
        return out
    }

    public var json: String {
        let object: [String: Any] = [
            "gateway": gateway, "app_id": appID, "passed": passed, "aborted": aborted ?? NSNull(),
            "platforms": platforms.map(\.rawValue), "android_package": androidPackage ?? NSNull(),
            "probes": probes.map { p -> [String: Any] in
                [
                    "name": p.name, "step": p.step, "expect": p.expectAccepted ? "accepted" : "refused",
                    "expected_codes": p.expectedCodes, "status": p.verdict?.status ?? NSNull(),
                    "error": p.verdict?.error ?? NSNull(), "action": p.verdict?.action ?? NSNull(),
                    "failure": p.failure ?? NSNull(), "note": p.note ?? NSNull(), "passed": p.passed,
                    "platform": p.platform.rawValue,
                ]
            },
        ]
        let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data("{}".utf8)
        return String(decoding: data, as: UTF8.self)
    }
}

/// `attest-sim attack`: registers a control device and gets one legitimate request accepted, then
/// runs each attack, then checks that the control device is still accepted.
public final class AttackRunner {
    public let options: AttackOptions
    public let ca: TestCA
    /// Called with each probe as it completes (progress output).
    public var onProbe: ((Probe) -> Void)?
    /// Called with progress notes (the wait of `expired-challenge`).
    public var onNote: ((String) -> Void)?

    let client: HTTPClient
    let session: GatewaySession
    var report: AttackReport

    // The control device and its accepted request.
    var control: SimulatedDevice!
    var acceptedRaw: [UInt8] = []
    var acceptedChallenge = ""
    var acceptedCounter: UInt32 = 0
    /// Seconds the control's last challenge had to live when issued: the gateway's challenge TTL.
    var challengeLifetime: Double?

    public init(options: AttackOptions, ca: TestCA) {
        self.options = options
        self.ca = ca
        client = HTTPClient(endpoint: options.endpoint, timeout: options.timeout)
        session = GatewaySession(client: client, paths: options.paths)
        report = AttackReport(gateway: options.endpoint.description, appID: options.appID.description)
    }

    public func run() -> AttackReport {
        defer { client.close() }
        let o = options
        let device = SimulatedDevice(appID: o.appID, environment: o.environment, ca: ca)
        control = device
        guard registerStep(name: "control", device: device, expectAccepted: true, codes: []) else {
            report.aborted = "the control device could not register; no attack was tried"
            return report
        }
        guard controlRequest(step: "request") else {
            report.aborted = "the control request was not accepted; no attack was tried"
            return report
        }
        if o.modes.contains(.expiredChallenge) { onNote?(expiryWaitNote) }
        for mode in o.modes { attack(mode) }
        _ = controlRequest(step: "request-after")
        return report
    }

    // MARK: Steps

    func record(_ p: Probe) {
        report.probes.append(p)
        onProbe?(p)
    }

    /// Sends `request` (or raw bytes) and records the verdict.
    @discardableResult
    func send(
        _ name: String, _ step: String, _ request: HTTPRequest? = nil, raw: [UInt8]? = nil, expectAccepted: Bool,
        codes: [String], note: String? = nil
    ) -> HTTPResponse? {
        do {
            let resp: HTTPResponse
            if let raw {
                resp = try client.send(raw: raw, method: o.method)
            } else {
                resp = try client.send(request!)
            }
            record(
                Probe(
                    name: name, step: step, expectAccepted: expectAccepted, expectedCodes: codes, verdict: Verdict(resp),
                    failure: nil, note: note))
            return resp
        } catch {
            record(
                Probe(
                    name: name, step: step, expectAccepted: expectAccepted, expectedCodes: codes, verdict: nil,
                    failure: error.description, note: note))
            return nil
        }
    }

    var o: AttackOptions { options }

    /// A challenge for `device`: bound to its key and `purpose`; when the gateway refuses that
    /// (e.g. for a key it does not know) an unbound one. When neither is issued, the refusal is
    /// recorded as this step's result and nil returned.
    func challenge(
        _ name: String, _ step: String, purpose: ChallengePurpose, device: SimulatedDevice, expectAccepted: Bool,
        codes: [String]
    ) -> IssuedChallenge? {
        var last: Result<HTTPResponse, HTTPClientError>?
        for keyed in [true, false] {
            do {
                let (resp, c) = try session.fetchChallenge(purpose: keyed ? purpose : nil, keyID: keyed ? device.keyID : nil)
                if let c { return c }
                last = .success(resp)
            } catch {
                last = .failure(error)
            }
        }
        switch last {
        case .success(let resp):
            record(
                Probe(
                    name: name, step: step, expectAccepted: expectAccepted, expectedCodes: codes, verdict: Verdict(resp),
                    failure: nil, note: "the challenge request was refused"))
        case .failure(let e):
            record(
                Probe(
                    name: name, step: step, expectAccepted: expectAccepted, expectedCodes: codes, verdict: nil,
                    failure: "challenge: \(e)", note: nil))
        case nil: break
        }
        return nil
    }

    /// Fetches a registration challenge and registers `device`; true when accepted.
    func registerStep(name: String, device: SimulatedDevice, expectAccepted: Bool, codes: [String]) -> Bool {
        guard
            let c = challenge(
                name, "register", purpose: .register, device: device, expectAccepted: expectAccepted, codes: codes)
        else { return false }
        do {
            let resp = try session.register(device: device, challenge: c.value)
            let v = Verdict(resp)
            record(
                Probe(
                    name: name, step: "register", expectAccepted: expectAccepted, expectedCodes: codes, verdict: v, failure: nil,
                    note: nil))
            return v.accepted
        } catch {
            record(
                Probe(
                    name: name, step: "register", expectAccepted: expectAccepted, expectedCodes: codes, verdict: nil,
                    failure: error.description, note: nil))
            return false
        }
    }

    /// A legitimate request of the control device on a fresh challenge; remembers it when accepted.
    func controlRequest(step: String) -> Bool {
        guard let c = challenge("control", step, purpose: .assert, device: control, expectAccepted: true, codes: []) else {
            return false
        }
        let request = GatewayRequests.protected(
            device: control, challenge: c.value, method: o.method, target: o.path, body: Array("{\"control\":true}".utf8),
            binding: .request, version: o.clientData, host: o.host)
        let raw = request.serialized(host: o.endpoint.hostHeader)
        guard let resp = send("control", step, raw: raw, expectAccepted: true, codes: []), Verdict(resp).accepted else {
            return false
        }
        acceptedRaw = raw
        acceptedChallenge = c.value
        acceptedCounter = control.counter
        if let expiry = c.expiryDate { challengeLifetime = expiry.timeIntervalSinceNow }
        return true
    }

    /// Said before the attacks start: how long expired-challenge will wait, and how to shorten it.
    var expiryWaitNote: String {
        if let w = o.challengeWait { return String(format: "expired-challenge will wait %.1f s (--challenge-wait)", w) }
        guard let ttl = challengeLifetime else {
            return "expired-challenge will wait for a challenge to expire: the gateway's attest.challenge_ttl (5m by default)"
        }
        let wait = max(ttl, 0) + 1.5
        var note = String(
            format: "expired-challenge will wait about %.1f s for a challenge to expire (the gateway's attest.challenge_ttl + 1.5 s)", wait)
        if wait > 60 {
            note +=
                "; a gateway with a short challenge_ttl (samples/simulator/gateway.yaml: 10s) or --challenge-wait makes it shorter, --mode without expired-challenge skips it"
        }
        return note
    }

    /// A protected request of `device` on `challenge` (sign for one target/body, maybe send another).
    func protectedRequest(
        _ device: SimulatedDevice, challenge: String, body: [UInt8] = Array("{\"attack\":true}".utf8), target: String? = nil,
        signedAuthority: String? = nil, mutations: AssertionMutations = .none
    ) -> HTTPRequest {
        GatewayRequests.protected(
            device: device, challenge: challenge, method: o.method, target: target ?? o.path, body: body, binding: .request,
            version: o.clientData, host: o.host, signedAuthority: signedAuthority, mutations: mutations)
    }

    // MARK: Attacks

    func attack(_ mode: AttackMode) {
        let name = mode.rawValue
        let codes = mode.expectedCodes
        switch mode {
        case .replay:
            send(name, "resend", raw: acceptedRaw, expectAccepted: false, codes: codes)

        case .reusedChallenge:
            let r = protectedRequest(control, challenge: acceptedChallenge)
            send(name, "assert", r, expectAccepted: false, codes: codes, note: "counter \(control.counter)")

        case .counterRollback:
            guard let c = challenge(name, "assert", purpose: .assert, device: control, expectAccepted: false, codes: codes)
            else { return }
            let r = protectedRequest(control, challenge: c.value, mutations: AssertionMutations(counter: acceptedCounter))
            send(name, "assert", r, expectAccepted: false, codes: codes, note: "counter \(acceptedCounter) again")

        case .tamperedBody:
            guard let c = challenge(name, "assert", purpose: .assert, device: control, expectAccepted: false, codes: codes)
            else { return }
            var r = protectedRequest(control, challenge: c.value, body: Array("{\"amount\":1}".utf8))
            r.body = Array("{\"amount\":9}".utf8)
            send(name, "assert", r, expectAccepted: false, codes: codes)

        case .tamperedTarget:
            guard let c = challenge(name, "assert", purpose: .assert, device: control, expectAccepted: false, codes: codes)
            else { return }
            var r = protectedRequest(control, challenge: c.value, target: o.target(query: "1"))
            r.target = o.target(query: "2")
            send(name, "assert", r, expectAccepted: false, codes: codes)

        case .wrongHost:
            guard let c = challenge(name, "assert", purpose: .assert, device: control, expectAccepted: false, codes: codes)
            else { return }
            let r = protectedRequest(control, challenge: c.value, signedAuthority: o.elsewhere)
            send(name, "assert", r, expectAccepted: false, codes: codes, note: "signed for \(o.elsewhere), sent as \(o.host.value)")

        case .unknownKey:
            let stranger = SimulatedDevice(appID: o.appID, environment: o.environment, ca: ca)
            guard let c = challenge(name, "assert", purpose: .assert, device: stranger, expectAccepted: false, codes: codes)
            else { return }
            send(name, "assert", protectedRequest(stranger, challenge: c.value), expectAccepted: false, codes: codes)

        case .wrongAppID:
            let wrong = SimulatedDevice(appID: o.wrongAppID, environment: o.environment, ca: ca)
            assertAfterRegistration(mode, device: wrong)

        case .untrustedRoot:
            let other: TestCA
            do {
                other = try TestCA(name: "attest-sim UNTRUSTED")
            } catch {
                record(
                    Probe(
                        name: name, step: "register", expectAccepted: false, expectedCodes: codes, verdict: nil,
                        failure: "cannot create the untrusted CA: \(error)", note: nil))
                return
            }
            assertAfterRegistration(mode, device: SimulatedDevice(appID: o.appID, environment: o.environment, ca: other))

        case .expiredChallenge:
            guard let c = challenge(name, "assert", purpose: .assert, device: control, expectAccepted: false, codes: codes)
            else { return }
            let wait: Double
            if let w = o.challengeWait {
                wait = w
            } else if let expiry = c.expiryDate {
                wait = min(max(expiry.timeIntervalSinceNow + 1.5, 0), 3600)
            } else {
                record(
                    Probe(
                        name: name, step: "assert", expectAccepted: false, expectedCodes: codes, verdict: nil,
                        failure: "the challenge has no expiresAt; give --challenge-wait", note: nil))
                return
            }
            // The idle connection may be closed by the gateway meanwhile; the client reconnects.
            onNote?(String(format: "expired-challenge: waiting %.1f s for the challenge to expire", wait))
            Thread.sleep(forTimeInterval: wait)
            send(
                name, "assert", protectedRequest(control, challenge: c.value), expectAccepted: false, codes: codes,
                note: String(format: "after %.1f s", wait))
        }
    }

    /// Registering must be refused; then an assertion of that (unregistered) key must be refused too.
    func assertAfterRegistration(_ mode: AttackMode, device: SimulatedDevice) {
        let name = mode.rawValue
        if registerStep(name: name, device: device, expectAccepted: false, codes: mode.expectedCodes) { return }
        let codes = ["key_unknown"] + (mode == .wrongAppID ? ["app_id_mismatch", "app_not_allowed"] : [])
        guard let c = challenge(name, "assert", purpose: .assert, device: device, expectAccepted: false, codes: codes)
        else { return }
        send(name, "assert", protectedRequest(device, challenge: c.value), expectAccepted: false, codes: codes)
    }
}
