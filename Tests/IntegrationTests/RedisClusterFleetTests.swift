import AppAttest
import AppAttestSimulator
import Foundation
import GatewayCrypto
import GatewayTestSupport
import GatewayWire
import Synchronization
import Testing

/// Two real `gatewayd` processes on one real 3-node Redis Cluster (`store: {kind: redis, cluster: true}`).
@Suite(
    "Gateway fleet on a Redis Cluster (real gatewayd processes, 3 real redis-server nodes)", .serialized, .timeLimit(.minutes(3)),
    .enabled(if: RedisProcess.testsEnabled, Comment(rawValue: RedisProcess.skipMessage)))
struct RedisClusterFleetTests {
    static let appID = "ABCDE12345.com.example.shop"
    let ca: TestCA
    let dir: URL

    init() throws {
        (ca, dir) = try makeTrustedTestCADirectory("gw-cluster-fleet")
    }

    func config(cluster: RedisClusterProcess, seedIndex: Int) -> String {
        let others = cluster.ports.indices.filter { $0 != seedIndex }.map { cluster.url($0) }.joined(separator: ", ")
        return RedisFleetTests.fleetConfig(
            root: dir.appendingPathComponent("root.pem").path,
            store: "{kind: redis, cluster: true, url: \(cluster.url(seedIndex)), seeds: [\(others)], timeout: 500ms}")
    }

    func send(_ s: ContractDevice.Signed, port: UInt16) throws -> HTTPCall { try RedisFleetTests.send(s, port: port) }

    /// The registration of the client contract with a key-bound registration challenge.
    func register(_ phone: ContractDevice, port: UInt16) throws -> HTTPCall {
        let r = try HTTPCall.send(
            port: port, method: "POST", target: "/v1/attest/challenge",
            body: Array("{\"purpose\":\"register\",\"keyId\":\"\(phone.keyID)\"}".utf8))
        guard r.status == 201, let c = r.json?["challenge"] as? String else { throw POSIXError(.EPROTO) }
        let attestation = try phone.device.attest(clientDataHash: SHA256.hash(Array(c.utf8)))
        let body = "{\"keyId\":\"\(phone.keyID)\",\"attestation\":\"\(Base64.encode(attestation))\",\"challenge\":\"\(c)\"}"
        return try HTTPCall.send(port: port, method: "POST", target: "/v1/attest/register", body: Array(body.utf8))
    }

    @Test("unbound challenges refused (400 key_id_required); parallel replays across two instances: exactly one accept")
    func exactlyOneAcceptAcrossInstances() throws {
        let cluster = try RedisClusterProcess(nodes: 3)
        defer { cluster.stop() }
        let gws = try (0..<2).map { try GatewayProcess(config: config(cluster: cluster, seedIndex: $0)) }
        defer { for g in gws { g.stop() } }
        let ports = gws.map { HTTPCall.port($0, "public") }
        for g in gws { #expect((try? curl([g.url("admin", "/readyz")]).0) == 200) }

        for port in ports {
            for body in ["", "{\"purpose\":\"register\"}", "{\"purpose\":\"assert\"}"] {
                let r = try HTTPCall.send(port: port, method: "POST", target: "/v1/attest/challenge", body: Array(body.utf8))
                #expect(r.status == 400, "\(body): \(r.status) \(r.body)")
                #expect(r.error == "key_id_required", "\(body): \(r.body)")
            }
        }

        // Devices whose keys land on different nodes; each registers on one instance, is used on both.
        var phones: [ContractDevice] = []
        for i in 0..<3 {
            let phone = try ContractDevice(ca: ca, appID: Self.appID, port: ports[i % 2])
            let registered = try register(phone, port: ports[i % 2])
            #expect(registered.status == 201, "\(registered.body)")
            phones.append(phone)
        }
        #expect((0..<3).map { (try? cluster.dbsize($0)) ?? 0 }.reduce(0, +) >= 6)

        for (n, phone) in phones.enumerated() {
            for round in 0..<2 {
                let c = try HTTPCall.send(
                    port: ports[(n + round) % 2], method: "POST", target: "/v1/attest/challenge",
                    body: Array("{\"purpose\":\"assert\",\"keyId\":\"\(phone.keyID)\"}".utf8))
                let challenge = try #require(c.json?["challenge"] as? String, "\(c.status) \(c.body)")
                let signed = phone.sign(
                    target: "/api/purchase", body: Array("{\"phone\":\(n),\"round\":\(round)}".utf8), challenge: challenge)
                let statuses = Mutex<[Int]>([])
                let errors = Mutex<[String]>([])
                DispatchQueue.concurrentPerform(iterations: 12) { i in
                    let r = try? send(signed, port: ports[i % 2])
                    statuses.withLock { $0.append(r?.status ?? 0) }
                    if let e = r?.error { errors.withLock { $0.append(e) } }
                }
                let all = statuses.withLock { $0 }
                #expect(all.filter { $0 == 200 }.count == 1, "phone \(n) round \(round): \(all)")
                #expect(all.filter { $0 == 401 }.count == 11, "phone \(n) round \(round): \(all)")
                #expect(Set(errors.withLock { $0 }).isSubset(of: ["counter_replay", "challenge_consumed"]))
            }
        }
        // The next challenge a response carries (bound to the key) works on the other instance.
        let c = try HTTPCall.send(
            port: ports[0], method: "POST", target: "/v1/attest/challenge",
            body: Array("{\"purpose\":\"assert\",\"keyId\":\"\(phones[0].keyID)\"}".utf8))
        let first = try send(
            phones[0].sign(target: "/api/purchase", body: [1], challenge: try #require(c.json?["challenge"] as? String)), port: ports[0])
        #expect(first.status == 200, "\(first.body)")
        let next = try #require(first.headers["x-app-attest-next-challenge"])
        #expect(try send(phones[0].sign(target: "/api/purchase", body: [2], challenge: next), port: ports[1]).status == 200)
    }
}
