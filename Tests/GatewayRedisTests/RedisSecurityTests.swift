import Foundation
import GatewayCrypto
import GatewayStore
import GatewayTestSupport
import GatewayWire
import Testing

@testable import GatewayRedis

private let t0: Int64 = 1_700_000_000_000

/// A store on `port` with `security`, waited for (at most `millis`).
private func store(port: UInt16, _ security: RedisSecurity, cluster: Bool = false, waitMillis: Int64 = 5_000) -> (RedisAttestStore, Bool) {
    let s = RedisAttestStore(
        options: .init(
            endpoint: RedisEndpoint(host: "127.0.0.1", port: port, timeoutMillis: 1_000, security: security), connections: 1,
            cluster: cluster))
    return (s, s.waitUntilConnected(timeoutMillis: waitMillis))
}

/// A registration and a challenge through `store`: it really talks to the server.
private func roundTrip(_ store: RedisAttestStore, seed: UInt64) throws {
    var rng = SeededRandom(seed: seed)
    let record = makeRecord(&rng)
    let c = try store.issue(.register, key: record.keyID, now: t0)
    #expect(try store.registerNow(record, challenge: c.token, now: t0) == .registered(existing: false))
    #expect(try store.key(record.keyID) == record)
}

private func tlsContext(ca: String, client: TestCertificates? = nil) throws -> TLSClientContext {
    try TLSClientContext(
        configuration: TLSClientConfiguration(
            caFile: ca, clientCertificatePath: client?.clientCertificate, clientKeyPath: client?.clientKey, alpnProtocols: []))
}

@Suite(
    "Redis store: passwords, ACL users and TLS on a real redis-server", .serialized, .timeLimit(.minutes(3)),
    .enabled(if: RedisProcess.testsEnabled, Comment(rawValue: RedisProcess.skipMessage)))
struct RedisSecurityTests {
    /// `requirepass`: the right password works; a wrong one, or none, keeps the store down with an
    /// authentication failure that never shows the password.
    @Test func requirepass() throws {
        let redis = try RedisProcess(security: RedisServerSecurity(password: "correct horse battery"))
        defer { redis.stop() }
        let (good, up) = store(port: redis.port, RedisSecurity(password: Array("correct horse battery".utf8)))
        defer { good.close() }
        try #require(up, "\(good.lastError)")
        try roundTrip(good, seed: 1)

        let (wrong, wrongUp) = store(port: redis.port, RedisSecurity(password: Array("tr0ub4dor".utf8)), waitMillis: 1_500)
        defer { wrong.close() }
        #expect(!wrongUp && !wrong.isHealthy)
        #expect(wrong.lastFailureKind == .authentication)
        #expect(wrong.lastError.contains("WRONGPASS") && wrong.lastError.contains("default user"), "\(wrong.lastError)")
        #expect(!wrong.lastError.contains("tr0ub4dor"))
        let refused = wait {
            wrong.issueChallenge(ChallengeRequest(purpose: nil, keyID: nil, ttlMillis: 1_000), nowMillis: t0, completion: $0)
        }
        guard case .failure(let e) = refused else {
            Issue.record("a store with the wrong password issued a challenge")
            return
        }
        #expect(e.code == .unavailable && !e.detail.contains("tr0ub4dor"), "\(e.detail)")

        let (none, noneUp) = store(port: redis.port, RedisSecurity(), waitMillis: 1_500)
        defer { none.close() }
        #expect(!noneUp)
        #expect(none.lastFailureKind == .authentication)
        #expect(none.lastError.contains("NOAUTH"), "\(none.lastError)")
    }

    /// The ACL docs/redis.md recommends: the gateway's key prefix, no dangerous commands.
    static let documentedACL = "~ag:* +@read +@write +@scripting +@connection -@dangerous +select +wait +cluster|slots +asking"

    /// ACL users (`AUTH user password`), with the default user off, limited as docs/redis.md says.
    @Test func aclUser() throws {
        let rules = Self.documentedACL.split(separator: " ").map(String.init)
        let doc = try String(contentsOf: repositoryRoot.appendingPathComponent("docs/redis.md"), encoding: .utf8)
        #expect(doc.contains("user gateway on >PASSWORD \(Self.documentedACL)"))
        let redis = try RedisProcess(
            security: RedisServerSecurity(users: [("gateway", "gw-secret-1")], userRules: rules, defaultUserOff: true))
        defer { redis.stop() }
        let (good, up) = store(port: redis.port, RedisSecurity(username: "gateway", password: Array("gw-secret-1".utf8)))
        defer { good.close() }
        try #require(up, "\(good.lastError)")
        try roundTrip(good, seed: 2)
        var rng = SeededRandom(seed: 22)
        let record = makeRecord(&rng)
        let c = try good.issue(.register, key: record.keyID, now: t0)
        #expect(try good.registerNow(record, challenge: c.token, now: t0) == .registered(existing: false))
        #expect(
            try good.commit(record.keyID, counter: 5, challenge: try good.issue(.assert, key: record.keyID, now: t0).token, now: t0)
                == .committed(previousCounter: 0))
        #expect(try redis.cli(["FLUSHALL"]).contains("NOPERM"), "the documented ACL keeps dangerous commands out")

