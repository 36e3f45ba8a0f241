import AppAttest
import AppAttestSimulator
import ArgumentParser
import AttestSim
import Foundation
import GatewayCrypto

/// `attest-sim`: software App Attest devices against a running gateway: a test CA, load runs, attacks.
@main
struct AttestSimCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "attest-sim",
        abstract: "Simulated App Attest devices and Android phones for attest-gateway: test CA, load, attacks, stand-ins.",
        subcommands: [CA.self, Run.self, Attack.self, Flood.self, Apple.self, Unsupported.self, Presign.self, Google.self]
    )

    /// Usage errors exit 2 with the message on stderr (ArgumentParser's default is 64); help exits 0.
    static func main() {
        do {
            var command = try parseAsRoot()
            try command.run()
        } catch let exit as ExitCode {
            Foundation.exit(exit.rawValue)
        } catch let e as AttestSimError {
            FileHandle.standardError.write(Data("attest-sim: \(e)\n".utf8))
            Foundation.exit(2)
        } catch {
            let code = exitCode(for: error)
            if code == .success {
                print(fullMessage(for: error))
                Foundation.exit(0)
            }
            FileHandle.standardError.write(Data((fullMessage(for: error) + "\n").utf8))
            Foundation.exit(2)
        }
    }
}

/// Options shared by `run` and `attack`.
struct GatewayOptions: ParsableArguments {
    @Option(help: "The gateway, http://HOST:PORT.")
    var gateway: String

    @Option(
        help:
            "A CA directory made by `attest-sim ca` (root.pem in the gateway's trust.extra_roots, receipt-root.pem in trust.extra_receipt_roots, android-root.pem in trust.extra_android_roots)."
    )
    var ca: String

    @Option(name: .customLong("app-id"), help: "The app id the devices attest for, TEAMID.bundle.id.")
    var appID: String

    @Option(
        help:
            "production or development (the attestation's aaguid); the gateway's apps[].environments must list it (default there: production)."
    )
    var environment: String = "production"

    @Option(help: "The gateway's challenge endpoint.")
    var challengePath: String = GatewayPaths().challenge

    @Option(help: "The gateway's registration endpoint.")
    var registerPath: String = GatewayPaths().register

    @Option(help: "Seconds for each exchange with the gateway.")
    var timeout: Double = 10

    @Option(name: .customLong("client-data"), help: "v1 or v2: the client data version of the protected route (its assertion.client_data).")
    var clientData: String = "v2"

    @Option(help: "The Host to send and (client data v2) sign for, HOST[:PORT]; default: the --gateway's.")
    var host: String?

    func clientDataVersion() throws(AttestSimError) -> ClientDataVersion {
        guard let v = ClientDataVersion(rawValue: clientData) else {
            throw .usage("--client-data must be v1 or v2 (got \"\(clientData)\")")
        }
        return v
    }

    func requestHost() throws(AttestSimError) -> RequestHost? {
        guard let host else { return nil }
        return try RequestHost(host)
    }
    @Option(help: "Numeric local address to connect from, e.g. 127.0.0.2 (to play another client on one host).")
    var source: String?

    func endpoint() throws(AttestSimError) -> HTTPEndpoint { try HTTPEndpoint(url: gateway) }

    func app() throws(AttestSimError) -> AppID {
        do {
            return try AppID(appID).validated()
        } catch {
            throw .usage("--app-id: \(error)")
        }
    }

    func env() throws(AttestSimError) -> AttestEnvironment {
        guard let e = AttestEnvironment(rawValue: environment) else {
            throw .usage("--environment must be development or production (got \"\(environment)\")")
        }
        return e
    }

    var paths: GatewayPaths { GatewayPaths(challenge: challengePath, register: registerPath) }

    func loadCA() throws(AttestSimError) -> TestCA {
        do {
            return try TestCA.load(from: URL(fileURLWithPath: ca))
        } catch {
            throw .file("--ca: \(error)")
        }
    }

    @Option(
        help:
            "ios, android or both: the devices' platform (both alternates iPhones and Android phones; Android needs android-root.pem in the gateway's trust.extra_android_roots and an apps[].android entry)."
    )
    var platform: String = "ios"

    @Option(
        name: .customLong("package"),
        help: "The Android devices' package name (default: the bundle id of --app-id); the gateway's apps[].android.package_names.")
    var packageName: String?

    @Option(
        name: .customLong("signing-cert-sha256"),
        help: "SHA-256 of the Android app's signing certificate, 64 hex digits (default: the one `attest-sim ca` prints).")
    var signingCertSHA256: String?

    func platforms() throws(AttestSimError) -> [Platform] { try PlatformChoice.parse(platform).platforms }

