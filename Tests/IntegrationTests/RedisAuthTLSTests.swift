import Foundation
import GatewayTestSupport
import Testing

/// A real `gatewayd` on a real `redis-server` that wants a password (an ACL user) over TLS: the right
/// credentials serve, wrong ones leave the gateway up but not ready with a reason that names the
/// failure, and the password shows up nowhere (logs, `/readyz`, `gatewayd check`).
@Suite(
    "gatewayd on a Redis with a password and TLS (real gatewayd, real redis-server)", .serialized, .timeLimit(.minutes(3)),
    .enabled(if: RedisProcess.testsEnabled, Comment(rawValue: RedisProcess.skipMessage)))
struct RedisAuthTLSTests {
    static let password = "s3cret-Gateway-pass"

    static func config(store: String) -> String {
        """
        listeners:
          - {name: public, address: 127.0.0.1:0}
        admin: {address: 127.0.0.1:0}
        limits: {drain_timeout: 1s}
        upstreams:
          - {name: demo, url: demo}
        routes:
          - {name: default, match: {path_prefix: /}, upstream: demo}
        store: \(store)
        """
    }

    /// A password file (mode 0400) in `dir`.
    static func passwordFile(_ text: String, in dir: URL, mode: mode_t = 0o400) throws -> String {
        let path = dir.appendingPathComponent("redis-password-\(UUID().uuidString)").path
        #expect(FileManager.default.createFile(atPath: path, contents: Data((text + "\n").utf8)))
        #expect(chmod(path, mode) == 0)
        return path
    }

    static func readyz(_ gw: GatewayProcess) throws -> (Int, [String]) {
        let (status, body) = try curl([gw.url("admin", "/readyz")])
        let reasons = (try? JSONSerialization.jsonObject(with: Data(body.utf8)) as? [String: Any])?["reasons"] as? [String] ?? []
        return (status, reasons)
    }

    static func challengeStatus(_ gw: GatewayProcess) throws -> Int {
        try HTTPCall.send(
            port: UInt16(gw.url("public", "").split(separator: ":").last!)!, method: "POST", target: "/v1/attest/challenge", body: []
        ).status
    }

    @Test("rediss:// with an ACL user and password_file: ready and serving; wrong password or wrong CA: not ready, reason named")
    func authAndTLS() throws {
        let certs = try TestCertificates()
        defer { certs.remove() }
        let redis = try RedisProcess(security: RedisServerSecurity(users: [("gateway", Self.password)], defaultUserOff: true, tls: certs))
        defer { redis.stop() }
        let secrets = certs.directory
        let url = "rediss://gateway@127.0.0.1:\(redis.port)/0"

        // The right credentials: ready, challenges issued through Redis.
        let goodFile = try Self.passwordFile(Self.password, in: secrets)
        let good = try GatewayProcess(
            config: Self.config(
                store: "{kind: redis, url: '\(url)', password_file: \(goodFile), tls: {ca_file: \(certs.caCertificate)}}"))
        defer { good.stop() }
        #expect(try Self.readyz(good).0 == 200)
        #expect(try Self.challengeStatus(good) == 201)
        #expect(try redis.cli(["DBSIZE"]) != "0", "the challenge is in Redis")
        #expect(good.stderr.contains("\"msg\":\"store connected\""), "\(good.stderr)")

        // A password rotated in the file: a reload says it needs a restart; the running connections stay.
        let rotated = goodFile + ".new"
        #expect(FileManager.default.createFile(atPath: rotated, contents: Data("rotated-password\n".utf8)))
        #expect(chmod(rotated, 0o400) == 0 && rename(rotated, goodFile) == 0)
        good.signal(SIGHUP)
        var warned = false
        for _ in 0..<100 where !warned {
            warned = good.stderr.contains(
                "reload: store.password_file holds another password than the one read at start; takes effect after a restart")
            if !warned { usleep(50_000) }
        }
        #expect(warned, "\(good.stderr)")
        #expect(try Self.readyz(good).0 == 200)
        #expect(!good.stderr.contains("rotated-password"))

        // The password in the url instead (percent-encoded '-' is fine as is): the same.
        let inURL = try GatewayProcess(
            config: Self.config(
                store:
                    "{kind: redis, url: 'rediss://gateway:\(Self.password)@127.0.0.1:\(redis.port)/0', tls: {ca_file: \(certs.caCertificate), server_name: localhost}}"
            ))
        defer { inURL.stop() }
        #expect(try Self.readyz(inURL).0 == 200)
        #expect(inURL.stderr.contains("rediss://gateway:***@127.0.0.1:\(redis.port)/0"), "the url is logged redacted: \(inURL.stderr)")

        // A wrong password: the gateway runs, /readyz 503 names the authentication failure.
        let wrong = try GatewayProcess(
            config: Self.config(
                store:
                    "{kind: redis, url: '\(url)', timeout: 300ms, password_file: \(try Self.passwordFile("not-the-password", in: secrets)), tls: {ca_file: \(certs.caCertificate)}}"
            ))
        defer { wrong.stop() }
        let (status, reasons) = try Self.readyz(wrong)
        #expect(status == 503)
        #expect(
            reasons.contains {
                $0.hasPrefix("store: Redis 127.0.0.1:\(redis.port) authentication failed: AUTH as user \"gateway\": WRONGPASS")
            }, "\(reasons)")
        #expect(try Self.challengeStatus(wrong) == 503)
        #expect(wrong.stderr.contains("store: Redis refused the credentials"), "\(wrong.stderr)")