        for (user, password) in [("gateway", "gw-secret-2"), ("nobody", "gw-secret-1")] {
            let (bad, badUp) = store(port: redis.port, RedisSecurity(username: user, password: Array(password.utf8)), waitMillis: 1_500)
            defer { bad.close() }
            #expect(!badUp && bad.lastFailureKind == .authentication)
            #expect(bad.lastError.hasPrefix("AUTH as user \"\(user)\": WRONGPASS"), "\(bad.lastError)")
            #expect(!bad.lastError.contains(password))
        }
    }

    /// TLS: the server's certificate verified against the CA file and the name; a wrong CA, a wrong
    /// name, a plain client and a missing client certificate (when the server requires one) fail.
    @Test func tls() throws {
        let certs = try TestCertificates()
        defer { certs.remove() }
        let redis = try RedisProcess(security: RedisServerSecurity(users: [("gateway", "tls-pass")], tls: certs))
        defer { redis.stop() }
        let auth = RedisSecurity(username: "gateway", password: Array("tls-pass".utf8))

        var ok = auth
        ok.tls = try tlsContext(ca: certs.caCertificate)
        let (good, up) = store(port: redis.port, ok)
        defer { good.close() }
        try #require(up, "\(good.lastError)")
        try roundTrip(good, seed: 3)
        var named = ok
        named.tlsServerName = "localhost"
        let (byName, byNameUp) = store(port: redis.port, named)
        defer { byName.close() }
        #expect(byNameUp, "\(byName.lastError)")

        var wrongCA = auth
        wrongCA.tls = try tlsContext(ca: certs.otherCACertificate)
        let (untrusted, untrustedUp) = store(port: redis.port, wrongCA, waitMillis: 1_500)
        defer { untrusted.close() }
        #expect(!untrustedUp && untrusted.lastFailureKind == .tls)
        #expect(untrusted.lastError.contains("certificate_verification"), "\(untrusted.lastError)")

        var wrongName = ok
        wrongName.tlsServerName = "redis.example.com"
        let (misnamed, misnamedUp) = store(port: redis.port, wrongName, waitMillis: 1_500)
        defer { misnamed.close() }
        #expect(!misnamedUp && misnamed.lastFailureKind == .tls)
        #expect(misnamed.lastError.contains("certificate_verification"), "\(misnamed.lastError)")

        let (plain, plainUp) = store(port: redis.port, auth, waitMillis: 1_500)
        defer { plain.close() }
        #expect(!plainUp && !plain.isHealthy, "a plain-text client must not get through a TLS port")
    }

    @Test func tlsWithClientCertificate() throws {
        let certs = try TestCertificates()
        defer { certs.remove() }
        let redis = try RedisProcess(security: RedisServerSecurity(password: "mtls-pass", tls: certs, requireClientCertificate: true))
        defer { redis.stop() }
        var with = RedisSecurity(password: Array("mtls-pass".utf8))
        with.tls = try tlsContext(ca: certs.caCertificate, client: certs)
        let (good, up) = store(port: redis.port, with)
        defer { good.close() }
        try #require(up, "\(good.lastError)")
        try roundTrip(good, seed: 4)

        var without = with
        without.tls = try tlsContext(ca: certs.caCertificate)
        let (bad, badUp) = store(port: redis.port, without, waitMillis: 1_500)
        defer { bad.close() }
        #expect(!badUp && bad.lastFailureKind == .tls, "\(bad.lastFailureKind): \(bad.lastError)")
    }

    /// A Redis Cluster over TLS with an ACL user: the store, seeded with one node, reaches the other
    /// primaries it learns from CLUSTER SLOTS with the same credentials and TLS, and uses them all.
    @Test func clusterOverTLSWithAnACLUser() throws {
        let certs = try TestCertificates()
        defer { certs.remove() }
        let cluster = try RedisClusterProcess(
            nodes: 3, security: RedisServerSecurity(password: "cluster-pass", users: [("gateway", "cluster-user-pass")], tls: certs))
        defer { cluster.stop() }
        var security = RedisSecurity(username: "gateway", password: Array("cluster-user-pass".utf8))
        security.tls = try tlsContext(ca: certs.caCertificate)
        let (s, up) = store(port: cluster.ports[0], security, cluster: true, waitMillis: 10_000)
        defer { s.close() }
        try #require(up, "\(s.lastError)")
        #expect(Set(s.clusterNodes) == Set(cluster.ports.map { "127.0.0.1:\($0)" }))
        var rng = SeededRandom(seed: 5)
        for _ in 0..<24 {
            let record = makeRecord(&rng)
            let c = try s.issue(.register, key: record.keyID, now: t0)
            #expect(try s.registerNow(record, challenge: c.token, now: t0) == .registered(existing: false))
        }
        for i in 0..<3 { #expect(try cluster.dbsize(i) > 0, "node \(i) holds none of the keys") }

        var wrong = security
        wrong.password = Array("not-the-password".utf8)
        let (bad, badUp) = store(port: cluster.ports[0], wrong, cluster: true, waitMillis: 1_500)
        defer { bad.close() }
        #expect(!badUp && bad.lastFailureKind == .authentication, "\(bad.lastFailureKind): \(bad.lastError)")
    }
}
