import AppAttest
import AppAttestSimulator
import Foundation
import GatewayTestSupport
import Glibc
import Testing

/// A client tool for these tests: present, or skipped — except under CI=true, where missing fails.
private func tool(_ name: String) -> String? {
    for dir in ["/usr/bin", "/usr/local/bin", "/bin"] {
        let p = "\(dir)/\(name)"
        if FileManager.default.isExecutableFile(atPath: p) { return p }
    }
    if ProcessInfo.processInfo.environment["CI"] == "true" {
        Issue.record("\(name) is required under CI=true (scripts/install-deps.sh installs it)")
    }
    return nil
}

/// curl with h2c prior knowledge: (HTTP version, status, lowercased fields, body).
private func h2curl(_ curl: String, _ args: [String]) throws -> (version: String, status: Int, headers: [String: String], body: String) {
    let r = try runProcess(URL(fileURLWithPath: curl), ["-sS", "-i", "--max-time", "20", "--http2-prior-knowledge"] + args, timeout: 30)
    guard let split = r.stdout.range(of: "\r\n\r\n") else { return ("curl exit \(r.status): \(r.stderr)", 0, [:], "") }
    var lines = r.stdout[..<split.lowerBound].components(separatedBy: "\r\n")
    let status = lines.removeFirst().split(separator: " ")
    var fields: [String: String] = [:]
    for l in lines {
        guard let c = l.firstIndex(of: ":") else { continue }
        fields[l[..<c].lowercased()] = l[l.index(after: c)...].trimmingCharacters(in: .whitespaces)
    }
    return (String(status.first ?? ""), status.count > 1 ? Int(status[1]) ?? 0 : 0, fields, String(r.stdout[split.upperBound...]))
}

private func json(_ s: String) -> [String: Any]? { (try? JSONSerialization.jsonObject(with: Data(s.utf8))) as? [String: Any] }

@Suite("HTTP/2 h2c listeners (real gatewayd, curl, nghttp, h2load)", .serialized, .timeLimit(.minutes(3)))
struct HTTP2Tests {
    static let appID = "ABCDE12345.com.example.shop"
    let ca: TestCA
    let dir: URL

    init() throws {
        (ca, dir) = try makeTrustedTestCADirectory("gw-h2")
    }

    func config(upstream: String = "demo") -> String {
        """
        workers: 2
        listeners:
          - {name: public, address: 127.0.0.1:0, protocols: [http1, h2c]}
          - {name: h2, address: 127.0.0.1:0, protocols: [h2c]}
        admin: {address: 127.0.0.1:0}
        limits: {drain_timeout: 5s}
        upstreams:
          - {name: up, url: \(upstream)}
          - {name: demo, url: demo}
        apps:
          - {team_id: ABCDE12345, bundle_ids: [com.example.shop], environments: [development]}
        trust: {extra_roots: [\(dir.appendingPathComponent("root.pem").path)], extra_receipt_roots: [\(dir.appendingPathComponent("receipt-root.pem").path)]}
        store: {kind: memory, shards: 8}
        routes:
          - name: purchase
            match: {methods: [POST], path_prefix: /api/purchase}
            upstream: demo
            max_body: 64KiB
            assertion: {mode: enforce}
          - {name: default, match: {path_prefix: /}, upstream: up}
        """
    }

