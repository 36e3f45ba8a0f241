import Testing

@testable import GatewayConfig

@Suite("store: Redis credentials and TLS")
struct RedisSecurityConfigTests {
    static func redis(_ yaml: String) throws -> StoreConfig.Redis {
        let config = try ConfigFixture.parse(minimalPlus: yaml)
        guard case .redis(let redis) = config.store.backend else { throw ConfigFixtureError("not a redis store") }
        return redis
    }

    struct ConfigFixtureError: Error { let text: String; init(_ t: String) { text = t } }

    @Test("user and password come from the url (percent-decoded); rediss:// turns TLS on with its defaults")
    func urlCredentials() throws {
        let acl = try Self.redis("store: {kind: redis, url: 'redis://gateway:s3cr%40t:x@cache:6380/2'}")
        #expect(acl.url.username == "gateway")
        #expect(acl.url.password == RedisSecret("s3cr@t:x"))
        #expect(acl.url.host == "cache" && acl.url.port == 6380 && acl.url.database == 2)
        #expect(!acl.url.tls && acl.tls == nil)
        let passwordOnly = try Self.redis("store: {kind: redis, url: 'redis://:pw@cache'}")
        #expect(passwordOnly.url.username == nil)
        #expect(passwordOnly.url.password == RedisSecret("pw"))
        let tls = try Self.redis("store: {kind: redis, url: 'rediss://cache'}")
        #expect(tls.url.tls && tls.url.port == 6379)
        #expect(tls.tls == RedisTLSConfig())
        let none = try Self.redis("store: {kind: redis, url: redis://cache}")
        #expect(none.url.username == nil && none.url.password == nil && none.passwordFile == nil && none.tls == nil)
    }

