import AppAttestSimulator
import Foundation
import GatewayCrypto
import GatewayTestSupport
import GatewayWire
import Synchronization
import Testing

/// One client address floods `POST /v1/attest/challenge` (loopback 127.0.0.1) while clients at
/// other addresses (127.0.0.2, 127.0.0.3: all of 127/8 is loopback on Linux) register new devices,
/// fetch challenges and send protected requests chaining `X-App-Attest-Next-Challenge`. Issue 18:
/// before the budgets and the per-client buckets, the flood filled the store and everyone got
/// `503 challenge_capacity`.
@Suite("A flood of anonymous challenges from one address (real gatewayd, software devices)", .serialized, .timeLimit(.minutes(3)))
struct ChallengeFloodTests {
    static let appID = "ABCDE12345.com.example.shop"
    static let floodSeconds = 4.0
    let ca: TestCA
    let dir: URL

    init() throws {
        (ca, dir) = try makeTrustedTestCADirectory("gw-flood")
    }

    /// Small budgets, so that a flood at loopback speed would fill them many times over.
    func config(challengeRate: String) -> String {
        """
        \(TestGatewayYAML.base(caDir: dir))
        attest: {challenge_ttl: 5m, challenge_rate: \(challengeRate)}
        store: {kind: memory, shards: 8, max_anonymous_challenges: 256, max_key_bound_challenges: 256}
        routes:
          - name: purchase
            match: {methods: [POST], path_prefix: /api/purchase}
            upstream: demo
            assertion: {mode: enforce}
          - {name: default, match: {path_prefix: /}, upstream: demo}
        """
    }

