import Testing

@testable import GatewayConfig

/// `attest.challenge_rate`, `attest.registration_rate` and the memory store's challenge budgets.
@Suite("Admission limits and challenge budgets")
struct AdmissionConfigTests {
    @Test("defaults: 10/s per client with a burst of 20 over 65,536 clients; 50 registrations/s; budgets 500,000 / 250,000 / 4")
    func defaults() throws {
        let config = try ConfigFixture.parse(ConfigFixture.minimal)
        #expect(config.attest.challengeRate == ClientRateConfig(perClient: Rate(10, per: .second), burst: 20, clients: 65_536))
        #expect(config.attest.registrationRate == Rate(50, per: .second))
        guard case .memory(let m) = config.store.backend else {
            Issue.record("the default store is not memory")
            return
        }
        #expect(m.maxAnonymousChallenges == 500_000)
        #expect(m.maxKeyBoundChallenges == 250_000)
        #expect(m.maxChallengesPerKey == 4)
    }

    @Test("rates are N/s, N/m or N/h, or off; burst defaults to two seconds' worth")
    func rates() throws {
        let a = try ConfigFixture.parse(
            minimalPlus: "attest: {challenge_rate: {per_client: 600/m, clients: 1024}, registration_rate: 90/h}"
        ).attest
        #expect(a.challengeRate.perClient == Rate(600, per: .minute))
        #expect(a.challengeRate.burst == 20)
        #expect(a.challengeRate.clients == 1024)
        #expect(a.registrationRate?.perSecond == 0.025)
        let b = try ConfigFixture.parse(minimalPlus: "attest: {challenge_rate: {per_client: 5/s, burst: 7}, registration_rate: off}").attest
        #expect(b.challengeRate == ClientRateConfig(perClient: Rate(5, per: .second), burst: 7, clients: 65_536))
        #expect(b.registrationRate == nil)
        let c = try ConfigFixture.parse(minimalPlus: "attest: {challenge_rate: {per_client: off}}").attest
        #expect(c.challengeRate.perClient == nil)
        #expect(ClientRateConfig(perClient: Rate(1, per: .hour)).burst == 1)
    }

    @Test("bad rates, bursts and client counts name the key and the expected form")
    func badRates() {
        #expect(
            ConfigFixture.errors(ConfigFixture.minimal + "\nattest: {challenge_rate: {per_client: 10}, registration_rate: 0.5/s}") == [
                "gateway.yaml:7:39: attest.challenge_rate.per_client needs a unit: per s, m or h (e.g. 10/s), got \"10\"",
                "gateway.yaml:7:63: attest.registration_rate must be a rate: a whole number, / and a unit, s, m or h (e.g. 10/s, 600/m, 100/h), got \"0.5/s\"",
            ]
        )
        #expect(
            ConfigFixture.errors(ConfigFixture.minimal + "\nattest: {registration_rate: 0/s, challenge_rate: {per_client: 10/d}}") == [
                "gateway.yaml:7:29: attest.registration_rate must count from 1 to 1000000 per unit, got \"0/s\"",
                "gateway.yaml:7:63: attest.challenge_rate.per_client must be a rate: a whole number, / and a unit, s, m or h (e.g. 10/s, 600/m, 100/h), got \"10/d\"",
            ]
        )
        #expect(
            ConfigFixture.errors(ConfigFixture.minimal + "\nattest: {challenge_rate: {burst: 0, clients: 100, per_clients: 1/s}}") == [
                "gateway.yaml:7:34: attest.challenge_rate.burst must be an integer from 1 to 1000000, got 0",
                "gateway.yaml:7:46: attest.challenge_rate.clients must be an integer from 1024 to 4194304, got 100",
                "gateway.yaml:7:51: unknown key \"per_clients\" in attest.challenge_rate (did you mean \"per_client\"?)",
            ]
        )
        #expect(
            ConfigFixture.errors(ConfigFixture.minimal + "\nattest: {challenge_rate: {per_client: off, burst: 5}}") == [
                "gateway.yaml:7:44: attest.challenge_rate.burst has no effect with per_client: off; remove it"
            ]
        )
    }

    @Test("the challenge budgets belong to the memory store: ranges checked, refused on redis")
    func budgets() throws {
        let config = try ConfigFixture.parse(
            minimalPlus: "store: {max_anonymous_challenges: 300, max_key_bound_challenges: 200, max_challenges_per_key: 1}")
        guard case .memory(let m) = config.store.backend else {
            Issue.record("not memory")
            return
        }
        #expect(m.maxAnonymousChallenges == 300 && m.maxKeyBoundChallenges == 200 && m.maxChallengesPerKey == 1)
        #expect(
            ConfigFixture.errors(
                ConfigFixture.minimal + "\nstore: {max_anonymous_challenges: 0, max_key_bound_challenges: 1e6, max_challenges_per_key: 9}")
                == [
                    "gateway.yaml:7:35: store.max_anonymous_challenges must be an integer from 1 to 100000000, got 0",
                    "gateway.yaml:7:64: store.max_key_bound_challenges must be an integer from 1 to 100000000, got \"1e6\"",
                    "gateway.yaml:7:93: store.max_challenges_per_key must be an integer from 1 to 8, got 9",
                ]
        )
        #expect(
            ConfigFixture.errors(ConfigFixture.minimal + "\nstore: {kind: redis, url: redis://127.0.0.1, max_anonymous_challenges: 10}")
                == [
                    "gateway.yaml:7:46: store.max_anonymous_challenges applies only to kind \"memory\"; this store is \"redis\""
                ]
        )
    }
}
