import Foundation
import GatewayTestSupport
import Glibc
import Testing

/// The access log of the real `gatewayd`: to a file, buffered per loop; complete after SIGTERM,
/// reopened on SIGUSR1, whole lines from several loops; request ids end to end (docs/logging.md).
@Suite("Access log and request ids (real process)", .serialized, .timeLimit(.minutes(2)))
struct AccessLogTests {
    static func config(accessLog: String, workers: Int = 2) -> String {
        """
        workers: \(workers)
        listeners:
          - {name: public, address: 127.0.0.1:0}
        admin: {address: 127.0.0.1:0}
        limits: {drain_timeout: 5s}
        logging: {access_log: \(accessLog)}
        upstreams:
          - {name: demo, url: demo}
        routes:
          - {name: demo, match: {path_prefix: /}, upstream: demo}
        """
    }

    static func lines(_ path: String) -> [String] {
        ((try? String(contentsOfFile: path, encoding: .utf8)) ?? "").split(separator: "\n", omittingEmptySubsequences: false)
            .map(String.init).filter { !$0.isEmpty }
    }

    static func object(_ line: String) -> [String: Any]? {
        (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any]
    }

    /// `clients` keep-alive connections at once, `each` requests on each, with a long User-Agent
    /// (lines of about 1.5 KB) and the request id `c<client>-<i>`.
    static func load(port: UInt16, clients: Int, each: Int) {
        let ua = "load/1 " + String(repeating: "abcdefghij", count: 150)
        DispatchQueue.concurrentPerform(iterations: clients) { c in
            guard let conn = try? HTTPTestConnection(port: port) else { return }
            defer { conn.close() }
            for i in 0..<each {
                conn.send("GET /load/\(c)/\(i) HTTP/1.1\r\nHost: load.test\r\nUser-Agent: \(ua)\r\nX-Request-Id: c\(c)-\(i)\r\n\r\n")
                guard (try? conn.readResponse())?.status == 200 else { return }
            }
        }
    }

    /// Every line whole and parseable, one per request id.
    static func checkWhole(_ lines: [String], clients: Int, each: Int) {
        #expect(lines.count == clients * each)
        var ids = Set<String>()
        for line in lines {
            guard let o = object(line) else {
                Issue.record("not one JSON object: \(line.prefix(200))…")
                continue
            }
            if let id = o["request_id"] as? String { ids.insert(id) }
            #expect(o["status"] as? Int == 200)
            #expect(o["host"] as? String == "load.test")
            #expect((o["user_agent"] as? String)?.count == 1507)
        }
        #expect(ids == Set((0..<clients).flatMap { c in (0..<each).map { "c\(c)-\($0)" } }))
    }

    @Test("to a file, buffered (64 KiB, flush: 10m): after SIGTERM every line is there, whole, from both loops")
    func completeAfterSIGTERM() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("gw-access-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("access.log").path
        let gw = try GatewayProcess(config: Self.config(accessLog: "{path: \(path), buffer: 64KiB, flush: 10m}"))
        defer { gw.stop() }
        Self.load(port: publicPort(gw), clients: 8, each: 61)
        // The buffers were flushed on size only (about 36 lines of 1.8 KB a time): 488 lines cannot
        // all be out, some still wait in a buffer.
        #expect(Self.lines(path).count < 488)
        gw.signal(SIGTERM)
        #expect(gw.waitForExit() == 0)
        Self.checkWhole(Self.lines(path), clients: 8, each: 61)
    }

    @Test("to stdout (a pipe), 64 KiB flushes from two loops never interleave")
    func wholeLinesOnAPipe() throws {
        let gw = try GatewayProcess(config: Self.config(accessLog: "{path: stdout, flush: 10m}"))
        defer { gw.stop() }
        Self.load(port: publicPort(gw), clients: 8, each: 100)
        gw.signal(SIGTERM)
        #expect(gw.waitForExit() == 0)
        Self.checkWhole(gw.stdout.split(separator: "\n").map(String.init), clients: 8, each: 100)
    }

