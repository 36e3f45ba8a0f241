import Foundation

/// A real `redis-server` on a free loopback port, in a temporary directory, for tests and benches.
/// `stop()` (or deinit) always ends it and removes the directory; `restart()` keeps port and data.
///
/// Tests that need it are enabled when `redis-server` is installed, or when `CI` is `true` (then a
/// missing server fails the test instead of skipping it).
public final class RedisProcess: @unchecked Sendable {
    public static let serverPath = ["/usr/bin/redis-server", "/usr/local/bin/redis-server"]
        .first { FileManager.default.isExecutableFile(atPath: $0) }
    public static let cliPath = ["/usr/bin/redis-cli", "/usr/local/bin/redis-cli"]
        .first { FileManager.default.isExecutableFile(atPath: $0) }
    public static var isCI: Bool { ProcessInfo.processInfo.environment["CI"] == "true" }
    /// Whether Redis tests run: redis-server is installed, or CI demands it.
    public static var testsEnabled: Bool { (serverPath != nil && cliPath != nil) || isCI }
    public static let skipMessage = "redis-server is not installed (apt-get install redis-server); set CI=true to make this a failure"

    public private(set) var port: UInt16 = 0
    public let directory: URL
    /// `appendonly yes` + `appendfsync always` (survives restarts), or no persistence at all.
    public let durable: Bool
    /// Passwords, ACL users, TLS (default: none; the fixture's own commands get in either way).
    public let security: RedisServerSecurity
    private var process: Process?
    private let lock = NSLock()

    public init(durable: Bool = false, security: RedisServerSecurity = RedisServerSecurity()) throws {
        guard let server = Self.serverPath, Self.cliPath != nil else {
            throw NSError(domain: "RedisProcess", code: 1, userInfo: [NSLocalizedDescriptionKey: Self.skipMessage])
        }
        _ = server
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("redis-it-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        self.durable = durable
        self.security = security
        var lastError: (any Error)?
        for _ in 0..<5 {
            let candidate = try Self.freePort()
            do {
                self.port = candidate
                try start()
                return
            } catch {
                lastError = error
            }
        }
        try? FileManager.default.removeItem(at: directory)
        throw lastError ?? NSError(domain: "RedisProcess", code: 2)
    }

    deinit { stop() }

    /// `redis://127.0.0.1:PORT/0`.
    public var url: String { "redis://127.0.0.1:\(port)/0" }

    public var isRunning: Bool { lock.withLock { process?.isRunning ?? false } }

    /// Starts the server (again) and waits until it answers PING (at most 10 s).
    public func start() throws {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: Self.serverPath!)
        var args =
            security.serverArguments(port: port) + [
                "--bind", "127.0.0.1", "--save", "", "--dir", directory.path,
                "--daemonize", "no", "--protected-mode", "no", "--loglevel", "warning", "--logfile",
                directory.appendingPathComponent("redis.log").path,
            ]
        args += durable ? ["--appendonly", "yes", "--appendfsync", "always"] : ["--appendonly", "no"]
        p.arguments = args
        p.standardOutput = FileHandle.nullDevice
        p.standardError = FileHandle.nullDevice
        p.standardInput = FileHandle.nullDevice
        try p.run()
        lock.withLock { process = p }
        let deadline = Date().addingTimeInterval(10)
        while Date() < deadline {
            if !p.isRunning { break }
            if (try? cli(["PING"])) == "PONG" { return }
            usleep(20_000)
        }
        kill()
        let log = (try? String(contentsOf: directory.appendingPathComponent("redis.log"), encoding: .utf8)) ?? ""
        throw NSError(
            domain: "RedisProcess", code: 3, userInfo: [NSLocalizedDescriptionKey: "redis-server did not start on port \(port): \(log)"])
    }

    /// SIGKILL (no shutdown save), waiting for the exit.
    public func kill() {
        lock.withLock {
            if let p = process, p.isRunning {
                Foundation.kill(p.processIdentifier, SIGKILL)
                p.waitUntilExit()
            }
            process = nil
        }
    }

    /// SIGSTOP: the server keeps its connections but answers nothing (a silent peer) until `resume()`.
    public func pause() {
        lock.withLock { if let p = process, p.isRunning { Foundation.kill(p.processIdentifier, SIGSTOP) } }
    }

    /// SIGCONT after `pause()`.
    public func resume() {
        lock.withLock { if let p = process { Foundation.kill(p.processIdentifier, SIGCONT) } }
    }

    /// Kills and starts again on the same port with the same directory (AOF kept when durable).
    public func restart() throws {
        kill()
        try start()
    }

    /// Ends the server and removes its directory.
    public func stop() {
        kill()
        try? FileManager.default.removeItem(at: directory)
    }

    /// `redis-cli -p PORT args…` (raw output, trimmed).
    @discardableResult
    public func cli(_ args: [String]) throws -> String {
        let r = try runProcess(
            URL(fileURLWithPath: Self.cliPath!), ["-h", "127.0.0.1", "-p", String(port)] + security.cliArguments + args, timeout: 10)
        guard r.status == 0 else {
            throw NSError(domain: "RedisProcess", code: 4, userInfo: [NSLocalizedDescriptionKey: "redis-cli \(args): \(r.stderr)"])
        }
        return r.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// `INFO commandstats` as calls by command name (lowercase, e.g. "evalsha").
    public func commandCalls() throws -> [String: Int] {
        var out: [String: Int] = [:]
        for line in try cli(["INFO", "commandstats"]).split(whereSeparator: \.isNewline) {
            // cmdstat_evalsha:calls=12,usec=…
            guard line.hasPrefix("cmdstat_"), let colon = line.firstIndex(of: ":") else { continue }
            let name = String(line[line.index(line.startIndex, offsetBy: 8)..<colon])
            for field in line[line.index(after: colon)...].split(separator: ",") where field.hasPrefix("calls=") {
                out[name] = Int(field.dropFirst(6))
            }
        }
        return out
    }

    /// A port that was free on 127.0.0.1 a moment ago.
    public static func freePort() throws -> UInt16 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw NSError(domain: "RedisProcess", code: 5) }
        defer { close(fd) }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = 0
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0 else { throw NSError(domain: "RedisProcess", code: 6) }
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) }
        }
        return UInt16(bigEndian: addr.sin_port)
    }
}
