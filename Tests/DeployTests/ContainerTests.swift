import Foundation
import GatewayConfig
import GatewayTestSupport
import Testing

/// One Dockerfile instruction, continuation lines joined.
struct DockerInstruction {
    let keyword: String
    let arguments: String
    let line: Int
}

/// A minimal Dockerfile reader: comments, `\` continuations, ARG defaults for FROM, stages.
struct Dockerfile {
    let instructions: [DockerInstruction]

    init(_ text: String) {
        var result: [DockerInstruction] = []
        var pending = ""
        var start = 0
        for (i, raw) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let line = raw.trimmingCharacters(in: .whitespaces)
            if pending.isEmpty && (line.isEmpty || line.hasPrefix("#")) { continue }
            if !pending.isEmpty && line.hasPrefix("#") { continue }
            if pending.isEmpty { start = i + 1 }
            if line.hasSuffix("\\") {
                pending += line.dropLast() + " "
                continue
            }
            pending += line
            let parts = pending.split(separator: " ", maxSplits: 1)
            result.append(
                DockerInstruction(
                    keyword: parts[0].uppercased(), arguments: parts.count > 1 ? String(parts[1]).trimmingCharacters(in: .whitespaces) : "",
                    line: start))
            pending = ""
        }
        instructions = result
    }

    /// ARG defaults declared before the first FROM.
    var globalArgs: [String: String] {
        var args: [String: String] = [:]
        for i in instructions.prefix(while: { $0.keyword != "FROM" }) where i.keyword == "ARG" {
            let kv = i.arguments.split(separator: "=", maxSplits: 1)
            if kv.count == 2 { args[String(kv[0])] = String(kv[1]) }
        }
        return args
    }

    struct Stage { let image: String; let name: String?; let instructions: [DockerInstruction] }

    var stages: [Stage] {
        var stages: [Stage] = []
        var current: (image: String, name: String?, body: [DockerInstruction])?
        let args = globalArgs
        for i in instructions {
            if i.keyword == "FROM" {
                if let c = current { stages.append(Stage(image: c.image, name: c.name, instructions: c.body)) }
                let words = i.arguments.split(separator: " ").map(String.init)
                var image = words[0]
                for (k, v) in args { image = image.replacingOccurrences(of: "${\(k)}", with: v) }
                let name = words.count == 3 && words[1].uppercased() == "AS" ? words[2] : nil
                current = (image, name, [])
            } else if current != nil {
                current!.body.append(i)
            }
        }
        if let c = current { stages.append(Stage(image: c.image, name: c.name, instructions: c.body)) }
        return stages
    }

    /// Packages named by `apt-get install` in a stage's RUN instructions.
    static func aptPackages(_ stage: Stage) -> [String] {
        var packages: [String] = []
        for i in stage.instructions where i.keyword == "RUN" {
            for command in i.arguments.components(separatedBy: "&&") where command.contains("apt-get install") {
                let words = command.split(separator: " ").map(String.init)
                guard let at = words.firstIndex(of: "install") else { continue }
                packages += words[(at + 1)...].filter { !$0.hasPrefix("-") && !$0.contains("=") }
            }
        }
        return packages
    }
}

@Suite("deploy/container")
struct ContainerTests {
    static let dockerfilePath = "deploy/container/Dockerfile"
    static let configPath = "deploy/container/gateway.yaml"
    /// Present in every debian:bookworm-slim image (dependencies of its essential packages).
    static let baseImageLibraries: Set<String> = ["libc6", "libgcc-s1"]

    static func load() throws -> (Dockerfile, build: Dockerfile.Stage, runtime: Dockerfile.Stage) {
        let d = Dockerfile(try Deploy.text(dockerfilePath))
        let stages = d.stages
        try #require(stages.count == 2, "two stages (build, runtime), found \(stages.count)")
        return (d, stages[0], stages[1])
    }

    static func args(_ stage: Dockerfile.Stage, _ keyword: String) -> [String] {
        stage.instructions.filter { $0.keyword == keyword }.map(\.arguments)
    }

    /// JSON (exec) form of CMD/ENTRYPOINT/HEALTHCHECK CMD as an array.
    static func execForm(_ s: String) -> [String]? {
        guard let start = s.firstIndex(of: "[") else { return nil }
        return (try? JSONSerialization.jsonObject(with: Data(s[start...].utf8))) as? [String]
    }

