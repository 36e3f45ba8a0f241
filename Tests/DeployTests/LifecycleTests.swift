import Foundation
import GatewayTestSupport
import Testing

/// The shipped configurations run by the real gatewayd on loopback, driven the way the supervisors
/// drive it: the systemd unit's ExecReload commands and KillSignal, and the container's HEALTHCHECK
/// command exactly as the Dockerfile writes it.
@Suite("deploy lifecycle", .serialized)
struct LifecycleTests {
    /// A shipped gateway.yaml moved to loopback with system-chosen ports and a data_dir next to it.
    static func loopback(_ yaml: String, dataDir: String) -> String {
        yaml.replacingOccurrences(of: "0.0.0.0:8080", with: "127.0.0.1:0")
            .replacingOccurrences(of: "127.0.0.1:9090", with: "127.0.0.1:0")
            .replacingOccurrences(of: "0.0.0.0:9090", with: "127.0.0.1:0")
            .replacingOccurrences(of: "data_dir: \(dataDir)", with: "data_dir: ./data")
            .replacingOccurrences(of: "workers: auto", with: "workers: 1")
    }

    static func metric(_ gw: GatewayProcess, _ line: String) throws -> Bool {
        let (status, body) = try curl([gw.url("admin", "/metrics")])
        return status == 200 && body.split(separator: "\n").contains { $0.hasPrefix(line) }
    }