    @Test("SIGUSR1 after a rename (logrotate): earlier lines in the renamed file, later ones in a new file of the name")
    func reopenAfterRename() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("gw-access-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("access.log").path
        let gw = try GatewayProcess(config: Self.config(accessLog: "{path: \(path), format: combined, flush: 10m}", workers: 1))
        defer { gw.stop() }
        let port = publicPort(gw)
        for i in 0..<3 { #expect(try HTTPCall.send(port: port, method: "GET", target: "/before/\(i)").status == 200) }
        #expect(rename(path, path + ".1") == 0)
        gw.signal(SIGUSR1)
        #expect(waitForLog(gw, "log files reopened"))
        for i in 0..<2 { #expect(try HTTPCall.send(port: port, method: "GET", target: "/after/\(i)").status == 200) }
        gw.signal(SIGTERM)
        #expect(gw.waitForExit() == 0)
        let old = Self.lines(path + ".1"), new = Self.lines(path)
        #expect(old.count == 3 && old.allSatisfy { $0.contains("\"GET /before/") }, "\(old)")
        #expect(new.count == 2 && new.allSatisfy { $0.contains("\"GET /after/") }, "\(new)")
        #expect(new.first?.hasPrefix("127.0.0.1 - - [") == true && new.first?.contains(" HTTP/1.1\" 200 ") == true, "\(new)")
    }

    @Test("request ids: a valid client id kept, forwarded, returned and logged; others replaced; on errors and admin answers too")
    func requestIDs() throws {
        let gw = try GatewayProcess(config: Self.config(accessLog: "{path: stdout, buffer: 0}", workers: 1))
        defer { gw.stop() }
        let port = publicPort(gw)
        let kept = try HTTPCall.send(port: port, method: "GET", target: "/a", headers: [("X-Request-Id", "Root=1-abc_DEF.9:+=")])
        #expect(kept.headers["x-request-id"] == "Root=1-abc_DEF.9:+=")
        let seen = try #require(kept.json?["headers"] as? [String: String])
        #expect(seen["X-Request-Id"] == "Root=1-abc_DEF.9:+=", "\(seen)")
        var generated: [String] = []
        for bad in [
            [("X-Request-Id", "has space")], [("X-Request-Id", "a"), ("X-Request-Id", "b")],
            [("X-Request-Id", String(repeating: "x", count: 129))], [],
        ] {
            let r = try HTTPCall.send(port: port, method: "GET", target: "/b", headers: bad)
            let id = try #require(r.headers["x-request-id"])
            #expect(id.count == 15 && id.allSatisfy { $0.isLetter || $0.isNumber || $0 == "-" || $0 == "_" }, "\(bad): \(id)")
            #expect((r.json?["headers"] as? [String: String])?["X-Request-Id"] == id)
            generated.append(id)
        }
        #expect(Set(generated).count == generated.count)
        // The gateway's own error answers: the header and the body's requestId.
        let refused = try HTTPCall.send(port: port, method: "GET", target: "/a%2Fb", headers: [("X-Request-Id", "err-1")])
        #expect(
            refused.status == 400 && refused.headers["x-request-id"] == "err-1" && refused.json?["requestId"] as? String == "err-1",
            "\(refused)")
        let admin = try HTTPCall.send(
            port: HTTPCall.port(gw, "admin"), method: "GET", target: "/healthz", headers: [("X-Request-Id", "adm-1")])
        #expect(admin.status == 200 && admin.headers["x-request-id"] == "adm-1")
        let lines = waitForStdout(gw) { $0.contains("\"err-1\"") }.split(separator: "\n").compactMap { Self.object(String($0)) }
        let ids = lines.compactMap { $0["request_id"] as? String }
        #expect(ids.contains("Root=1-abc_DEF.9:+=") && ids.contains("err-1") && generated.allSatisfy(ids.contains), "\(ids)")
        #expect(lines.first { $0["request_id"] as? String == "err-1" }?["error"] as? String == "ambiguous_path")
    }
}