    @Test("two stages: the Swift toolchain image builds a release binary, Debian slim runs it")
    func stages() throws {
        let (_, build, runtime) = try Self.load()
        #expect(build.image.wholeMatch(of: /swift:6\.\d+\.\d+-bookworm/) != nil, "build image: \(build.image)")
        #expect(build.name == "build")
        #expect(runtime.image.wholeMatch(of: /debian:12\.\d+-slim/) != nil, "runtime image: \(runtime.image)")
        let buildRuns = Self.args(build, "RUN").joined(separator: "\n")
        #expect(buildRuns.contains("swift build -c release --static-swift-stdlib --product gatewayd"))
        #expect(buildRuns.contains("ldd"), "the build stage proves no Swift library is linked dynamically")
        #expect(Self.args(runtime, "RUN").allSatisfy { !$0.contains("swift ") }, "nothing is built in the runtime stage")
    }

    @Test("runtime stage: non-root USER, HEALTHCHECK on /healthz of the admin port, STOPSIGNAL, VOLUME, EXPOSE")
    func runtimeStage() throws {
        let (_, _, runtime) = try Self.load()
        let config = try Deploy.gatewayConfig(try Deploy.text(Self.configPath), file: Self.configPath)

        let user = try #require(Self.args(runtime, "USER").last)
        let uid = String(user.split(separator: ":")[0])
        #expect(uid != "root" && uid != "0", "USER \(user)")
        #expect(Self.args(runtime, "RUN").joined().contains("--uid \(uid)"), "the USER is created in the image")

        let health = try #require(Self.args(runtime, "HEALTHCHECK").last)
        let probe = try #require(Self.execForm(health), "HEALTHCHECK CMD in exec form (no shell needed)")
        #expect(probe.contains("http://127.0.0.1:\(config.admin.address.port)/healthz"), "\(probe)")
        let client = try #require(probe.first)
        #expect(Dockerfile.aptPackages(runtime).contains(client), "the HEALTHCHECK client \(client) is installed")

        #expect(Self.args(runtime, "STOPSIGNAL") == ["SIGTERM"])

        guard case .memory(let memory) = config.store.backend, let dataDir = memory.dataDirectory else {
            Issue.record("the image's config keeps a memory store with a data_dir")
            return
        }
        let volumes = Self.args(runtime, "VOLUME").flatMap { Self.execForm($0) ?? $0.split(separator: " ").map(String.init) }
        #expect(volumes.contains(dataDir), "VOLUME \(volumes) holds store.data_dir \(dataDir)")

        let exposed = Set(
            Self.args(runtime, "EXPOSE").flatMap { $0.split(separator: " ") }.compactMap { UInt16($0.split(separator: "/")[0]) })
        let ports = Set(config.listeners.map(\.address.port) + [config.admin.address.port])
        #expect(exposed == ports, "EXPOSE \(exposed.sorted()) vs config ports \(ports.sorted())")
        #expect(
            !config.admin.address.host.hasPrefix("127."), "the admin listener must be reachable for scraping from outside the container")

        // Docker's default stop timeout is 10s: the shipped config drains within it.
        #expect(config.limits.drainTimeout < .seconds(10))

