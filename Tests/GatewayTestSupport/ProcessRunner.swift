import Foundation

/// Runs a program to completion with a deadline, capturing its output. Used to drive the real
/// `gatewayd` binary in end-to-end tests; the child is killed if it outlives `timeout`.
public struct ProcessResult: Sendable {
    public let status: Int32
    public let stdout: String
    public let stderr: String

    /// stdout parsed as one JSON object.
    public var json: [String: Any]? {
        (try? JSONSerialization.jsonObject(with: Data(stdout.utf8))) as? [String: Any]
    }
}

public func runProcess(_ executable: URL, _ arguments: [String], timeout: TimeInterval = 30) throws -> ProcessResult {
    let p = Process()
    p.executableURL = executable
    p.arguments = arguments
    let out = Pipe()
    let err = Pipe()
    p.standardOutput = out
    p.standardError = err
    p.standardInput = FileHandle.nullDevice
    try p.run()
    // Drain both pipes concurrently so a chatty child never blocks on a full pipe.
    let group = DispatchGroup()
    nonisolated(unsafe) var outData = Data()
    nonisolated(unsafe) var errData = Data()
    DispatchQueue.global().async(group: group) { outData = out.fileHandleForReading.readDataToEndOfFile() }
    DispatchQueue.global().async(group: group) { errData = err.fileHandleForReading.readDataToEndOfFile() }
    if group.wait(timeout: .now() + timeout) == .timedOut {
        p.terminate()
        kill(p.processIdentifier, SIGKILL)
        _ = group.wait(timeout: .now() + 5)
    }
    p.waitUntilExit()
    return ProcessResult(
        status: p.terminationStatus, stdout: String(decoding: outData, as: UTF8.self),
        stderr: String(decoding: errData, as: UTF8.self))
}

/// The built `attest-sim` next to `gatewayd` (`swift build --build-tests` builds it), or `$ATTEST_SIM_BIN`.
public var attestSimBinary: URL {
    if let env = ProcessInfo.processInfo.environment["ATTEST_SIM_BIN"] { return URL(fileURLWithPath: env) }
    return gatewaydBinary.deletingLastPathComponent().appendingPathComponent("attest-sim")
}

/// The `gatewayd` built next to the test bundle (`swift build --build-tests` builds both), or
/// `$GATEWAYD_BIN`.
public var gatewaydBinary: URL {
    if let env = ProcessInfo.processInfo.environment["GATEWAYD_BIN"] { return URL(fileURLWithPath: env) }
    let testBinary = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
    var dir = testBinary.deletingLastPathComponent()
    // On Linux the test runner is `<bin>/attest-gatewayPackageTests.xctest`; on macOS it sits inside a bundle.
    for _ in 0..<4 {
        let candidate = dir.appendingPathComponent("gatewayd")
        if FileManager.default.isExecutableFile(atPath: candidate.path) { return candidate }
        dir = dir.deletingLastPathComponent()
    }
    return repositoryRoot.appendingPathComponent(".build/debug/gatewayd")
}
