import AppAttest
import AppAttestSimulator
import AttestSim
import Foundation
import GatewayCrypto
import GatewayTestSupport
import GatewayWire
import Testing

/// The DeviceCheck fallback end to end: a real `gatewayd` with the local stand-in for Apple's
/// DeviceCheck (`AppleStandIn`, what `attest-sim apple` serves) over real TLS, devices without App
/// Attest (`SimulatedDeviceCheck`): accepted once, a replay refused, the share cap, the two bits
/// forwarded and written from an upstream's header, DeviceCheck unreachable (fail closed, fail
/// open), the unsupported-claims signal.
@Suite("DeviceCheck fallback (real gatewayd, the Apple stand-in)", .serialized, .timeLimit(.minutes(3)))
struct DeviceCheckFallbackTests {
    let team: AppleTeamFixture
    var ca: TestCA { team.ca }
    var dir: URL { team.dir }

    init() throws { team = try AppleTeamFixture("gw-devicecheck") }

    func standIn() throws -> AppleStandIn { try team.standIn() }

    func config(_ apple: AppleStandIn, legacyPort: UInt16 = 9) -> String {
        """
        \(TestGatewayYAML.base(caDir: dir, upstreams: ["{name: legacy, url: \"http://127.0.0.1:\(legacyPort)\"}"], environments: false))
        attest: {challenge_rate: {per_client: off}}
        \(team.appleSection(apple, service: "devicecheck_url"))
        risk: {refresh: off}
        routes:
          - name: shop
            match: {methods: [POST], path_prefix: /api/shop}
            upstream: demo
            assertion: {mode: enforce, fallback: {devicecheck: true, max_share: 50%, window: 1m, min_requests: 4}}
          - name: watch
            match: {path_prefix: /api/watch}
            upstream: demo
            assertion: {mode: shadow, fallback: {devicecheck: true, max_share: 100%}}
          - name: open
            match: {path_prefix: /api/open}
            upstream: demo
            assertion: {mode: enforce, on_store_error: fail_open, fallback: {devicecheck: true, max_share: 100%}}
          - name: promo
            match: {path_prefix: /api/promo}
            upstream: legacy
            assertion: {mode: enforce, fallback: {devicecheck: {bits: write}, max_share: 100%}}
          - {name: default, match: {path_prefix: /}, upstream: demo}
        """
    }

