/// The gateway's own App Attest endpoints and the header that tells upstreams which key was verified.
public struct AttestConfig: Sendable, Equatable {
    /// Where clients fetch a challenge. Default `/v1/attest/challenge`.
    public var challengePath: String
    /// Where clients register an attested key. Default `/v1/attest/register`.
    public var registerPath: String
    /// How long an issued challenge stays valid: more than 0, at most 1h. Default 5m.
    public var challengeTTL: Duration
    /// Request header set towards the upstream with the verified key id. Default `X-App-Attest-Verified-Key-Id`.
    public var verifiedKeyHeader: String
    /// A token bucket per client address on the challenge and register endpoints. Default 10/s, burst 20.
    public var challengeRate: ClientRateConfig
    /// Attestations admitted per second by this process (challenges with purpose `register`, and
    /// registrations presenting a challenge of no purpose); nil (`off`): not limited. Default 50/s.
    public var registrationRate: Rate?

    public init(
        challengePath: String = "/v1/attest/challenge",
        registerPath: String = "/v1/attest/register",
        challengeTTL: Duration = .seconds(300),
        verifiedKeyHeader: String = "X-App-Attest-Verified-Key-Id",
        challengeRate: ClientRateConfig = ClientRateConfig(),
        registrationRate: Rate? = Rate(50, per: .second)
    ) {
        self.challengePath = challengePath
        self.registerPath = registerPath
        self.challengeTTL = challengeTTL
        self.verifiedKeyHeader = verifiedKeyHeader
        self.challengeRate = challengeRate
        self.registrationRate = registrationRate
    }

    /// The longest `challenge_ttl` accepted.
    public static let maximumChallengeTTL: Duration = .seconds(3600)
}
