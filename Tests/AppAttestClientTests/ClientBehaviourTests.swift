import AppAttestClient
import Foundation
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// The client's decisions against a gateway played in memory (`ScriptedGateway`): headers and hashes,
/// what it retries and how often, what it returns and what it throws.
@Suite("AppAttestClient: headers, retries and errors (scripted gateway)")
struct ClientBehaviourTests {
    static let gateway = URL(string: "https://shop.example.com")!

    func client(
        _ transport: ScriptedGateway, service: FakeService = FakeService(), store: any KeyIDStore = InMemoryKeyIDStore(),
        routes: [AppAttestClient.Route] = [], retry: AppAttestClient.RetryPolicy = .init(), timing: TestTiming = TestTiming(),
        whenUnsupported: AppAttestClient.UnsupportedBehaviour = .fail
    ) -> AppAttestClient {
        AppAttestClient(
            configuration: .init(gateway: Self.gateway, routes: routes, retry: retry, whenUnsupported: whenUnsupported),
            service: service, keyStore: store, transport: transport, timing: timing.timing)
    }

    static func post(_ url: String, _ body: String) -> URLRequest {
        var r = URLRequest(url: URL(string: url)!)
        r.httpMethod = "POST"
        r.httpBody = Data(body.utf8)
        return r
    }