    @Test(
        "limited per client: the flooder gets 429 beyond its bucket; registration, challenges and chained requests of others: ≥ 99 % succeed"
    )
    func floodLimitedPerClient() throws {
        let gw = try GatewayProcess(config: config(challengeRate: "{per_client: 20/s, burst: 40}"))
        defer { gw.stop() }
        let port = HTTPCall.port(gw, "public")
        let flood = Flooder(port: port, source: "127.0.0.1", threads: 3)
        let others = try Others(ca: ca, port: port, sources: ["127.0.0.2", "127.0.0.3"], registerEvery: 25)
        flood.start()
        let measured = others.run(seconds: Self.floodSeconds)
        let flooded = flood.stop()

        let rate = measured.successRate
        print("flood (per_client 20/s): flooder \(flooded), others \(measured)")
        #expect(rate >= 0.99, "others' success rate \(rate) during the flood: \(measured)")
        #expect(
            measured.registrations.attempts >= 8 && measured.fetches.attempts >= 20 && measured.requests.attempts >= 200,
            "too little measured: \(measured)")
        // The flooder was limited: a burst of 40 and 20/s over the flood, nothing more.
        let issued = flooded[201, default: 0]
        #expect(issued <= 40 + Int(20 * (Self.floodSeconds + 2)), "\(flooded)")
        #expect(flooded[429, default: 0] > 10 * issued, "\(flooded)")
        let metrics = try curl([gw.url("admin", "/metrics")]).1
        #expect(metrics.contains("attest_gateway_rate_limited_total{limit=\"client\",endpoint=\"challenge\"}"))
        // One log line when the limit first bit (then at most one per 10 s), naming the client.
        let lines = gw.stderrLines.filter { $0.contains("challenge limits in effect") }
        #expect((1...2).contains(lines.count), "\(lines)")
        #expect(lines.first?.contains("\"last_limited_client\":\"127.0.0.1\"") == true, "\(lines)")
    }

    @Test("without per-client buckets: the budgets alone keep registered keys' challenges working under an unlimited flood")
    func floodUnlimitedBudgetsOnly() throws {
        let gw = try GatewayProcess(config: config(challengeRate: "{per_client: off}"))
        defer { gw.stop() }
        let port = HTTPCall.port(gw, "public")
        // Registered before the flood; during it they chain next challenges and re-challenge by keyId.
        let others = try Others(ca: ca, port: port, sources: ["127.0.0.2", "127.0.0.3"], registerEvery: 0)
        let flood = Flooder(port: port, source: "127.0.0.1", threads: 3)
        flood.start()
        let measured = others.run(seconds: Self.floodSeconds)
        let flooded = flood.stop()

        print("flood (no per-client limit): flooder \(flooded), others \(measured)")
        #expect(measured.successRate >= 0.99, "\(measured)")
        #expect(measured.fetches.attempts >= 20 && measured.requests.attempts >= 200, "\(measured)")
        // The flood went through (nothing limited it) and made the anonymous budget replace its oldest.
        #expect(flooded[201, default: 0] > 1_000, "\(flooded)")
        #expect(flooded.keys.allSatisfy { $0 == 201 }, "\(flooded)")
        usleep(1_200_000)  // the store's gauges and eviction counters are read once a second
        let metrics = try curl([gw.url("admin", "/metrics")]).1
        let evicted = Self.value(metrics, "attest_gateway_challenges_evicted_total{budget=\"anonymous\"}") ?? 0
        #expect(evicted > 500, "\(metrics.split(separator: "\n").filter { $0.contains("evicted") })")
        let live = Self.value(metrics, "attest_gateway_store_live_challenges") ?? .infinity
        #expect(live <= 512)
    }

    @Test("the bench's tools: attest-sim flood from one address, attest-sim run from another, each client counted apart")
    func attestSimFloodAndRun() throws {
        let simCA = dir.appendingPathComponent("sim-ca-\(UUID().uuidString)")
        let made = try runProcess(AttestSimEndToEndTests.attestSim, ["ca", "--out", simCA.path])
        try #require(made.status == 0, "\(made.stderr)")
        let gw = try GatewayProcess(
            config: config(challengeRate: "{per_client: 20/s, burst: 40}")
                .replacingOccurrences(of: dir.appendingPathComponent("root.pem").path, with: simCA.appendingPathComponent("root.pem").path)
                .replacingOccurrences(
                    of: dir.appendingPathComponent("receipt-root.pem").path, with: simCA.appendingPathComponent("receipt-root.pem").path))
        defer { gw.stop() }
        let url = gw.url("public", "")
        let flood = Process()
        flood.executableURL = AttestSimEndToEndTests.attestSim
        flood.arguments = ["flood", "--gateway", url, "--seconds", "3", "--connections", "2", "--source", "127.0.0.7", "--json"]
        let out = Pipe()
        flood.standardOutput = out
        try flood.run()
        defer { if flood.isRunning { flood.terminate() } }
        let run = try runProcess(
            AttestSimEndToEndTests.attestSim,
            [
                "run", "--gateway", url, "--ca", simCA.path, "--app-id", Self.appID, "--devices", "4", "--requests", "200",
                "--source", "127.0.0.2", "--json",
            ], timeout: 60)
        let floodJSON = out.fileHandleForReading.readDataToEndOfFile()
        flood.waitUntilExit()
        #expect(run.status == 0, "\(run.stdout) \(run.stderr)")
        #expect(run.json?["verdicts"] as? [String: Int] == ["200": 200])
        let report = try #require(try JSONSerialization.jsonObject(with: floodJSON) as? [String: Any])
        let answers = report["answers"] as? [String: Int] ?? [:]
        #expect(answers["429 rate_limited", default: 0] > 100, "\(report)")
        #expect((report["issued"] as? Int ?? .max) <= 40 + 20 * 5, "\(report)")
        let lines = gw.stderrLines.filter { $0.contains("challenge limits in effect") }
        #expect(lines.first?.contains("\"last_limited_client\":\"127.0.0.7\"") == true, "\(lines)")
    }

    static func value(_ metrics: String, _ series: String) -> Double? {
        metrics.split(separator: "\n").first { $0.hasPrefix(series + " ") }.flatMap { Double($0.split(separator: " ").last ?? "") }
    }
}