    @Test("curl --http2-prior-knowledge: GET, POST with a body, on an h2c-only and an http1+h2c listener; metrics by protocol")
    func curlBasics() throws {
        guard let curl = tool("curl") else { return }
        let gw = try GatewayProcess(config: config())
        defer { gw.stop() }
        for listener in ["h2", "public"] {
            let get = try h2curl(curl, [gw.url(listener, "/hello?x=1")])
            #expect(get.version == "HTTP/2")
            #expect(get.status == 200)
            let seen = try #require(json(get.body))
            #expect(seen["method"] as? String == "GET")
            #expect(seen["target"] as? String == "/hello?x=1")
            let file = dir.appendingPathComponent("body")
            try String(repeating: "0123456789", count: 20_000).write(to: file, atomically: true, encoding: .utf8)
            let post = try h2curl(curl, ["--data-binary", "@" + file.path, gw.url(listener, "/submit")])
            #expect(post.status == 200)
            #expect(json(post.body)?["bodyBytes"] as? Int == 200_000)
        }
        // The same port still speaks HTTP/1.1.
        let h1 = try runProcess(
            URL(fileURLWithPath: curl),
            ["-sS", "--http1.1", "-o", "/dev/null", "-w", "%{http_version} %{http_code}", gw.url("public", "/h1")])
        #expect(h1.stdout == "1.1 200")
        let metrics = try runProcess(URL(fileURLWithPath: curl), ["-sS", gw.url("admin", "/metrics")]).stdout
        #expect(metrics.contains("protocol=\"h2\""))
        #expect(metrics.contains("protocol=\"http1\""))
    }

    @Test("large download and concurrent streams (curl --parallel) through a real nginx upstream")
    func largeAndParallel() throws {
        guard let curl = tool("curl"), NginxProcess.testsEnabled else { return }
        let nginx = try NginxProcess()
        defer { nginx.stop() }
        let gw = try GatewayProcess(config: config(upstream: "http://127.0.0.1:\(nginx.port)"))
        defer { gw.stop() }
        let out = dir.appendingPathComponent("large.bin")
        let r = try runProcess(
            URL(fileURLWithPath: curl), ["-sS", "--max-time", "30", "--http2-prior-knowledge", "-o", out.path, gw.url("h2", "/large.bin")],
            timeout: 40)
        #expect(r.status == 0, "\(r.stderr)")
        let data = [UInt8](try Data(contentsOf: out))
        #expect(data.count == NginxProcess.largeBytes)
        var same = data.count == NginxProcess.largeBytes
        for i in 0..<min(data.count, NginxProcess.largeBytes) where data[i] != NginxProcess.largePattern(i) {
            same = false
            break
        }
        #expect(same)
        var args = ["-sS", "--max-time", "30", "--http2-prior-knowledge", "--parallel", "--parallel-immediate", "--parallel-max", "10"]
        for i in 0..<10 { args += ["-o", dir.appendingPathComponent("p\(i)").path, gw.url("h2", i % 2 == 0 ? "/large.bin" : "/fixed")] }
        let p = try runProcess(URL(fileURLWithPath: curl), args, timeout: 60)
        #expect(p.status == 0, "\(p.stderr)")
        for i in 0..<10 {
            let n = (try? Data(contentsOf: dir.appendingPathComponent("p\(i)")))?.count
            #expect(n == (i % 2 == 0 ? NginxProcess.largeBytes : "hello from nginx\n".utf8.count))
        }
    }