    /// The Android app, when Android devices are played (else nil).
    func androidApp() throws(AttestSimError) -> AndroidApp? {
        guard try platforms().contains(.android) else { return nil }
        return try AndroidApp.parse(package: packageName, appID: try app(), signingCertSHA256: signingCertSHA256)
    }

    /// The CA directory's Android CA and revoked batch, when Android devices are played (else nil).
    func loadAndroidCA() throws(AttestSimError) -> (ca: TestAndroidCA, revokedBatch: TestAndroidCA.RevokedBatch)? {
        guard try platforms().contains(.android) else { return nil }
        do {
            return try TestAndroidCA.load(from: URL(fileURLWithPath: ca))
        } catch {
            throw .file("--ca: \(error)")
        }
    }
}

extension AppID {
    /// Apple's `TEAMID.BUNDLEID` form is required on the command line (a typo would only show as refusals).
    fileprivate func validated() throws(AppID.ParseError) -> AppID { try AppID(teamID: teamID, bundleID: bundleID) }
}

struct CA: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract:
            "Create a test CA: DIR/root.pem (for trust.extra_roots), DIR/receipt-root.pem (for trust.extra_receipt_roots), DIR/android-root.pem (for trust.extra_android_roots) and the keys the simulator issues with."
    )

    @Option(help: "Directory to create the CA in (refuses to overwrite an existing CA).")
    var out: String

    @Option(help: "Organization and common-name prefix of the CA certificates.")
    var name: String = "Attest Gateway TEST"

    @Flag(help: "When DIR already holds a CA, check it and keep it (instead of refusing): a walkthrough can run twice.")
    var reuse = false

    func run() throws {
        guard !name.isEmpty, !name.unicodeScalars.contains(where: { $0.value < 0x20 }) else {
            throw AttestSimError.usage("--name must be non-empty text without control characters")
        }
        let dir = URL(fileURLWithPath: out)
        if reuse, FileManager.default.fileExists(atPath: dir.appendingPathComponent(TestCA.rootFile).path) {
            do {
                _ = try TestCA.load(from: dir)
            } catch {
                throw AttestSimError.file("--reuse: \(error)")
            }
            print("kept the CA in \(dir.path) (\(TestCA.rootFile) listed in gateway.yaml under trust.extra_roots)")
            if TestAndroidCA.exists(in: dir) {
                do {
                    _ = try TestAndroidCA.load(from: dir)
                } catch {
                    throw AttestSimError.file("--reuse: \(error)")
                }
            } else {
                // A CA made before Android support: add the Android CA beside it.
                try Self.writeAndroid(name: name, to: dir)
            }
            Self.printAndroid(dir)
            try Self.writeVerdictKey(in: dir)
            return
        }
        let ca: TestCA
        do {
            ca = try TestCA(name: name)
        } catch {
            throw AttestSimError.file("cannot create the CA: \(error)")
        }
        do {
            try ca.write(to: dir)
        } catch {
            throw AttestSimError.file("\(error)")
        }
        print("created \(dir.appendingPathComponent(TestCA.rootFile).path): list it in gateway.yaml under trust.extra_roots")
        print(
            "created \(dir.appendingPathComponent(TestCA.receiptRootFile).path): list it in gateway.yaml under "
                + "trust.extra_receipt_roots (the devices' receipts are signed under it)")
        try Self.writeAndroid(name: name, to: dir)
        Self.printAndroid(dir)
        try Self.writeVerdictKey(in: dir)
    }

    /// The Android test CA and its revoked batch, beside the App Attest CA.
    static func writeAndroid(name: String, to dir: URL) throws {
        do {
            let android = try TestAndroidCA(name: name)
            try android.write(to: dir, revokedBatch: try android.issueRevokedBatch())
        } catch let e as TestCA.FileError {
            throw AttestSimError.file("\(e)")
        } catch {
            throw AttestSimError.file("cannot create the Android CA: \(error)")
        }
    }

    /// Where the Android root goes in gateway.yaml, and the apps[] entry `--platform android` devices match.
    static func printAndroid(_ dir: URL) {
        let root = dir.appendingPathComponent(TestAndroidCA.rootFile).path
        print("Android CA in \(root): list it in gateway.yaml under trust.extra_android_roots, and give the app an Android entry:")
        print("  trust: {extra_roots: [\(dir.appendingPathComponent(TestCA.rootFile).path)], extra_android_roots: [\(root)]}")
        print("  apps:")
        print("    - {team_id: ABCDE12345, bundle_ids: [com.example.shop], \(AndroidApp(packageName: "com.example.shop").yaml)}")
        print(
            "(its revoked batch \(dir.appendingPathComponent(TestAndroidCA.revokedBatchFile).path) is listed by `attest-sim google --ca \(dir.path)`)"
        )
    }

    /// The file beside the CA with a P-256 key for the gateway's `verdict.key` (the walkthrough's
    /// signed verdict); made once, mode 0600, kept when it exists.
    static let verdictKeyFile = "verdict.pem"

    static func writeVerdictKey(in dir: URL) throws {
        let path = dir.appendingPathComponent(verdictKeyFile).path
        guard !FileManager.default.fileExists(atPath: path) else { return }
        let pem = Data(ECPrivateKey(curve: .p256).pkcs8PEM.utf8)
        guard FileManager.default.createFile(atPath: path, contents: pem, attributes: [.posixPermissions: 0o600]) else {
            throw AttestSimError.file("cannot write \(path)")
        }
        print("created \(path): a P-256 key for the gateway's verdict.key (the signed verdict, X-App-Attest-Verdict)")
    }
}

