import AppAttestSimulator
import Foundation
import GatewayTestSupport
import GatewayWire
import Testing

@Suite("attest-sim command line: usage errors exit 2 and say why", .serialized, .timeLimit(.minutes(3)))
struct CommandLineTests {
    static let app = "ABCDE12345.com.example.sim"

    func sim(_ args: [String]) throws -> ProcessResult { try runProcess(attestSimBinary, args, timeout: 30) }

    @Test("bad option values and missing options") func usageErrors() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("attest-sim-cli-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: dir) }
        let made = try sim(["ca", "--out", dir.path])
        #expect(made.status == 0 && made.stdout.contains("root.pem"))
        let again = try sim(["ca", "--out", dir.path])
        #expect(again.status == 2 && again.stderr.contains("refusing to overwrite"))
        // --reuse keeps a CA that is there (checked) and makes one that is not.
        let root = try Data(contentsOf: dir.appendingPathComponent("root.pem"))
        let kept = try sim(["ca", "--out", dir.path, "--reuse"])
        #expect(kept.status == 0 && kept.stdout.hasPrefix("kept the CA in \(dir.path)"), "\(kept.stderr)")
        #expect(try Data(contentsOf: dir.appendingPathComponent("root.pem")) == root)
        let fresh = dir.appendingPathComponent("fresh")
        #expect(try sim(["ca", "--out", fresh.path, "--reuse"]).status == 0)
        #expect(FileManager.default.fileExists(atPath: fresh.appendingPathComponent("root.pem").path))
        try Data("{}".utf8).write(to: fresh.appendingPathComponent("ca.json"))
        let broken = try sim(["ca", "--out", fresh.path, "--reuse"])
        #expect(broken.status == 2 && broken.stderr.contains("--reuse: "), "\(broken.stderr)")
        let base = ["--gateway", "http://127.0.0.1:1", "--ca", dir.path, "--app-id", Self.app]
        let cases: [([String], String)] = [
            (["run"] + base + ["--devices", "0"], "--devices must be at least 1"),
            (["run"] + base + ["--bind", "header"], "--bind must be request or body"),
            (["run"] + base + ["--environment", "staging"], "--environment must be development or production"),
            (["run"] + base + ["--method", "get"], "--method must be an upper-case token"),
            (["run"] + base + ["--requests", "many"], "--requests"),
            (["run", "--gateway", "https://127.0.0.1:1", "--ca", dir.path, "--app-id", Self.app], "must start with http://"),
            (["run", "--gateway", "http://127.0.0.1:1", "--ca", dir.path, "--app-id", "nodot"], "--app-id"),
            (["run", "--gateway", "http://127.0.0.1:1", "--ca", dir.path + "-missing", "--app-id", Self.app], "ca.json"),
            (["run", "--ca", dir.path, "--app-id", Self.app], "--gateway"),
            (["attack"] + base + ["--mode", "everything"], "--mode must be all or one of"),
            (["attack"] + base + ["--challenge-wait", "5000"], "--challenge-wait must be 0…3600"),
            (["run"] + base + ["--client-data", "v3"], "--client-data must be v1 or v2"),
            (["run"] + base + ["--host", "a b"], "--host must be HOST[:PORT]"),
            (["attack"] + base + ["--mode", "wrong-host", "--client-data", "v1"], "--mode wrong-host needs --client-data v2"),
            (["run"] + base + ["--source", "not-an-address"], "--source not-an-address is not an IPv4 or IPv6 address"),
            (["run"] + base + ["--rate", "0"], "--rate must be more than 0"),
            (["flood", "--gateway", "http://127.0.0.1:1", "--connections", "0"], "--connections must be 1…256"),
            (["flood", "--gateway", "http://127.0.0.1:1", "--key-ids", "some"], "--key-ids must be none or random"),
            (["flood", "--gateway", "http://127.0.0.1:1", "--seconds", "0"], "--seconds must be more than 0"),
        ]
        for (args, message) in cases {
            let r = try sim(args)
            #expect(r.status == 2, "\(args): \(r.stderr)")
            #expect(r.stderr.contains(message), "\(args): \(r.stderr)")
        }
        // A gateway that is not there: the run happens and fails (exit 1), it is not a usage error.
        let down = try sim(["run"] + base + ["--devices", "1", "--requests", "1", "--json"])
        #expect(down.status == 1)
        #expect(down.json?["passed"] as? Bool == false)
    }

    @Test("unsupported: DeviceCheck tokens of one device, that the stand-in reads back to it; bad options refused")
    func unsupportedTokens() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("attest-sim-dc-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: dir) }
        #expect(try sim(["ca", "--out", dir.path]).status == 0)
        let device = "00112233445566778899aabbccddeeff"
        let r = try sim(["unsupported", "--ca", dir.path, "--device", device, "--count", "2"])
        #expect(r.status == 0, "\(r.stderr)")
        let lines = r.stdout.split(separator: "\n").map(String.init)
        #expect(lines.count == 2 && lines[0] != lines[1])
        let ca = try TestCA.load(from: dir)
        for line in lines {
            let read = try #require(SimulatedDeviceCheck.read(try Base64.decode(line), ca: ca))
            #expect(Hex.encode(read.deviceID) == device)
        }
        #expect(try sim(["unsupported", "--ca", dir.path]).stderr.hasPrefix("device "))
        let bad = try sim(["unsupported", "--ca", dir.path, "--device", "xyz"])
        #expect(bad.status == 2 && bad.stderr.contains("--device must be 32 hex digits"))
        #expect(try sim(["unsupported", "--ca", dir.path, "--count", "0"]).stderr.contains("--count must be from 1 to 10000"))
    }
}
