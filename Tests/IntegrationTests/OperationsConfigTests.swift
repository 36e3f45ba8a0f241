import Foundation
import GatewayTestSupport
import Testing

/// What `gatewayd check` finds before `run` would, where (file:line:column), and `logging.level`
/// and `${VAR}` in the real binary.
@Suite("check and run: problems at their position, logging.level, ${VAR} (real gatewayd)", .serialized, .timeLimit(.minutes(2)))
struct OperationsConfigTests {
    final class Dir {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("gw-ops-\(UUID().uuidString)")
        init() throws { try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true) }
        deinit { try? FileManager.default.removeItem(at: url) }
        func path(_ name: String) -> String { url.appendingPathComponent(name).path }
        func write(_ name: String, _ text: String) throws -> String {
            try text.write(toFile: path(name), atomically: true, encoding: .utf8)
            return path(name)
        }
    }

    /// `gatewayd ARGS` with `environment` added to the test's own (through env(1)).
    static func gatewayd(_ args: [String], environment: [String: String] = [:], timeout: TimeInterval = 30) throws -> ProcessResult {
        let assignments = environment.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }
        return try runProcess(URL(fileURLWithPath: "/usr/bin/env"), assignments + [gatewaydBinary.path] + args, timeout: timeout)
    }

    @Test("a host that does not resolve: at the value, in words (no Swift enum), for an upstream and a listener")
    func unresolvableHosts() throws {
        let dir = try Dir()
        let config = try dir.write(
            "gateway.yaml",
            """
            listeners:
              - {name: public, address: "127.0.0.1:0"}
              - {name: inner, address: "no-such-host.invalid:8081"}
            admin: {address: 127.0.0.1:0}
            upstreams:
              - name: api
                url: http://no-such-host.invalid:8080
            routes: [{name: r, match: {path_prefix: /}, upstream: api}]
            """)
        let check = try Self.gatewayd(["check", "--config", config])
        #expect(check.status == 2)
        #expect(!check.stderr.contains("invalid("), "\(check.stderr)")
        #expect(
            check.stderr.contains(
                "\(config):3:28: listeners[1].address (listener inner): cannot resolve host \"no-such-host.invalid\": "),
            "\(check.stderr)")
        #expect(
            check.stderr.contains("\(config):7:10: upstreams[0].url (upstream api): cannot resolve host \"no-such-host.invalid\": "),
            "\(check.stderr)")
        let run = try Self.gatewayd(["run", "--config", config])
        #expect(run.status == 1)
        #expect(run.stderr.contains("\(config):3:28: listeners[1].address (listener inner): cannot resolve host"), "\(run.stderr)")
    }

    @Test("files named in the configuration: a missing extra root and token file at their values")
    func missingFiles() throws {
        let dir = try Dir()
        let config = try dir.write(
            "gateway.yaml",
            """
            listeners: [{name: public, address: "127.0.0.1:0"}]
            admin: {address: 127.0.0.1:0}
            upstreams: [{name: demo, url: demo}]
            routes: [{name: r, match: {path_prefix: /}, upstream: demo}]
            trust:
              extra_roots:
                - roots/missing.pem
            """)
        let check = try Self.gatewayd(["check", "--config", config])
        #expect(check.status == 2)
        #expect(
            check.stderr.contains("\(config):7:7: trust.extra_roots[0] \(dir.path("roots/missing.pem")): cannot read the file"),
            "\(check.stderr)")
        let token = try dir.write(
            "token.yaml",
            """
            listeners: [{name: public, address: "127.0.0.1:0"}]
            admin: {address: 127.0.0.1:0, token_file: secrets/admin-token}
            upstreams: [{name: demo, url: demo}]
            routes: [{name: r, match: {path_prefix: /}, upstream: demo}]
            """)
        let tokenCheck = try Self.gatewayd(["check", "--config", token])
        #expect(tokenCheck.status == 2)
        #expect(
            tokenCheck.stderr.contains("\(token):2:43: admin.token_file \(dir.path("secrets/admin-token")): does not exist"),
            "\(tokenCheck.stderr)")
    }

    @Test("data_dir: check tries to create and write it, reports what run would meet, and leaves nothing behind")
    func dataDirectory() throws {
        let dir = try Dir()
        func config(_ dataDir: String) throws -> String {
            try dir.write(
                "gateway.yaml",
                """
                listeners: [{name: public, address: "127.0.0.1:0"}]
                admin: {address: 127.0.0.1:0}
                upstreams: [{name: demo, url: demo}]
                routes: [{name: r, match: {path_prefix: /}, upstream: demo}]
                store:
                  kind: memory
                  data_dir: \(dataDir)
                """)
        }
        // A parent that does not exist: the store creates data_dir, not its parents; run fails the same way.
        let missingParent = try config("state/gateway/data")
        let check = try Self.gatewayd(["check", "--config", missingParent])
        #expect(check.status == 2)
        #expect(
            check.stderr.contains(
                "\(missingParent):7:13: store.data_dir \(dir.path("state/gateway/data")): cannot be created: its parent directory "
                    + "\(dir.path("state/gateway")) does not exist"),
            "\(check.stderr)")
        let run = try Self.gatewayd(["run", "--config", missingParent])
        #expect(run.status == 1)
        #expect(run.stderr.contains("\(missingParent):7:13: store.data_dir"), "\(run.stderr)")

        // A regular file where the directory should be, and a file in the way of its parent.
        _ = try dir.write("occupied", "x")
        let file = try Self.gatewayd(["check", "--config", try config("occupied")])
        #expect(file.status == 2)
        #expect(file.stderr.contains(":7:13: store.data_dir \(dir.path("occupied")): is not a directory"), "\(file.stderr)")
        let under = try Self.gatewayd(["check", "--config", try config("occupied/data")])
        #expect(under.status == 2)
        #expect(under.stderr.contains(":7:13: store.data_dir \(dir.path("occupied/data")): cannot be used: "), "\(under.stderr)")

        // One that can be created: ok, and it is not there afterwards; an existing one keeps only its files.
        let fine = try Self.gatewayd(["check", "--config", try config("data")])
        #expect(fine.status == 0, "\(fine.stderr)")
        #expect(!FileManager.default.fileExists(atPath: dir.path("data")))
        try FileManager.default.createDirectory(atPath: dir.path("kept"), withIntermediateDirectories: false)
        _ = try dir.write("kept/snapshot.dat", "s")
        #expect(try Self.gatewayd(["check", "--config", try config("kept")]).status == 0)
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir.path("kept")) == ["snapshot.dat"])
    }

    @Test("${VAR}: check says which variable is unset and where; with it set, run serves what it says")
    func environment() throws {
        let dir = try Dir()
        let port = try RedisProcess.freePort()
        let config = try dir.write(
            "gateway.yaml",
            """
            listeners:
              - name: public
                address: 127.0.0.1:${GW_PORT}
            admin: {address: "127.0.0.1:${GW_ADMIN_PORT:-0}"}
            upstreams: [{name: demo, url: demo}]
            routes:
              - {name: r, match: {path_prefix: /}, upstream: demo, max_body: "${GW_MAX_BODY:-1KiB}"}
            """)
        let unset = try Self.gatewayd(["check", "--config", config])
        #expect(unset.status == 2)
        #expect(
            unset.stderr == "\(config):3:24: listeners[0].address uses the environment variable GW_PORT, which is not set; set it, "
                + "or give a default: ${GW_PORT:-value}\n", "\(unset.stderr)")
        let set = try Self.gatewayd(["check", "--config", config], environment: ["GW_PORT": String(port)])
        #expect(set.status == 0, "\(set.stderr)")

        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        p.arguments = ["GW_PORT=\(port)", "GW_MAX_BODY=4", gatewaydBinary.path, "run", "--config", config]
        p.standardOutput = FileHandle.nullDevice
        p.standardError = FileHandle.nullDevice
        try p.run()
        defer {
            if p.isRunning { kill(p.processIdentifier, SIGKILL) }
            p.waitUntilExit()
        }
        var answered = (0, "")
        for _ in 0..<100 {
            answered = (try? curl(["http://127.0.0.1:\(port)/hello"])) ?? (0, "")
            if answered.0 == 200 { break }
            usleep(50_000)
        }
        #expect(answered.0 == 200)
        // max_body came from GW_MAX_BODY: 4 bytes.
        #expect(try curl(["-X", "POST", "--data", "12345", "http://127.0.0.1:\(port)/x"]).0 == 413)
    }

    /// Starts gatewayd on fixed free ports (a level above info does not log the "serving" line that
    /// GatewayProcess waits for), waits for /healthz, stops it with SIGTERM; returns its stderr lines.
    static func eventLog(level: String?) throws -> [String] {
        let dir = try Dir()
        let (port, admin) = (try RedisProcess.freePort(), try RedisProcess.freePort())
        let logging = level.map { "logging: {level: \($0)}" } ?? ""
        let config = try dir.write(
            "gateway.yaml",
            """
            listeners: [{name: public, address: "127.0.0.1:\(port)"}]
            admin: {address: "127.0.0.1:\(admin)"}
            upstreams: [{name: demo, url: demo}, {name: spare, url: "http://127.0.0.1:9"}]
            routes: [{name: r, match: {path_prefix: /}, upstream: demo}]
            \(logging)
            """)
        let p = Process()
        p.executableURL = gatewaydBinary
        p.arguments = ["run", "--config", config]
        let err = Pipe()
        p.standardError = err
        p.standardOutput = FileHandle.nullDevice
        try p.run()
        var healthy = false
        for _ in 0..<100 where !healthy {
            healthy = (try? curl(["http://127.0.0.1:\(admin)/healthz"]))?.0 == 200
            if !healthy { usleep(50_000) }
        }
        _ = try? curl(["http://127.0.0.1:\(port)/hello"])
        kill(p.processIdentifier, SIGTERM)
        let text = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        p.waitUntilExit()
        #expect(healthy, "\(text)")
        #expect(p.terminationStatus == 0, "\(text)")
        return text.split(separator: "\n").map(String.init)
    }

    static func levels(_ lines: [String]) -> Set<String> {
        Set(
            lines.compactMap { line in
                ((try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any])?["level"] as? String
            })
    }

    @Test("logging.level filters the event log: debug adds the routes, warning drops info, error drops warnings")
    func loggingLevel() throws {
        let byDefault = try Self.eventLog(level: nil)
        #expect(Self.levels(byDefault) == ["info", "warning"], "\(byDefault)")
        #expect(byDefault.contains { $0.contains("\"msg\":\"serving\"") })
        #expect(byDefault.contains { $0.contains("is named by no route") })

        let debug = try Self.eventLog(level: "debug")
        #expect(Self.levels(debug) == ["debug", "info", "warning"], "\(debug)")
        #expect(
            debug.contains { $0.contains("\"msg\":\"route\"") && $0.contains("\"route\":\"r\"") && $0.contains("\"upstream\":\"demo\"") })

        let warning = try Self.eventLog(level: "warning")
        #expect(Self.levels(warning) == ["warning"], "\(warning)")
        #expect(!warning.contains { $0.contains("serving") || $0.contains("stopped") })

        let error = try Self.eventLog(level: "error")
        #expect(error.isEmpty, "\(error)")
    }
}
