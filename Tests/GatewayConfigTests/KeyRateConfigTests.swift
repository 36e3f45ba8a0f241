import GatewayConfig
import Testing

/// Issue 27: `routes[].assertion.key_rate: {rate, burst}`, and what `gatewayd check` says of a bad one.
@Suite("Config: assertion.key_rate")
struct KeyRateConfigTests {
    static func yaml(_ assertion: String) -> String {
        ValidationTests.base + """

            routes:
              - {name: r, match: {path_prefix: /}, upstream: demo, assertion: {\(assertion)}}
            apps: [{team_id: ABCDE12345, bundle_ids: [com.example.shop]}]
            """
    }

    @Test("off by default; rate with burst, or burst two seconds' worth; enforce and shadow, any binding")
    func accepted() throws {
        #expect(try ConfigFixture.parse(Self.yaml("mode: enforce")).routes[0].assertion.keyRate == nil)
        let pay = try ConfigFixture.parse(Self.yaml("mode: enforce, key_rate: {rate: 5/s, burst: 10}")).routes[0].assertion
        #expect(pay.keyRate == KeyRateConfig(rate: Rate(5, per: .second), burst: 10))
        let defaulted = try ConfigFixture.parse(Self.yaml("mode: shadow, key_rate: {rate: 30/m}")).routes[0].assertion.keyRate
        #expect(defaulted?.rate == Rate(30, per: .minute) && defaulted?.burst == 1)
        let hourly = try ConfigFixture.parse(Self.yaml("mode: enforce, bind: body, challenge: \"off\", key_rate: {rate: 100/h, burst: 1}"))
        #expect(hourly.routes[0].assertion.keyRate == KeyRateConfig(rate: Rate(100, per: .hour), burst: 1))
        #expect(KeyRateConfig(rate: Rate(10, per: .second)).burst == 20)
    }

    @Test("bad key_rate values are errors at their position")
    func refused() {
        func errors(_ keyRate: String) -> [String] { ConfigFixture.errors(Self.yaml("mode: enforce, key_rate: \(keyRate)")) }
        #expect(
            errors("{rate: 5}") == [
                "gateway.yaml:4:100: routes[0].assertion.key_rate.rate needs a unit: per s, m or h (e.g. 5/s), got \"5\""
            ])
        #expect(
            errors("{rate: 0.5/s}") == [
                "gateway.yaml:4:100: routes[0].assertion.key_rate.rate must be a rate: a whole number, / and a unit, s, m or h (e.g. 10/s, 600/m, 100/h), got \"0.5/s\""
            ])
        #expect(
            errors("{rate: 0/s}") == [
                "gateway.yaml:4:100: routes[0].assertion.key_rate.rate must count from 1 to 1000000 per unit, got \"0/s\""
            ])
        #expect(
            errors("{rate: 5/s, burst: 0}") == [
                "gateway.yaml:4:112: routes[0].assertion.key_rate.burst must be an integer from 1 to 1000000, got 0"
            ])
        #expect(
            errors("{rate: 5/s, burst: 1000001}") == [
                "gateway.yaml:4:112: routes[0].assertion.key_rate.burst must be an integer from 1 to 1000000, got 1000001"
            ])
        #expect(errors("{burst: 10}") == ["gateway.yaml:4:93: missing required key \"rate\" in routes[0].assertion.key_rate"])
        #expect(errors("{rate: 5/s, brust: 10}").first?.contains("unknown key") == true)
        #expect(errors("{rate: 5/s, brust: 10}").first?.hasPrefix("gateway.yaml:4:") == true)
        #expect(errors("5/s").count == 1)
    }
}