        let entry = try #require(Self.args(runtime, "ENTRYPOINT").last.flatMap(Self.execForm), "ENTRYPOINT in exec form")
        let cmd = try #require(Self.args(runtime, "CMD").last.flatMap(Self.execForm), "CMD in exec form")
        #expect(entry == ["/usr/local/bin/gatewayd"])
        let configIndex = try #require(cmd.firstIndex(of: "--config"))
        let configInImage = cmd[configIndex + 1]
        #expect(
            Self.args(runtime, "COPY").contains { $0.hasSuffix(" \(configInImage)") },
            "CMD's --config \(configInImage) is copied into the image")
    }

    @Test("every COPY source exists in the repository (the build context) or names an earlier stage")
    func copySources() throws {
        let (_, build, runtime) = try Self.load()
        var stageNames: Set<String> = []
        for stage in [build, runtime] {
            for copy in Self.args(stage, "COPY") {
                var words = copy.split(separator: " ").map(String.init)
                let from = words.first { $0.hasPrefix("--from=") }.map { String($0.dropFirst("--from=".count)) }
                words.removeAll { $0.hasPrefix("--") }
                try #require(words.count >= 2, "COPY \(copy)")
                if let from {
                    #expect(stageNames.contains(from), "COPY --from=\(from) names an earlier stage")
                    continue
                }
                for source in words.dropLast() {
                    #expect(
                        FileManager.default.fileExists(atPath: Deploy.url(source).path), "COPY source \(source) is not in the repository")
                }
            }
            if let n = stage.name { stageNames.insert(n) }
        }
    }

    @Test("the image's gateway.yaml passes gatewayd check; its admin listener needs the token of /run/secrets")
    func configChecks() throws {
        let r = try Deploy.gatewaydCheckShipped(Self.configPath)
        #expect(r.status == 0, "\(r.stdout)\(r.stderr)")
        let config = try Deploy.gatewayConfig(try Deploy.text(Self.configPath), file: Self.configPath)
        // Docker and Compose mount secrets in /run/secrets/<name>; the admin listener is not loopback here.
        #expect(config.admin.tokenFile == "/run/secrets/admin-token")
        #expect(try Deploy.text(Self.dockerfilePath).contains("/run/secrets/admin-token"), "the Dockerfile's run example mounts the token")
    }

    @Test(
        "every apt package the Dockerfile installs exists in Debian 12",
        .enabled(if: Deploy.runnable("apt-cache"), "apt-cache not available (not Debian); skipped outside CI"))
    func packagesExist() throws {
        let aptCache = try #require(Deploy.tool("apt-cache"), "apt-cache is missing")
        let (_, build, runtime) = try Self.load()
        let packages = Dockerfile.aptPackages(build) + Dockerfile.aptPackages(runtime)
        #expect(Dockerfile.aptPackages(runtime).count >= 4)
        // One apt-cache run for all (it loads the package lists each time): it fails if any is unknown.
        let r = try runProcess(aptCache, ["show", "--no-all-versions"] + packages, timeout: 120)
        #expect(r.status == 0, "apt-cache show: \(r.stderr)")
        for p in packages {
            #expect(r.stdout.contains("Package: \(p)\n"), "\(p) is not a Debian 12 package: \(r.stderr)")
        }
        // And the check itself refuses a name that does not exist.
        let bogus = try runProcess(aptCache, ["show", "--no-all-versions", "libhiredis0-does-not-exist"], timeout: 60)
        #expect(bogus.status != 0)
    }

    /// The shared libraries the locally built gatewayd loads from Debian packages must be installed in the
    /// runtime stage (the Swift runtime itself is linked statically there, so /opt/swift libraries are skipped).
    @Test(
        "the runtime stage installs the Debian package of every system library gatewayd links",
        .enabled(if: Deploy.runnable("dpkg") && Deploy.runnable("ldd"), "dpkg or ldd not available; skipped outside CI"))
    func runtimeLibraries() throws {
        let ldd = try #require(Deploy.tool("ldd"))
        let dpkg = try #require(Deploy.tool("dpkg"))
        let (_, _, runtime) = try Self.load()
        let installed = Set(Dockerfile.aptPackages(runtime)).union(Self.baseImageLibraries)
        let r = try runProcess(ldd, [gatewaydBinary.path], timeout: 60)
        try #require(r.status == 0, "ldd \(gatewaydBinary.path): \(r.stderr)")
        var checked = 0
        for line in r.stdout.split(separator: "\n") {
            let parts = line.split(separator: " ")
            guard let arrow = parts.firstIndex(of: "=>"), arrow + 1 < parts.count else { continue }
            let path = String(parts[arrow + 1])
            guard path.hasPrefix("/lib") || path.hasPrefix("/usr/lib") else { continue }  // /opt/swift: static in the image
            let usrPath = path.hasPrefix("/lib") ? "/usr" + path : path
            let owner = try runProcess(dpkg, ["-S", usrPath], timeout: 30)
            let package =
                owner.status == 0
                ? String(owner.stdout.split(separator: ":")[0])
                : String((try runProcess(dpkg, ["-S", path], timeout: 30)).stdout.split(separator: ":").first ?? "")
            #expect(installed.contains(package), "gatewayd loads \(path) from \(package), which the runtime stage does not install")
            checked += 1
        }
        #expect(checked >= 3, "ldd listed \(checked) system libraries: \(r.stdout)")
    }
}
