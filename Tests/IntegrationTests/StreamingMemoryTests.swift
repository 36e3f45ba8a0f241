import Foundation
import GatewayTestSupport
import Glibc
import Testing

/// 1 GiB each way through `gatewayd run`: the bytes all arrive, and the gateway's resident memory
/// stays flat (a memory bound read from /proc, not a timing assertion).
@Suite("Streaming 1 GiB with flat memory (real process, loopback)", .serialized, .timeLimit(.minutes(4)))
struct StreamingMemoryTests {
    static let gib = 1 << 30
    /// Allowed growth of gatewayd's peak RSS over its RSS before the transfer: far below 1 GiB.
    static let bound = 64 << 20

    static func config(upstream port: UInt16) -> String {
        """
        workers: 1
        listeners:
          - {name: public, address: 127.0.0.1:0}
        admin: {address: 127.0.0.1:0}
        limits: {max_body: 2GiB, body_timeout: 60s, drain_timeout: 1s}
        logging: {access_log: false}
        upstreams:
          - {name: up, url: "http://127.0.0.1:\(port)", response_timeout: 60s}
        routes:
          - {name: all, match: {path_prefix: /}, upstream: up}
        """
    }

    static func port(_ gw: GatewayProcess) -> UInt16 { UInt16(gw.url("public", "").split(separator: ":").last!)! }

    @Test(
        "1 GiB download from nginx (sparse file): every byte arrives, RSS growth under 64 MiB",
        .enabled(
            if: NginxProcess.testsEnabled,
            "nginx is not installed (scripts/install-deps.sh installs it); skipped outside CI, fails under CI=true"))
    func download() throws {
        let nginx = try NginxProcess(zeroFileBytes: Int64(Self.gib))
        defer { nginx.stop() }
        let gw = try GatewayProcess(config: Self.config(upstream: nginx.port))
        defer { gw.stop() }
        let c = try HTTPTestConnection(port: Self.port(gw))
        #expect(try c.request("GET /static.txt HTTP/1.1\r\nHost: x\r\n\r\n").status == 200)  // warm: pool, buffers
        let before = try #require(processMemory(pid: gw.process.processIdentifier))
        c.send("GET /zero.bin HTTP/1.1\r\nHost: x\r\n\r\n")
        let r = try c.readResponse(keepBody: false)
        let after = try #require(processMemory(pid: gw.process.processIdentifier))
        #expect(r.status == 200)
        #expect(r.bodyLength == Self.gib)
        let growth = after.peak - before.rss
        print("download 1 GiB: gatewayd RSS before \(before.rss >> 10) KiB, peak after \(after.peak >> 10) KiB, growth \(growth >> 10) KiB")
        #expect(growth < Self.bound, "peak RSS grew by \(growth >> 20) MiB")
        // The connection is still usable: the body was framed exactly.
        #expect(try c.request("GET /static.txt HTTP/1.1\r\nHost: x\r\n\r\n").text == "static file\n")
    }

    /// Upload `k`'s body: a block of a prime length (so block edges never line up with reads)
    /// filled from seed `k`, repeated; another upload's bytes in it are found by one array compare.
    static let uploadBlocks: [[UInt8]] = (0..<8).map { k in
        (0..<65521).map { i in UInt8(truncatingIfNeeded: (i &* (2 * k + 1)) ^ (i >> 9) ^ (k &* 37)) }
    }
    static let uploadSize = 65521 * 128

    static func uploadBody(_ k: Int) -> [UInt8] {
        var body: [UInt8] = []
        body.reserveCapacity(uploadSize)
        for _ in 0..<128 { body.append(contentsOf: uploadBlocks[k]) }
        return body
    }

    @Test("one worker, eight concurrent 8 MiB uploads with distinct contents: every byte arrives unaltered")
    func concurrentUploadsOneWorker() throws { try Self.concurrentUploads(workers: 1) }

    @Test("two workers, eight concurrent 8 MiB uploads with distinct contents: every byte arrives unaltered")
    func concurrentUploadsTwoWorkers() throws { try Self.concurrentUploads(workers: 2) }

    static func concurrentUploads(workers: Int) throws {
        let expected = (0..<8).map(uploadBody)
        let sink = try ScriptedServer { c in
            while let req = c.readRequest() {
                guard let k = Int(req.header("X-Seed") ?? ""), expected.indices.contains(k) else {
                    c.respond(status: 400, "no seed\n")
                    continue
                }
                if req.body == expected[k] {
                    c.respond("intact \(req.body.count)\n")
                } else {
                    let at = zip(req.body, expected[k]).enumerated().first { $0.element.0 != $0.element.1 }?.offset ?? -1
                    c.respond("corrupt at \(at) of \(req.body.count)\n")
                }
            }
        }
        defer { sink.stop() }
        let gw = try GatewayProcess(
            config: Self.config(upstream: sink.port).replacingOccurrences(of: "workers: 1", with: "workers: \(workers)"))
        defer { gw.stop() }
        let port = Self.port(gw)
        // Several rounds: a race between loops shows in most rounds, not all.
        for round in 0..<(workers == 1 ? 1 : 3) {
            let answers = Answers()
            DispatchQueue.concurrentPerform(iterations: 8) { k in
                do {
                    let c = try HTTPTestConnection(port: port)
                    c.send("POST /u/\(k) HTTP/1.1\r\nHost: x\r\nX-Seed: \(k)\r\nContent-Length: \(uploadSize)\r\n\r\n")
                    c.send(expected[k])
                    answers.set(k, try c.readResponse().text)
                } catch {
                    answers.set(k, "error: \(error)")
                }
            }
            for k in 0..<8 { #expect(answers.get(k) == "intact \(uploadSize)\n", "round \(round), upload \(k)") }
        }
    }

    final class Answers: @unchecked Sendable {
        private let lock = NSLock()
        private var values: [Int: String] = [:]
        func set(_ k: Int, _ v: String) { lock.withLock { values[k] = v } }
        func get(_ k: Int) -> String? { lock.withLock { values[k] } }
    }

    @Test("1 GiB upload to a counting sink: every byte arrives, RSS growth under 64 MiB") func upload() throws {
        let sink = try ScriptedServer { c in
            while let req = c.readRequest(keepBody: false) {
                c.respond("received=\(req.bodyLength)\n")
            }
        }
        defer { sink.stop() }
        let gw = try GatewayProcess(config: Self.config(upstream: sink.port))
        defer { gw.stop() }
        let c = try HTTPTestConnection(port: Self.port(gw))
        #expect(try c.request("POST /warm HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello").text == "received=5\n")
        let before = try #require(processMemory(pid: gw.process.processIdentifier))
        c.send("POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: \(Self.gib)\r\n\r\n")
        var block = [UInt8](repeating: 0, count: 256 * 1024)
        for i in block.indices { block[i] = UInt8(truncatingIfNeeded: i) }
        for _ in 0..<(Self.gib / block.count) { c.send(block) }
        let r = try c.readResponse()
        let after = try #require(processMemory(pid: gw.process.processIdentifier))
        #expect(r.status == 200)
        #expect(r.text == "received=\(Self.gib)\n")
        let growth = after.peak - before.rss
        print("upload 1 GiB: gatewayd RSS before \(before.rss >> 10) KiB, peak after \(after.peak >> 10) KiB, growth \(growth >> 10) KiB")
        #expect(growth < Self.bound, "peak RSS grew by \(growth >> 20) MiB")
    }
}
