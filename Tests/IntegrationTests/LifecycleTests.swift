import Foundation
import GatewayTestSupport
import Glibc
import Testing

/// A one-shot gate between an upstream thread and the test: bounded waits only.
final class Gate: @unchecked Sendable {
    private let s = DispatchSemaphore(value: 0)
    func open() { s.signal() }
    /// True if opened within `seconds`.
    func wait(_ seconds: Double = 10) -> Bool { s.wait(timeout: .now() + seconds) == .success }
}

/// Waits (bounded) until the gateway's stderr contains `text`.
func waitForLog(_ gw: GatewayProcess, _ text: String, seconds: Double = 10) -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while Date() < deadline {
        if gw.stderr.contains(text) { return true }
        usleep(20_000)
    }
    return false
}

func publicPort(_ gw: GatewayProcess) -> UInt16 { UInt16(gw.url("public", "").split(separator: ":").last!)! }

func gatewayConfig(upstream: String, limits: String = "drain_timeout: 5s") -> String {
    """
    workers: 1
    listeners:
      - {name: public, address: 127.0.0.1:0}
    admin: {address: 127.0.0.1:0}
    limits: {\(limits)}
    upstreams:
      - {name: up, url: "\(upstream)"\(upstream == "demo" ? "" : ", response_timeout: 20s")}
      - {name: demo, url: demo}
    routes:
      - {name: demo, match: {path_prefix: /demo}, upstream: demo}
      - {name: up, match: {path_prefix: /}, upstream: up}
    """
}

