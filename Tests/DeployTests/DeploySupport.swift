import Foundation
import GatewayConfig
import GatewayTestSupport
import Testing
import Yams

/// Shared by the deploy checks: the repository's deploy/ files, the external tools that check them,
/// and the metric names the gateway exports.
enum Deploy {
    static let root = repositoryRoot
    static func url(_ path: String) -> URL { root.appendingPathComponent(path) }
    static func text(_ path: String) throws -> String { try String(contentsOf: url(path), encoding: .utf8) }

    /// Under CI a missing tool fails the test; elsewhere the test is skipped with a message.
    static var isCI: Bool { ProcessInfo.processInfo.environment["CI"] == "true" }

    /// A tool by name: `extra` paths first (e.g. the venv of scripts/install-deps.sh), then `$PATH`.
    static func tool(_ name: String, extra: [String] = []) -> URL? {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/local/bin:/usr/bin:/bin"
        let candidates = extra + path.split(separator: ":").map { "\($0)/\(name)" }
        return candidates.first { FileManager.default.isExecutableFile(atPath: $0) }.map { URL(fileURLWithPath: $0) }
    }

    /// True when the test should run: the tool is there, or CI demands it (and the test then fails
    /// on `#require`).
    static func runnable(_ name: String, extra: [String] = []) -> Bool { isCI || tool(name, extra: extra) != nil }

    static let kubernetesValidateVenv = root.appendingPathComponent(".build-tools/venv/bin/kubernetes-validate").path

    /// A fresh temporary directory, removed by the caller.
    static func temporaryDirectory() throws -> URL {
        let d = FileManager.default.temporaryDirectory.appendingPathComponent("deploy-test-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: d, withIntermediateDirectories: true)
        return d
    }

    /// Every YAML document of a file, as plain dictionaries.
    static func yamlDocuments(_ path: String) throws -> [[String: Any]] {
        try Yams.load_all(yaml: try text(path)).compactMap { $0 as? [String: Any] }
    }

    /// A gateway.yaml text validated by the gateway's own loader (no I/O, no name resolution).
    static func gatewayConfig(_ yaml: String, file: String) throws -> GatewayConfig {
        do {
            return try GatewayConfig.parse(yaml: yaml, file: file, baseDirectory: "/")
        } catch {
            throw DeployCheckError("\(file) is not a valid gateway.yaml:\n\(error)")
        }
    }

    /// The token the tests put where a shipped `admin.token_file` points (the real file exists only
    /// on the target host: a systemd credential, a container or Kubernetes secret).
    static let testAdminToken = "deploy-test-token-0123456789abcdef"

    /// `yaml`, a shipped gateway.yaml, with its `admin.token_file` moved to a fresh file in `directory`
    /// (mode 0400, holding `testAdminToken`). Every shipped configuration must set one.
    static func stagingAdminToken(_ yaml: String, file: String, in directory: URL) throws -> String {
        let config = try gatewayConfig(yaml, file: file)
        let shipped = try #require(config.admin.tokenFile, "\(file): admin.token_file is not set; /explain would be open")
        #expect(yaml.components(separatedBy: "token_file: \(shipped)").count == 2, "\(file) sets token_file: \(shipped) once")
        let staged = directory.appendingPathComponent("admin-token-\(UUID().uuidString)").path
        #expect(FileManager.default.createFile(atPath: staged, contents: Data((testAdminToken + "\n").utf8)))
        #expect(chmod(staged, 0o400) == 0)
        return yaml.replacingOccurrences(of: "token_file: \(shipped)", with: "token_file: \(staged)")
    }

    /// `gatewayd check` on a shipped gateway.yaml, its admin token file staged (`stagingAdminToken`).
    static func gatewaydCheckShipped(_ path: String) throws -> ProcessResult {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let file = dir.appendingPathComponent("gateway.yaml")
        try stagingAdminToken(try text(path), file: path, in: dir).write(to: file, atomically: true, encoding: .utf8)
        return try gatewaydCheck(file)
    }

    /// `gatewayd check --config FILE` on the built binary.
    static func gatewaydCheck(_ file: URL) throws -> ProcessResult {
        try runProcess(gatewaydBinary, ["check", "--config", file.path], timeout: 60)
    }
}

struct DeployCheckError: Error, CustomStringConvertible {
    let description: String
    init(_ d: String) { description = d }
}

/// The metric names `gatewayd` exports, read from the `static let x = "attest_gateway_…"` constants of
/// every `*Metrics.swift` under Sources/. Timers and latency histograms (`histogram(label:…)`, an
/// aggregating recorder) are Prometheus histograms (swift-prometheus), so they are exported as
/// `_bucket`, `_sum` and `_count` series.
enum ExportedMetrics {
    struct Metric: Hashable { let name: String; let histogram: Bool }

