import Testing

@testable import GatewayConfig

/// `verdict` (the signed verdict's key, ttl, issuer, publish) and a route's
/// `assertion.verdict_header`: defaults, values, and every refusal at its position.
@Suite("verdict and verdict_header")
struct VerdictConfigTests {
    static let verdict = "verdict: {key: keys/verdict.pem}"

    @Test("defaults: no verdict; routes without verdict_header; a verdict with key only: 60s, attest-gateway, not published")
    func defaults() throws {
        let none = try ConfigFixture.parse(ConfigFixture.protectedRoute("{mode: enforce}"))
        #expect(none.verdict == nil && none.routes[0].assertion.verdictHeader == false)
        let v = try #require(try ConfigFixture.parse(minimalPlus: Self.verdict).verdict)
        #expect(
            v == VerdictConfig(key: "/etc/attest-gateway/keys/verdict.pem", ttl: .seconds(60), issuer: "attest-gateway", publish: false))
    }

    @Test("every key set; verdict_header on enforce and shadow routes")
    func values() throws {
        let yaml =
            ConfigFixture.protectedRoute("{mode: shadow, verdict_header: true}")
            + "\nverdict: {key: /keys/v.pem, ttl: 5m, issuer: \"gateway eu-1\", publish: true}"
        let config = try ConfigFixture.parse(yaml)
        #expect(config.verdict == VerdictConfig(key: "/keys/v.pem", ttl: .seconds(300), issuer: "gateway eu-1", publish: true))
        #expect(config.routes[0].assertion.verdictHeader)
        let enforce = try ConfigFixture.parse(ConfigFixture.protectedRoute("{mode: enforce, verdict_header: false}") + "\n" + Self.verdict)
        #expect(!enforce.routes[0].assertion.verdictHeader)
    }

    @Test("verdict_header needs verdict, has no effect with mode: off, and is a boolean; each at its position")
    func routeKey() {
        #expect(
            ConfigFixture.errors(ConfigFixture.protectedRoute("{mode: enforce, verdict_header: true}")) == [
                "gateway.yaml:8:93: routes[0].assertion.verdict_header needs the key the gateway signs the verdict with, but verdict is not configured: add verdict: {key: FILE} (an EC P-256 private key, PEM), or remove verdict_header"
            ])
        #expect(
            ConfigFixture.errors(ConfigFixture.protectedRoute("{mode: off, verdict_header: true}") + "\n" + Self.verdict) == [
                "gateway.yaml:8:89: routes[0].assertion.verdict_header has no effect with mode: off (the route verifies nothing); remove it, or set mode: enforce or shadow"
            ])
        #expect(
            ConfigFixture.errors(ConfigFixture.protectedRoute("{mode: enforce, verdict_header: yes please}") + "\n" + Self.verdict) == [
                "gateway.yaml:8:109: routes[0].assertion.verdict_header must be true or false, got \"yes please\""
            ])
    }

    @Test("bad values are refused at their value: ttl 1s to 1h, a printable issuer, publish a boolean, key required")
    func badValues() {
        let errors = ConfigFixture.errors(
            ConfigFixture.minimal + "\nverdict: {key: v.pem, ttl: 2h, issuer: \"\", publish: maybe}\n")
        #expect(
            errors == [
                "gateway.yaml:7:28: verdict.ttl must be at most 1h, got 2h",
                "gateway.yaml:7:40: verdict.issuer must not be empty",
                "gateway.yaml:7:53: verdict.publish must be true or false, got \"maybe\"",
            ])
        #expect(
            ConfigFixture.errors(ConfigFixture.minimal + "\nverdict: {key: v.pem, issuer: \"gw\\tone\"}") == [
                "gateway.yaml:7:31: verdict.issuer must be 1 to 256 characters without control characters (the tokens' iss), got \"gw\\tone\""
            ])
        #expect(
            ConfigFixture.errors(ConfigFixture.minimal + "\nverdict: {ttl: 500ms}") == [
                "gateway.yaml:7:10: missing required key \"key\" in verdict",
                "gateway.yaml:7:16: verdict.ttl must be at least 1s, got 500ms",
            ])
        #expect(
            ConfigFixture.errors(ConfigFixture.minimal + "\nverdict: {key: v.pem, algorithm: ES256}").first?.hasPrefix(
                "gateway.yaml:7:23: unknown key \"algorithm\" in verdict") == true)
    }
}
