import Foundation
import Glibc

/// A private HAProxy on loopback as a layer-4 load balancer in front of the gateway: each `Route` is
/// a `mode tcp` frontend on a free loopback port relaying to `127.0.0.1:<serverPort>` with its
/// server options (`send-proxy` for PROXY protocol v1, `send-proxy-v2` for v2). Foreground (`-db`),
/// its own configuration in a temp directory; `stop()` (and deinit) kills it and removes the directory.
public final class HAProxyProcess: @unchecked Sendable {
    public static let candidates = ["/usr/sbin/haproxy", "/usr/local/sbin/haproxy", "/usr/bin/haproxy"]
    public static var binary: String? { candidates.first { FileManager.default.isExecutableFile(atPath: $0) } }
    /// Whether HAProxy-backed tests run: installed, or under CI (where its absence must fail).
    public static var testsEnabled: Bool { binary != nil || NginxProcess.isCI }

    public struct Route: Sendable {
        public var name: String
        public var serverPort: UInt16
        public var serverOptions: String
        public init(name: String, serverPort: UInt16, serverOptions: String) {
            self.name = name
            self.serverPort = serverPort
            self.serverOptions = serverOptions
        }
    }

    public let directory: URL
    /// Frontend port by route name.
    public private(set) var ports: [String: UInt16] = [:]
    private var process: Process?
    private var stopped = false

    public init(routes: [Route], timeout: TimeInterval = 15) throws {
        guard let binary = Self.binary else {
            throw HTTPTestError("haproxy not found (looked in \(Self.candidates.joined(separator: ", "))); run scripts/install-deps.sh")
        }
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("gw-haproxy-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        var lastError = ""
        // A port is chosen free just before HAProxy binds it; a failed start is retried on new ones.
        for _ in 0..<3 {
            var config = """
                global
                    maxconn 256
                defaults
                    mode tcp
                    timeout connect 5s
                    timeout client 30s
                    timeout server 30s

                """
            ports = [:]
            for r in routes {
                let port = try freeLoopbackPort()
                ports[r.name] = port
                config += """
                    frontend f_\(r.name)
                        bind 127.0.0.1:\(port)
                        default_backend b_\(r.name)
                    backend b_\(r.name)
                        server s1 127.0.0.1:\(r.serverPort) \(r.serverOptions)

                    """
            }
            let file = directory.appendingPathComponent("haproxy.cfg")
            try config.write(to: file, atomically: true, encoding: .utf8)
            let log = directory.appendingPathComponent("haproxy.log")
            FileManager.default.createFile(atPath: log.path, contents: nil)
            let p = Process()
            p.executableURL = URL(fileURLWithPath: binary)
            p.arguments = ["-db", "-f", file.path]
            p.standardInput = FileHandle.nullDevice
            p.standardOutput = try FileHandle(forWritingTo: log)
            p.standardError = try FileHandle(forWritingTo: log)
            try p.run()
            let deadline = Date().addingTimeInterval(timeout)
            while Date() < deadline && p.isRunning {
                // Listening sockets, without connecting (a probe connection would reach the gateway).
                if ports.values.allSatisfy(Self.isListening) {
                    process = p
                    return
                }
                usleep(20_000)
            }
            if p.isRunning { kill(p.processIdentifier, SIGKILL) }
            p.waitUntilExit()
            lastError = (try? String(contentsOf: log, encoding: .utf8)) ?? ""
        }
        try? FileManager.default.removeItem(at: directory)
        throw HTTPTestError("haproxy did not start: \(lastError)")
    }

    /// Whether something listens on 127.0.0.1:`port` (`/proc/net/tcp`, state 0A).
    static func isListening(_ port: UInt16) -> Bool {
        guard let table = try? String(contentsOfFile: "/proc/net/tcp", encoding: .utf8) else { return false }
        let local = String(format: "0100007F:%04X", port)
        return table.split(separator: "\n").contains { line in
            let cols = line.split(separator: " ")
            return cols.count > 3 && cols[1] == local && cols[3] == "0A"
        }
    }

    deinit { stop() }

    public func stop() {
        guard !stopped else { return }
        stopped = true
        if let p = process, p.isRunning {
            kill(p.processIdentifier, SIGKILL)
            p.waitUntilExit()
        }
        try? FileManager.default.removeItem(at: directory)
    }
}