/// Tallies of one kind of operation by the well-behaved clients.
struct Tally: CustomStringConvertible {
    var attempts = 0
    var successes = 0
    var failures: [String] = []

    mutating func record(_ ok: Bool, _ what: @autoclosure () -> String) {
        attempts += 1
        if ok { successes += 1 } else if failures.count < 5 { failures.append(what()) }
    }

    mutating func merge(_ o: Tally) {
        attempts += o.attempts
        successes += o.successes
        failures += o.failures.prefix(max(0, 5 - failures.count))
    }

    var description: String { "\(successes)/\(attempts)\(failures.isEmpty ? "" : " \(failures)")" }
}

struct Measured: CustomStringConvertible {
    var registrations = Tally()
    var fetches = Tally()
    var requests = Tally()

    var successRate: Double {
        let attempts = registrations.attempts + fetches.attempts + requests.attempts
        return attempts == 0 ? 0 : Double(registrations.successes + fetches.successes + requests.successes) / Double(attempts)
    }

    var description: String {
        "registrations \(registrations), challenges \(fetches), protected requests \(requests), success \(String(format: "%.4f", successRate))"
    }
}

/// Well-behaved clients: per source address one thread with two registered devices, paced at
/// 50 operations a second (so their own challenge requests stay well under a per-client 20/s).
/// Each operation is a protected request signed over the device's chained next challenge; every
/// 10th operation first fetches a fresh challenge naming the key; every `registerEvery`th
/// registers a new device (challenge with purpose register and keyId, attestation, registration).
final class Others: @unchecked Sendable {
    let ca: TestCA
    let port: UInt16
    let sources: [String]
    let registerEvery: Int
    private var devices: [[(device: ContractDevice, next: String?)]] = []

    init(ca: TestCA, port: UInt16, sources: [String], registerEvery: Int) throws {
        self.ca = ca
        self.port = port
        self.sources = sources
        self.registerEvery = registerEvery
        for source in sources {
            var mine: [(ContractDevice, String?)] = []
            for _ in 0..<2 {
                let d = try ContractDevice(ca: ca, appID: ChallengeFloodTests.appID, port: port, source: source)
                let r = try d.register()
                guard r.status == 201 else { throw HTTPCallError("setup registration: \(r.status) \(r.body)") }
                mine.append((d, nil))
            }
            devices.append(mine)
        }
    }

    func run(seconds: Double) -> Measured {
        let results = Mutex<[Measured]>([])
        let group = DispatchGroup()
        for (i, source) in sources.enumerated() {
            group.enter()
            let thread = Thread { [self] in
                let m = self.work(source: source, devices: self.devices[i], seconds: seconds)
                results.withLock { $0.append(m) }
                group.leave()
            }
            thread.start()
        }
        group.wait()
        var total = Measured()
        for m in results.withLock({ $0 }) {
            total.registrations.merge(m.registrations)
            total.fetches.merge(m.fetches)
            total.requests.merge(m.requests)
        }
        return total
    }

    private func fetch(_ d: ContractDevice, purpose: String) -> HTTPCall? {
        let body = Array("{\"purpose\":\"\(purpose)\",\"keyId\":\"\(d.keyID)\"}".utf8)
        return try? HTTPCall.send(port: port, method: "POST", target: "/v1/attest/challenge", body: body, source: d.source)
    }

