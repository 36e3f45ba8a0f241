import Foundation

/// A real `gatewayd run` on loopback with a temporary config (ports 0), for integration tests.
/// The bound addresses are read from its "serving" log line; `stop()` (or deinit) always ends it.
public final class GatewayProcess: @unchecked Sendable {
    public let process = Process()
    public let directory: URL
    public let configURL: URL
    public private(set) var addresses: [String: String] = [:]
    private let stderrPipe = Pipe()
    private let stdoutPipe = Pipe()
    private let lock = NSLock()
    private var stderrText = ""
    private var stdoutText = ""
    /// Set when a pipe's reader saw end of file (the process and its children closed it): after
    /// an exit, what the process wrote last is read only once this is true.
    private var stderrEOF = false
    private var stdoutEOF = false

    /// - Parameter executable: another gatewayd than the one built (a stamped copy).
    /// - Parameter environment: variables added to (or replacing in) the test process's environment.
    public init(
        config yaml: String, timeout: TimeInterval = 20, executable: URL = gatewaydBinary, environment: [String: String] = [:]
    ) throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("gw-it-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        configURL = directory.appendingPathComponent("gateway.yaml")
        try yaml.write(to: configURL, atomically: true, encoding: .utf8)
        process.executableURL = executable
        process.arguments = ["run", "--config", configURL.path]
        process.standardError = stderrPipe
        process.standardOutput = stdoutPipe
        process.standardInput = FileHandle.nullDevice
        if !environment.isEmpty {
            process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        }
        stderrPipe.fileHandleForReading.readabilityHandler = { [weak self] h in
            let d = h.availableData
            guard let self else { return }
            if d.isEmpty {
                h.readabilityHandler = nil
                self.lock.withLock { self.stderrEOF = true }
                return
            }
            self.lock.withLock { self.stderrText += String(decoding: d, as: UTF8.self) }
        }
        stdoutPipe.fileHandleForReading.readabilityHandler = { [weak self] h in
            let d = h.availableData
            guard let self else { return }
            if d.isEmpty {
                h.readabilityHandler = nil
                self.lock.withLock { self.stdoutEOF = true }
                return
            }
            self.lock.withLock { self.stdoutText += String(decoding: d, as: UTF8.self) }
        }
        try process.run()
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if let line = stderrLines.first(where: { $0.contains("\"msg\":\"serving\"") }),
                let obj = (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any]
            {
                for (k, v) in obj { if let s = v as? String, s.contains(":") && k != "ts" { addresses[k] = s } }
                return
            }
            if !process.isRunning { break }
            usleep(20_000)
        }
        stop()
        throw NSError(domain: "GatewayProcess", code: 1, userInfo: [NSLocalizedDescriptionKey: "gatewayd did not start: \(stderr)"])
    }

    deinit { stop() }

    public var stderr: String { lock.withLock { stderrText } }
    public var stdout: String { lock.withLock { stdoutText } }
    public var stderrLines: [String] { stderr.split(separator: "\n").map(String.init) }
    /// stdout's lines: the access log, by default.
    public var stdoutLines: [String] { stdout.split(separator: "\n").map(String.init) }

    /// `http://127.0.0.1:PORT` of a listener (by name) or of "admin".
    public func url(_ listener: String, _ path: String) -> String {
        let a = addresses[listener] ?? "?"
        let port = a.split(separator: ":").last.map(String.init) ?? "0"
        return "http://127.0.0.1:\(port)\(path)"
    }

    public func signal(_ sig: Int32) { kill(process.processIdentifier, sig) }

    /// Waits for exit (up to `timeout`), then kills; returns the exit status.
    @discardableResult
    public func waitForExit(timeout: TimeInterval = 15) -> Int32? {
        let deadline = Date().addingTimeInterval(timeout)
        while process.isRunning && Date() < deadline { usleep(20_000) }
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
            return nil
        }
        // The last lines (e.g. "stopped") may still be in the pipes: read them before answering.
        let drained = Date().addingTimeInterval(2)
        while !lock.withLock({ stderrEOF && stdoutEOF }) && Date() < drained { usleep(5_000) }
        return process.terminationStatus
    }

    public func stop() {
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
        stderrPipe.fileHandleForReading.readabilityHandler = nil
        stdoutPipe.fileHandleForReading.readabilityHandler = nil
        try? FileManager.default.removeItem(at: directory)
    }
}

/// curl with a bounded time; returns (status code, body).
public func curl(_ args: [String]) throws -> (Int, String) {
    let r = try runProcess(URL(fileURLWithPath: "/usr/bin/curl"), ["-s", "--max-time", "10", "-w", "\n%{http_code}"] + args)
    var lines = r.stdout.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
    let code = Int(lines.popLast() ?? "") ?? 0
    return (code, lines.joined(separator: "\n"))
}
