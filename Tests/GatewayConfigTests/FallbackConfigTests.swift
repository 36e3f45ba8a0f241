import Testing

@testable import GatewayConfig

/// A route's `assertion.fallback` (the DeviceCheck fallback) and `apple`'s DeviceCheck keys:
/// defaults, values, and every refusal at its position.
@Suite("assertion.fallback and apple's DeviceCheck keys")
struct FallbackConfigTests {
    static let apple = "apple: {team_id: ABCDE12345, key_id: KEY1234567, private_key: /keys/team.p8}\nrisk: {refresh: off}"

    static func yaml(_ assertion: String, apple: String = FallbackConfigTests.apple) -> String {
        ConfigFixture.protectedRoute(assertion, name: "shop") + "\n" + apple
    }

    @Test("defaults: no fallback; devicecheck: true is 5% over 10m, from 20 requests, tokens kept 1h, no bits; Apple's production host")
    func defaults() throws {
        #expect(try ConfigFixture.parse(Self.yaml("{mode: enforce}")).routes[0].assertion.fallback == nil)
        let f = try #require(
            try ConfigFixture.parse(Self.yaml("{mode: enforce, fallback: {devicecheck: true}}")).routes[0].assertion.fallback)
        #expect(
            f
                == DeviceCheckFallback(
                    bits: .off, maxShare: Percentage(basisPoints: 500), window: .seconds(600), minRequests: 20, tokenTTL: .seconds(3600)))
        let a = try #require(try ConfigFixture.parse(Self.yaml("{mode: enforce}")).apple)
        #expect(a.deviceCheckEnvironment == .production && a.deviceCheckURL == nil)
        #expect(a.deviceCheckBase.description == "https://api.devicecheck.apple.com:443")
        // devicecheck: false alone: no fallback.
        #expect(try ConfigFixture.parse(Self.yaml("{mode: enforce, fallback: {devicecheck: false}}")).routes[0].assertion.fallback == nil)
    }

    @Test("values: bits, share, window, min_requests, token_ttl; the development host or one url (the stand-in)")
    func values() throws {
        let f = try #require(
            try ConfigFixture.parse(
                Self.yaml(
                    "{mode: shadow, fallback: {devicecheck: {bits: write}, max_share: 12.5%, window: 1m, min_requests: 4, token_ttl: 30m}}"
                )
            ).routes[0].assertion.fallback)
        #expect(
            f
                == DeviceCheckFallback(
                    bits: .write, maxShare: Percentage(basisPoints: 1250), window: .seconds(60), minRequests: 4, tokenTTL: .seconds(1800)))
        #expect(
            try ConfigFixture.parse(Self.yaml("{mode: enforce, fallback: {devicecheck: {}}}")).routes[0].assertion.fallback?.bits == .off)
        let dev = try #require(
            try ConfigFixture.parse(
                Self.yaml(
                    "{mode: enforce}",
                    apple:
                        "apple: {team_id: ABCDE12345, key_id: KEY1234567, private_key: /k.p8, devicecheck_environment: development}\nrisk: {refresh: off}"
                )
            ).apple)
        #expect(dev.deviceCheckBase.description == "https://api.development.devicecheck.apple.com:443")
        let sim = try #require(
            try ConfigFixture.parse(
                Self.yaml(
                    "{mode: enforce}",
                    apple:
                        "apple: {team_id: ABCDE12345, key_id: KEY1234567, private_key: /k.p8, devicecheck_url: https://127.0.0.1:8443/}\nrisk: {refresh: off}"
                )
            ).apple)
        #expect(sim.deviceCheckBase == UpstreamURL(scheme: .https, host: "127.0.0.1", port: 8443, path: ""))
    }

    @Test("refused at their position: bad values, inert keys, mode off, a fallback without apple, an environment beside a url")
    func refusals() {
        #expect(
            ConfigFixture.errors(
                Self.yaml(
                    "{mode: enforce, fallback: {devicecheck: yes, max_share: 0%, window: 25h, min_requests: 0, token_ttl: 0s, extra: 1}}"))
                == [
                    "gateway.yaml:8:113: routes[0].assertion.fallback.devicecheck must be true or false, got \"yes\"",
                    "gateway.yaml:8:129: routes[0].assertion.fallback.max_share must be more than 0% (to allow no fallback request, remove the fallback)",
                    "gateway.yaml:8:141: routes[0].assertion.fallback.window must be at most 24h, got 25h",
                    "gateway.yaml:8:160: routes[0].assertion.fallback.min_requests must be an integer from 1 to 1000000, got 0",
                    "gateway.yaml:8:174: routes[0].assertion.fallback.token_ttl must be more than 0, got 0s",
                    "gateway.yaml:8:178: unknown key \"extra\" in routes[0].assertion.fallback",
                ])
        #expect(
            ConfigFixture.errors(Self.yaml("{mode: enforce, fallback: {devicecheck: {bits: all}}}")) == [
                "gateway.yaml:8:120: routes[0].assertion.fallback.devicecheck.bits must be one of \"off\", \"read\" or \"write\", got \"all\""
            ])
        #expect(
            ConfigFixture.errors(Self.yaml("{mode: enforce, fallback: {devicecheck: false, max_share: 10%}}")) == [
                "gateway.yaml:8:120: routes[0].assertion.fallback.max_share has no effect with devicecheck: false (no fallback); remove it"
            ])
        #expect(
            ConfigFixture.errors(Self.yaml("{mode: enforce, fallback: {max_share: 10%}}")) == [
                "gateway.yaml:8:99: missing required key \"devicecheck\" in routes[0].assertion.fallback"
            ])
        #expect(
            ConfigFixture.errors(Self.yaml("{mode: off, fallback: {devicecheck: true}}")) == [
                "gateway.yaml:8:85: routes[0].assertion.fallback has no effect with mode: off (the route verifies nothing); remove it, or set mode: enforce or shadow"
            ])
        #expect(
            ConfigFixture.errors(Self.yaml("{mode: enforce, fallback: {devicecheck: true}}", apple: "")) == [
                "gateway.yaml:8:89: routes[0].assertion.fallback needs Apple's DeviceCheck, which the gateway calls with the team's key, but apple is not configured: add apple: {team_id, key_id, private_key}, or remove the fallback"
            ])
        #expect(
            ConfigFixture.errors(
                Self.yaml(
                    "{mode: enforce}",
                    apple:
                        "apple: {team_id: ABCDE12345, key_id: KEY1234567, private_key: /k.p8, devicecheck_url: http://x, devicecheck_environment: staging}\nrisk: {refresh: off}"
                )) == [
                    "gateway.yaml:9:87: apple.devicecheck_url must be an https:// url (Apple's services are only spoken to over TLS), got \"http://x:80\"",
                    "gateway.yaml:9:122: apple.devicecheck_environment must be one of \"production\" or \"development\", got \"staging\"",
                ])
        #expect(
            ConfigFixture.errors(
                Self.yaml(
                    "{mode: enforce}",
                    apple:
                        "apple: {team_id: ABCDE12345, key_id: KEY1234567, private_key: /k.p8, devicecheck_url: https://x, devicecheck_environment: development}\nrisk: {refresh: off}"
                )) == [
                    "gateway.yaml:9:98: apple.devicecheck_environment has no effect with apple.devicecheck_url (the url names the one DeviceCheck server spoken to); remove one of them"
                ])
    }
}