    private func work(source: String, devices start: [(device: ContractDevice, next: String?)], seconds: Double) -> Measured {
        var m = Measured()
        var devices = start
        let deadline = Date().addingTimeInterval(seconds)
        var op = 0
        while Date() < deadline {
            let began = Date()
            op += 1
            if registerEvery > 0 && op % registerEvery == 0,
                let d = try? ContractDevice(ca: ca, appID: ChallengeFloodTests.appID, port: port, source: source)
            {
                let ok: Bool
                let why: String
                if let c = fetch(d, purpose: "register"), c.status == 201, let challenge = c.json?["challenge"] as? String {
                    let r = try? d.register(challenge: challenge)
                    ok = r?.status == 201
                    why = "register: " + (r.map { "\($0.status) \($0.body)" } ?? "no answer")
                } else {
                    ok = false
                    why = "registration challenge refused"
                }
                m.registrations.record(ok, why)
                if ok { devices.append((d, nil)) }
            }
            let i = op % devices.count
            var challenge = devices[i].next
            if challenge == nil || op % 10 == 0 {
                let c = fetch(devices[i].device, purpose: "assert")
                m.fetches.record(c?.status == 201, "challenge: \(c.map { "\($0.status) \($0.body)" } ?? "no answer")")
                challenge = c?.json?["challenge"] as? String
            }
            if let challenge {
                let d = devices[i].device
                let r = try? d.send(d.sign(target: "/api/purchase?op=\(op)", body: Array("{\"op\":\(op)}".utf8), challenge: challenge))
                let next = r?.headers["x-app-attest-next-challenge"]
                // Success: accepted, and the next challenge came with it (the chain goes on).
                m.requests.record(r?.status == 200 && next != nil, "request: \(r.map { "\($0.status) \($0.body)" } ?? "no answer")")
                devices[i].next = r?.status == 200 ? next : nil
            }
            let spent = Date().timeIntervalSince(began)
            if spent < 0.02 { usleep(UInt32((0.02 - spent) * 1_000_000)) }
        }
        return m
    }
}

/// Threads sending `POST /v1/attest/challenge` back to back on keep-alive connections from one
/// source address, counting answers by status.
final class Flooder: @unchecked Sendable {
    let port: UInt16
    let source: String
    let threads: Int
    private let stopping = Atomic<Bool>(false)
    private let counts = Mutex<[Int: Int]>([:])
    private let group = DispatchGroup()

    init(port: UInt16, source: String, threads: Int) {
        self.port = port
        self.source = source
        self.threads = threads
    }

    func start() {
        for _ in 0..<threads {
            group.enter()
            let t = Thread { [self] in
                var local: [Int: Int] = [:]
                self.flood(&local)
                self.counts.withLock { c in for (k, v) in local { c[k, default: 0] += v } }
                self.group.leave()
            }
            t.start()
        }
    }

    /// Stops the threads; the answers by status (0: no answer).
    func stop() -> [Int: Int] {
        stopping.store(true, ordering: .relaxed)
        group.wait()
        return counts.withLock { $0 }
    }

    private func flood(_ local: inout [Int: Int]) {
        let request = Array("POST /v1/attest/challenge HTTP/1.1\r\nHost: flood\r\nContent-Length: 0\r\n\r\n".utf8)
        var client: LoopbackClient?
        var buffer: [UInt8] = []
        while !stopping.load(ordering: .relaxed) {
            if client == nil {
                client = try? LoopbackClient(port: port, source: source)
                buffer = []
                if client == nil {
                    local[0, default: 0] += 1
                    usleep(1_000)
                    continue
                }
            }
            client!.send(request)
            guard let status = Self.readResponse(client!, &buffer) else {
                client?.close()
                client = nil
                local[0, default: 0] += 1
                continue
            }
            local[status, default: 0] += 1
        }
        client?.close()
    }

