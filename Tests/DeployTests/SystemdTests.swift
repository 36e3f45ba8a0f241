import Foundation
import GatewayConfig
import GatewayTestSupport
import Testing

/// deploy/systemd: the unit verified by systemd itself, its sandbox scored, and kept consistent with
/// the production gateway.yaml next to it.
@Suite("deploy/systemd")
struct SystemdTests {
    static let unitPath = "deploy/systemd/attest-gateway.service"
    static let dropInPath = "deploy/systemd/privileged-port.conf"
    static let configPath = "deploy/systemd/gateway.yaml"
    static let installedBinary = "/usr/local/bin/gatewayd"

    /// `[Service]` settings of a unit file (repeated keys keep every value, in order).
    static func settings(_ text: String, section: String = "Service") -> [String: [String]] {
        var result: [String: [String]] = [:]
        var current = ""
        for raw in text.split(separator: "\n", omittingEmptySubsequences: false) {
            let line = raw.trimmingCharacters(in: .whitespaces)
            if line.isEmpty || line.hasPrefix("#") || line.hasPrefix(";") { continue }
            if line.hasPrefix("[") { current = String(line.dropFirst().dropLast()); continue }
            guard current == section, let eq = line.firstIndex(of: "=") else { continue }
            result[String(line[..<eq]), default: []].append(String(line[line.index(after: eq)...]))
        }
        return result
    }

    static func seconds(_ value: String) -> Int? {
        if value.hasSuffix("min"), let n = Int(value.dropLast(3)) { return n * 60 }
        if value.hasSuffix("s"), let n = Int(value.dropLast()) { return n }
        return Int(value)
    }

    /// Copies the unit (and optionally the drop-in) into a temporary directory with ExecStart pointing at
    /// the freshly built gatewayd (systemd-analyze verify requires the binary to exist and be executable).
    static func stage(unit: String, dropIn: String? = nil) throws -> URL {
        let dir = try Deploy.temporaryDirectory()
        let unitText = unit.replacingOccurrences(of: installedBinary, with: gatewaydBinary.path)
        try unitText.write(to: dir.appendingPathComponent("attest-gateway.service"), atomically: true, encoding: .utf8)
        if let dropIn {
            let d = dir.appendingPathComponent("attest-gateway.service.d")
            try FileManager.default.createDirectory(at: d, withIntermediateDirectories: true)
            try dropIn.write(to: d.appendingPathComponent("privileged-port.conf"), atomically: true, encoding: .utf8)
        }
        return dir
    }