        // A CA that did not sign the server's certificate: refused, /readyz says TLS.
        let untrusted = try GatewayProcess(
            config: Self.config(
                store:
                    "{kind: redis, url: '\(url)', timeout: 300ms, password_file: \(try Self.passwordFile(Self.password, in: secrets)), tls: {ca_file: \(certs.otherCACertificate)}}"
            ))
        defer { untrusted.stop() }
        let (tlsStatus, tlsReasons) = try Self.readyz(untrusted)
        #expect(tlsStatus == 503)
        #expect(
            tlsReasons.contains {
                $0.hasPrefix(
                    "store: Redis 127.0.0.1:\(redis.port) TLS failed: TLS handshake with 127.0.0.1:\(redis.port): certificate_verification")
            },
            "\(tlsReasons)")

        // The password appears in no log line of any of them, nor in /readyz.
        for gw in [good, inURL, wrong, untrusted] {
            #expect(!gw.stderr.contains(Self.password) && !gw.stdout.contains(Self.password))
            #expect(!(try curl([gw.url("admin", "/readyz")]).1.contains(Self.password)))
        }
    }

    @Test("gatewayd check reads password_file and store.tls files, and never prints the password")
    func check() throws {
        let certs = try TestCertificates()
        defer { certs.remove() }
        let dir = certs.directory
        func check(_ store: String) throws -> ProcessResult {
            let file = dir.appendingPathComponent("gateway-\(UUID().uuidString).yaml")
            try Self.config(store: store).write(to: file, atomically: true, encoding: .utf8)
            return try runProcess(gatewaydBinary, ["check", "--config", file.path], timeout: 30)
        }
        let ok = try check(
            "{kind: redis, url: 'rediss://gateway@127.0.0.1:6390/0', password_file: \(try Self.passwordFile(Self.password, in: dir)), tls: {ca_file: \(certs.caCertificate)}}"
        )
        #expect(ok.status == 0, "\(ok.stdout)\(ok.stderr)")

        let open = try Self.passwordFile(Self.password, in: dir, mode: 0o644)
        let loose = try check("{kind: redis, url: 'redis://gateway@127.0.0.1:6390/0', password_file: \(open)}")
        #expect(loose.status == 2)
        #expect(
            loose.stderr.contains("store.password_file \(open): its mode 0644 lets other users read or change the password"),
            "\(loose.stderr)")
        let missing = try check("{kind: redis, url: 'redis://gateway@127.0.0.1:6390/0', password_file: \(dir.path)/no-such-file}")
        #expect(missing.status == 2)
        #expect(missing.stderr.contains("store.password_file \(dir.path)/no-such-file: does not exist"), "\(missing.stderr)")
        let badCA = try check("{kind: redis, url: 'rediss://:x@127.0.0.1:6390/0', tls: {ca_file: /nonexistent/ca.pem}}")
        #expect(badCA.status == 2)
        #expect(badCA.stderr.contains("store.tls:") && badCA.stderr.contains("/nonexistent/ca.pem"), "\(badCA.stderr)")
        let badURL = try check("{kind: redis, url: 'redis://gateway:\(Self.password)@127.0.0.1:99999/0'}")
        #expect(badURL.status == 2)
        for r in [ok, loose, missing, badCA, badURL] { #expect(!(r.stdout + r.stderr).contains(Self.password)) }
        #expect(badURL.stderr.contains("redis://gateway:***@127.0.0.1:99999/0"), "\(badURL.stderr)")
    }
}
