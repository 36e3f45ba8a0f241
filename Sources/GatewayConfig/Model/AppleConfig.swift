/// The team's key for Apple's device services (`apple:`): what authenticates the gateway's calls
/// to the App Attest data service (the risk metric, docs/verification.md) and, later, DeviceCheck.
/// One ES256 key per team, made in the Apple Developer account (Keys, with the DeviceCheck
/// capability: docs/operations.md). The key file is read at start, by `gatewayd check` and on
/// reload, and never logged.
public struct AppleConfig: Sendable, Equatable {
    /// The 10-character team id: the `iss` of every token.
    public var teamID: String
    /// The key's 10-character id: the `kid` of every token.
    public var keyID: String
    /// The `.p8` file Apple hands out once (a PKCS#8 EC P-256 private key, PEM), resolved against the
    /// config file's directory.
    public var privateKey: String
    /// Where the App Attest data service is, as a base url (`/v1/attestationData` is appended).
    /// nil (default): Apple's hosts, by the key's environment: `https://data-development.appattest.apple.com`
    /// for development keys, `https://data.appattest.apple.com` for production ones. Set, one url for
    /// both (the local stand-in `attest-sim apple`).
    public var attestDataURL: UpstreamURL?
    /// PEM roots trusted for the service's certificate instead of the system's (the stand-in's test
    /// CA). nil (default): the system roots.
    public var caFile: String?
    /// Connecting to the service (TCP and TLS). Default 5s.
    public var connectTimeout: Duration
    /// From the request's last byte to the whole response. Default 10s.
    public var responseTimeout: Duration

    /// Which DeviceCheck host the fallback and the two bits speak to (`devicecheck_environment`):
    /// DeviceCheck tokens carry no environment, so the app's build decides (a development build's
    /// tokens are only known to the development host). Default `.production`.
    public var deviceCheckEnvironment: DeviceCheckEnvironment
    /// Where DeviceCheck is, as a base url (`/v1/validate_device_token`, `/v1/query_two_bits` and
    /// `/v1/update_two_bits` are appended). nil (default): Apple's host of `deviceCheckEnvironment`.
    /// Set: the local stand-in `attest-sim apple`.
    public var deviceCheckURL: UpstreamURL?

    public enum DeviceCheckEnvironment: String, Sendable, CaseIterable {
        case production
        case development
    }

    public init(
        teamID: String, keyID: String, privateKey: String, attestDataURL: UpstreamURL? = nil, caFile: String? = nil,
        connectTimeout: Duration = .seconds(5), responseTimeout: Duration = .seconds(10),
        deviceCheckEnvironment: DeviceCheckEnvironment = .production, deviceCheckURL: UpstreamURL? = nil
    ) {
        self.deviceCheckEnvironment = deviceCheckEnvironment
        self.deviceCheckURL = deviceCheckURL
        self.teamID = teamID
        self.keyID = keyID
        self.privateKey = privateKey
        self.attestDataURL = attestDataURL
        self.caFile = caFile
        self.connectTimeout = connectTimeout
        self.responseTimeout = responseTimeout
    }

    /// Apple's hosts ("Assessing fraud risk").
    public static let developmentAttestData = UpstreamURL(scheme: .https, host: "data-development.appattest.apple.com", port: 443)
    public static let productionAttestData = UpstreamURL(scheme: .https, host: "data.appattest.apple.com", port: 443)
    /// The data service's endpoint, after the base url.
    public static let attestDataPath = "/v1/attestationData"

    /// DeviceCheck's hosts ("Accessing and modifying per-device data").
    public static let developmentDeviceCheck = UpstreamURL(scheme: .https, host: "api.development.devicecheck.apple.com", port: 443)
    public static let productionDeviceCheck = UpstreamURL(scheme: .https, host: "api.devicecheck.apple.com", port: 443)
    /// DeviceCheck's base url for this configuration.
    public var deviceCheckBase: UpstreamURL {
        deviceCheckURL ?? (deviceCheckEnvironment == .production ? Self.productionDeviceCheck : Self.developmentDeviceCheck)
    }
}

/// How the gateway refreshes each key's risk metric (`risk:`), with `apple`.
public struct RiskConfig: Sendable, Equatable {
    /// At most one refresh per key per this long (jittered by up to a tenth more); nil: `off`, no
    /// refresh (the metric stays as it is). Default 24h.
    public var refresh: Duration?
    /// Refreshes in flight at once, per process. Default 4.
    public var concurrency: Int
    /// Refreshes started per process, at most. Default 10/s.
    public var rate: Rate
    /// A key whose data Apple no longer has (`404`, after 30 days without an attestation on the
    /// device) is asked again at this fixed cadence: a device that attests again revives it. Default 72h.
    public var staleProbe: Duration

    public init(
        refresh: Duration? = .seconds(86_400), concurrency: Int = 4, rate: Rate = Rate(10, per: .second),
        staleProbe: Duration = .seconds(72 * 3600)
    ) {
        self.refresh = refresh
        self.concurrency = concurrency
        self.rate = rate
        self.staleProbe = staleProbe
    }

    public static let concurrencyRange = 1...256
    /// Apple's receipts can be refreshed once a day (their not-before); the shortest setting is a
    /// second for tests against the local stand-in.
    public static let minimumRefresh = Duration.seconds(1)
}
