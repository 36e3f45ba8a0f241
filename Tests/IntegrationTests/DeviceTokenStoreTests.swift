import AppAttestSimulator
import AttestSim
import Foundation
import GatewayCrypto
import GatewayTestSupport
import GatewayWire
import Testing

/// The DeviceCheck fallback's replay cache is the store's (docs/verification.md, "Devices without
/// App Attest"): a token accepted by one gatewayd of a fleet on one Redis is refused by the other,
/// and a memory store with `data_dir` keeps refusing it after `kill -9` and after a clean restart.
/// Real gatewayd processes, real redis-server, the Apple stand-in.
@Suite("DeviceCheck token claims in the store (real gatewayd, redis-server, the Apple stand-in)", .serialized, .timeLimit(.minutes(3)))
struct DeviceTokenStoreTests {
    let team: AppleTeamFixture
    var ca: TestCA { team.ca }
    var dir: URL { team.dir }

    init() throws { team = try AppleTeamFixture("gw-devicetoken") }

    func standIn() throws -> AppleStandIn { try team.standIn() }

    func config(_ apple: AppleStandIn, store: String) -> String {
        """
        \(TestGatewayYAML.base(caDir: dir, drain: "2s", environments: false, receiptRoot: false))
        attest: {challenge_rate: {per_client: off}}
        store: \(store)
        \(team.appleSection(apple, service: "devicecheck_url"))
        risk: {refresh: off}
        routes:
          - name: shop
            match: {methods: [POST], path_prefix: /api/shop}
            upstream: demo
            assertion: {mode: enforce, fallback: {devicecheck: true, max_share: 100%}}
          - {name: default, match: {path_prefix: /}, upstream: demo}
        """
    }

    func send(_ gw: GatewayProcess, token: String) throws -> HTTPCall {
        try HTTPCall.send(
            port: HTTPCall.port(gw, "public"), method: "POST", target: "/api/shop/buy", headers: [("X-Apple-Device-Token", token)],
            body: Array("{}".utf8))
    }

    @Test(
        "two gatewayd on one Redis: a token accepted by A is refused device_token_replayed by B (and by A); the claim is ag:dt:<hex SHA-256>",
        .enabled(if: RedisProcess.testsEnabled, Comment(rawValue: RedisProcess.skipMessage)))
    func fleetRefusesAReplayOnAnotherInstance() throws {
        let redis = try RedisProcess()
        defer { redis.stop() }
        let apple = try standIn()
        defer { apple.stop() }
        let store = "{kind: redis, url: \(redis.url), timeout: 1s}"
        let a = try GatewayProcess(config: config(apple, store: store))
        defer { a.stop() }
        let b = try GatewayProcess(config: config(apple, store: store))
        defer { b.stop() }
        let phone = SimulatedDeviceCheck(ca: ca)
        for _ in 0..<3 {
            let token = phone.tokenHeader()
            let first = try send(a, token: token)
            #expect(first.status == 200, "\(first.body)")
            let onB = try send(b, token: token)
            #expect(onB.status == 401 && onB.error == "device_token_replayed", "\(onB.status) \(onB.body)")
            let onA = try send(a, token: token)
            #expect(onA.status == 401 && onA.error == "device_token_replayed")
            let digest = SHA256.hash(try Base64.decode(token))
            #expect(try redis.cli(["EXISTS", "ag:dt:" + Hex.encode(digest)]) == "1")
        }
        // The other way round, and a fresh token on B is accepted.
        let token = phone.tokenHeader()
        #expect(try send(b, token: token).status == 200)
        #expect(try send(a, token: token).error == "device_token_replayed")
        #expect(apple.deviceCheckRequests.count == 4)  // each token went to Apple once
    }

    @Test(
        "memory store with data_dir: a token accepted before kill -9, or before a clean restart, is refused device_token_replayed after it")
    func restartsKeepTheClaims() throws {
        let apple = try standIn()
        defer { apple.stop() }
        let data = dir.appendingPathComponent("data-\(UUID().uuidString)").path
        let store = "{kind: memory, shards: 8, data_dir: \(data), snapshot_interval: 1s}"
        let phone = SimulatedDeviceCheck(ca: ca)
        var accepted: [String] = []
        var gw = try GatewayProcess(config: config(apple, store: store))
        for round in 0..<2 {
            let token = phone.tokenHeader()
            #expect(try send(gw, token: token).status == 200)
            accepted.append(token)
            if round == 0 {
                usleep(1_300_000)  // a periodic snapshot covers the first token, the journal the second
                accepted.append(phone.tokenHeader())
                #expect(try send(gw, token: accepted.last!).status == 200)
            }
            gw.signal(SIGKILL)
            gw.waitForExit()
            gw = try GatewayProcess(config: config(apple, store: store))
            #expect(gw.stderr.contains("\"last_stop\":\"unclean\""))
            for t in accepted {
                let again = try send(gw, token: t)
                #expect(again.status == 401 && again.error == "device_token_replayed", "round \(round): \(again.status) \(again.body)")
            }
        }
        // A clean stop (SIGTERM: final snapshot, clean-stop marker) keeps them too.
        let fresh = phone.tokenHeader()
        #expect(try send(gw, token: fresh).status == 200)
        accepted.append(fresh)
        gw.signal(SIGTERM)
        #expect(gw.waitForExit() == 0)
        gw = try GatewayProcess(config: config(apple, store: store))
        defer { gw.stop() }
        #expect(gw.stderr.contains("\"last_stop\":\"clean\""))
        for t in accepted { #expect(try send(gw, token: t).error == "device_token_replayed") }
        #expect(try send(gw, token: phone.tokenHeader()).status == 200)
    }
}