/// Drain, reload, timeouts and retries of the real `gatewayd run`, with in-test upstreams whose
/// behaviour the test controls step by step.
@Suite("gatewayd lifecycle: drain, reload, timeouts, retries (real process)", .serialized, .timeLimit(.minutes(2)))
struct LifecycleTests {
    @Test("SIGTERM with a slow request in flight: it finishes, new connections are refused, exit 0") func drainInFlight() throws {
        let received = Gate()
        let release = Gate()
        let slow = try ScriptedServer { c in
            guard c.readRequest() != nil else { return }
            received.open()
            _ = release.wait(20)
            c.respond("slow answer\n")
        }
        defer { slow.stop() }
        defer { release.open() }  // first: a failed test must not leave the upstream thread waiting
        let gw = try GatewayProcess(config: gatewayConfig(upstream: "http://127.0.0.1:\(slow.port)"))
        defer { gw.stop() }
        let port = publicPort(gw)
        let c = try HTTPTestConnection(port: port)
        c.send("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
        #expect(received.wait())
        gw.signal(SIGTERM)
        #expect(waitForLog(gw, "\"msg\":\"draining\""))
        // "draining" is logged just before the listeners close: wait (bounded) for the refusal.
        var refused = false
        for _ in 0..<250 where !refused {
            refused = (try? LoopbackClient(port: port)) == nil
            if !refused { usleep(20_000) }
        }
        #expect(refused, "the listener still accepts while draining")
        release.open()
        let r = try c.readResponse()
        #expect(r.status == 200)
        #expect(r.text == "slow answer\n")
        #expect(r.header("Connection")?.lowercased() == "close")
        #expect(gw.waitForExit() == 0)
        #expect(gw.stderr.contains("\"msg\":\"stopped\""))
    }

    @Test("SIGHUP: open connections (idle and mid-request) survive a reload; new routes apply") func reloadKeepsConnections() throws {
        let received = Gate()
        let release = Gate()
        let slow = try ScriptedServer { c in
            while let req = c.readRequest() {
                if req.target == "/slow" {
                    received.open()
                    _ = release.wait(20)
                }
                c.respond("upstream saw \(req.target)\n")
            }
        }
        defer { slow.stop() }
        defer { release.open() }  // first: a failed test must not leave the upstream thread waiting
        let config = gatewayConfig(upstream: "http://127.0.0.1:\(slow.port)")
        let gw = try GatewayProcess(config: config)
        defer { gw.stop() }
        let port = publicPort(gw)
        let idle = try HTTPTestConnection(port: port)
        #expect(try idle.request("GET /demo/a HTTP/1.1\r\nHost: x\r\n\r\n").status == 200)
        let busy = try HTTPTestConnection(port: port)
        busy.send("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
        #expect(received.wait())
        try config.replacingOccurrences(of: "path_prefix: /demo}", with: "path_prefix: /v2}")
            .write(to: gw.configURL, atomically: true, encoding: .utf8)
        gw.signal(SIGHUP)
        #expect(waitForLog(gw, "configuration reloaded"))
        release.open()
        let slowAnswer = try busy.readResponse()
        #expect(slowAnswer.status == 200 && slowAnswer.text == "upstream saw /slow\n")
        // Both connections stay open and keep serving.
        #expect(try idle.request("GET /x HTTP/1.1\r\nHost: x\r\n\r\n").text == "upstream saw /x\n")
        #expect(try busy.request("GET /y HTTP/1.1\r\nHost: x\r\n\r\n").text == "upstream saw /y\n")
        // A new connection sees the new routes: /v2 is the demo now, /demo goes upstream.
        let fresh = try HTTPTestConnection(port: port)
        #expect(try fresh.request("GET /v2/b HTTP/1.1\r\nHost: x\r\n\r\n").text.contains("\"route\":\"demo\""))
        #expect(try fresh.request("GET /demo/c HTTP/1.1\r\nHost: x\r\n\r\n").text == "upstream saw /demo/c\n")
    }

    @Test("SIGHUP with a config that refers to an unknown upstream: refused, old config and connections kept") func invalidReload() throws {
        let gw = try GatewayProcess(config: gatewayConfig(upstream: "demo"))
        defer { gw.stop() }
        let c = try HTTPTestConnection(port: publicPort(gw))
        #expect(try c.request("GET /demo/1 HTTP/1.1\r\nHost: x\r\n\r\n").text.contains("\"route\":\"demo\""))
        let broken = gatewayConfig(upstream: "demo").replacingOccurrences(of: "upstream: up}", with: "upstream: missing}")
        try broken.write(to: gw.configURL, atomically: true, encoding: .utf8)
        gw.signal(SIGHUP)
        #expect(waitForLog(gw, "reload refused"))
        #expect(gw.stderr.contains("missing"))
        #expect(try c.request("GET /demo/2 HTTP/1.1\r\nHost: x\r\n\r\n").text.contains("\"route\":\"demo\""))
        #expect(try c.request("GET /other HTTP/1.1\r\nHost: x\r\n\r\n").text.contains("\"route\":\"up\""))
        let metrics = try curl([gw.url("admin", "/metrics")]).1
        #expect(metrics.contains("attest_gateway_config_reloads_total{result=\"failure\"} 1"))
    }

    @Test("idle, header and body timeouts of the real binary close or answer 408") func timeouts() throws {
        let gw = try GatewayProcess(
            config: gatewayConfig(
                upstream: "demo", limits: "idle_timeout: 1s, header_timeout: 1s, body_timeout: 1s, drain_timeout: 1s"))
        defer { gw.stop() }
        let port = publicPort(gw)
        // Idle: after a response, a silent keep-alive connection is closed.
        let idle = try HTTPTestConnection(port: port)
        #expect(try idle.request("GET /demo HTTP/1.1\r\nHost: x\r\n\r\n").status == 200)
        #expect(idle.isClosedByPeer())
        // Header: a head that never ends gets 408 header_timeout, then the connection closes.
        let head = try HTTPTestConnection(port: port)
        head.send("GET /demo HTTP/1.1\r\nHost: x\r\n")
        let h = try head.readResponse()
        #expect(h.status == 408)
        #expect(h.json?["error"] as? String == "header_timeout")
        #expect(head.isClosedByPeer())
        // Body: a body that stops arriving gets 408 body_timeout.
        let body = try HTTPTestConnection(port: port)
        body.send("POST /demo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789")
        let b = try body.readResponse()
        #expect(b.status == 408)
        #expect(b.json?["error"] as? String == "body_timeout")
        #expect(body.isClosedByPeer())
    }

    @Test(
        "limits.max_connections counts per process, also with several workers")
    func maxConnectionsAcrossWorkers() throws {
        let gw = try GatewayProcess(
            config: gatewayConfig(upstream: "demo", limits: "max_connections: 3, drain_timeout: 1s")
                .replacingOccurrences(of: "workers: 1", with: "workers: 2"))
        defer { gw.stop() }
        var held: [HTTPTestConnection] = []
        for i in 0..<3 {
            let c = try HTTPTestConnection(port: publicPort(gw))
            c.send("GET /demo/\(i) HTTP/1.1\r\nHost: x\r\n\r\n")
            let r = try? c.readResponse()
            #expect(r?.status == 200, "connection \(i + 1) of 3 was refused under max_connections: 3")
            held.append(c)
        }
    }

    /// The upstream answers the first request of its first connection, then closes that connection
    /// when the second request arrives on it, without answering; later connections answer "fresh".
    static func flakyUpstream(log: RequestLog) throws -> ScriptedServer {
        try ScriptedServer { c in
            var n = 0
            while let req = c.readRequest() {
                log.add(connection: c.index, req.method + " " + req.target)
                n += 1
                if c.index == 0 && n == 2 { return }  // closes a reused connection without answering
                let text = c.index == 0 ? "first\n" : "fresh\n"
                if req.method == "HEAD" {
                    c.write("HTTP/1.1 200 X\r\nContent-Length: \(text.utf8.count)\r\n\r\n")
                } else {
                    c.respond(text)
                }
            }
        }
    }

    struct RetryCase: Sendable, CustomTestStringConvertible {
        let method: String
        let body: String
        let retried: Bool
        init(_ method: String, body: String = "", retried: Bool) {
            self.method = method
            self.body = body
            self.retried = retried
        }
        var testDescription: String { "\(method)\(body.isEmpty ? "" : " with a body") → \(retried ? "retried" : "502")" }
    }

    final class RequestLog: @unchecked Sendable {
        private let lock = NSLock()
        private var entries: [(Int, String)] = []
        func add(connection: Int, _ line: String) { lock.withLock { entries.append((connection, line)) } }
        var all: [(Int, String)] { lock.withLock { entries } }
    }

    @Test(
        "a reused upstream connection closes before answering: idempotent requests without a body are retried once, others get 502",
        arguments: [
            RetryCase("GET", retried: true), RetryCase("HEAD", retried: true), RetryCase("DELETE", retried: true),
            RetryCase("POST", retried: false), RetryCase("POST", body: "body", retried: false),
            RetryCase("PUT", body: "body", retried: false),
        ])
    func retries(_ k: RetryCase) throws {
        let (method, retried) = (k.method, k.retried)
        let rest = k.body.isEmpty ? "" : "Content-Length: \(k.body.utf8.count)\r\n\r\n\(k.body)"
        let log = RequestLog()
        let upstream = try Self.flakyUpstream(log: log)
        defer { upstream.stop() }
        let gw = try GatewayProcess(config: gatewayConfig(upstream: "http://127.0.0.1:\(upstream.port)"))
        defer { gw.stop() }
        let c = try HTTPTestConnection(port: publicPort(gw))
        #expect(try c.request("GET /one HTTP/1.1\r\nHost: x\r\n\r\n").text == "first\n")
        c.send("\(method) /two HTTP/1.1\r\nHost: x\r\n" + (rest.isEmpty ? "\r\n" : rest))
        let r = try c.readResponse(method: method)
        let attempts = log.all.filter { $0.1 == "\(method) /two" }.map(\.0)
        if retried {
            #expect(r.status == 200)
            if method != "HEAD" { #expect(r.text == "fresh\n") }
            #expect(attempts == [0, 1], "attempts by upstream connection: \(attempts)")
        } else {
            #expect(r.status == 502)
            #expect(r.json?["error"] as? String == "upstream_closed")
            #expect(attempts == [0], "a non-idempotent request or one with a body was sent again: \(attempts)")
        }
    }
}

/// Waits (bounded) until the gateway's stdout satisfies `done`; returns it as it is then.
func waitForStdout(_ gw: GatewayProcess, seconds: Double = 5, _ done: (String) -> Bool) -> String {
    let deadline = Date().addingTimeInterval(seconds)
    while Date() < deadline {
        let out = gw.stdout
        if done(out) { return out }
        usleep(20_000)
    }
    return gw.stdout
}