    static func load() throws -> [Metric] {
        var result: Set<Metric> = []
        let sources = Deploy.url("Sources")
        let files =
            FileManager.default.enumerator(at: sources, includingPropertiesForKeys: nil)?
            .compactMap { $0 as? URL }.filter { $0.lastPathComponent.hasSuffix("Metrics.swift") } ?? []
        for file in files {
            let text = try String(contentsOf: file, encoding: .utf8)
            for m in text.matches(of: /static let (\w+) = "(attest_gateway_[a-z0-9_]+)"/) {
                let ident = String(m.output.1)
                let histogram =
                    text.contains("Timer(label: Self.\(ident),")
                    || text.matches(of: /Timer\(label: \w+\.(\w+),/).contains { $0.output.1 == ident }
                    || text.matches(of: /histogram\(label: \w+\.(\w+),/).contains { $0.output.1 == ident }
                result.insert(Metric(name: String(m.output.2), histogram: histogram))
            }
        }
        return result.sorted { $0.name < $1.name }
    }

    /// Series names a query may use.
    static func seriesNames(_ metrics: [Metric]) -> Set<String> {
        var names: Set<String> = []
        for m in metrics {
            if m.histogram {
                for s in ["_bucket", "_sum", "_count"] { names.insert(m.name + s) }
            } else {
                names.insert(m.name)
            }
        }
        return names
    }

    /// The metric names a PromQL expression refers to (recording-rule names contain ':' and are not matched).
    static func referenced(in expr: String) -> Set<String> {
        Set(expr.matches(of: /attest_gateway_[a-z0-9_]+/).map { String($0.output) })
    }
}

/// A redis-server on 127.0.0.1 and a free port, in a temporary directory, nothing persisted; for
/// checks that may connect to the store. `stop()` ends it.
final class ThrowawayRedis: @unchecked Sendable {
    let port: UInt16
    private let process = Process()
    private let directory: URL

    init(server: URL) throws {
        directory = try Deploy.temporaryDirectory()
        port = try Self.freePort()
        process.executableURL = server
        process.arguments = [
            "--port", String(port), "--bind", "127.0.0.1", "--dir", directory.path, "--save", "", "--appendonly", "no",
            "--daemonize", "no", "--logfile", directory.appendingPathComponent("redis.log").path,
        ]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        process.standardInput = FileHandle.nullDevice
        try process.run()
        // Ready when it accepts a TCP connection (bounded: 5 s).
        for _ in 0..<100 {
            if Self.accepts(port) { return }
            if !process.isRunning { break }
            usleep(50_000)
        }
        stop()
        throw DeployCheckError("redis-server did not start on 127.0.0.1:\(port)")
    }

    func stop() {
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
        try? FileManager.default.removeItem(at: directory)
    }

    deinit { stop() }

    /// A port the system hands out for 127.0.0.1 (released at once; redis-server binds it next).
    static func freePort() throws -> UInt16 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw DeployCheckError("socket: \(errno)") }
        defer { close(fd) }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        addr.sin_port = 0
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        let ok = withUnsafeMutablePointer(to: &addr) { p in
            p.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, len) == 0 && getsockname(fd, $0, &len) == 0 }
        }
        guard ok else { throw DeployCheckError("bind 127.0.0.1:0: \(errno)") }
        return UInt16(bigEndian: addr.sin_port)
    }

    static func accepts(_ port: UInt16) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        addr.sin_port = port.bigEndian
        return withUnsafePointer(to: &addr) { p in
            p.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
    }
}