    /// One response (head and Content-Length body) off a keep-alive connection; nil when closed.
    static func readResponse(_ c: LoopbackClient, _ buffer: inout [UInt8]) -> Int? {
        let separator: [UInt8] = [13, 10, 13, 10]
        while true {
            if let end = buffer.firstRange(of: separator) {
                let head = String(decoding: buffer[..<end.lowerBound], as: UTF8.self)
                let lines = head.split(separator: "\r\n")
                guard let status = lines.first.flatMap({ Int($0.split(separator: " ")[1]) }) else { return nil }
                let length =
                    lines.dropFirst().compactMap { line -> Int? in
                        let parts = line.split(separator: ":", maxSplits: 1)
                        guard parts.count == 2, parts[0].lowercased() == "content-length" else { return nil }
                        return Int(parts[1].trimmingCharacters(in: .whitespaces))
                    }.first ?? 0
                let total = end.upperBound + length
                while buffer.count < total {
                    let more = c.receiveSome()
                    if more.isEmpty { return nil }
                    buffer += more
                }
                buffer.removeFirst(total)
                return status
            }
            let more = c.receiveSome()
            if more.isEmpty { return nil }
            buffer += more
        }
    }
}

@Suite("Admission: registration budget and per-client buckets (real gatewayd)", .serialized, .timeLimit(.minutes(2)))
struct AdmissionTests {
    let ca: TestCA
    let dir: URL

    init() throws {
        (ca, dir) = try makeTrustedTestCADirectory("gw-admission")
    }

    func config(_ attest: String) -> String {
        """
        workers: 2
        listeners:
          - {name: public, address: 127.0.0.1:0}
        admin: {address: 127.0.0.1:0}
        upstreams:
          - {name: demo, url: demo}
        apps:
          - {team_id: ABCDE12345, bundle_ids: [com.example.shop], environments: [development, production]}
        trust: {extra_roots: [\(dir.appendingPathComponent("root.pem").path)], extra_receipt_roots: [\(dir.appendingPathComponent("receipt-root.pem").path)]}
        attest: \(attest)
        routes:
          - {name: default, match: {path_prefix: /}, upstream: demo}
        """
    }

    @Test(
        "registration_rate: challenges with purpose register take a token; a registration with a purpose-less challenge takes one; 429 with Retry-After above it"
    )
    func registrationBudget() throws {
        let gw = try GatewayProcess(config: config("{registration_rate: 2/s}"))
        defer { gw.stop() }
        let port = HTTPCall.port(gw, "public")
        let a = try ContractDevice(ca: ca, appID: ChallengeFloodTests.appID, port: port)
        let b = try ContractDevice(ca: ca, appID: ChallengeFloodTests.appID, port: port)
        let challengeA = try a.challenge(purpose: "register", keyID: a.keyID)
        _ = try b.challenge(purpose: "register", keyID: b.keyID)
        let unbound = try b.challenge()  // no purpose: not counted here
        // The budget (burst 2) is spent: the next registration challenge is refused, before the app attests.
        let refused = try HTTPCall.send(
            port: port, method: "POST", target: "/v1/attest/challenge",
            body: Array("{\"purpose\":\"register\"}".utf8))
        #expect(refused.status == 429)
        #expect(refused.headers["retry-after"] == "1")
        #expect(refused.error == "rate_limited")
        #expect(refused.json?["action"] as? String == "retry_later")
        #expect(refused.json?["limit"] as? String == "registration")
        // A registration whose challenge was admitted when issued goes through, budget or not.
        #expect(try a.register(challenge: challengeA).status == 201)
        // One with a purpose-less challenge is admitted at the register endpoint: refused now, and the
        // same request (same challenge, same attestation) later passes.
        let attestation = try b.device.attest(clientDataHash: SHA256Digest.hash(unbound))
        let body = Array("{\"keyId\":\"\(b.keyID)\",\"attestation\":\"\(Base64.encode(attestation))\",\"challenge\":\"\(unbound)\"}".utf8)
        let limited = try HTTPCall.send(port: port, method: "POST", target: "/v1/attest/register", body: body)
        #expect(limited.status == 429)
        #expect(limited.json?["limit"] as? String == "registration")
        // A registration with a challenge that was never issued does not go through the (empty)
        // budget: the registration itself refuses it (here its attestation, made over another challenge).
        let bogus = try HTTPCall.send(
            port: port, method: "POST", target: "/v1/attest/register",
            body: Array(
                "{\"keyId\":\"\(b.keyID)\",\"attestation\":\"\(Base64.encode(attestation))\",\"challenge\":\"AAAAAAAAAAAAAAAAAAAAAA\"}".utf8
            ))
        #expect(bogus.status == 401)
        #expect(bogus.error == "nonce_mismatch")
        usleep(1_100_000)
        #expect(try HTTPCall.send(port: port, method: "POST", target: "/v1/attest/register", body: body).status == 201)
        let metrics = try curl([gw.url("admin", "/metrics")]).1
        #expect(metrics.contains("attest_gateway_rate_limited_total{limit=\"registration\",endpoint=\"challenge\"} 1"))
        #expect(metrics.contains("attest_gateway_rate_limited_total{limit=\"registration\",endpoint=\"register\"} 1"))
    }

