import Testing

@testable import GatewayConfig

/// Keys per account: the top-level `accounts: {window}` and a route's `max_keys_per_account` /
/// `on_keys`: defaults, values, and every refusal at its position.
@Suite("accounts and max_keys_per_account")
struct AccountsConfigTests {
    @Test("defaults: a 720h (30 day) window; routes without a maximum; on_keys flag")
    func defaults() throws {
        let config = try ConfigFixture.parse(ConfigFixture.minimal)
        #expect(config.accounts == AccountsConfig(window: .seconds(30 * 86_400)))
        #expect(config.routes[0].assertion.maxKeysPerAccount == nil)
        #expect(AssertionPolicy(mode: .enforce).onKeys == .flag)
    }

    @Test("values: the window, the maximum and on_keys")
    func values() throws {
        let config = try ConfigFixture.parse(
            ConfigFixture.protectedRoute("{mode: enforce, max_keys_per_account: 3, on_keys: refuse}") + "\naccounts: {window: 24h}")
        #expect(config.accounts.window == .seconds(86_400))
        #expect(config.routes[0].assertion.maxKeysPerAccount == 3)
        #expect(config.routes[0].assertion.onKeys == .refuse)
        let flagged = try ConfigFixture.parse(ConfigFixture.protectedRoute("{mode: shadow, max_keys_per_account: 1}"))
        #expect(flagged.routes[0].assertion.onKeys == .flag)
    }

    @Test("on_keys needs max_keys_per_account; both have no effect with mode: off; the maximum is 1 to 1,000,000; on_keys flag or refuse")
    func routeKeys() {
        func errors(_ assertion: String) -> [String] { ConfigFixture.errors(ConfigFixture.protectedRoute(assertion)) }
        #expect(
            errors("{mode: enforce, on_keys: refuse}") == [
                "gateway.yaml:8:93: routes[0].assertion.on_keys has no effect without routes[0].assertion.max_keys_per_account (the number of keys per account above which a key is flagged or refused); set it, or remove on_keys"
            ])
        #expect(
            errors("{mode: off, max_keys_per_account: 2}") == [
                "gateway.yaml:8:89: routes[0].assertion.max_keys_per_account has no effect with mode: off (the route verifies nothing); remove it, or set mode: enforce or shadow"
            ])
        #expect(
            errors("{mode: shadow, max_keys_per_account: 0}") == [
                "gateway.yaml:8:114: routes[0].assertion.max_keys_per_account must be an integer from 1 to 1000000, got 0"
            ])
        #expect(
            errors("{mode: shadow, max_keys_per_account: 1000001}") == [
                "gateway.yaml:8:114: routes[0].assertion.max_keys_per_account must be an integer from 1 to 1000000, got 1000001"
            ])
        #expect(
            errors("{mode: shadow, max_keys_per_account: 5, on_keys: block}") == [
                "gateway.yaml:8:126: routes[0].assertion.on_keys must be one of \"flag\" or \"refuse\", got \"block\""
            ])
        #expect(errors("{mode: shadow, max_keys_per_account: 5, on_keys: refuse}").isEmpty)
    }

    @Test("accounts.window: a duration from 1m to 8760h; unknown keys refused")
    func window() {
        func errors(_ accounts: String) -> [String] {
            ConfigFixture.errors(ConfigFixture.protectedRoute("{mode: enforce}") + "\naccounts: " + accounts)
        }
        #expect(errors("{window: 720h}").isEmpty)
        #expect(errors("{window: 1m}").isEmpty)
        #expect(errors("{window: 30s}") == ["gateway.yaml:9:20: accounts.window must be at least 1m, got 30s"])
        #expect(errors("{window: 8761h}") == ["gateway.yaml:9:20: accounts.window must be at most 8760h, got 8761h"])
        #expect(
            errors("{window: 30d}") == [
                "gateway.yaml:9:20: accounts.window must be a duration: a whole number and one unit, ms, s, m or h (e.g. 250ms, 30s, 5m, 1h), got \"30d\""
            ])
        #expect(errors("{windw: 1h}").first?.hasPrefix("gateway.yaml:9:12: ") == true)
    }
}
