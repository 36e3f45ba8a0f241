import Foundation
import GatewayTestSupport
import Testing

/// The README's simulator walkthrough, run as written: the commands between
/// `<!-- walkthrough:begin -->` and `<!-- walkthrough:end -->`, in order, in a directory holding the
/// shipped `samples/simulator/gateway.yaml`. `scripts/run.sh ARGS` and `scripts/sim.sh ARGS` build,
/// then exec `gatewayd ARGS` and `attest-sim ARGS` (checked below): the test runs the built binaries
/// with the same arguments. The only change is the ports (free ones instead of 8080 and 9090, in the
/// commands and the sample alike), so that the test runs beside anything else.
@Suite("the README walkthrough, copy-pasted (real gatewayd and attest-sim)", .serialized, .timeLimit(.minutes(3)))
struct WalkthroughTests {
    static var attestSim: URL {
        if let env = ProcessInfo.processInfo.environment["ATTEST_SIM_BIN"] { return URL(fileURLWithPath: env) }
        return gatewaydBinary.deletingLastPathComponent().appendingPathComponent("attest-sim")
    }

    /// The walkthrough's command lines: `sh` blocks between the markers, comments and line
    /// continuations handled, split into words. A quote, pipe, redirection or `$` is refused: the
    /// walkthrough is meant to be plain commands.
    static func commands(inReadme text: String) throws -> [[String]] {
        let begin = try #require(text.range(of: "<!-- walkthrough:begin -->"), "README has no walkthrough:begin marker")
        let end = try #require(text.range(of: "<!-- walkthrough:end -->"), "README has no walkthrough:end marker")
        var commands: [[String]] = []
        var inBlock = false
        var pending = ""
        for raw in text[begin.upperBound..<end.lowerBound].split(separator: "\n", omittingEmptySubsequences: false) {
            let line = raw.trimmingCharacters(in: .whitespaces)
            if line.hasPrefix("```") {
                inBlock = line == "```sh" || line == "```bash"
                continue
            }
            guard inBlock else { continue }
            var code = line
            if let hash = code.range(of: " #") ?? (code.hasPrefix("#") ? code.range(of: "#") : nil) {
                code = String(code[..<hash.lowerBound])
            }
            code = code.trimmingCharacters(in: .whitespaces)
            if code.hasSuffix("\\") {
                pending += code.dropLast() + " "
                continue
            }
            code = pending + code
            pending = ""
            guard !code.isEmpty else { continue }
            #expect(!code.contains { "'\"|<>;&$`".contains($0) }, "not a plain command: \(code)")
            commands.append(code.split(separator: " ").map(String.init))
        }
        return commands
    }

    @Test("the scripts pass their arguments to the binaries they build")
    func scriptsExec() throws {
        let run = try String(contentsOf: repositoryRoot.appendingPathComponent("scripts/run.sh"), encoding: .utf8)
        #expect(run.contains("swift build --product gatewayd"))
        #expect(run.contains("if [ $# -gt 0 ]; then exec \"$bin\" \"$@\"; fi"))
        let sim = try String(contentsOf: repositoryRoot.appendingPathComponent("scripts/sim.sh"), encoding: .utf8)
        #expect(sim.contains("swift build --package-path \"$root\" --product attest-sim"))
        #expect(sim.contains("exec \"$(swift build --package-path \"$root\" --show-bin-path)/attest-sim\" \"$@\""))
        let attributes = try FileManager.default.attributesOfItem(atPath: repositoryRoot.appendingPathComponent("scripts/sim.sh").path)
        #expect(((attributes[.posixPermissions] as? NSNumber)?.intValue ?? 0) & 0o111 == 0o111, "scripts/sim.sh is not executable")
    }