    @Test("the password never appears in descriptions, reflections or error messages")
    func passwordRedacted() throws {
        let redis = try Self.redis("store: {kind: redis, url: 'rediss://gateway:hunter2hunter2@cache:6380/1'}")
        #expect(redis.url.description == "rediss://gateway:***@cache:6380/1")
        #expect(!String(describing: redis).contains("hunter2"))
        #expect(!String(reflecting: redis).contains("hunter2"))
        var dumped = ""
        dump(redis, to: &dumped)
        #expect(!dumped.contains("hunter2"), "\(dumped)")
        #expect(try Self.redis("store: {kind: redis, url: 'redis://:pw@cache'}").url.description == "redis://:***@cache:6379/0")
        #expect(
            try Self.redis("store: {kind: redis, url: 'redis://gateway@cache', password_file: /p}").url.description
                == "redis://gateway@cache:6379/0")
        // A url refused for another reason is quoted with its password masked.
        let errors = ConfigFixture.errors(ConfigFixture.minimal + "\nstore: {kind: redis, url: 'redis://gw:hunter2hunter2@cache:99999'}")
        #expect(
            errors == [
                "gateway.yaml:7:27: store.url has an invalid port \"99999\" (1 to 65535), got \"redis://gw:***@cache:99999\""
            ])
        #expect(AddressSyntax.redactedRedisURL("redis://u:p@h") == "redis://u:***@h")
        #expect(AddressSyntax.redactedRedisURL("redis://h:1/0") == "redis://h:1/0")
    }

    @Test("password_file and tls are read, resolved against the config's directory")
    func fileAndTLS() throws {
        let redis = try Self.redis(
            """
            store:
              kind: redis
              url: rediss://gateway@redis.internal:6380
              password_file: secrets/redis-password
              tls: {ca_file: redis-ca.pem, server_name: redis.internal, client_certificate: c.pem, client_key: c.key}
            """)
        #expect(redis.passwordFile == "/etc/attest-gateway/secrets/redis-password")
        #expect(redis.url.username == "gateway" && redis.url.password == nil)
        #expect(
            redis.tls
                == RedisTLSConfig(
                    caFile: "/etc/attest-gateway/redis-ca.pem", serverName: "redis.internal",
                    clientCertificate: "/etc/attest-gateway/c.pem", clientKey: "/etc/attest-gateway/c.key"))
    }

    @Test("bad credentials, tls on redis://, half a client certificate and credentials on seeds are refused")
    func refusals() {
        func errors(_ store: String) -> [String] { ConfigFixture.errors(ConfigFixture.minimal + "\nstore: " + store) }
        #expect(
            errors("{kind: redis, url: 'redis://gateway@cache'}") == [
                "gateway.yaml:7:27: store.url names the user \"gateway\" but no password: add it to the url (redis://USER:PASSWORD@HOST) or set store.password_file"
            ])
        #expect(
            errors("{kind: redis, url: 'redis://:pw@cache', password_file: /p}") == [
                "gateway.yaml:7:63: store.password_file and a password in store.url are both set: keep one (the file keeps the password out of gateway.yaml)"
            ])
        #expect(
            errors("{kind: redis, url: 'redis://u:@cache'}") == [
                "gateway.yaml:7:27: store.url has an empty password after \"u:\", got \"redis://u:***@cache\""
            ])
        #expect(
            errors("{kind: redis, url: 'redis://u:p@ss@cache'}") == [
                "gateway.yaml:7:27: store.url has more than one \"@\": write an \"@\" in the user or password as %40, got \"redis://u:***@cache\""
            ])
        #expect(
            errors("{kind: redis, url: 'redis://u:p%4@cache'}") == [
                "gateway.yaml:7:27: store.url has an invalid percent-escape in the password (%XX with two hex digits), got \"redis://u:***@cache\""
            ])
        #expect(
            errors("{kind: redis, url: 'redis://@cache'}") == [
                "gateway.yaml:7:27: store.url has an empty user before \"@\", got \"redis://@cache\""
            ])
        #expect(
            errors("{kind: redis, url: 'redis://a%20b:pw@cache'}") == [
                "gateway.yaml:7:27: store.url has an invalid user (visible ASCII characters, percent-encoded where needed), got \"redis://a%20b:***@cache\""
            ])
        #expect(
            errors("{kind: redis, url: redis://cache, tls: {ca_file: /ca.pem}}") == [
                "gateway.yaml:7:42: store.tls applies only to rediss:// urls (TLS); store.url is redis://"
            ])
        #expect(
            errors("{kind: redis, url: rediss://cache, tls: {client_key: /k, verify: false}}") == [
                "gateway.yaml:7:49: store.tls has client_key but no client_certificate: mutual TLS needs both",
                "gateway.yaml:7:65: unknown key \"verify\" in store.tls",
            ])
        #expect(
            errors("{kind: redis, url: rediss://cache, tls: {server_name: 'not a name'}}") == [
                "gateway.yaml:7:62: store.tls.server_name must be a host name such as api.example.com, got \"not a name\""
            ])
        #expect(
            errors("{kind: redis, cluster: true, url: 'rediss://:pw@c', seeds: ['rediss://:pw@d', redis://e]}") == [
                "gateway.yaml:7:68: store.seeds[0] must not carry a user or password: every node gets those of store.url (or store.password_file)",
                "gateway.yaml:7:86: store.seeds[1] is redis:// but store.url is rediss://: every node of a cluster is reached the same way",
            ])
        #expect(
            errors("{kind: memory, password_file: /p, tls: {}}") == [
                "gateway.yaml:7:23: store.password_file applies only to kind \"redis\"; this store is \"memory\"",
                "gateway.yaml:7:42: store.tls applies only to kind \"redis\"; this store is \"memory\"",
            ])
    }

    @Test("percent-decoding and its failures")
    func percentDecoding() {
        #expect(AddressSyntax.percentDecoded("a%40b%3a%2F") == Array("a@b:/".utf8))
        #expect(AddressSyntax.percentDecoded("%4") == nil)
        #expect(AddressSyntax.percentDecoded("%zz") == nil)
        #expect(RedisURL.percentEncoded("a b@c") == "a%20b%40c")
    }
}