struct Run: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Register N devices, send M protected requests from C workers, report rate, latency and verdicts.",
        discussion: "Exits 0 when every legitimate exchange was accepted, 1 otherwise, 2 on usage errors.")

    @OptionGroup var common: GatewayOptions

    @Option(help: "Number of simulated devices (each registers one key).")
    var devices: Int = 4

    @Option(help: "Protected requests in total, shared evenly among the devices.")
    var requests: Int = 100

    @Option(help: "Worker threads, each with its own keep-alive connection (at most one per device).")
    var concurrency: Int = 2

    @Option(help: "Method of the protected requests.")
    var method: String = "POST"

    @Option(help: "Request-target of the protected requests (a route with an assertion block).")
    var path: String = "/api/purchase"

    @Option(help: "Body bytes of each protected request.")
    var bodySize: Int = 256

    @Option(help: "request or body: what the assertion covers (the route's assertion.bind).")
    var bind: String = "request"

    @Flag(help: "Fetch a challenge for every request instead of using X-App-Attest-Next-Challenge.")
    var noNextChallenge = false

    @Option(
        help: ArgumentHelp(
            "How many of the devices have no App Attest: they send DeviceCheck tokens (X-Apple-Device-Token) instead of assertions.",
            discussion: "For a route with a DeviceCheck fallback, and Apple's DeviceCheck played by `attest-sim apple` for the same --ca."))
    var unsupported: Int = 0

    @Flag(help: "Baseline: send the same requests without registration, challenge or assertion (to an unprotected route).")
    var plain = false

    @Option(help: "At most this many protected requests per second in all, evenly spaced (default: as fast as the gateway answers).")
    var rate: Double?

    @Flag(
        help: ArgumentHelp(
            "Send a request answered 429 key_rate_limited again, unchanged, after Retry-After (at most 5 times).",
            discussion: "As the client contract says for a route with assertion.key_rate; without it the 429 is the request's verdict."))
    var retryKeyRate = false
    @Option(
        help: ArgumentHelp(
            "Keys per account: every device claims this account (X-Demo-Account), so the devices are keys of one account.",
            discussion:
                "For the demo upstream, which names it as the key's account (X-App-Attest-Account), and a route with max_keys_per_account.")
    )
    var account: String?

    @Flag(help: "Print the report as one JSON object.")
    var json = false

    @Flag(
        help: ArgumentHelp(
            "Show the signed verdict (X-App-Attest-Verdict) the upstream got for an accepted request, decoded.",
            discussion: "With the demo upstream (which answers with the fields it was sent) and a route with assertion.verdict_header."))
    var showVerdict = false

    func run() throws {
        guard let binding = Binding(rawValue: bind) else {
            throw AttestSimError.usage("--bind must be request or body (got \"\(bind)\")")
        }
        var options = try RunOptions(
            endpoint: common.endpoint(), paths: common.paths, appID: common.app(), environment: common.env(), devices: devices,
            requests: requests, concurrency: concurrency, method: method, path: path, bodySize: bodySize, binding: binding,
            clientData: common.clientDataVersion(), host: common.requestHost(), useNextChallenge: !noNextChallenge, plain: plain,
            timeout: common.timeout, source: common.source, unsupported: unsupported, rate: rate, platforms: common.platforms(),
            androidApp: common.androidApp(), retryKeyRate: retryKeyRate, account: account)
        options.showVerdict = showVerdict
        let report = LoadRunner(options: options, ca: try common.loadCA(), androidCA: try common.loadAndroidCA()?.ca).run()
        print(json ? report.json : report.text, terminator: json ? "\n" : "")
        if !report.passed { throw ExitCode(1) }
    }
}

