import Foundation
import GatewayTestSupport
import Testing

/// The systemd unit's sandbox cannot be run here (no systemd as PID 1), so gatewayd is traced doing
/// everything a service does (start with a data_dir, serve and proxy to a real upstream, admin
/// endpoints, a registration-path write, SIGHUP reload, SIGTERM drain) and the trace is held against
/// the unit: every system call in SystemCallFilter, every socket family in RestrictAddressFamilies, no
/// writable-and-executable memory (MemoryDenyWriteExecute), writes only under StateDirectory.
@Suite("deploy/systemd sandbox")
struct SandboxTests {
    /// Syscall names of a systemd filter set (`@group` expanded recursively by systemd-analyze).
    static func syscalls(_ group: String, _ tool: URL, _ seen: inout Set<String>) throws -> Set<String> {
        guard seen.insert(group).inserted else { return [] }
        let r = try runProcess(tool, ["syscall-filter", group], timeout: 30)
        try #require(r.status == 0, "systemd-analyze syscall-filter \(group): \(r.stderr)")
        var names: Set<String> = []
        for raw in r.stdout.split(separator: "\n").dropFirst() {
            let s = raw.trimmingCharacters(in: .whitespaces)
            if s.isEmpty || s.hasPrefix("#") { continue }
            if s.hasPrefix("@") { names.formUnion(try syscalls(s, tool, &seen)) } else { names.insert(s) }
        }
        return names
    }

