import AppAttest
import AppAttestSimulator
import Foundation
import GatewayCrypto
import GatewayTestSupport
import GatewayWire
import Testing

/// Issue 19, "Receipts and keys are bounded", through a real `gatewayd`: the answers a device gets
/// (413, 429, 409, 503 with their codes, actions and `Retry-After`), what keeps working at the cap,
/// the metrics, and idle eviction that survives a restart.
@Suite("Key and receipt bounds end to end (real gatewayd)", .serialized, .timeLimit(.minutes(3)))
struct KeyBoundsGatewayTests {
    static let shop = "ABCDE12345.com.example.shop"
    static let clip = "ABCDE12345.com.example.shop.Clip"
    let ca: TestCA
    let dir: URL

    init() throws {
        (ca, dir) = try makeTrustedTestCADirectory("gw-bounds")
    }

    func config(store: String) -> String {
        """
        workers: 2
        listeners:
          - {name: public, address: 127.0.0.1:0}
        admin: {address: 127.0.0.1:0}
        limits: {drain_timeout: 5s, max_receipt: 8KiB}
        upstreams:
          - {name: demo, url: demo}
        apps:
          # receipts: ignore: the size tests send filler receipts, not CMS
          - {team_id: ABCDE12345, bundle_ids: [com.example.shop, com.example.shop.Clip], environments: [development], receipts: ignore}
        trust: {extra_roots: [\(dir.appendingPathComponent("root.pem").path)]}
        store: \(store)
        routes:
          - name: purchase
            match: {methods: [POST], path_prefix: /api/purchase}
            upstream: demo
            assertion: {mode: enforce}
          - {name: default, match: {path_prefix: /}, upstream: demo}
        """
    }

    /// Challenge, attestation (with `receipt` in attStmt when given), registration.
    func register(_ device: SimulatedDevice, port: UInt16, receipt: [UInt8]? = nil) throws -> HTTPCall {
        let keyID = Base64.encode(device.keyID)
        let c = try HTTPCall.send(
            port: port, method: "POST", target: "/v1/attest/challenge",
            body: Array("{\"purpose\":\"register\",\"keyId\":\"\(keyID)\"}".utf8))
        let challenge = try #require(c.json?["challenge"] as? String)
        let attestation = try device.attest(
            clientDataHash: SHA256.hash(Array(challenge.utf8)), mutations: AttestationMutations(receipt: receipt))
        let body = "{\"keyId\":\"\(keyID)\",\"attestation\":\"\(Base64.encode(attestation))\",\"challenge\":\"\(challenge)\"}"
        return try HTTPCall.send(port: port, method: "POST", target: "/v1/attest/register", body: Array(body.utf8))
    }

    @Test("413 receipt_too_large, 429 reregistration_limited, 409 key_app_conflict, 503 key_capacity; known keys keep working")
    func refusals() throws {
        let gw = try GatewayProcess(
            config: config(store: "{kind: memory, shards: 4, max_keys: 2, max_reregistrations: 1, reregistration_window: 1h}"))
        defer { gw.stop() }
        let port = HTTPCall.port(gw, "public")
        let key = ECPrivateKey(curve: .p256)
        let phone = try ContractDevice(ca: ca, appID: Self.shop, port: port)
        let shop = try SimulatedDevice(appID: try AppID(Self.shop), ca: ca, key: key, counter: 0)

        // A receipt over limits.max_receipt (real ones are ≈ 4 KB; 4 KB passes).
        let big = try register(shop, port: port, receipt: [UInt8](repeating: 0x30, count: 8 * 1024 + 1))
        #expect(big.status == 413)
        #expect(big.error == "receipt_too_large")
        #expect(big.json?["action"] as? String == "none")
        #expect(try register(shop, port: port, receipt: [UInt8](repeating: 0x30, count: 4_000)).status == 201)

        // One re-registration per hour: the second is 429 with the window's end in Retry-After.
        #expect(try register(shop, port: port).status == 201)
        let limited = try register(shop, port: port)
        #expect(limited.status == 429)
        #expect(limited.error == "reregistration_limited")
        #expect(limited.json?["action"] as? String == "none")
        let retry = try #require(limited.headers["retry-after"].flatMap { Int($0) })
        #expect((3_500...3_600).contains(retry), "Retry-After: \(retry)")

        // The same key attested for the other app: 409, the key stays the shop's.
        let clip = try SimulatedDevice(appID: try AppID(Self.clip), ca: ca, key: key, counter: 0)
        let conflict = try register(clip, port: port)
        #expect(conflict.status == 409)
        #expect(conflict.error == "key_app_conflict")
        #expect(conflict.json?["action"] as? String == "reattest")

        // The cap: the phone is the second key; a third device is refused with Retry-After.
        #expect(try phone.register().status == 201)
        let third = try register(SimulatedDevice(appID: try AppID(Self.shop), ca: ca), port: port)
        #expect(third.status == 503)
        #expect(third.error == "key_capacity")
        #expect(third.headers["retry-after"] == "600")
        // Known keys keep working at the cap: protected requests, and a re-registration.
        #expect(try phone.send(phone.sign(target: "/api/purchase", body: [], challenge: try phone.challenge())).status == 200)
        #expect(try phone.register().status == 201)

        var metrics = ""
        for _ in 0..<30 {  // the key gauge is set every second
            metrics = try curl([gw.url("admin", "/metrics")]).1
            if metrics.contains("attest_gateway_store_keys 2") { break }
            usleep(200_000)
        }
        #expect(metrics.contains("attest_gateway_store_keys 2"))
        #expect(metrics.contains("attest_gateway_store_key_capacity 2"))
        for reason in ["receipt_too_large", "reregistration_limited", "key_app_conflict", "key_capacity"] {
            #expect(metrics.contains("attest_gateway_registrations_total{result=\"refused\",reason=\"\(reason)\"} 1"), "\(reason)")
        }
    }

    @Test("key_idle_ttl: an idle key is removed, answers key_unknown (reattest), stays removed after a restart, and registers again")
    func idleEviction() throws {
        let data = dir.appendingPathComponent("idle-data").path
        let yaml = config(store: "{kind: memory, shards: 4, data_dir: \(data), snapshot_interval: 1s, key_idle_ttl: 2s}")
        let gw = try GatewayProcess(config: yaml)
        let phone = try ContractDevice(ca: ca, appID: Self.shop, port: HTTPCall.port(gw, "public"))
        #expect(try phone.register().status == 201)
        var metrics = ""
        for _ in 0..<60 {  // 2 s idle, then a sweep within 1 s; allow a loaded machine some slack
            usleep(200_000)
            metrics = try curl([gw.url("admin", "/metrics")]).1
            if metrics.contains("attest_gateway_store_keys_evicted_total 1") { break }
        }
        #expect(metrics.contains("attest_gateway_store_keys_evicted_total 1"))
        let gone = try phone.send(phone.sign(target: "/api/purchase", body: [], challenge: try phone.challenge()))
        #expect(gone.status == 401)
        #expect(gone.error == "key_unknown")
        #expect(gone.json?["action"] as? String == "reattest")
        gw.signal(SIGKILL)
        gw.waitForExit()

        let again = try GatewayProcess(config: yaml)
        defer { again.stop() }
        phone.rebind(port: HTTPCall.port(again, "public"))
        #expect(try phone.send(phone.sign(target: "/api/purchase", body: [], challenge: try phone.challenge())).error == "key_unknown")
        #expect(try phone.register().status == 201)
        #expect(try phone.send(phone.sign(target: "/api/purchase", body: [], challenge: try phone.challenge())).status == 200)
    }
}
