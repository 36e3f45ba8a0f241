import AppAttest
import AppAttestSimulator
import Foundation
import GatewayCrypto
import GatewayTestSupport
import GatewayWire
import Testing

/// Issue 16 §2: `assertion.counter_window` end to end, with a real `gatewayd` (and a real
/// `redis-server` for two instances): the assertions of one key delivered out of order over several
/// connections.
@Suite("Counter window end to end (real gatewayd, software devices)", .serialized, .timeLimit(.minutes(5)))
struct CounterWindowGatewayTests {
    static let appID = "ABCDE12345.com.example.shop"
    let ca: TestCA
    let dir: URL

    init() throws {
        (ca, dir) = try makeTrustedTestCADirectory("gw-window")
    }

    func config(store: String = "{kind: memory, shards: 8, max_challenges_per_key: 8}") -> String {
        """
        workers: 2
        listeners:
          - {name: public, address: 127.0.0.1:0, protocols: [http1, h2c]}
        admin: {address: 127.0.0.1:0}
        limits: {drain_timeout: 2s}
        upstreams:
          - {name: demo, url: demo}
        apps:
          - {team_id: ABCDE12345, bundle_ids: [com.example.shop], environments: [development, production]}
        trust: {extra_roots: [\(dir.appendingPathComponent("root.pem").path)], extra_receipt_roots: [\(dir.appendingPathComponent("receipt-root.pem").path)]}
        attest: {challenge_ttl: 5m, challenge_rate: {per_client: off}}
        store: \(store)
        routes:
          - {name: window-body, match: {path_prefix: /api/window-body}, upstream: demo, assertion: {mode: enforce, bind: body, challenge: "off", counter_window: 64}}
          - {name: strict-body, match: {path_prefix: /api/strict-body}, upstream: demo, assertion: {mode: enforce, bind: body, challenge: "off"}}
          - {name: window, match: {path_prefix: /api/window}, upstream: demo, assertion: {mode: enforce, counter_window: 8}}
          - {name: purchase, match: {path_prefix: /api/purchase}, upstream: demo, assertion: {mode: enforce}}
          - {name: default, match: {path_prefix: /}, upstream: demo}
        """
    }

    /// A registered device on `gw`.
    func device(_ port: UInt16) throws -> ContractDevice {
        let d = try ContractDevice(ca: ca, appID: Self.appID, port: port)
        #expect(try d.register().status == 201)
        return d
    }

    /// `n` assertions of `d` over bodies `{"n":i}` (`bind: body`, no challenge), in the device's
    /// counter order (the i-th carries counter `first + i`).
    static func bodySigned(_ d: ContractDevice, target: String, count n: Int) -> [ContractDevice.Signed] {
        (0..<n).map { i in
            let body = Array("{\"n\":\(i)}".utf8)
            let a = d.device.assert(clientDataHash: SHA256.hash(body))
            return ContractDevice.Signed(
                method: "POST", target: target, body: body,
                headers: [("X-App-Attest-Key-Id", d.keyID), ("X-App-Assertion", Base64.encode(a))], authority: "127.0.0.1:\(d.port)")
        }
    }

    static func raw(_ s: ContractDevice.Signed) -> String {
        var head = "\(s.method) \(s.target) HTTP/1.1\r\nHost: \(s.authority)\r\n"
        for (k, v) in s.headers { head += "\(k): \(v)\r\n" }
        return head + "Content-Length: \(s.body.count)\r\n\r\n" + String(decoding: s.body, as: UTF8.self)
    }

    struct Answer: Sendable {
        var status = 0
        var error: String?
        var next: String?
        var requestID: String?
    }