    @Test("CA, gateway, 2,000 protected requests accepted, every attack refused, the control still accepted")
    func walkthrough() throws {
        let readme = try String(contentsOf: repositoryRoot.appendingPathComponent("README.md"), encoding: .utf8)
        let commands = try Self.commands(inReadme: readme)
        try #require(commands.count >= 4, "\(commands)")
        let (port, admin) = (try RedisProcess.freePort(), try RedisProcess.freePort())
        func ports(_ s: String) -> String {
            s.replacingOccurrences(of: "127.0.0.1:8080", with: "127.0.0.1:\(port)")
                .replacingOccurrences(of: "127.0.0.1:9090", with: "127.0.0.1:\(admin)")
        }

        // A fresh tree: the sample where the README says it is, nothing else.
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("walkthrough-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: dir) }
        let samples = dir.appendingPathComponent("samples/simulator")
        try FileManager.default.createDirectory(at: samples, withIntermediateDirectories: true)
        let sample = try String(contentsOf: repositoryRoot.appendingPathComponent("samples/simulator/gateway.yaml"), encoding: .utf8)
        #expect(sample.contains("127.0.0.1:8080") && sample.contains("127.0.0.1:9090"))
        try ports(sample).write(to: samples.appendingPathComponent("gateway.yaml"), atomically: true, encoding: .utf8)

        var gateway: Process?
        let gatewayLog = LockedLog()
        defer {
            if let g = gateway, g.isRunning {
                kill(g.processIdentifier, SIGKILL)
                g.waitUntilExit()
            }
        }
        var outputs: [(command: [String], result: ProcessResult)] = []
        for command in commands {
            let args = command.dropFirst().map(ports)
            switch command[0] {
            case "scripts/run.sh" where args.first == "run":
                // The gateway: in the background, until it says it serves.
                let p = Process()
                p.executableURL = gatewaydBinary
                p.arguments = Array(args)
                p.currentDirectoryURL = dir
                let err = Pipe()
                p.standardError = err
                p.standardOutput = FileHandle.nullDevice
                err.fileHandleForReading.readabilityHandler = { h in gatewayLog.append(h.availableData) }
                try p.run()
                gateway = p
                var serving = false
                for _ in 0..<300 where !serving && p.isRunning {
                    serving = gatewayLog.text.contains("\"msg\":\"serving\"")
                    if !serving { usleep(50_000) }
                }
                try #require(serving, "the walkthrough's gateway did not start: \(gatewayLog.text)")
            case "scripts/sim.sh":
                let result = try runInDirectory(Self.attestSim, Array(args), directory: dir, timeout: 150)
                #expect(result.status == 0, "\(command.joined(separator: " ")): \(result.stdout)\(result.stderr)")
                outputs.append((command, result))
            default:
                Issue.record("the walkthrough runs \(command[0]); this test knows scripts/run.sh run and scripts/sim.sh")
            }
        }
        try #require(gateway != nil, "the walkthrough starts no gateway")

        // The load run: every device registered, every protected request accepted.
        let run = try #require(outputs.first { $0.command.dropFirst().first == "run" }?.result)
        #expect(run.stdout.contains("registrations: 8/8 accepted"), "\(run.stdout)")
        #expect(run.stdout.contains("verdicts:      200 ×2000\n"), "\(run.stdout)")
        #expect(run.stdout.contains("result:        PASS"), "\(run.stdout)")
        // The budget per device (key_rate): some answers 429 key_rate_limited, each sent again and accepted.
        let paced = try #require(outputs.first { $0.command.contains("/api/pay") }?.result)
        #expect(paced.stdout.contains("verdicts:      200 ×20\n"), "\(paced.stdout)")
        #expect(paced.stdout.contains("answers 429 key_rate_limited;"), "\(paced.stdout)")
        #expect(paced.stdout.contains("result:        PASS"), "\(paced.stdout)")
        // The signed verdict the demo upstream got (--show-verdict), for the purchase route.
        #expect(run.stdout.contains("verdict:       the upstream got X-App-Attest-Verdict"), "\(run.stdout)")
        #expect(run.stdout.contains("header {\"alg\":\"ES256\",\"kid\":"), "\(run.stdout)")
        #expect(run.stdout.contains("\"aud\":\"purchase\"") && run.stdout.contains("\"verdict\":\"accepted\""), "\(run.stdout)")
        // The attacks: all refused, the control accepted after them; the expiry wait said up front.
        let attack = try #require(outputs.first { $0.command.dropFirst().first == "attack" }?.result)
        #expect(attack.stderr.contains("expired-challenge will wait about 11."), "\(attack.stderr)")
        #expect(attack.stdout.contains("result: PASS"), "\(attack.stdout)")
        // Android phones beside the iPhones, counted apart; the Android attacks refused (revoked registers: no status list).
        let both = try #require(outputs.first { $0.command.contains("both") }?.result)
        #expect(both.stdout.contains("android:       registrations 201 ×2; requests 200 ×100\n"), "\(both.stdout)")
        let android = try #require(outputs.first { $0.command.dropFirst().first == "attack" && $0.command.contains("android") }?.result)
        #expect(android.stdout.contains("android: 12/12 attack steps as expected"), "\(android.stdout)")
        #expect(
            android.stdout.contains(
                "result: PASS (11/11 attack steps refused as expected, 1/1 accepted as expected (see notes), control accepted)"),
            "\(android.stdout)")

        // The gateway agrees: protected requests accepted on the purchase route.
        let metrics = try curl(["http://127.0.0.1:\(admin)/metrics"]).1
        let accepted = metrics.split(separator: "\n").first {
            $0.hasPrefix("attest_gateway_assertion_verdicts_total{") && $0.contains("route=\"purchase\"")
                && $0.contains("mode=\"enforce\"") && $0.contains("verdict=\"accepted\"")
        }
        let count = accepted.flatMap { Double($0.split(separator: " ").last ?? "") } ?? 0
        #expect(count >= 2002, "\(accepted ?? "no accepted series")")  // the run's 2,000 and the attack's two control requests
        // Keys per account: keys 4 and 5 of the account flagged after their first request.
        let flagged = metrics.split(separator: "\n").first {
            $0.hasPrefix("attest_gateway_assertion_verdicts_total{") && $0.contains("route=\"account\"")
                && $0.contains("verdict=\"flagged\"") && $0.contains("reason=\"account_key_limit\"")
        }
        #expect(flagged.flatMap { Double($0.split(separator: " ").last ?? "") } == 6, "\(flagged ?? "no flagged series")")

        let g = try #require(gateway)
        kill(g.processIdentifier, SIGTERM)
        g.waitUntilExit()
        #expect(g.terminationStatus == 0)
    }

    /// `runProcess` in another working directory (the walkthrough's paths are relative).
    func runInDirectory(_ executable: URL, _ arguments: [String], directory: URL, timeout: TimeInterval) throws -> ProcessResult {
        try runProcess(
            URL(fileURLWithPath: "/usr/bin/env"), ["-C", directory.path, executable.path] + arguments, timeout: timeout)
    }
}

final class LockedLog: @unchecked Sendable {
    private let lock = NSLock()
    private var data = Data()
    func append(_ d: Data) { lock.withLock { data.append(d) } }
    var text: String { lock.withLock { String(decoding: data, as: UTF8.self) } }
}
