import Testing

@testable import GatewayConfig

/// `apple` (the team's key for Apple's device services), `risk` (the risk metric's refresh) and a
/// route's `max_risk_metric` / `on_risk`: defaults, values, and every refusal at its position.
@Suite("apple, risk and max_risk_metric")
struct AppleConfigTests {
    static let store = "store: {kind: memory, data_dir: /var/lib/attest-gateway}"
    static let apple = "apple: {team_id: ABCDE12345, key_id: KEY1234567, private_key: keys/AuthKey_KEY1234567.p8}"

    @Test("defaults: no apple; risk every 24h, 4 at a time, 10/s, stale keys asked again every 72h; routes without a maximum, flag")
    func defaults() throws {
        let config = try ConfigFixture.parse(ConfigFixture.minimal)
        #expect(config.apple == nil)
        #expect(
            config.risk
                == RiskConfig(refresh: .seconds(86_400), concurrency: 4, rate: Rate(10, per: .second), staleProbe: .seconds(259_200)))
        #expect(config.routes[0].assertion.maxRiskMetric == nil)
        #expect(AssertionPolicy(mode: .enforce).onRisk == .flag)
    }

    @Test("apple: ids, the key file resolved against the config's directory, Apple's hosts by default or one https base url")
    func apple() throws {
        let a = try #require(try ConfigFixture.parse(minimalPlus: Self.store + "\n" + Self.apple).apple)
        #expect(a.teamID == "ABCDE12345" && a.keyID == "KEY1234567")
        #expect(a.privateKey == "/etc/attest-gateway/keys/AuthKey_KEY1234567.p8")
        #expect(a.attestDataURL == nil && a.caFile == nil)
        #expect(a.connectTimeout == .seconds(5) && a.responseTimeout == .seconds(10))
        #expect(AppleConfig.developmentAttestData.description == "https://data-development.appattest.apple.com:443")
        #expect(AppleConfig.productionAttestData.description == "https://data.appattest.apple.com:443")
        let b = try #require(
            try ConfigFixture.parse(
                minimalPlus: Self.store + """

                    apple:
                      team_id: ABCDE12345
                      key_id: KEY1234567
                      private_key: /keys/team.p8
                      attest_data_url: https://127.0.0.1:8443/
                      ca_file: sim-ca/root.pem
                      connect_timeout: 1s
                      response_timeout: 2s
                    risk: {refresh: 2s, concurrency: 2, rate: 600/m, stale_probe: 1h}
                    """
            ).apple)
        #expect(b.attestDataURL == UpstreamURL(scheme: .https, host: "127.0.0.1", port: 8443, path: ""))
        #expect(b.caFile == "/etc/attest-gateway/sim-ca/root.pem")
        #expect(b.connectTimeout == .seconds(1) && b.responseTimeout == .seconds(2))
        let risk = try ConfigFixture.parse(
            minimalPlus: Self.store + "\n" + Self.apple + "\nrisk: {refresh: 2s, concurrency: 2, rate: 600/m, stale_probe: 1h}"
        ).risk
        #expect(risk == RiskConfig(refresh: .seconds(2), concurrency: 2, rate: Rate(600, per: .minute), staleProbe: .seconds(3600)))
        // Off: nothing refreshed, and then no store needs the receipts.
        #expect(try ConfigFixture.parse(minimalPlus: Self.apple + "\nrisk: {refresh: off}").risk.refresh == nil)
        // Redis keeps receipts.
        #expect(throws: Never.self) {
            try ConfigFixture.parse(minimalPlus: "store: {kind: redis, url: redis://127.0.0.1:6379}\n" + Self.apple)
        }
    }

    @Test("bad ids, urls, key files and ranges are refused at their value")
    func badValues() {
        let errors = ConfigFixture.errors(
            ConfigFixture.minimal + "\n" + Self.store + """

                apple: {team_id: abcde12345, key_id: KEY123, private_key: k.p8, attest_data_url: http://127.0.0.1:8443, connect_timeout: 2m}
                risk: {refresh: 500ms, concurrency: 0, rate: 10, stale_probe: 0s}
                """)
        #expect(
            errors == [
                "gateway.yaml:8:18: apple.team_id must be Apple's 10-character team id (A-Z, 0-9), got \"abcde12345\" (letters must be uppercase)",
                "gateway.yaml:8:38: apple.key_id must be the 10-character id Apple shows for the key (A-Z, 0-9; the .p8 file is named AuthKey_<id>.p8), got \"KEY123\"",
                "gateway.yaml:8:82: apple.attest_data_url must be an https:// url (Apple's services are only spoken to over TLS), got \"http://127.0.0.1:8443\"",
                "gateway.yaml:8:122: apple.connect_timeout must be at most 1m, got 2m",
                "gateway.yaml:9:17: risk.refresh must be at least 1s, got 500ms",
                "gateway.yaml:9:37: risk.concurrency must be an integer from 1 to 256, got 0",
                "gateway.yaml:9:46: risk.rate needs a unit: per s, m or h (e.g. 10/s), got \"10\"",
                "gateway.yaml:9:63: risk.stale_probe must be more than 0, got 0s",
            ])
        let missing = ConfigFixture.errors(ConfigFixture.minimal + "\n" + Self.store + "\napple: {team_id: ABCDE12345}")
        #expect(
            missing == [
                "gateway.yaml:8:8: missing required key \"key_id\" in apple",
                "gateway.yaml:8:8: missing required key \"private_key\" in apple",
            ])
    }

    @Test("what the refresh needs and what needs it: apple for risk, kept receipts for the refresh, the refresh for max_risk_metric")
    func dependencies() {
        #expect(
            ConfigFixture.errors(ConfigFixture.minimal + "\nrisk: {refresh: 1h}") == [
                "gateway.yaml:7:1: risk has no effect without apple (the team's key that authenticates the refresh with Apple's data service); add apple: {team_id, key_id, private_key}, or remove risk"
            ])
        #expect(
            ConfigFixture.errors(ConfigFixture.minimal + "\n" + Self.apple) == [
                "gateway.yaml:7:1: the risk refresh needs the receipts kept: set store.data_dir (a memory-only store does not keep receipts), use store.kind: redis, or set risk.refresh: off"
            ])
        #expect(
            ConfigFixture.errors(ConfigFixture.minimal + "\n" + Self.apple + "\nrisk: {refresh: off, concurrency: 2}") == [
                "gateway.yaml:8:22: risk.concurrency has no effect with refresh: off (no key is refreshed); remove it"
            ])
        let protected = ConfigFixture.protectedRoute("{mode: enforce, max_risk_metric: 3, on_risk: refuse}")
        #expect(
            ConfigFixture.errors(protected) == [
                "gateway.yaml:8:93: routes[0].assertion.max_risk_metric needs the risk metric, which the gateway fetches from Apple's data service, but apple is not configured: configure apple (and risk), or remove max_risk_metric"
            ])
        #expect(
            ConfigFixture.errors(protected + "\n" + Self.apple + "\nrisk: {refresh: off}") == [
                "gateway.yaml:8:93: routes[0].assertion.max_risk_metric needs the risk metric, which the gateway fetches from Apple's data service, but risk.refresh is off: configure apple (and risk), or remove max_risk_metric"
            ])
        let ok = try? ConfigFixture.parse(protected + "\n" + Self.apple + "\n" + Self.store)
        #expect(ok?.routes[0].assertion.maxRiskMetric == 3)
        #expect(ok?.routes[0].assertion.onRisk == .refuse)
    }

    @Test("on_risk needs max_risk_metric; both have no effect with mode: off; the maximum is 0 to 1,000,000")
    func routeKeys() {
        func errors(_ assertion: String) -> [String] {
            ConfigFixture.errors(ConfigFixture.protectedRoute(assertion) + "\n" + Self.apple + "\n" + Self.store)
        }
        #expect(
            errors("{mode: enforce, on_risk: refuse}") == [
                "gateway.yaml:8:93: routes[0].assertion.on_risk has no effect without routes[0].assertion.max_risk_metric (the risk metric above which a key is flagged or refused); set it, or remove on_risk"
            ])
        #expect(
            errors("{mode: off, max_risk_metric: 2}") == [
                "gateway.yaml:8:89: routes[0].assertion.max_risk_metric has no effect with mode: off (the route verifies nothing); remove it, or set mode: enforce or shadow"
            ])
        #expect(
            errors("{mode: shadow, max_risk_metric: -1}") == [
                "gateway.yaml:8:109: routes[0].assertion.max_risk_metric must be an integer from 0 to 1000000, got -1"
            ])
        #expect(
            errors("{mode: shadow, max_risk_metric: 0, on_risk: warn}") == [
                "gateway.yaml:8:121: routes[0].assertion.on_risk must be one of \"flag\" or \"refuse\", got \"warn\""
            ])
        #expect(errors("{mode: shadow, max_risk_metric: 0}").isEmpty)
    }
}
