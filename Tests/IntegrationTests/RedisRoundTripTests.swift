import AppAttest
import AppAttestSimulator
import Foundation
import GatewayTestSupport
import Testing

/// Redis commands per accepted protected request (issue 12 §3): in the steady state of a chained
/// device (`bind: request`, each request signed over the previous response's next challenge), one
/// round trip, the commit script that also consumes the challenge and issues the next one.
@Suite(
    "Redis round trips per protected request (real gatewayd, real redis-server, MONITOR)", .serialized, .timeLimit(.minutes(3)),
    .enabled(if: RedisProcess.testsEnabled, Comment(rawValue: RedisProcess.skipMessage)))
struct RedisRoundTripTests {
    static let appID = "ABCDE12345.com.example.shop"

    /// The commands `redis-cli MONITOR` saw from clients, by name, while `body` ran: `sent` those
    /// the clients sent, `scripted` those their scripts ran (`[db lua]`).
    static func monitored(_ redis: RedisProcess, _ body: () throws -> Void) throws -> (sent: [String: Int], scripted: [String: Int]) {
        var sent: [String: Int] = [:]
        var scripted: [String: Int] = [:]
        for c in try monitoredCommands(redis, inScripts: true, body) {
            if c.source == "lua" { scripted[c.command, default: 0] += 1 } else { sent[c.command, default: 0] += 1 }
        }
        return (sent, scripted)
    }

    /// The commands clients sent (and, with `inScripts`, those their scripts ran, from `lua`), each
    /// with the client address that sent it (`127.0.0.1:PORT`), in order.
    static func monitoredCommands(_ redis: RedisProcess, inScripts: Bool = false, _ body: () throws -> Void) throws
        -> [(source: String, command: String)]
    {
        let out = FileManager.default.temporaryDirectory.appendingPathComponent("monitor-\(UUID().uuidString).txt")
        FileManager.default.createFile(atPath: out.path, contents: nil)
        defer { try? FileManager.default.removeItem(at: out) }
        let handle = try FileHandle(forWritingTo: out)
        let monitor = Process()
        monitor.executableURL = URL(fileURLWithPath: RedisProcess.cliPath!)
        monitor.arguments = ["-h", "127.0.0.1", "-p", String(redis.port), "MONITOR"]
        monitor.standardOutput = handle
        try monitor.run()
        // redis-cli in MONITOR mode does not end on SIGTERM: SIGKILL.
        defer {
            if monitor.isRunning { kill(monitor.processIdentifier, SIGKILL) }
            monitor.waitUntilExit()
        }
        // MONITOR answers OK once it is on: wait for it.
        for _ in 0..<100 where (try? String(contentsOf: out, encoding: .utf8))?.contains("OK") != true { usleep(20_000) }
        try body()
        usleep(200_000)
        kill(monitor.processIdentifier, SIGKILL)
        monitor.waitUntilExit()
        try handle.close()
        var commands: [(source: String, command: String)] = []
        for line in try String(contentsOf: out, encoding: .utf8).split(whereSeparator: \.isNewline) {
            // 1732612345.123456 [0 127.0.0.1:50000] "EVALSHA" "…" …
            guard let open = line.firstIndex(of: "["), let close = line.firstIndex(of: "]"),
                inScripts || !line[open..<close].contains("lua"),
                let q = line[close...].firstIndex(of: "\"")
            else { continue }
            let rest = line[line.index(after: q)...]
            guard let end = rest.firstIndex(of: "\"") else { continue }
            let source = line[line.index(after: open)..<close].split(separator: " ").last.map(String.init) ?? ""
            commands.append((source, rest[..<end].lowercased()))
        }
        return commands
    }

    /// A Redis server, a gatewayd on it, and a device registered there (the caller stops both).
    static func registeredDevice(_ name: String) throws -> (RedisProcess, GatewayProcess, ContractDevice) {
        let (ca, dir) = try makeTrustedTestCADirectory(name)
        let redis = try RedisProcess()
        let gw: GatewayProcess
        do {
            gw = try GatewayProcess(
                config: RedisFleetTests.fleetConfig(
                    root: dir.appendingPathComponent("root.pem").path, store: "{kind: redis, url: \(redis.url), timeout: 1s}"))
        } catch {
            redis.stop()
            throw error
        }
        do {
            let phone = try ContractDevice(ca: ca, appID: appID, port: HTTPCall.port(gw, "public"))
            #expect(try phone.register().status == 201)
            return (redis, gw, phone)
        } catch {
            gw.stop()
            redis.stop()
            throw error
        }
    }