    @Test(
        "traced gatewayd stays inside the unit's SystemCallFilter, RestrictAddressFamilies, MemoryDenyWriteExecute and StateDirectory",
        .enabled(
            if: Deploy.runnable("strace") && Deploy.runnable("systemd-analyze"),
            "strace or systemd-analyze not installed (scripts/install-deps.sh); skipped outside CI"))
    func traceAgainstUnit() throws {
        let strace = try #require(Deploy.tool("strace"), "strace is missing")
        let analyze = try #require(Deploy.tool("systemd-analyze"), "systemd-analyze is missing")
        let unit = SystemdTests.settings(try Deploy.text(SystemdTests.unitPath))

        // What the unit allows.
        var allowed: Set<String> = []
        var denied: Set<String> = []
        for filter in unit["SystemCallFilter"] ?? [] {
            var seen: Set<String> = []
            let deny = filter.hasPrefix("~")
            for item in filter.dropFirst(deny ? 1 : 0).split(separator: " ").map(String.init) {
                let set = item.hasPrefix("@") ? try Self.syscalls(item, analyze, &seen) : [item]
                if deny { denied.formUnion(set) } else { allowed.formUnion(set) }
            }
        }
        try #require(allowed.count > 100, "@system-service expanded to \(allowed.count) calls")
        let families = Set((unit["RestrictAddressFamilies"]?.last ?? "").split(separator: " ").map(String.init))
        #expect(unit["MemoryDenyWriteExecute"]?.last == "yes")

        // A real upstream: a plain gatewayd serving its demo application.
        let upstream = try GatewayProcess(
            config: """
                workers: 1
                listeners: [{name: public, address: 127.0.0.1:0}]
                admin: {address: 127.0.0.1:0}
                upstreams: [{name: demo, url: demo}]
                routes: [{name: all, match: {path_prefix: /}, upstream: demo}]
                """)
        defer { upstream.stop() }
        let upstreamURL = upstream.url("public", "")

        // The systemd example, on loopback, its data_dir in a temporary directory, traced.
        let dir = try Deploy.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let dataDir = dir.appendingPathComponent("state").path
        let yaml = try Deploy.text(SystemdTests.configPath)
            .replacingOccurrences(of: "0.0.0.0:8080", with: "127.0.0.1:0")
            .replacingOccurrences(of: "127.0.0.1:9090", with: "127.0.0.1:0")
            .replacingOccurrences(of: "http://127.0.0.1:8081", with: upstreamURL)
            .replacingOccurrences(of: "data_dir: /var/lib/attest-gateway", with: "data_dir: \(dataDir)")
            .replacingOccurrences(of: "snapshot_interval: 30s", with: "snapshot_interval: 1s")
        #expect(yaml.contains(upstreamURL) && yaml.contains(dataDir))
        let config = dir.appendingPathComponent("gateway.yaml")
        try Deploy.stagingAdminToken(yaml, file: SystemdTests.configPath, in: dir).write(to: config, atomically: true, encoding: .utf8)
        let trace = dir.appendingPathComponent("trace").path

        let p = Process()
        p.executableURL = strace
        p.arguments = ["-f", "-qq", "-o", trace, gatewaydBinary.path, "run", "--config", config.path]
        // As systemd runs the Type=notify unit: the notifications (an AF_UNIX datagram) are traced too.
        let notify = try FakeNotifySocket(abstract: true)
        p.environment = ProcessInfo.processInfo.environment.merging(["NOTIFY_SOCKET": notify.name]) { $1 }
        let err = Pipe()
        p.standardError = err
        p.standardOutput = FileHandle.nullDevice
        p.standardInput = FileHandle.nullDevice
        let log = LockedText()
        err.fileHandleForReading.readabilityHandler = { h in log.append(String(decoding: h.availableData, as: UTF8.self)) }
        try p.run()
        defer {
            err.fileHandleForReading.readabilityHandler = nil
            if p.isRunning { kill(p.processIdentifier, SIGKILL) }
            p.waitUntilExit()
        }
        func waitFor(_ needle: String, seconds: Int = 30) -> Bool {
            for _ in 0..<(seconds * 20) {
                if log.text.contains(needle) { return true }
                usleep(50_000)
            }
            return false
        }
        try #require(waitFor("\"msg\":\"serving\""), "gatewayd did not start under strace: \(log.text)")
        let serving = try #require(log.text.split(separator: "\n").first { $0.contains("\"msg\":\"serving\"") })
        let obj = try #require(try JSONSerialization.jsonObject(with: Data(serving.utf8)) as? [String: Any])
        let admin = try #require(obj["admin"] as? String), publicAddress = try #require(obj["public"] as? String)
        // gatewayd's pid: the child strace started (the only one whose parent is strace).
        let children = try String(contentsOfFile: "/proc/\(p.processIdentifier)/task/\(p.processIdentifier)/children", encoding: .utf8)
        let pid = try #require(children.split(separator: " ").first.flatMap { Int32($0) })

        #expect(notify.await("READY=1", timeout: 30) != nil, "no READY=1 under strace")
        #expect(try curl(["http://\(admin)/healthz"]).0 == 200)
        #expect(try curl(["http://\(admin)/readyz"]).0 == 200)
        #expect(try curl(["http://\(admin)/metrics"]).0 == 200)
        #expect(try curl(["http://\(publicAddress)/hello"]).0 == 200, "proxied to the upstream")
        #expect(try curl(["-X", "POST", "http://\(publicAddress)/v1/attest/challenge"]).0 == 201)
        kill(pid, SIGHUP)
        #expect(waitFor("configuration reloaded"))
        kill(pid, SIGTERM)
        for _ in 0..<600 where p.isRunning { usleep(50_000) }
        #expect(!p.isRunning && p.terminationStatus == 0, "strace/gatewayd exit: \(p.isRunning ? "running" : "\(p.terminationStatus)")")
        #expect(log.text.contains("store closed cleanly"))

        // Hold the trace against the unit.
        let lines = try String(contentsOfFile: trace, encoding: .utf8).split(separator: "\n")
        #expect(lines.count > 100, "trace has \(lines.count) lines")
        var used: Set<String> = []
        for line in lines {
            if let m = line.firstMatch(of: /^\d+\s+([a-z0-9_]+)\(/) { used.insert(String(m.output.1)) }
            if let m = line.firstMatch(of: /socket\((AF_[A-Z0-9]+)/) {
                #expect(families.contains(String(m.output.1)), "RestrictAddressFamilies refuses \(m.output.1): \(line)")
            }
            if (line.contains(" mmap(") || line.contains(" mprotect(")) && line.contains("PROT_WRITE") && line.contains("PROT_EXEC") {
                Issue.record("MemoryDenyWriteExecute refuses: \(line)")
            }
            if let m = line.firstMatch(of: /openat\([^,]+, "([^"]+)", ([A-Z_|]+)/),
                m.output.2.contains("O_WRONLY") || m.output.2.contains("O_RDWR") || m.output.2.contains("O_CREAT")
            {
                #expect(m.output.1.hasPrefix(dataDir + "/"), "ProtectSystem=strict refuses a write to \(m.output.1)")
            }
            if let m = line.firstMatch(of: /(?:rename|unlink|mkdir|renameat2?|unlinkat|mkdirat)\((?:AT_FDCWD, )?"([^"]+)"/) {
                #expect(m.output.1.hasPrefix(dataDir), "ProtectSystem=strict refuses changing \(m.output.1)")
            }
        }
        #expect(
            used.isSuperset(of: ["epoll_wait", "accept4", "connect", "fsync", "rename", "sendto"]),
            "the trace covers serving, proxying, the store and the notifications: \(used.sorted())")
        let outside = used.subtracting(allowed).subtracting(["execve"])  // execve: strace starting gatewayd
        #expect(outside.isEmpty, "not in SystemCallFilter: \(outside.sorted())")
        let refused = used.intersection(denied)
        #expect(refused.isEmpty, "denied by SystemCallFilter=~…: \(refused.sorted())")
    }
}

final class LockedText: @unchecked Sendable {
    private let lock = NSLock()
    private var buffer = ""
    func append(_ s: String) { lock.withLock { buffer += s } }
    var text: String { lock.withLock { buffer } }
}