    @Test("nghttp -nv (prior knowledge h2c) gets its answer; its GOAWAY is counted")
    func nghttp() throws {
        guard let nghttp = tool("nghttp"), let curl = tool("curl") else { return }
        let gw = try GatewayProcess(config: config())
        defer { gw.stop() }
        let r = try runProcess(URL(fileURLWithPath: nghttp), ["-nv", "--timeout=10", gw.url("h2", "/nghttp")], timeout: 30)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout.contains(":status: 200"))
        #expect(r.stdout.contains("recv DATA frame"))  // -n discards the body itself
        var metrics = ""
        for _ in 0..<50 {
            metrics = try runProcess(URL(fileURLWithPath: curl), ["-sS", gw.url("admin", "/metrics")]).stdout
            if metrics.contains("attest_gateway_h2_goaway_total{reason=\"client_goaway\"}") { break }
            usleep(100_000)
        }
        #expect(metrics.contains("attest_gateway_h2_goaway_total{reason=\"client_goaway\"}"))
    }

    @Test("h2load -n 2000 -c 4 -m 10 completes with 0 errors")
    func h2load() throws {
        guard let h2load = tool("h2load") else { return }
        let gw = try GatewayProcess(config: config())
        defer { gw.stop() }
        let r = try runProcess(URL(fileURLWithPath: h2load), ["-n", "2000", "-c", "4", "-m", "10", gw.url("h2", "/load")], timeout: 60)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout.contains("2000 total, 2000 started, 2000 done, 2000 succeeded, 0 failed, 0 errored, 0 timeout"), "\(r.stdout)")
        #expect(r.stdout.contains("status codes: 2000 2xx"))
    }

    @Test("App Attest over h2c: an assertion-protected request passes with valid headers, is refused without")
    func appAttest() throws {
        guard let curl = tool("curl") else { return }
        let gw = try GatewayProcess(config: config())
        defer { gw.stop() }
        let phone = try ContractDevice(ca: ca, appID: Self.appID, port: HTTPCall.port(gw, "public"))
        #expect(try phone.register().status == 201)
        let challenge = try phone.challenge(purpose: "assert", keyID: phone.keyID)
        let body = "{\"sku\":7}"
        // curl sends :authority 127.0.0.1:<port of the h2 listener>, the authority signed.
        let signed = phone.sign(
            target: "/api/purchase?order=7", body: Array(body.utf8), challenge: challenge, authority: "127.0.0.1:\(HTTPCall.port(gw, "h2"))"
        )
        var args: [String] = ["-X", "POST", "--data-binary", body]
        for (k, v) in signed.headers { args += ["-H", "\(k): \(v)"] }
        let ok = try h2curl(curl, args + [gw.url("h2", "/api/purchase?order=7")])
        #expect(ok.version == "HTTP/2")
        #expect(ok.status == 200, "\(ok.body)")
        let seen = try #require(json(ok.body))
        let headers = try #require(seen["headers"] as? [String: String])
        #expect(headers["X-App-Attest-Verified-Key-Id"] == phone.keyID)
        #expect(headers["X-App-Assertion"] == nil)
        #expect(ok.headers["x-app-attest-next-challenge"] != nil)
        // Replayed (same challenge, same counter) and unsigned: refused with the JSON error shape.
        let replay = try h2curl(curl, args + [gw.url("h2", "/api/purchase?order=7")])
        #expect(replay.status == 401 || replay.status == 403)
        #expect(json(replay.body)?["error"] is String)
        let bare = try h2curl(curl, ["--data-binary", body, gw.url("h2", "/api/purchase")])
        #expect(bare.status == 401)
        #expect(bare.headers["content-type"] == "application/json")
        #expect(json(bare.body)?["error"] is String)
    }

    @Test("upstream down → 502 JSON on h2")
    func upstreamDown() throws {
        guard let curl = tool("curl") else { return }
        let gw = try GatewayProcess(config: config(upstream: "http://127.0.0.1:1"))
        defer { gw.stop() }
        let r = try h2curl(curl, [gw.url("h2", "/down")])
        #expect(r.version == "HTTP/2")
        #expect(r.status == 502)
        #expect(r.headers["content-type"] == "application/json")
        #expect((json(r.body)?["error"] as? String)?.hasPrefix("upstream_") == true)
    }

    @Test("SIGTERM drains an open h2 connection with GOAWAY (two-step), then the process exits 0")
    func drainGoaway() throws {
        let gw = try GatewayProcess(config: config())
        defer { gw.stop() }
        let c = try LoopbackClient(port: HTTPCall.port(gw, "h2"))
        c.send(http2ClientPreface)
        var reader = HTTP2FrameReader(client: c)
        #expect(reader.next()?.type == 0x4)  // the server's SETTINGS: the connection is up
        gw.signal(SIGTERM)
        let goaways = http2CollectGoaways(&reader)
        #expect(goaways.count == 2)
        #expect(goaways.first == 0x7fff_ffff)
        #expect(goaways.last == 0)
        #expect(gw.waitForExit() == 0)
    }
}