    @Test("challenge_rate: one bucket per client for both endpoints; other clients are not affected; off turns it off")
    func perClientBucket() throws {
        let gw = try GatewayProcess(config: config("{challenge_rate: {per_client: 1/m, burst: 3}, registration_rate: off}"))
        defer { gw.stop() }
        let port = HTTPCall.port(gw, "public")
        func challenge(_ source: String) throws -> HTTPCall {
            try HTTPCall.send(port: port, method: "POST", target: "/v1/attest/challenge", source: source)
        }
        #expect(try challenge("127.0.0.4").status == 201)
        #expect(try challenge("127.0.0.4").status == 201)
        let register = try HTTPCall.send(
            port: port, method: "POST", target: "/v1/attest/register", body: Array("{}".utf8), source: "127.0.0.4")
        #expect(register.status == 400)  // counted (its body was read and refused)
        let limited = try challenge("127.0.0.4")
        #expect(limited.status == 429)
        #expect(limited.json?["limit"] as? String == "client")
        #expect(Int(limited.headers["retry-after"] ?? "") ?? 0 >= 55)  // a token every 60 s
        let limitedRegister = try HTTPCall.send(
            port: port, method: "POST", target: "/v1/attest/register", body: Array("{}".utf8), source: "127.0.0.4")
        #expect(limitedRegister.status == 429)
        #expect(try challenge("127.0.0.5").status == 201)

        // A reload keeps the table (same size): the client stays limited; turning the limit off lets it in.
        func reload(_ attest: String, _ n: Int) throws {
            try config(attest).write(to: gw.configURL, atomically: true, encoding: .utf8)
            gw.signal(SIGHUP)
            let deadline = Date().addingTimeInterval(10)
            while gw.stderrLines.filter({ $0.contains("configuration reloaded") }).count < n && Date() < deadline { usleep(20_000) }
            try #require(gw.stderrLines.filter { $0.contains("configuration reloaded") }.count == n, "\(gw.stderr)")
        }
        try reload("{challenge_rate: {per_client: 1/m, burst: 3}, registration_rate: off, challenge_ttl: 4m}", 1)
        #expect(try challenge("127.0.0.4").status == 429)
        try reload("{challenge_rate: {per_client: off}, registration_rate: off}", 2)
        #expect(try challenge("127.0.0.4").status == 201)

        let open = try GatewayProcess(config: config("{challenge_rate: {per_client: off}}"))
        defer { open.stop() }
        let openPort = HTTPCall.port(open, "public")
        for _ in 0..<30 {
            #expect(try HTTPCall.send(port: openPort, method: "POST", target: "/v1/attest/challenge", source: "127.0.0.4").status == 201)
        }
    }
}

/// SHA-256 of a challenge's text, as the app computes clientDataHash for registration.
enum SHA256Digest {
    static func hash(_ text: String) -> [UInt8] { SHA256.hash(Array(text.utf8)) }
}