    /// Sends `requests` over `connections` keep-alive connections at once (connection c sends
    /// requests c, c + connections, … in turn; `ports[c % ports.count]`: which gateway it talks
    /// to); answers by request index.
    static func deliver(_ requests: [ContractDevice.Signed], ports: [UInt16], connections: Int) -> [Answer] {
        let answers = Mutex2([Answer](repeating: Answer(), count: requests.count))
        DispatchQueue.concurrentPerform(iterations: connections) { c in
            guard let conn = try? HTTPTestConnection(port: ports[c % ports.count]) else { return }
            defer { conn.close() }
            for i in stride(from: c, to: requests.count, by: connections) {
                guard let r = try? conn.request(raw(requests[i])) else { return }
                let a = Answer(
                    status: r.status, error: r.json?["error"] as? String, next: r.header("X-App-Attest-Next-Challenge"),
                    requestID: r.json?["requestId"] as? String)
                answers.with { $0[i] = a }
            }
        }
        return answers.with { $0 }
    }

    @Test(
        "64 assertions of one key, shuffled over 8 connections: all accepted with a window, each once; without one the out-of-order ones are counter_replay"
    )
    func shuffledOverEightConnections() throws {
        let gw = try GatewayProcess(config: config())
        defer { gw.stop() }
        let port = HTTPCall.port(gw, "public")
        var rng = SeededRandom(seed: 1614)

        let phone = try device(port)
        let signed = Self.bodySigned(phone, target: "/api/window-body", count: 64)
        let order = Array(0..<64).shuffled(using: &rng)
        let answers = Self.deliver(order.map { signed[$0] }, ports: [port], connections: 8)
        #expect(answers.allSatisfy { $0.status == 200 }, "\(answers.filter { $0.status != 200 }.map { "\($0.status) \($0.error ?? "")" })")
        // Each is accepted once: the same 64 again, in another order, from other connections.
        let again = Self.deliver(Array(0..<64).shuffled(using: &rng).map { signed[$0] }, ports: [port], connections: 8)
        #expect(again.allSatisfy { $0.status == 401 && $0.error == "counter_replay" })

        // Without the window: one connection, the same shuffled order. Exactly the counters above
        // every earlier one pass; the others are counter_replay.
        let tablet = try device(port)
        let strict = Self.bodySigned(tablet, target: "/api/strict-body", count: 64)
        let oneByOne = Self.deliver(order.map { strict[$0] }, ports: [port], connections: 1)
        var highest = -1
        for (position, i) in order.enumerated() {
            if i > highest {
                #expect(oneByOne[position].status == 200, "counter \(i + 1)")
                highest = i
            } else {
                #expect(oneByOne[position].status == 401 && oneByOne[position].error == "counter_replay", "counter \(i + 1)")
            }
        }
        // … and over 8 connections: some refused, every refusal a counter_replay.
        let watch = try device(port)
        let watchSigned = Self.bodySigned(watch, target: "/api/strict-body", count: 64)
        let strict8 = Self.deliver(order.map { watchSigned[$0] }, ports: [port], connections: 8)
        #expect(strict8.contains { $0.status == 401 })
        #expect(strict8.allSatisfy { $0.status == 200 || $0.error == "counter_replay" })
        let metrics = try curl([gw.url("admin", "/metrics")]).1
        #expect(
            metrics.contains(
                "attest_gateway_assertion_verdicts_total{route=\"window-body\",mode=\"enforce\",verdict=\"accepted\",reason=\"ok\"} 64"))
        #expect(
            metrics.contains(
                "attest_gateway_assertion_verdicts_total{route=\"window-body\",mode=\"enforce\",verdict=\"refused\",reason=\"counter_replay\"} 64"
            ))
    }

    /// Sends `requests` as streams of one HTTP/2 connection (prior knowledge, all streams opened
    /// before any answer is read: the gateway gets them multiplexed, in this order); the answer of
    /// each, by request index: 200 with the demo upstream's echo, else the gateway's error code.
    /// (Headers are sent as HPACK literals; answers are told apart by their bodies, so no HPACK
    /// decoder is needed.)
    static func deliverOverHTTP2(_ requests: [ContractDevice.Signed], port: UInt16) throws -> [String] {
        func integer(_ n: Int, prefix: Int) -> [UInt8] {
            let max = (1 << prefix) - 1
            if n < max { return [UInt8(n)] }
            var out = [UInt8(max)]
            var rest = n - max
            while rest >= 128 {
                out.append(UInt8(rest % 128 + 128))
                rest /= 128
            }
            return out + [UInt8(rest)]
        }
        func literal(_ name: String, _ value: String) -> [UInt8] {  // without indexing, new name, no Huffman
            [0x00] + integer(name.utf8.count, prefix: 7) + Array(name.utf8) + integer(value.utf8.count, prefix: 7) + Array(value.utf8)
        }
        func frame(_ type: UInt8, _ flags: UInt8, _ stream: UInt32, _ payload: [UInt8]) -> [UInt8] {
            [
                UInt8(payload.count >> 16 & 0xff), UInt8(payload.count >> 8 & 0xff), UInt8(payload.count & 0xff), type, flags,
                UInt8(stream >> 24 & 0x7f), UInt8(stream >> 16 & 0xff), UInt8(stream >> 8 & 0xff), UInt8(stream & 0xff),
            ] + payload
        }
        let client = try LoopbackClient(port: port)
        defer { client.close() }
        var out = http2ClientPreface
        for (i, r) in requests.enumerated() {
            var block = literal(":method", r.method) + literal(":scheme", "http") + literal(":path", "\(r.target)?i=\(i)")
            block += literal(":authority", r.authority) + literal("content-length", String(r.body.count))
            for (k, v) in r.headers { block += literal(k.lowercased(), v) }
            let stream = UInt32(2 * i + 1)
            out += frame(0x1, 0x4, stream, block) + frame(0x0, 0x1, stream, r.body)  // HEADERS (END_HEADERS), DATA (END_STREAM)
        }
        client.send(out)
        var reader = HTTP2FrameReader(client: client)
        var bodies = [UInt32: [UInt8]]()
        var ended = Set<UInt32>()
        while ended.count < requests.count, let f = reader.next() {
            switch f.type {
            case 0x0:
                bodies[f.stream, default: []] += f.payload
                if f.flags & 0x1 != 0 { ended.insert(f.stream) }
            case 0x1 where f.flags & 0x1 != 0: ended.insert(f.stream)
            case 0x3: ended.insert(f.stream)  // RST_STREAM: no answer
            case 0x4 where f.flags & 0x1 == 0: client.send(frame(0x4, 0x1, 0, []))
            case 0x6 where f.flags & 0x1 == 0: client.send(frame(0x6, 0x1, 0, f.payload))
            case 0x7: throw HTTPCallError("GOAWAY after \(ended.count) answers")
            default: break
            }
        }
        return (0..<requests.count).map { i in
            let text = String(decoding: bodies[UInt32(2 * i + 1)] ?? [], as: UTF8.self)
            let json = (try? JSONSerialization.jsonObject(with: Data(text.utf8))) as? [String: Any]
            if let error = json?["error"] as? String { return error }
            return json?["headers"] != nil ? "200" : "no answer: \(text)"
        }
    }

    @Test(
        "HTTP/2: 64 shuffled assertions of one key as streams of one connection: all accepted with a window, once; without one only those above every earlier stream"
    )
    func shuffledOverHTTP2() throws {
        let gw = try GatewayProcess(config: config())
        defer { gw.stop() }
        let port = HTTPCall.port(gw, "public")
        var rng = SeededRandom(seed: 1617)
        let phone = try device(port)
        let signed = Self.bodySigned(phone, target: "/api/window-body", count: 64)
        let order = Array(0..<64).shuffled(using: &rng)
        #expect(try Self.deliverOverHTTP2(order.map { signed[$0] }, port: port) == [String](repeating: "200", count: 64))
        #expect(try Self.deliverOverHTTP2(order.map { signed[$0] }, port: port) == [String](repeating: "counter_replay", count: 64))
        // Without a window, exactly the counters above every earlier stream's pass.
        let tablet = try device(port)
        let strict = Self.bodySigned(tablet, target: "/api/strict-body", count: 64)
        let answers = try Self.deliverOverHTTP2(order.map { strict[$0] }, port: port)
        var highest = -1
        for (position, i) in order.enumerated() {
            #expect(answers[position] == (i > highest ? "200" : "counter_replay"), "counter \(i + 1)")
            highest = max(highest, i)
        }
        #expect(try curl([gw.url("admin", "/metrics")]).1.contains("protocol=\"h2\""))
    }

    /// What a well-behaved app does on HTTP/2 or several connections: sign in counter order, each
    /// request with its own challenge, send without waiting; the next challenges of the answers
    /// sign the next requests. Eight in flight need eight live challenges per key.
    @Test("bind: request with a challenge each, 8 in flight over 8 connections, 8 rounds: all 64 accepted; explain shows the window")
    func challengesInFlight() throws {
        let gw = try GatewayProcess(config: config())
        defer { gw.stop() }
        let port = HTTPCall.port(gw, "public")
        let phone = try device(port)
        var challenges = try (0..<8).map { _ in try phone.challenge(purpose: "assert", keyID: phone.keyID) }
        var all: [ContractDevice.Signed] = []
        for round in 0..<8 {
            let signed = challenges.enumerated().map { i, c in
                phone.sign(target: "/api/window/\(round)?i=\(i)", body: Array("{\"r\":\(round)}".utf8), challenge: c)
            }
            all += signed
            let answers = Self.deliver(signed.reversed(), ports: [port], connections: 8)
            #expect(answers.allSatisfy { $0.status == 200 }, "round \(round): \(answers.map { "\($0.status) \($0.error ?? "")" })")
            challenges = answers.compactMap(\.next)
            #expect(challenges.count == 8)
        }
        // Replays: refused (counter_replay, the challenges being consumed too); explain shows the window.
        let replay = Self.deliver([all[60]], ports: [port], connections: 1)[0]
        #expect(replay.status == 401 && replay.error == "counter_replay")
        let id = try #require(replay.requestID)
        let explain = try curl([gw.url("admin", "/explain/\(id)")])
        #expect(explain.0 == 200)
        for field in [
            "\"counter_window\":\"8\"", "\"counter_window_floor\":\"57\"", "\"counter_window_open\":\"none\"",
            "\"counter_window_reason\":\"already_accepted\"", "\"counter_stored_at_commit\":\"64\"",
        ] {
            #expect(explain.1.contains(field), "\(field) in \(explain.1)")
        }
        let old = Self.deliver([all[3]], ports: [port], connections: 1)[0]
        let oldExplain = try curl([gw.url("admin", "/explain/\(try #require(old.requestID))")])
        #expect(
            oldExplain.1.contains("\"counter_window_reason\":\"below_window\"") && oldExplain.1.contains("\"step\":\"verify\""),
            "\(oldExplain.1)")

        // With the default of 4 live challenges per key, the first of 8 fetched are replaced: that
        // device gets challenge_unknown for them (docs/configuration.md: raise max_challenges_per_key).
        let four = try GatewayProcess(config: config(store: "{kind: memory, shards: 8}"))
        defer { four.stop() }
        let fourPort = HTTPCall.port(four, "public")
        let tablet = try device(fourPort)
        let eight = try (0..<8).map { _ in try tablet.challenge(purpose: "assert", keyID: tablet.keyID) }
        let signed = eight.enumerated().map { i, c in tablet.sign(target: "/api/window?i=\(i)", body: [], challenge: c) }
        let answers = Self.deliver(signed, ports: [fourPort], connections: 1)
        #expect(
            answers.prefix(4).allSatisfy { $0.error == "challenge_unknown" } && answers.suffix(4).allSatisfy { $0.status == 200 },
            "\(answers.map { "\($0.status) \($0.error ?? "")" })")
    }

    @Test("kill -9 and restart, twice: every accepted counter stays refused, every counter never sent stays open")
    func killAndRestartKeepsTheWindow() throws {
        let data = dir.appendingPathComponent("data-\(UUID().uuidString)").path
        let store = "{kind: memory, shards: 8, data_dir: \(data), snapshot_interval: 1s}"
        var gw = try GatewayProcess(config: config(store: store))
        var port = HTTPCall.port(gw, "public")
        var rng = SeededRandom(seed: 1615)
        let phone = try device(port)
        let signed = Self.bodySigned(phone, target: "/api/window-body", count: 60)
        var order = Array(0..<60).shuffled(using: &rng)
        var accepted: [Int] = []
        for round in 0..<2 {
            // Half of what is left is sent (out of order); the rest stays open in the window.
            let now = Array(order.prefix(order.count / 2))
            order.removeFirst(now.count)
            let answers = Self.deliver(now.map { signed[$0] }, ports: [port], connections: 8)
            #expect(answers.allSatisfy { $0.status == 200 }, "round \(round)")
            accepted += now
            if round == 0 { usleep(1_300_000) }  // a snapshot covers some of it, the journal the rest
            gw.signal(SIGKILL)
            gw.waitForExit()
            gw = try GatewayProcess(config: config(store: store))
            port = HTTPCall.port(gw, "public")
            #expect(gw.stderr.contains("\"last_stop\":\"unclean\""))
            let replays = Self.deliver(accepted.map { signed[$0] }, ports: [port], connections: 8)
            #expect(
                replays.allSatisfy { $0.status == 401 && $0.error == "counter_replay" }, "round \(round): an accepted counter passed again")
        }
        let rest = Self.deliver(order.map { signed[$0] }, ports: [port], connections: 8)
        #expect(rest.allSatisfy { $0.status == 200 }, "\(rest.map(\.status))")
        gw.stop()
    }

    @Test(
        "two gatewayd instances on one Redis: 64 shuffled assertions of one key over both, each accepted once",
        .enabled(if: RedisProcess.testsEnabled, Comment(rawValue: RedisProcess.skipMessage)))
    func twoInstancesOnRedis() throws {
        let redis = try RedisProcess()
        defer { redis.stop() }
        let store = "{kind: redis, url: \(redis.url), timeout: 1s}"
        let a = try GatewayProcess(config: config(store: store))
        defer { a.stop() }
        let b = try GatewayProcess(config: config(store: store))
        defer { b.stop() }
        let ports = [HTTPCall.port(a, "public"), HTTPCall.port(b, "public")]
        var rng = SeededRandom(seed: 1616)
        let phone = try device(ports[0])
        let signed = Self.bodySigned(phone, target: "/api/window-body", count: 64)
        let answers = Self.deliver(Array(0..<64).shuffled(using: &rng).map { signed[$0] }, ports: ports, connections: 8)
        #expect(answers.allSatisfy { $0.status == 200 }, "\(answers.map { "\($0.status) \($0.error ?? "")" })")
        // The same 64, each sent to both instances at once: all refused.
        let twice = Self.deliver(Array(0..<64).shuffled(using: &rng).flatMap { [signed[$0], signed[$0]] }, ports: ports, connections: 8)
        #expect(twice.allSatisfy { $0.status == 401 && $0.error == "counter_replay" })
        // Challenges in flight across both instances: the next challenge one issued is used at the other.
        var challenges = try (0..<4).map { _ in try phone.challenge(purpose: "assert", keyID: phone.keyID) }
        for round in 0..<4 {
            let batch = challenges.enumerated().map { i, c in phone.sign(target: "/api/window?r=\(round)&i=\(i)", body: [], challenge: c) }
            let r = Self.deliver(batch.reversed(), ports: ports, connections: 4)
            #expect(r.allSatisfy { $0.status == 200 }, "round \(round): \(r.map { "\($0.status) \($0.error ?? "")" })")
            challenges = r.compactMap(\.next)
        }
    }
}
