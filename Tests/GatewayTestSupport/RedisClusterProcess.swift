import Foundation

/// A real Redis Cluster of `nodes` primaries (no replicas) on free loopback ports, in a temporary
/// directory: `redis-server --cluster-enabled yes …` per node, joined with `redis-cli --cluster
/// create`, ready once every node reports `cluster_state:ok`. `stop()` (or deinit) ends every node
/// and removes the directory.
///
/// Nodes run with `cluster-require-full-coverage no` (a killed primary fails only its own slots,
/// which is what the tests look at; with Redis' default `yes` every node refuses every command with
/// `CLUSTERDOWN` once the others have declared it failed) and no persistence.
public final class RedisClusterProcess: @unchecked Sendable {
    public let directory: URL
    public private(set) var ports: [UInt16] = []
    private var processes: [Process?]
    private let lock = NSLock()
    /// Passwords, ACL users, TLS for every node (and the cluster bus); default none.
    public let security: RedisServerSecurity

    public init(nodes: Int = 3, security: RedisServerSecurity = RedisServerSecurity()) throws {
        self.security = security
        guard RedisProcess.serverPath != nil, RedisProcess.cliPath != nil else {
            throw NSError(domain: "RedisClusterProcess", code: 1, userInfo: [NSLocalizedDescriptionKey: RedisProcess.skipMessage])
        }
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("redis-cluster-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        processes = Array(repeating: nil, count: nodes)
        do {
            // A port found free can still be taken before its node binds it (another test's
            // server): then every node starts again on new ports, at most three times, as
            // RedisProcess does for its one server.
            for attempt in 1...3 {
                var chosen: [UInt16] = []
                while chosen.count < nodes { chosen.append(try Self.freeClusterPort(excluding: chosen)) }
                ports = chosen
                do {
                    for i in 0..<nodes { try start(i) }
                    break
                } catch let e as NSError where e.domain == "RedisClusterProcess" && e.code == 3 && attempt < 3 {
                    for i in 0..<nodes { kill(i) }
                }
            }
            let create = try runProcess(
                URL(fileURLWithPath: RedisProcess.cliPath!),
                security.cliArguments + ["--cluster", "create"] + ports.map { "127.0.0.1:\($0)" } + [
                    "--cluster-replicas", "0", "--cluster-yes",
                ],
                timeout: 30)
            guard create.status == 0 else {
                throw NSError(
                    domain: "RedisClusterProcess", code: 2,
                    userInfo: [NSLocalizedDescriptionKey: "redis-cli --cluster create: \(create.stdout) \(create.stderr)"])
            }
            try waitUntilOK(timeout: 20)
        } catch {
            stop()
            throw error
        }
    }

    deinit { stop() }

    /// `redis://127.0.0.1:PORT` of node `i`.
    public func url(_ i: Int) -> String { "redis://127.0.0.1:\(ports[i])" }

    public func isRunning(_ i: Int) -> Bool { lock.withLock { processes[i]?.isRunning ?? false } }

    /// Starts node `i` (again) and waits until it answers PING (at most 10 s).
    public func start(_ i: Int) throws {
        let port = ports[i]
        let p = Process()
        p.executableURL = URL(fileURLWithPath: RedisProcess.serverPath!)
        p.arguments =
            security.serverArguments(port: port, cluster: true) + [
                "--bind", "127.0.0.1", "--cluster-enabled", "yes",
                "--cluster-config-file", directory.appendingPathComponent("nodes-\(port).conf").path,
                "--cluster-node-timeout", "15000", "--cluster-require-full-coverage", "no",
                "--save", "", "--appendonly", "no", "--dir", directory.path, "--daemonize", "no", "--protected-mode", "no",
                "--loglevel", "warning", "--logfile", directory.appendingPathComponent("redis-\(port).log").path,
            ]
        p.standardOutput = FileHandle.nullDevice
        p.standardError = FileHandle.nullDevice
        p.standardInput = FileHandle.nullDevice
        try p.run()
        lock.withLock { processes[i] = p }
        let deadline = Date().addingTimeInterval(10)
        while Date() < deadline {
            if !p.isRunning { break }
            if (try? cli(i, ["PING"])) == "PONG" { return }
            usleep(20_000)
        }
        kill(i)
        let log = (try? String(contentsOf: directory.appendingPathComponent("redis-\(port).log"), encoding: .utf8)) ?? ""
        throw NSError(
            domain: "RedisClusterProcess", code: 3,
            userInfo: [NSLocalizedDescriptionKey: "redis-server (cluster) did not start on port \(port): \(log)"])
    }

    /// Waits until every running node says `cluster_state:ok` and knows every slot.
    public func waitUntilOK(timeout: TimeInterval) throws {
        let deadline = Date().addingTimeInterval(timeout)
        var last = ""
        while Date() < deadline {
            var ok = true
            for i in ports.indices where isRunning(i) {
                last = (try? cli(i, ["CLUSTER", "INFO"])) ?? ""
                if !(last.contains("cluster_state:ok") && last.contains("cluster_slots_assigned:16384")) { ok = false }
            }
            if ok { return }
            usleep(100_000)
        }
        throw NSError(
            domain: "RedisClusterProcess", code: 4,
            userInfo: [NSLocalizedDescriptionKey: "the cluster did not reach cluster_state:ok: \(last)"])
    }

    /// SIGKILL node `i`, waiting for its exit.
    public func kill(_ i: Int) {
        lock.withLock {
            if let p = processes[i], p.isRunning {
                Foundation.kill(p.processIdentifier, SIGKILL)
                p.waitUntilExit()
            }
            processes[i] = nil
        }
    }

    /// Ends every node and removes the directory.
    public func stop() {
        for i in ports.indices { kill(i) }
        try? FileManager.default.removeItem(at: directory)
    }

    /// `redis-cli -p PORT(i) args…` (raw output, trimmed).
    @discardableResult
    public func cli(_ i: Int, _ args: [String]) throws -> String {
        let r = try runProcess(
            URL(fileURLWithPath: RedisProcess.cliPath!), ["-h", "127.0.0.1", "-p", String(ports[i])] + security.cliArguments + args,
            timeout: 10)
        guard r.status == 0 else {
            throw NSError(domain: "RedisClusterProcess", code: 5, userInfo: [NSLocalizedDescriptionKey: "redis-cli \(args): \(r.stderr)"])
        }
        return r.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// Node `i`'s cluster id.
    public func nodeID(_ i: Int) throws -> String { try cli(i, ["CLUSTER", "MYID"]) }

    /// The index of the node serving `slot`, from node 0's `CLUSTER SLOTS` view (`redis-cli` prints
    /// the nested reply flat: start, end, host, port, id per range).
    public func node(serving slot: Int, asking i: Int = 0) throws -> Int? {
        let lines = try cli(i, ["CLUSTER", "SLOTS"]).split(whereSeparator: \.isNewline).map(String.init)
        var k = 0
        while k + 3 < lines.count {
            if let start = Int(lines[k]), let end = Int(lines[k + 1]), let port = UInt16(lines[k + 3]), (start...end).contains(slot) {
                return ports.firstIndex(of: port)
            }
            k += 1
        }
        return nil
    }

    /// The number of keys on node `i`.
    public func dbsize(_ i: Int) throws -> Int { Int(try cli(i, ["DBSIZE"])) ?? -1 }

    /// A port P free on 127.0.0.1 with its cluster bus port P + 10000 free too.
    /// P and P + 10,000 (the cluster bus) both free, and both below Linux's ephemeral range (32768 up),
    /// where other tests' `bind(0)` servers and outgoing connections take their ports.
    static func freeClusterPort(excluding: [UInt16]) throws -> UInt16 {
        for _ in 0..<200 {
            let port = UInt16.random(in: 10_000...22_767)
            if excluding.contains(port) { continue }
            if canBind(port) && canBind(port + 10_000) { return port }
        }
        throw NSError(
            domain: "RedisClusterProcess", code: 6, userInfo: [NSLocalizedDescriptionKey: "no free port pair (P, P+10000) on 127.0.0.1"])
    }

    private static func canBind(_ port: UInt16) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = port.bigEndian
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        return withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        } == 0
    }
}