struct Attack: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Try attacks the gateway must refuse, around a legitimate control device.",
        discussion: """
            Modes: \(AttackMode.allCases.map(\.rawValue).joined(separator: ", ")), or all.
            Android modes (--platform android or both): \(AndroidAttackMode.allCases.map(\.rawValue).joined(separator: ", ")).
            Exits 0 only when every attack was refused with its expected code and the control requests \
            were accepted; 1 otherwise; 2 on usage errors.
            """)

    @OptionGroup var common: GatewayOptions

    @Option(help: "One attack mode, or all.")
    var mode: String = "all"

    @Option(
        help:
            "Seconds expired-challenge waits (default: until the challenge's expiresAt plus 1.5 s, i.e. the gateway's attest.challenge_ttl: 5 minutes unless configured shorter; said before the attacks start)."
    )
    var challengeWait: Double?

    @Option(help: "Method of the protected requests.")
    var method: String = "POST"

    @Option(help: "Request-target of the protected requests (a route with assertion mode enforce, bind request).")
    var path: String = "/api/purchase"

    @Flag(
        name: .customLong("expect-revocation"),
        help:
            "The gateway checks a status list that lists the CA's revoked batch (android.status_url, e.g. `attest-sim google`): the Android revoked attack must be refused with revoked (without it, its registration is expected to pass)."
    )
    var expectRevocation = false

    @Flag(help: "Print the report as one JSON object.")
    var json = false

    func run() throws {
        let version = try common.clientDataVersion()
        let platforms = try common.platforms()
        // `all`, or a mode of one of the platforms attacked (replay and tampered-body are on both).
        let iosModes = platforms.contains(.ios) ? (try? AttackMode.parse(mode, clientData: version)) ?? [] : []
        let androidModes = platforms.contains(.android) ? AndroidAttackMode.parse(mode) ?? [] : []
        if iosModes.isEmpty, androidModes.isEmpty {
            let known =
                (platforms.contains(.ios) ? AttackMode.allCases.map(\.rawValue) : [])
                + (platforms.contains(.android) ? AndroidAttackMode.allCases.map(\.rawValue) : [])
            throw AttestSimError.usage("--mode must be all or one of: \(known.joined(separator: ", ")) (got \"\(mode)\")")
        }
        let options = try AttackOptions(
            endpoint: common.endpoint(), paths: common.paths, appID: common.app(), environment: common.env(),
            modes: iosModes.isEmpty ? [.replay] : iosModes, challengeWait: challengeWait, method: method, path: path,
            timeout: common.timeout, clientData: version, host: common.requestHost())
        var report: AttackReport
        if !iosModes.isEmpty {
            let runner = AttackRunner(options: options, ca: try common.loadCA())
            runner.onNote = { FileHandle.standardError.write(Data("attest-sim: \($0)\n".utf8)) }
            report = runner.run()
        } else {
            report = AttackReport(gateway: options.endpoint.description, appID: options.appID.description)
        }
        report.platforms = (iosModes.isEmpty ? [] : [.ios]) + (androidModes.isEmpty ? [] : [.android])
        if !androidModes.isEmpty, let app = try common.androidApp(), let android = try common.loadAndroidCA() {
            AndroidAttackRunner(
                options: options, android: AndroidAttackOptions(app: app, modes: androidModes, expectRevocation: expectRevocation),
                ca: android.ca, revokedBatch: android.revokedBatch
            ).run(into: &report)
        }
        print(json ? report.json : report.text, terminator: json ? "\n" : "")
        if !report.passed { throw ExitCode(1) }
    }
}

struct Flood: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Send challenge requests back to back for a while, as an attacker would; count the answers.",
        discussion: """
            For measuring what other clients see during a challenge flood (bench/challenge-flood): run \
            `attest-sim run --source 127.0.0.2 …` meanwhile. Never registers or asserts. Exits 0, 2 on usage errors.
            """)

    @Option(help: "The gateway, http://HOST:PORT.")
    var gateway: String

    @Option(help: "How long to flood.")
    var seconds: Double = 10

    @Option(help: "Keep-alive connections, each on its own thread.")
    var connections: Int = 4

    @Option(help: "none (anonymous challenges) or random (each request names a fresh random keyId).")
    var keyIds: String = "none"

    @Option(help: "Numeric local address to connect from (the flooding client's address).")
    var source: String?

    @Option(help: "The gateway's challenge endpoint.")
    var challengePath: String = GatewayPaths().challenge

    @Option(help: "Seconds for each exchange with the gateway.")
    var timeout: Double = 10

    @Flag(help: "Print the report as one JSON object.")
    var json = false

    func run() throws {
        guard let keys = FloodOptions.KeyIDs(rawValue: keyIds) else {
            throw AttestSimError.usage("--key-ids must be none or random (got \"\(keyIds)\")")
        }
        let options = try FloodOptions(
            endpoint: HTTPEndpoint(url: gateway), paths: GatewayPaths(challenge: challengePath), seconds: seconds,
            connections: connections, keyIDs: keys, source: source, timeout: timeout)
        let report = FloodRunner(options: options).run()
        print(json ? report.json : report.text, terminator: json ? "\n" : "")
    }
}