    /// The contract's worked example through the whole client: the registration, then the protected
    /// request with its three headers over clientDataHash = the contract's SHA-256.
    @Test("the contract's example: registration body and hash, the three headers, clientDataHash v2 and v1")
    func headersOfTheContractExample() async throws {
        for (version, expected) in [(AppAttestClient.ClientDataVersion.v2, ClientDataTests.v2SHA256), (.v1, ClientDataTests.v1SHA256)] {
            let gw = ScriptedGateway { call in
                call.isChallenge
                    ? .json(201, "{\"challenge\":\"\(ClientDataTests.challenge)\",\"expiresAt\":\"2999-01-01T00:00:00Z\"}") : nil
            }
            let service = FakeService()
            let c = client(gw, service: service, routes: [.init(pathPrefix: "/api/purchase", binding: .request(version))])
            let (data, response) = try await c.send(
                Self.post("https://Shop.Example.com:443/api/purchase?order=7", "{\"sku\":\"A-1\",\"qty\":2}"))
            #expect(response.statusCode == 200 && String(decoding: data, as: UTF8.self) == "ok")

            // Registration: a challenge for this key and purpose, attested over SHA256(challenge text).
            let challengeCalls = gw.challengeCalls
            #expect(challengeCalls.count == 2)
            #expect(challengeCalls[0].request.url?.absoluteString == "https://shop.example.com/v1/attest/challenge")
            #expect(challengeCalls[0].request.httpMethod == "POST")
            #expect(challengeCalls[0].bodyText == "{\"purpose\":\"register\",\"keyId\":\"key-1\"}")
            #expect(challengeCalls[1].bodyText == "{\"purpose\":\"assert\",\"keyId\":\"key-1\"}")
            #expect(service.attestedHashes.map(hex) == [hex(AttestClientData.registrationHash(challenge: ClientDataTests.challenge))])
            let register = try #require(gw.registerCalls.first)
            let attestation = Data("attestation key-1".utf8).base64EncodedString()
            #expect(
                register.bodyText
                    == "{\"keyId\":\"key-1\",\"attestation\":\"\(attestation)\",\"challenge\":\"\(ClientDataTests.challenge)\"}")

            // The protected request: signed over the contract's clientDataHash, sent as built.
            #expect(service.assertedHashes.map(hex) == [expected])
            let sent = try #require(gw.protectedCalls.first)
            #expect(sent.request.url?.absoluteString == "https://Shop.Example.com:443/api/purchase?order=7")
            #expect(sent.request.httpMethod == "POST")
            #expect(sent.bodyText == "{\"sku\":\"A-1\",\"qty\":2}")
            #expect(sent.header("X-App-Attest-Key-Id") == "key-1")
            #expect(sent.header("X-App-Attest-Challenge") == ClientDataTests.challenge)
            #expect(sent.header("X-App-Assertion") == Data("assertion key-1 1".utf8).base64EncodedString())
        }
    }

    @Test("the next challenge of a verified response signs the next request; no fetch")
    func nextChallengeIsUsed() async throws {
        let gw = ScriptedGateway()
        let c = client(gw)
        for i in 0..<5 { _ = try await c.send(Self.post("https://shop.example.com/api/purchase?i=\(i)", "{}")) }
        let sent = gw.protectedCalls
        #expect(sent.map { $0.header("X-App-Attest-Challenge") } == ["ch-2", "next-1", "next-2", "next-3", "next-4"])
        #expect(gw.challengeCalls.count == 2)  // one for the registration, one for the first request
        let stats = await c.statistics
        #expect(stats.nextChallengesUsed == 4 && stats.challengesFetched == 2 && stats.registrations == 1)
    }

    @Test("a kept challenge close to its expiry (device clock) is not used: a fresh one is fetched")
    func expiringNextChallengeIsNotUsed() async throws {
        let timing = TestTiming()
        let expires = ISO8601DateFormatter().string(from: timing.now.addingTimeInterval(60))
        let gw = ScriptedGateway { call in
            call.isChallenge || call.isRegister ? nil : .verified(next: "n\(call.protectedIndex)", expires: expires)
        }
        let c = client(gw, timing: timing)
        _ = try await c.send(Self.post("https://shop.example.com/api/a", ""))
        _ = try await c.send(Self.post("https://shop.example.com/api/a", ""))  // 60 s left: used
        timing.advance(56)  // 4 s left, under the 5 s margin
        _ = try await c.send(Self.post("https://shop.example.com/api/a", ""))
        #expect(gw.protectedCalls.map { $0.header("X-App-Attest-Challenge") } == ["ch-2", "n0", "ch-3"])
    }

    @Test("rechallenge: signed again once over a fresh challenge; a second rechallenge is thrown with its requestId")
    func rechallengeOnce() async throws {
        let gw = ScriptedGateway { call in
            call.isChallenge || call.isRegister
                ? nil : .refusal(401, "challenge_expired", "rechallenge", requestID: "req-\(call.protectedIndex)")
        }
        let c = client(gw)
        let error = await #expect(throws: AppAttestClientError.self) { try await c.send(Self.post("https://shop.example.com/api/a", "x")) }
        guard case .refused(let r)? = error else { Issue.record("not a refusal: \(String(describing: error))"); return }
        #expect(r.code == "challenge_expired" && r.status == 401 && r.action == .rechallenge && r.endpoint == .protected)
        #expect(r.requestID == "req-1" && error?.requestID == "req-1")
        #expect(gw.protectedCalls.count == 2)
        #expect(gw.protectedCalls.map { $0.header("X-App-Attest-Challenge") } == ["ch-2", "ch-3"])
        #expect(await c.statistics.rechallenges == 1)
    }

    @Test("reattest: a new key registered and the request signed again, once; a second reattest is thrown")
    func reattestOnce() async throws {
        let gw = ScriptedGateway { call in
            call.isChallenge || call.isRegister ? nil : .refusal(401, "key_unknown", "reattest", requestID: "r\(call.protectedIndex)")
        }
        let service = FakeService()
        let store = InMemoryKeyIDStore()
        let c = client(gw, service: service, store: store)
        let error = await #expect(throws: AppAttestClientError.self) { try await c.send(Self.post("https://shop.example.com/api/a", "x")) }
        #expect(error?.refusal?.code == "key_unknown" && error?.requestID == "r1")
        #expect(gw.protectedCalls.map { $0.header("X-App-Attest-Key-Id") } == ["key-1", "key-2"])
        #expect(gw.registerCalls.count == 2)
        #expect(try store.load(account: nil) == StoredAttestKey(keyID: "key-2", registered: true))
        #expect(await c.statistics.reattestations == 1)
    }

    @Test("an invalid key (DCError.invalidKey) is replaced by a new registered key and the request succeeds")
    func invalidKeyReplaced() async throws {
        let gw = ScriptedGateway()
        let service = FakeService()
        let store = InMemoryKeyIDStore()
        try store.save(StoredAttestKey(keyID: "key-0", registered: true), account: nil)  // from an earlier install
        service.set { $0.assertErrors = [AppAttestServiceError.invalidKey] }
        let c = client(gw, service: service, store: store)
        let (_, response) = try await c.send(Self.post("https://shop.example.com/api/a", "x"))
        #expect(response.statusCode == 200)
        #expect(gw.protectedCalls.map { $0.header("X-App-Attest-Key-Id") } == ["key-1"])
        #expect(try store.load(account: nil) == StoredAttestKey(keyID: "key-1", registered: true))
        #expect(await c.statistics.reattestations == 1)
    }

    @Test("429/503: Retry-After honoured with jitter, doubling, bounded; then thrown as rateLimited")
    func retryAfterBounded() async throws {
        let gw = ScriptedGateway { call in
            call.isChallenge || call.isRegister
                ? nil : .refusal(503, "store_unavailable", "none", requestID: "s", headers: ["Retry-After": "2"])
        }
        let timing = TestTiming(random: 0.5)
        let c = client(gw, retry: .init(maxWaits: 3), timing: timing)
        let error = await #expect(throws: AppAttestClientError.self) { try await c.send(Self.post("https://shop.example.com/api/a", "x")) }
        guard case .rateLimited(let r)? = error else { Issue.record("\(String(describing: error))"); return }
        #expect(r.code == "store_unavailable" && r.retryAfter == 2)
        #expect(timing.sleeps == [3, 6, 12])  // 2 s, then doubled, each plus 50 % jitter
        #expect(gw.protectedCalls.count == 4)
    }

    @Test("a challenge fetch answered 429 is sent again after Retry-After plus jitter")
    func challengeRateLimited() async throws {
        let limited = ScriptedGateway.Reply.json(
            429, "{\"error\":\"rate_limited\",\"action\":\"retry_later\",\"limit\":\"client\",\"retryAfter\":1}",
            headers: ["Retry-After": "1"])
        var answered429 = false
        let lock = NSLock()
        let gw2 = ScriptedGateway { call in
            lock.withLock {
                guard call.isChallenge, !answered429 else { return nil }
                answered429 = true
                return limited
            }
        }
        let timing = TestTiming(random: 0.25)
        let c = client(gw2, timing: timing)
        let (_, response) = try await c.send(Self.post("https://shop.example.com/api/a", "x"))
        #expect(response.statusCode == 200)
        #expect(timing.sleeps == [1.25])
        #expect(gw2.challengeCalls.count == 3)  // 429, then the registration's, then the request's
        #expect(await c.statistics.waits == 1)
    }

    @Test("the jittered delay stays within [Retry-After·2ⁿ, 2·Retry-After·2ⁿ] and under maxDelay")
    func delayBounds() {
        let p = AppAttestClient.RetryPolicy(maxWaits: 4, maxDelay: 100, minimumDelay: 1)
        #expect(p.delay(retryAfter: 3, attempt: 0, random: 0) == 3)
        #expect(p.delay(retryAfter: 3, attempt: 0, random: 0.999) < 6)
        #expect(p.delay(retryAfter: 3, attempt: 2, random: 0) == 12)
        #expect(p.delay(retryAfter: 0, attempt: 0, random: 0) == 1)  // never an immediate retry
        #expect(p.delay(retryAfter: nil, attempt: 1, random: 0.5) == 3)
        #expect(p.delay(retryAfter: 60, attempt: 3, random: 0.9) == 100)
    }

    @Test("Retry-After as seconds or as an HTTP-date")
    func retryAfterForms() {
        let now = Date(timeIntervalSince1970: 1_700_000_000)  // Tue, 14 Nov 2023 22:13:20 GMT
        #expect(GatewayRefusal.retryAfter("7", now: now) == 7)
        #expect(GatewayRefusal.retryAfter("Tue, 14 Nov 2023 22:13:50 GMT", now: now) == 30)
        #expect(GatewayRefusal.retryAfter("soon", now: now) == nil)
    }

    @Test("any other refusal is thrown at once, typed, with the gateway's requestId")
    func otherRefusalsThrown() async throws {
        let gw = ScriptedGateway { call in
            call.isChallenge || call.isRegister ? nil : .refusal(401, "bad_signature", "none", requestID: "5f0c")
        }
        let c = client(gw)
        let error = await #expect(throws: AppAttestClientError.self) { try await c.send(Self.post("https://shop.example.com/api/a", "x")) }
        guard case .refused(let r)? = error else { Issue.record("\(String(describing: error))"); return }
        #expect(
            r
                == GatewayRefusal(
                    endpoint: .protected, status: 401, code: "bad_signature", action: GatewayRefusal.Action.none,
                    requestID: "5f0c", retryAfter: nil, limit: nil))
        #expect(gw.protectedCalls.count == 1)
    }

    @Test("the upstream's own answers are returned, not thrown (verified with an error status, or not a gateway refusal)")
    func upstreamAnswersReturned() async throws {
        let gw = ScriptedGateway { call in
            if call.isChallenge || call.isRegister { return nil }
            switch call.protectedIndex {
            case 0: return .verified(500, next: "n", body: "{\"error\":\"boom\",\"action\":\"none\"}")  // forwarded: the upstream's 500
            case 1: return .json(404, "{\"message\":\"no such order\"}")  // not the gateway's shape
            case 2: return .json(409, "{\"error\":\"out_of_stock\"}")  // an upstream's error, without an action
            default: return .json(502, "{\"error\":\"upstream_unavailable\"}")  // the gateway's proxy error: a response
            }
        }
        let c = client(gw)
        let (d1, r1) = try await c.send(Self.post("https://shop.example.com/api/a", "x"))
        #expect(r1.statusCode == 500 && String(decoding: d1, as: UTF8.self).contains("boom"))
        let (d2, r2) = try await c.send(Self.post("https://shop.example.com/api/a", "x"))
        #expect(r2.statusCode == 404 && String(decoding: d2, as: UTF8.self).contains("no such order"))
        let (d3, r3) = try await c.send(Self.post("https://shop.example.com/api/a", "x"))
        #expect(r3.statusCode == 409 && String(decoding: d3, as: UTF8.self).contains("out_of_stock"))
        let (_, r4) = try await c.send(Self.post("https://shop.example.com/api/a", "x"))
        #expect(r4.statusCode == 502)
        #expect(gw.protectedCalls.count == 4)
    }

    @Test("a refused registration is not tried again before its cool-down (no storm on Apple's service)")
    func registrationCooldown() async throws {
        let gw = ScriptedGateway { call in call.isRegister ? .refusal(401, "app_id_mismatch", "none", requestID: "reg") : nil }
        let service = FakeService()
        let timing = TestTiming(random: 0)
        let c = client(gw, service: service, retry: .init(registrationCooldown: 60), timing: timing)
        let first = await #expect(throws: AppAttestClientError.self) { try await c.send(Self.post("https://shop.example.com/api/a", "x")) }
        #expect(first?.refusal?.code == "app_id_mismatch" && first?.refusal?.endpoint == .register)
        #expect(gw.recorded.count == 2 && service.attestedHashes.count == 1)
        timing.advance(59)
        let second = await #expect(throws: AppAttestClientError.self) { try await c.send(Self.post("https://shop.example.com/api/a", "x")) }
        guard case .registrationDeferred? = second else { Issue.record("\(String(describing: second))"); return }
        #expect(gw.recorded.count == 2 && service.attestedHashes.count == 1)  // nothing sent, Apple not called
        timing.advance(2)
        _ = await #expect(throws: AppAttestClientError.self) { try await c.send(Self.post("https://shop.example.com/api/a", "x")) }
        #expect(gw.recorded.count == 4 && service.attestedHashes.count == 2)  // tried again, refused again
        timing.advance(61)  // the second failure doubled the cool-down to 120 s
        let third = await #expect(throws: AppAttestClientError.self) { try await c.send(Self.post("https://shop.example.com/api/a", "x")) }
        guard case .registrationDeferred? = third else { Issue.record("\(String(describing: third))"); return }
    }

    @Test("Apple's serverUnavailable: the same key attested again after back-off, bounded")
    func attestationServerUnavailable() async throws {
        let gw = ScriptedGateway()
        let service = FakeService()
        service.set { $0.attestErrors = [AppAttestServiceError.serverUnavailable, AppAttestServiceError.serverUnavailable] }
        let timing = TestTiming(random: 0)
        let c = client(gw, service: service, timing: timing)
        let (_, response) = try await c.send(Self.post("https://shop.example.com/api/a", "x"))
        #expect(response.statusCode == 200)
        #expect(timing.sleeps == [1, 2] && service.generatedKeys == 1)

        let service2 = FakeService()
        service2.set { $0.attestErrors = Array(repeating: AppAttestServiceError.serverUnavailable, count: 10) }
        let c2 = client(ScriptedGateway(), service: service2, retry: .init(maxWaits: 2), timing: TestTiming(random: 0))
        let error = await #expect(throws: AppAttestClientError.self) { try await c2.send(Self.post("https://shop.example.com/api/a", "x")) }
        guard case .attestationServiceUnavailable? = error else { Issue.record("\(String(describing: error))"); return }
        #expect(service2.attestedHashes.count == 3)
    }

    @Test("App Attest unsupported: thrown by default; sent without attestation headers when configured")
    func unsupportedDevice() async throws {
        let gw = ScriptedGateway()
        let c = client(gw, service: FakeService(isSupported: false))
        let error = await #expect(throws: AppAttestClientError.self) { try await c.send(Self.post("https://shop.example.com/api/a", "x")) }
        guard case .unsupported? = error else { Issue.record("\(String(describing: error))"); return }
        #expect(gw.recorded.isEmpty)

        let gw2 = ScriptedGateway { _ in .json(200, "{}") }
        let c2 = client(gw2, service: FakeService(isSupported: false), whenUnsupported: .sendUnprotected)
        var request = Self.post("https://shop.example.com/api/a", "x")
        request.setValue("forged", forHTTPHeaderField: "X-App-Assertion")
        _ = try await c2.send(request)
        let sent = try #require(gw2.recorded.first)
        #expect(gw2.recorded.count == 1 && sent.header("X-App-Assertion") == nil && sent.header("X-App-Attest-Key-Id") == nil)
        #expect(sent.bodyText == "x")
    }

    @Test("one key per account, never shared; each account's key kept in the store")
    func keyPerAccount() async throws {
        let gw = ScriptedGateway()
        let dir = temporaryDirectory("client-keys")
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = FileKeyIDStore(directory: dir)
        let c = client(gw, store: store)
        _ = try await c.send(Self.post("https://shop.example.com/api/a", "x"), account: "alice")
        _ = try await c.send(Self.post("https://shop.example.com/api/a", "x"), account: "bob")
        _ = try await c.send(Self.post("https://shop.example.com/api/a", "x"), account: "alice")
        _ = try await c.send(Self.post("https://shop.example.com/api/a", "x"))
        #expect(gw.protectedCalls.map { $0.header("X-App-Attest-Key-Id") } == ["key-1", "key-2", "key-1", "key-3"])
        #expect(try store.load(account: "alice")?.keyID == "key-1")
        #expect(try store.load(account: "bob")?.keyID == "key-2")
        #expect(try store.load(account: nil)?.keyID == "key-3")
        let file = store.fileURL(account: "alice").path
        let mode = try FileManager.default.attributesOfItem(atPath: file)[.posixPermissions] as? NSNumber
        #expect(mode?.intValue == 0o600)
        try await c.forgetKey(account: "bob")
        #expect(try store.load(account: "bob") == nil)
        _ = try await c.send(Self.post("https://shop.example.com/api/a", "x"), account: "bob")
        #expect(gw.protectedCalls.last?.header("X-App-Attest-Key-Id") == "key-4")
    }

    @Test("concurrent sends of one account: one in flight at a time, sent in counter order")
    func concurrentSendsSerialisedPerKey() async throws {
        let gw = ScriptedGateway(protectedDelay: 0.005)
        let c = client(gw)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for i in 0..<30 {
                group.addTask {
                    let account = i % 3 == 0 ? "other" : nil
                    _ = try await c.send(Self.post("https://shop.example.com/api/a?i=\(i)", "\(i)"), account: account)
                }
            }
            try await group.waitForAll()
        }
        let sent = gw.protectedCalls
        #expect(sent.count == 30)
        for key in ["key-1", "key-2"] {
            // The assertions of a key reach the gateway in the order of their counters.
            let counters = sent.filter { $0.header("X-App-Attest-Key-Id") == key }.compactMap { call -> Int? in
                let text = call.header("X-App-Assertion").flatMap { Data(base64Encoded: $0) }.map { String(decoding: $0, as: UTF8.self) }
                return text.flatMap { Int($0.split(separator: " ").last ?? "") }
            }
            #expect(counters == Array(1...counters.count), "\(key): \(counters)")
        }
        #expect(gw.maxInFlight <= 2)  // at most one per account (two accounts)
    }

    @Test("a counterWindow route: signed in order, sent without waiting, never more than the window ahead of a request in flight")
    func counterWindowSendsWithoutWaiting() async throws {
        // The request with counter 1 is answered late: meanwhile only counters 2…4 may go (a window of 4).
        let gw = ScriptedGateway(protectedDelay: 0.02, delays: { $0.counter == 1 ? 0.4 : nil })
        let c = client(gw, routes: [.init(pathPrefix: "/api/feed", binding: .body(challenge: .off), counterWindow: 4)])
        try await c.prepare()
        try await withThrowingTaskGroup(of: Int.self) { group in
            for i in 0..<20 {
                group.addTask { try await c.send(Self.post("https://shop.example.com/api/feed?i=\(i)", "\(i)")).1.statusCode }
            }
            for try await status in group { #expect(status == 200) }
        }
        let sent = gw.protectedCalls
        #expect(Set(sent.compactMap(\.counter)) == Set(1...20))
        let first = try #require(sent.first { $0.counter == 1 }?.protectedIndex)
        let events = gw.events
        let firstAnswered = try #require(events.firstIndex(of: .answered(first)))
        for call in sent where call.counter! >= 5 {
            #expect(
                events.firstIndex(of: .sent(call.protectedIndex))! > firstAnswered,
                "counter \(call.counter!) went before counter 1 was answered")
        }
        #expect(sent.filter { $0.counter! <= 4 }.allSatisfy { events.firstIndex(of: .sent($0.protectedIndex))! < firstAnswered })
        // In parallel (a loaded machine may not fill the window before the 20 ms answers come).
        #expect((2...4).contains(gw.maxInFlight))
        #expect((2...4).contains(await c.statistics.mostInFlight))
    }

    @Test(
        "a counterWindow route with a challenge each: at most maxChallengesPerKey in flight, each challenge used once, next challenges reused"
    )
    func counterWindowWithChallenges() async throws {
        let gw = ScriptedGateway(protectedDelay: 0.02)
        let c = AppAttestClient(
            configuration: .init(
                gateway: Self.gateway, routes: [.init(pathPrefix: "/api/feed", binding: .request(.v2), counterWindow: 8)],
                maxChallengesPerKey: 3),
            service: FakeService(), keyStore: InMemoryKeyIDStore(), transport: gw, timing: TestTiming().timing)
        try await withThrowingTaskGroup(of: Int.self) { group in
            for i in 0..<30 {
                group.addTask { try await c.send(Self.post("https://shop.example.com/api/feed?i=\(i)", "{}")).1.statusCode }
            }
            for try await status in group { #expect(status == 200) }
        }
        let used = gw.protectedCalls.compactMap { $0.header("X-App-Attest-Challenge") }
        #expect(used.count == 30 && Set(used).count == 30)
        #expect((2...3).contains(gw.maxInFlight))
        let stats = await c.statistics
        #expect((2...3).contains(stats.mostInFlight))
        // The registration's challenge, and one per request in flight at most; then next challenges.
        #expect(stats.challengesFetched <= 1 + 3 && stats.nextChallengesUsed == 30 - (stats.challengesFetched - 1), "\(stats)")
        // A route without a window on the same key: one at a time again.
        #expect(try await c.send(Self.post("https://shop.example.com/api/other", "{}")).1.statusCode == 200)
    }

    @Test("reattest of requests in flight on a counterWindow route: the key is replaced once, every request signed again with the new one")
    func counterWindowReattestOnce() async throws {
        let gw = ScriptedGateway(protectedDelay: 0.02) { call in
            call.header("X-App-Attest-Key-Id") == "key-1" && !call.isChallenge && !call.isRegister
                ? .refusal(401, "key_unknown", "reattest", requestID: "r-\(call.protectedIndex)") : nil
        }
        let service = FakeService()
        let c = client(gw, service: service, routes: [.init(pathPrefix: "/api/feed", binding: .body(challenge: .off), counterWindow: 4)])
        try await c.prepare()
        try await withThrowingTaskGroup(of: Int.self) { group in
            for i in 0..<4 {
                group.addTask { try await c.send(Self.post("https://shop.example.com/api/feed?i=\(i)", "\(i)")).1.statusCode }
            }
            for try await status in group { #expect(status == 200) }
        }
        #expect(service.generatedKeys == 2 && gw.registerCalls.count == 2)
        #expect(await c.statistics.reattestations == 1)
        #expect(gw.protectedCalls.filter { $0.header("X-App-Attest-Key-Id") == "key-2" }.count == 4)
    }

    @Test("bind: body routes: the body is the client data; with a challenge, makeBody puts it in the body")
    func bodyBinding() async throws {
        let gw = ScriptedGateway()
        let service = FakeService()
        let c = client(
            gw, service: service,
            routes: [
                .init(pathPrefix: "/api/signed", binding: .body(challenge: .off)),
                .init(pathPrefix: "/api/signed/challenged", binding: .body(challenge: .embedded)),
            ])
        _ = try await c.send(Self.post("https://shop.example.com/api/signed/x", "{\"a\":1}"))
        var sent = try #require(gw.protectedCalls.last)
        #expect(sent.header("X-App-Attest-Challenge") == nil)
        #expect(service.assertedHashes.last.map(hex) == hex(AttestClientData.sha256(Data("{\"a\":1}".utf8))))

        let error = await #expect(throws: AppAttestClientError.self) {
            try await c.send(Self.post("https://shop.example.com/api/signed/challenged", "{}"))
        }
        guard case .invalidRequest? = error else { Issue.record("\(String(describing: error))"); return }

        _ = try await c.send(Self.post("https://shop.example.com/api/signed/challenged", "")) { challenge in
            Data("{\"challenge\":\"\(challenge)\",\"a\":2}".utf8)
        }
        sent = try #require(gw.protectedCalls.last)
        let challenge = try #require(sent.header("X-App-Attest-Challenge"))
        #expect(sent.bodyText == "{\"challenge\":\"\(challenge)\",\"a\":2}")
        #expect(service.assertedHashes.last.map(hex) == hex(AttestClientData.sha256(Data(sent.bodyText.utf8))))

        let missing = await #expect(throws: AppAttestClientError.self) {
            try await c.send(Self.post("https://shop.example.com/api/signed/challenged", "")) { _ in Data("{}".utf8) }
        }
        guard case .invalidRequest? = missing else { Issue.record("\(String(describing: missing))"); return }
    }

    @Test("routes match path prefixes on segment boundaries; the longest wins; else the default binding")
    func routeMatching() {
        let config = AppAttestClient.Configuration(
            gateway: Self.gateway,
            routes: [
                .init(pathPrefix: "/api/purchase", binding: .request(.v1)),
                .init(pathPrefix: "/api/purchase/gift", binding: .body(challenge: .off)),
                .init(pathPrefix: "/static/", binding: .request(.v1)),
            ])
        #expect(config.binding(forPath: "/api/purchase") == .request(.v1))
        #expect(config.binding(forPath: "/api/purchase/7") == .request(.v1))
        #expect(config.binding(forPath: "/api/purchases") == .request(.v2))
        #expect(config.binding(forPath: "/api/purchase/gift/1") == .body(challenge: .off))
        #expect(config.binding(forPath: "/static/x") == .request(.v1))
        #expect(config.binding(forPath: "") == .request(.v2))
    }

    @Test("requests the client cannot sign are refused before anything is sent")
    func unsignableRequests() async throws {
        let gw = ScriptedGateway()
        let c = client(gw)
        var stream = URLRequest(url: URL(string: "https://shop.example.com/api/a")!)
        stream.httpMethod = "POST"
        stream.httpBodyStream = InputStream(data: Data("x".utf8))
        for request in [stream, Self.post("https://shop.example.com/api/../a", "x"), Self.post("ftp://shop.example.com/api/a", "x")] {
            let error = await #expect(throws: AppAttestClientError.self) { try await c.send(request) }
            guard case .invalidRequest? = error else { Issue.record("\(String(describing: error))"); continue }
        }
        #expect(gw.recorded.isEmpty)
    }

    @Test("a key kept in the store is used by a new client (a relaunch): no second registration")
    func keyKeptAcrossLaunches() async throws {
        let gw = ScriptedGateway()
        let dir = temporaryDirectory("client-relaunch")
        defer { try? FileManager.default.removeItem(at: dir) }
        let service = FakeService()
        _ = try await client(gw, service: service, store: FileKeyIDStore(directory: dir)).send(
            Self.post("https://shop.example.com/api/a", "x"))
        let relaunched = client(gw, service: service, store: FileKeyIDStore(directory: dir))
        _ = try await relaunched.send(Self.post("https://shop.example.com/api/a", "x"))
        #expect(gw.registerCalls.count == 1 && service.generatedKeys == 1)
        #expect(gw.protectedCalls.map { $0.header("X-App-Attest-Key-Id") } == ["key-1", "key-1"])
        #expect(await relaunched.statistics.registrations == 0)
    }
}