    func eventually(_ seconds: Double = 10, _ condition: () throws -> Bool) rethrows -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if try condition() { return true }
            usleep(50_000)
        }
        return try condition()
    }

    func send(_ gw: GatewayProcess, _ target: String, token: String?, method: String = "POST", extra: [(String, String)] = []) throws
        -> HTTPCall
    {
        var headers = extra
        if let token { headers.append(("X-Apple-Device-Token", token)) }
        return try HTTPCall.send(
            port: HTTPCall.port(gw, "public"), method: method, target: target, headers: headers,
            body: method == "POST" ? Array("{}".utf8) : [])
    }

    func metrics(_ gw: GatewayProcess) throws -> String { try curl([gw.url("admin", "/metrics")]).1 }

    @Test("attest-sim run --unsupported: devices without App Attest send DeviceCheck tokens among attested devices; all accepted, counted")
    func simulatorMixesUnsupportedDevices() throws {
        let apple = try standIn()
        defer { apple.stop() }
        let gw = try GatewayProcess(config: config(apple))
        defer { gw.stop() }
        // 4 devices, the last one without App Attest: a quarter of the route's requests take the
        // fallback, under its max_share of 50 %.
        let options = try RunOptions(
            endpoint: HTTPEndpoint(host: "127.0.0.1", port: HTTPCall.port(gw, "public")), appID: AppID("ABCDE12345.com.example.shop"),
            devices: 4, requests: 40, concurrency: 2, path: "/api/shop/buy", unsupported: 1)
        #expect(options.isUnsupported(device: 3) && !options.isUnsupported(device: 2))
        let report = LoadRunner(options: options, ca: ca).run()
        #expect(report.passed, "\(report.text)")
        let text = try metrics(gw)
        #expect(text.contains("attest_gateway_fallback_requests_total{route=\"shop\",result=\"accepted\"} 10"), "\(text)")
        #expect(text.contains("attest_gateway_unsupported_claims_total{route=\"shop\"} 10"))
        #expect(
            text.contains("attest_gateway_assertion_verdicts_total{route=\"shop\",mode=\"enforce\",verdict=\"accepted\",reason=\"ok\"} 40"))
        // Usage errors: more unsupported devices than devices, or with --plain.
        let endpoint = HTTPEndpoint(host: "127.0.0.1", port: 1)
        #expect(throws: AttestSimError.self) {
            try RunOptions(
                endpoint: endpoint, appID: AppID("ABCDE12345.com.example.shop"), devices: 2, requests: 1, concurrency: 1, unsupported: 3)
        }
        #expect(throws: AttestSimError.self) {
            try RunOptions(
                endpoint: endpoint, appID: AppID("ABCDE12345.com.example.shop"), devices: 2, requests: 1, concurrency: 1, plain: true,
                unsupported: 1)
        }
    }

    @Test(
        "accepted once with X-Device-Check: valid (client copies stripped), the replay refused, a bad token refused; shadow forwards; counted"
    )
    func acceptedThenReplayRefused() throws {
        let apple = try standIn()
        defer { apple.stop() }
        let gw = try GatewayProcess(config: config(apple))
        defer { gw.stop() }
        let phone = SimulatedDeviceCheck(ca: ca)
        let token = phone.tokenHeader()
        let first = try send(
            gw, "/api/shop/buy", token: token,
            extra: [
                ("X-App-Attest-Unsupported", "1"), ("X-Device-Check", "forged"), ("X-Device-Check-Bits", "bit0=1"),
            ])
        #expect(first.status == 200, "\(first.body)")
        let upstream = try #require(first.json?["headers"] as? [String: String])
        #expect(upstream["X-Device-Check"] == "valid")
        #expect(
            upstream["X-Device-Check-Bits"] == nil && upstream["X-Apple-Device-Token"] == nil && upstream["X-App-Attest-Unsupported"] == nil
        )
        #expect(upstream["X-App-Attest-Verified-Key-Id"] == nil)
        // Apple was asked with a Bearer token and Apple's JSON: it verified.
        let asked = apple.deviceCheckRequests
        #expect(asked.count == 1 && asked[0].endpoint == "validate_device_token" && asked[0].status == 200)
        #expect(asked[0].deviceID == Hex.encode(phone.deviceID))

        let replay = try send(gw, "/api/shop/buy", token: token)
        #expect(replay.status == 401 && replay.error == "device_token_replayed" && replay.json?["action"] as? String == "none")
        #expect(apple.deviceCheckRequests.count == 1)  // refused without asking Apple
        let id = try #require(replay.json?["requestId"] as? String)
        let (_, explained) = try curl([gw.url("admin", "/explain/\(id)")])
        #expect(explained.contains("\"path\":\"devicecheck\"") && explained.contains("device_token_replayed"), "\(explained)")

        let forged = Base64.encode((0..<64).map { _ in UInt8.random(in: 0...255) })
        let bad = try send(gw, "/api/shop/buy", token: forged)
        #expect(bad.status == 401 && bad.error == "device_token_invalid")
        #expect(apple.deviceCheckRequests.last?.status == 400)
        // Shadow: the same refusal forwarded, without X-Device-Check.
        let shadowed = try send(gw, "/api/watch", token: Base64.encode((0..<64).map { _ in UInt8.random(in: 0...255) }))
        #expect(shadowed.status == 200 && (shadowed.json?["headers"] as? [String: String])?["X-Device-Check"] == nil)
        // An App Attest refusal on a fallback route says which path it took.
        let none = try send(gw, "/api/shop/buy", token: nil)
        #expect(none.error == "assertion_missing")
        let (_, noneExplained) = try curl([gw.url("admin", "/explain/\(try #require(none.json?["requestId"] as? String))")])
        #expect(noneExplained.contains("\"path\":\"app_attest\""))

        let text = try metrics(gw)
        #expect(text.contains("attest_gateway_fallback_requests_total{route=\"shop\",result=\"accepted\"} 1"))
        #expect(text.contains("attest_gateway_fallback_requests_total{route=\"shop\",result=\"device_token_replayed\"} 1"))
        #expect(text.contains("attest_gateway_fallback_requests_total{route=\"shop\",result=\"device_token_invalid\"} 1"))
        #expect(
            text.contains(
                "attest_gateway_assertion_verdicts_total{route=\"watch\",mode=\"shadow\",verdict=\"would_refuse\",reason=\"device_token_invalid\"} 1"
            ))
        #expect(text.contains("attest_gateway_unsupported_claims_total{route=\"shop\"} 1"))
        #expect(text.contains("attest_gateway_unsupported_claims_total{route=\"promo\"} 0"))
        #expect(text.contains("attest_gateway_devicecheck_requests_total{endpoint=\"validate_device_token\",result=\"ok\"} 1"))
        #expect(text.contains("attest_gateway_devicecheck_requests_total{endpoint=\"validate_device_token\",result=\"invalid_token\"} 2"))
        #expect(!apple.deviceCheckRequests.contains { $0.status == 401 || $0.reason.contains("authorization") })
    }

    @Test(
        "the share cap: above max_share over the window, fallback requests are refused 401 fallback_share_exceeded, logged once; App Attest requests go on"
    )
    func shareCap() throws {
        let apple = try standIn()
        defer { apple.stop() }
        let gw = try GatewayProcess(config: config(apple))
        defer { gw.stop() }
        // Two App Attest requests (no headers: refused, but counted in the route's requests).
        for _ in 0..<2 { #expect(try send(gw, "/api/shop/x", token: nil).error == "assertion_missing") }
        let phone = SimulatedDeviceCheck(ca: ca)
        // 1 of 3 (under min_requests 4), then 2 of 4 (50 %: not above): accepted.
        #expect(try send(gw, "/api/shop/x", token: phone.tokenHeader()).status == 200)
        #expect(try send(gw, "/api/shop/x", token: phone.tokenHeader()).status == 200)
        // 3 of 5: above 50 %.
        let refused = try send(gw, "/api/shop/x", token: phone.tokenHeader())
        #expect(refused.status == 401 && refused.error == "fallback_share_exceeded" && refused.json?["action"] as? String == "none")
        #expect(try send(gw, "/api/shop/x", token: phone.tokenHeader()).error == "fallback_share_exceeded")
        #expect(apple.deviceCheckRequests.count == 2)  // refused before DeviceCheck
        #expect(eventually { gw.stderr.contains("fallback share above max_share") })
        #expect(gw.stderr.components(separatedBy: "fallback share above max_share").count == 2, "logged once per window")
        let (_, explained) = try curl([gw.url("admin", "/explain/\(try #require(refused.json?["requestId"] as? String))")])
        #expect(explained.contains("\"max_share\":\"50%\"") && explained.contains("\"fallback_requests\":\"3\""), "\(explained)")
        let text = try metrics(gw)
        #expect(text.contains("attest_gateway_fallback_requests_total{route=\"shop\",result=\"fallback_share_exceeded\"} 2"))
        #expect(text.contains("attest_gateway_fallback_share{route=\"shop\"} 0.666"))
    }

    @Test(
        "bits: read forwarded as X-Device-Check-Bits (set, or unset); an upstream's X-Device-Check-Update writes both bits and never reaches the client"
    )
    func bitsReadAndWritten() throws {
        let apple = try standIn()
        defer { apple.stop() }
        let seen = Locked<[String]>([])
        let legacy = try ScriptedServer { conn in
            while let r = conn.readRequest() {
                seen.withLock { $0.append(r.header("X-Device-Check-Bits") ?? "-") }
                let update = r.target.hasPrefix("/api/promo/use") ? "X-Device-Check-Update: bit0=1\r\n" : ""
                guard conn.respond(status: 200, "ok", headers: update) else { return }
            }
        }
        defer { legacy.stop() }
        let gw = try GatewayProcess(config: config(apple, legacyPort: legacy.port))
        defer { gw.stop() }
        let used = SimulatedDeviceCheck(ca: ca)
        let fresh = SimulatedDeviceCheck(ca: ca)
        apple.setBits(deviceID: used.deviceID, bit0: false, bit1: true, month: "2026-10")

        #expect(try send(gw, "/api/promo/check", token: used.tokenHeader(), method: "GET").status == 200)
        #expect(try send(gw, "/api/promo/check", token: fresh.tokenHeader(), method: "GET").status == 200)
        #expect(seen.withLock { $0 } == ["bit0=0; bit1=1; updated=2026-10", "unset"])
        #expect(apple.deviceCheckRequests.map(\.endpoint) == ["query_two_bits", "query_two_bits"])

        let use = try send(gw, "/api/promo/use", token: used.tokenHeader())
        #expect(use.status == 200 && use.body == "ok")
        #expect(use.headers.keys.allSatisfy { $0.lowercased() != "x-device-check-update" }, "\(use.headers)")
        // Written after the response: bit0 set, bit1 as it was (both sent).
        #expect(eventually { apple.bits(deviceID: used.deviceID).map { $0.bit0 && $0.bit1 } == true })
        #expect(
            apple.deviceCheckRequests.last.map { ($0.endpoint, $0.bits, $0.status) } ?? ("", "", 0) == (
                "update_two_bits", "bit0=1; bit1=1", 200
            ))
        #expect(try send(gw, "/api/promo/check", token: used.tokenHeader(), method: "GET").status == 200)
        #expect(seen.withLock { $0.last }?.hasPrefix("bit0=1; bit1=1; updated=") == true)
        let text = try metrics(gw)
        #expect(text.contains("attest_gateway_devicecheck_requests_total{endpoint=\"query_two_bits\",result=\"bits_not_found\"} 1"))
        #expect(text.contains("attest_gateway_devicecheck_requests_total{endpoint=\"update_two_bits\",result=\"ok\"} 1"))
    }

    @Test(
        "DeviceCheck unreachable or failing: 503 devicecheck_unavailable (Retry-After from a 429), fail_open forwards without X-Device-Check, the token can be sent again"
    )
    func appleUnavailable() throws {
        let apple = try standIn()
        let gw = try GatewayProcess(config: config(apple))
        defer { gw.stop() }
        let phone = SimulatedDeviceCheck(ca: ca)
        apple.scriptDeviceCheck(.init(status: 429, retryAfter: 2, count: 1))
        let token = phone.tokenHeader()
        let limited = try send(gw, "/api/shop/x", token: token)
        #expect(limited.status == 503 && limited.error == "devicecheck_unavailable")
        #expect(limited.headers["retry-after"] == "2")
        // During the pause Apple is not asked: the fail-open route forwards, unverified.
        let open = try send(gw, "/api/open/x", token: phone.tokenHeader())
        #expect(open.status == 200)
        #expect((open.json?["headers"] as? [String: String])?["X-Device-Check"] == nil)
        #expect(apple.deviceCheckRequests.count == 1)
        // After the pause the same token is accepted (it was given back, not burnt).
        usleep(2_200_000)
        #expect(try send(gw, "/api/shop/x", token: token).status == 200)
        // Unreachable: refused (fail closed), forwarded (fail open).
        apple.stop()
        #expect(try send(gw, "/api/shop/x", token: phone.tokenHeader()).error == "devicecheck_unavailable")
        #expect(try send(gw, "/api/open/x", token: phone.tokenHeader()).status == 200)
        let text = try metrics(gw)
        #expect(text.contains("attest_gateway_devicecheck_requests_total{endpoint=\"validate_device_token\",result=\"rate_limited\"} 1"))
        #expect(text.contains("attest_gateway_devicecheck_requests_total{endpoint=\"validate_device_token\",result=\"unavailable\"} 1"))
        #expect(
            text.contains(
                "attest_gateway_assertion_verdicts_total{route=\"open\",mode=\"enforce\",verdict=\"fail_open\",reason=\"devicecheck_unavailable\"} 2"
            ))
        #expect(text.contains("attest_gateway_fallback_requests_total{route=\"shop\",result=\"devicecheck_unavailable\"} 2"))
    }
}

/// A value behind a lock, for a server thread and the test.
final class Locked<T>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: T
    init(_ value: T) { self.value = value }
    func withLock<R>(_ body: (inout T) -> R) -> R { lock.withLock { body(&value) } }
}