    @Test("200 chained protected requests: at most one Redis command each (the first request of a key may take more)")
    func oneRoundTripPerAcceptedRequest() throws {
        let (redis, gw, phone) = try Self.registeredDevice("gw-roundtrip")
        defer { gw.stop(); redis.stop() }
        // The key's first request reads it (the cache of public keys starts empty).
        let first = try phone.send(
            phone.sign(
                target: "/api/purchase", body: Array("{\"n\":0}".utf8),
                challenge: try phone.challenge(purpose: "assert", keyID: phone.keyID)))
        #expect(first.status == 200, "\(first.body)")
        var next = try #require(first.headers["x-app-attest-next-challenge"])
        let requests = 200
        var accepted = 0
        let (calls, scripted) = try Self.monitored(redis) {
            for i in 1...requests {
                let r = try phone.send(phone.sign(target: "/api/purchase", body: Array("{\"n\":\(i)}".utf8), challenge: next))
                guard r.status == 200, let n = r.headers["x-app-attest-next-challenge"] else {
                    Issue.record("request \(i): \(r.status) \(r.body)")
                    return
                }
                accepted += 1
                next = n
            }
        }
        #expect(accepted == requests)
        // Inside the script, Redis' own work: the key's fields read once and written once, the
        // challenge read and marked used, the next one created (EXISTS, HSET, PEXPIRE): 7 commands
        // (deleting the key's window field, rarely, makes 8).
        let inside = scripted.values.reduce(0, +)
        #expect(inside <= 7 * requests, "commands inside the script per request: \(scripted) over \(requests)")
        #expect(scripted["hget"] == nil && scripted["hdel"] == nil, "\(scripted)")
        // What the gateway sends on its own, whatever the traffic: the key count (statistics, about
        // once a second) and connection checks.
        let background: Set<String> = ["get", "ping", "info", "client", "hello", "select", "auth", "script"]
        let perRequest = calls.filter { !background.contains($0.key) }
        let total = perRequest.values.reduce(0, +)
        #expect(Double(total) / Double(requests) <= 1.0, "commands per accepted request: \(perRequest) over \(requests)")
        #expect(perRequest["evalsha"] == requests, "\(calls)")
    }

    /// The gate's calls go out on the event loops' own Redis connections (docs/redis.md,
    /// "Connections"), not through the threaded pool: every `EVALSHA` of the protected requests
    /// comes from a connection that never sends the pool's background commands (the key count
    /// `GET` every second, the idle `PING`), and gatewayd holds one connection per loop besides
    /// the pool's two.
    @Test("the gate's Redis calls go out on the event loop's own connection, the pool keeps the background commands")
    func gateCallsGoOutOnTheLoopsConnection() throws {
        let (redis, gw, phone) = try Self.registeredDevice("gw-loopconn")
        defer { gw.stop(); redis.stop() }
        var next = try phone.challenge(purpose: "assert", keyID: phone.keyID)
        let commands = try Self.monitoredCommands(redis) {
            for i in 1...50 {
                let r = try phone.send(phone.sign(target: "/api/purchase", body: Array("{\"n\":\(i)}".utf8), challenge: next))
                guard r.status == 200, let n = r.headers["x-app-attest-next-challenge"] else {
                    Issue.record("request \(i): \(r.status) \(r.body)")
                    return
                }
                next = n
            }
            usleep(1_500_000)  // at least one key count GET from the pool
        }
        let gate = Set(commands.filter { $0.command == "evalsha" }.map(\.source))
        let background = Set(commands.filter { $0.command == "get" || $0.command == "ping" }.map(\.source))
        #expect(!gate.isEmpty && !background.isEmpty, "\(commands.map { "\($0.source) \($0.command)" })")
        #expect(gate.isDisjoint(with: background), "EVALSHA from \(gate), GET/PING from \(background)")
        // `workers: 2`: the pool's 2 connections and one per loop (the listing's own connection left out).
        let clients = try redis.cli(["CLIENT", "LIST"]).split(whereSeparator: \.isNewline).filter { !$0.contains("cmd=client|list") }
        #expect(clients.count == 4, "\(clients)")
    }
}