    /// systemd-analyze verify: exit 0 is not enough (unknown keys are only warned about), so any
    /// diagnostic about our files counts as a failure.
    static func verify(_ dir: URL) throws -> (ok: Bool, output: String) {
        let tool = try #require(
            Deploy.tool("systemd-analyze"), "systemd-analyze is missing: scripts/install-deps.sh installs Debian's systemd package")
        let r = try runProcess(tool, ["verify", "--man=no", dir.appendingPathComponent("attest-gateway.service").path], timeout: 60)
        let output = r.stdout + r.stderr
        let ours = output.split(separator: "\n").filter { $0.contains("attest-gateway") || $0.contains(dir.path) }
        return (r.status == 0 && ours.isEmpty, output)
    }

    @Test(
        "systemd-analyze verify accepts the unit, alone and with the privileged-port drop-in",
        .enabled(
            if: Deploy.runnable("systemd-analyze"),
            "systemd-analyze not installed (scripts/install-deps.sh installs systemd); skipped outside CI"))
    func verifyUnit() throws {
        #expect(FileManager.default.isExecutableFile(atPath: gatewaydBinary.path), "build gatewayd first: \(gatewaydBinary.path)")
        let unit = try Deploy.text(Self.unitPath)
        let dir = try Self.stage(unit: unit, dropIn: nil)
        defer { try? FileManager.default.removeItem(at: dir) }
        let plain = try Self.verify(dir)
        #expect(plain.ok, "systemd-analyze verify: \(plain.output)")

        let withDropIn = try Self.stage(unit: unit, dropIn: try Deploy.text(Self.dropInPath))
        defer { try? FileManager.default.removeItem(at: withDropIn) }
        let both = try Self.verify(withDropIn)
        #expect(both.ok, "systemd-analyze verify with the drop-in: \(both.output)")
    }

    @Test(
        "the verify check catches a misspelled directive and a missing binary (it can fail)",
        .enabled(if: Deploy.runnable("systemd-analyze"), "systemd-analyze not installed; skipped outside CI"))
    func verifyCanFail() throws {
        let unit = try Deploy.text(Self.unitPath)
        let typo = try Self.stage(unit: unit.replacingOccurrences(of: "ProtectHome=", with: "ProtectHom="))
        defer { try? FileManager.default.removeItem(at: typo) }
        #expect(!(try Self.verify(typo)).ok)

        let dropInTypo = try Self.stage(
            unit: unit,
            dropIn: try Deploy.text(Self.dropInPath).replacingOccurrences(of: "AmbientCapabilities=", with: "AmbientCapabilitie="))
        defer { try? FileManager.default.removeItem(at: dropInTypo) }
        #expect(!(try Self.verify(dropInTypo)).ok)

        let dir = try Deploy.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        try unit.replacingOccurrences(of: Self.installedBinary, with: dir.appendingPathComponent("no-such-gatewayd").path)
            .write(to: dir.appendingPathComponent("attest-gateway.service"), atomically: true, encoding: .utf8)
        #expect(!(try Self.verify(dir)).ok)
    }

    /// systemd's own offline exposure score (0 = fully sandboxed, 10 = none); threshold is in tenths.
    @Test(
        "systemd-analyze security scores the sandbox at most 2.0, with or without the drop-in",
        .enabled(if: Deploy.runnable("systemd-analyze"), "systemd-analyze not installed; skipped outside CI"))
    func securityExposure() throws {
        let tool = try #require(Deploy.tool("systemd-analyze"))
        let unit = try Deploy.text(Self.unitPath)
        for dropIn in [nil, try Deploy.text(Self.dropInPath)] {
            let dir = try Self.stage(unit: unit, dropIn: dropIn)
            defer { try? FileManager.default.removeItem(at: dir) }
            let r = try runProcess(
                tool,
                ["security", "--offline=yes", "--threshold=20", "--no-pager", dir.appendingPathComponent("attest-gateway.service").path],
                timeout: 60)
            let overall = (r.stdout + r.stderr).split(separator: "\n").first { $0.contains("Overall exposure level") } ?? "no score printed"
            #expect(r.status == 0, "drop-in: \(dropIn != nil): \(overall)\n\(r.stderr)")
        }
        // The same score with the hardening removed is above the threshold: the check discriminates.
        let weak = unit.split(separator: "\n").filter {
            !$0.hasPrefix("Protect") && !$0.hasPrefix("Private") && !$0.hasPrefix("SystemCall")
        }
        .joined(separator: "\n")
        let dir = try Self.stage(unit: weak)
        defer { try? FileManager.default.removeItem(at: dir) }
        let r = try runProcess(
            tool, ["security", "--offline=yes", "--threshold=20", "--no-pager", dir.appendingPathComponent("attest-gateway.service").path],
            timeout: 60)
        #expect(r.status != 0)
    }

    @Test("the admin token: a credential of the unit, at the path gateway.yaml's admin.token_file names")
    func adminTokenCredential() throws {
        let s = Self.settings(try Deploy.text(Self.unitPath))
        let credentials = (s["LoadCredential"] ?? []).map { $0.split(separator: ":", maxSplits: 1).map(String.init) }
        let token = try #require(credentials.first { $0.first == "admin-token" }, "no LoadCredential=admin-token:…")
        #expect(token.count == 2 && token[1].hasPrefix("/etc/attest-gateway/"), "\(token)")
        let config = try Deploy.gatewayConfig(try Deploy.text(Self.configPath), file: Self.configPath)
        // systemd puts credentials of <unit> in /run/credentials/<unit>/ (the service user alone reads them).
        #expect(config.admin.tokenFile == "/run/credentials/attest-gateway.service/admin-token")
        #expect(config.admin.address.host == "127.0.0.1")
    }

    @Test("the unit has the required identity, sandbox, reload and stop settings")
    func requiredSettings() throws {
        let s = Self.settings(try Deploy.text(Self.unitPath))
        func one(_ k: String) -> String? { s[k]?.last }
        #expect(one("DynamicUser") == "yes" || one("User") == "attest-gateway")
        #expect(one("StateDirectory") == "attest-gateway")
        #expect(one("ProtectSystem") == "strict")
        #expect(["yes", "read-only", "tmpfs"].contains(one("ProtectHome") ?? ""))
        #expect(one("PrivateTmp") == "yes")
        #expect(one("NoNewPrivileges") == "yes")
        #expect(one("KillSignal") == "SIGTERM")
        // gatewayd reports READY=1 itself once it serves (sd_notify protocol): systemctl start returns then.
        #expect(one("Type") == "notify")
        #expect(one("NotifyAccess") == "main")
        #expect(one("Restart") == "on-failure")
        #expect(s["ExecReload"]?.contains("/bin/kill -HUP $MAINPID") == true)
        #expect(s["SystemCallFilter"]?.contains("@system-service") == true)
        #expect(Set((one("RestrictAddressFamilies") ?? "").split(separator: " ").map(String.init)) == ["AF_INET", "AF_INET6", "AF_UNIX"])
        #expect(Int(one("LimitNOFILE") ?? "") ?? 0 >= 4096)
        #expect(one("ExecStart") == "\(Self.installedBinary) run --config /etc/attest-gateway/gateway.yaml")
        // No capability unless the drop-in adds CAP_NET_BIND_SERVICE, and nothing else.
        #expect(one("CapabilityBoundingSet") == "")
        #expect(one("AmbientCapabilities") == "")
        let d = Self.settings(try Deploy.text(Self.dropInPath))
        #expect(d["AmbientCapabilities"] == ["CAP_NET_BIND_SERVICE"])
        #expect(d["CapabilityBoundingSet"] == ["CAP_NET_BIND_SERVICE"])
    }

    @Test("gateway.yaml passes gatewayd check and agrees with the unit (data_dir, ports, drain, descriptors)")
    func configMatchesUnit() throws {
        let check = try Deploy.gatewaydCheckShipped(Self.configPath)
        #expect(check.status == 0, "gatewayd check: \(check.stdout)\(check.stderr)")
        // Without its token file (a credential the unit loads) the check fails: the file is really read.
        let bare = try Deploy.gatewaydCheck(Deploy.url(Self.configPath))
        #expect(bare.status == 2 && bare.stderr.contains("admin.token_file"), "\(bare.stderr)")

        let config = try Deploy.gatewayConfig(try Deploy.text(Self.configPath), file: Self.configPath)
        let s = Self.settings(try Deploy.text(Self.unitPath))
        let stateDir = "/var/lib/" + (s["StateDirectory"]?.last ?? "?")
        guard case .memory(let memory) = config.store.backend else {
            Issue.record("the single-instance example uses the memory store")
            return
        }
        #expect(memory.dataDirectory == stateDir, "store.data_dir must be the unit's StateDirectory (the only writable path)")
        // Privileged ports need the drop-in: the shipped pair listens above 1024.
        let ports = config.listeners.map(\.address.port) + [config.admin.address.port]
        #expect(ports.allSatisfy { $0 >= 1024 }, "a port below 1024 needs privileged-port.conf; ship the example without it")
        // The stop timeout covers the drain plus the final snapshot.
        let drain = Int(config.limits.drainTimeout.components.seconds)
        let stop = try #require(Self.seconds(s["TimeoutStopSec"]?.last ?? ""))
        #expect(stop >= drain + 10, "TimeoutStopSec \(stop)s must exceed limits.drain_timeout \(drain)s by at least 10s")
        // Two descriptors per proxied connection, plus listeners, journal and snapshots.
        let nofile = Int(s["LimitNOFILE"]?.last ?? "") ?? 0
        #expect(nofile >= 2 * config.limits.maxConnections + 1024)
    }
}