    @Test(
        "systemd: Type=notify READY=1 once serving, ExecReload checks then reloads (RELOADING=1, READY=1; a bad file refused), KillSignal drains (STOPPING=1) to exit 0 with a clean store",
        .enabled(if: Deploy.runnable("kill"), "kill not found; skipped outside CI"))
    func systemdReloadAndStop() throws {
        let unit = SystemdTests.settings(try Deploy.text(SystemdTests.unitPath))
        let tokens = try Deploy.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: tokens) }
        let yaml = try Deploy.stagingAdminToken(
            Self.loopback(try Deploy.text(SystemdTests.configPath), dataDir: "/var/lib/attest-gateway"), file: SystemdTests.configPath,
            in: tokens)
        #expect(yaml.contains("data_dir: ./data") && yaml.contains("127.0.0.1:0"))
        // systemd hands a Type=notify service $NOTIFY_SOCKET and waits for READY=1.
        #expect(unit["Type"]?.last == "notify")
        let notify = try FakeNotifySocket(abstract: true)
        let gw = try GatewayProcess(config: yaml, environment: ["NOTIFY_SOCKET": notify.name])
        defer { gw.stop() }
        #expect(notify.await("READY=1", timeout: 30) != nil, "no READY=1: systemctl start would time out")
        #expect(try curl([gw.url("admin", "/readyz")]).0 == 200)
        // The shipped admin listener: health and metrics open, /explain behind the token.
        #expect(try curl([gw.url("admin", "/metrics")]).0 == 200)
        #expect(try curl([gw.url("admin", "/explain")]).0 == 401)
        #expect(try curl(["-H", "Authorization: Bearer \(Deploy.testAdminToken)", gw.url("admin", "/explain")]).0 == 200)

        /// The unit's command lines with the installed paths and $MAINPID of this test.
        func commands(_ key: String) -> [[String]] {
            (unit[key] ?? []).map { line in
                line.replacingOccurrences(of: SystemdTests.installedBinary, with: gatewaydBinary.path)
                    .replacingOccurrences(of: "/etc/attest-gateway/gateway.yaml", with: gw.configURL.path)
                    .replacingOccurrences(of: "$MAINPID", with: String(gw.process.processIdentifier))
                    .split(separator: " ").map(String.init)
            }
        }
        let reload = commands("ExecReload")
        #expect(reload.count == 2)
        for c in reload {
            let r = try runProcess(URL(fileURLWithPath: c[0]), Array(c.dropFirst()), timeout: 30)
            #expect(r.status == 0, "\(c.joined(separator: " ")): \(r.stdout)\(r.stderr)")
        }
        var reloaded = false
        for _ in 0..<100 where !reloaded {
            reloaded = try Self.metric(gw, "attest_gateway_config_reloads_total{result=\"success\"} 1")
            if !reloaded { usleep(100_000) }
        }
        #expect(reloaded, "the SIGHUP of ExecReload reloaded the configuration")
        #expect(notify.await("RELOADING=1", timeout: 10) != nil)
        #expect(notify.await("READY=1", timeout: 10) != nil, "no READY=1 after the reload: systemd would stay in 'reloading'")

        // A broken file stops `systemctl reload` at its first command: no signal is sent.
        let good = try String(contentsOf: gw.configURL, encoding: .utf8)
        try (good + "\nbogus_key: 1\n").write(to: gw.configURL, atomically: true, encoding: .utf8)
        let check = try runProcess(URL(fileURLWithPath: reload[0][0]), Array(reload[0].dropFirst()), timeout: 30)
        #expect(check.status != 0)
        #expect(check.stderr.contains("bogus_key"))
        try good.write(to: gw.configURL, atomically: true, encoding: .utf8)

        // Stop as systemd does: KillSignal to the main process, then wait up to TimeoutStopSec.
        #expect(unit["KillSignal"]?.last == "SIGTERM")
        let stopSeconds = SystemdTests.seconds(unit["TimeoutStopSec"]?.last ?? "") ?? 0
        gw.signal(SIGTERM)
        #expect(notify.await("STOPPING=1", timeout: 10) != nil)
        let status = gw.waitForExit(timeout: TimeInterval(stopSeconds))
        #expect(status == 0, "exit status \(String(describing: status)) (nil: still running after TimeoutStopSec)")
        let data = gw.directory.appendingPathComponent("data")
        #expect(FileManager.default.fileExists(atPath: data.appendingPathComponent("snapshot.dat").path), "final snapshot written")
        #expect(FileManager.default.fileExists(atPath: data.appendingPathComponent("clean-stop").path), "clean stop recorded")
    }

    @Test(
        "container: the Dockerfile's HEALTHCHECK command passes on /healthz of the image's config, fails otherwise",
        .enabled(if: Deploy.runnable("busybox"), "busybox not installed (scripts/install-deps.sh); skipped outside CI"))
    func containerHealthcheck() throws {
        let busybox = try #require(Deploy.tool("busybox"), "busybox is missing")
        let docker = Dockerfile(try Deploy.text(ContainerTests.dockerfilePath))
        let runtime = try #require(docker.stages.last)
        let health = try #require(ContainerTests.args(runtime, "HEALTHCHECK").last.flatMap(ContainerTests.execForm))
        try #require(health.first == "busybox", "\(health)")
        let url = try #require(health.first { $0.hasPrefix("http://") })

        let tokens = try Deploy.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: tokens) }
        let yaml = try Deploy.stagingAdminToken(
            Self.loopback(try Deploy.text(ContainerTests.configPath), dataDir: "/var/lib/attest-gateway"), file: ContainerTests.configPath,
            in: tokens)
        let gw = try GatewayProcess(config: yaml)
        defer { gw.stop() }
        let port = gw.url("admin", "").split(separator: ":").last.map(String.init) ?? "?"
        let live = url.replacingOccurrences(of: ":9090/", with: ":\(port)/")
        #expect(live != url)
        func probe(_ target: String) throws -> Int32 {
            let args = health.dropFirst().map { $0 == url ? target : $0 }
            return try runProcess(busybox, Array(args), timeout: 30).status
        }
        #expect(try probe(live) == 0)
        #expect(try probe(live.replacingOccurrences(of: "/healthz", with: "/no-such-endpoint")) != 0, "a 404 is unhealthy")
        gw.signal(SIGTERM)
        #expect(gw.waitForExit(timeout: 30) == 0)
        #expect(try probe(live) != 0, "a stopped gateway is unhealthy")
    }
}
