/// The top-level `android` section: Google's attestation status list, which Android registrations
/// are checked against (docs/android.md, "Revocation"). Used when an app has `android`.
public struct AndroidConfig: Sendable, Equatable {
    /// Where the list is fetched (`GET`, HTTPS); nil (`status_url: off`): no list, no certificate is
    /// known revoked. Default Google's.
    public var statusURL: UpstreamURL?
    /// How often the list is fetched again (`If-None-Match`: unchanged costs a `304`). Default 1h.
    public var refresh: Duration
    /// PEM file of the CA that signs the list server's certificate (the stand-in's, in tests); nil:
    /// the system's CAs.
    public var caFile: String?
    /// Default 5s.
    public var connectTimeout: Duration
    /// Default 30s (the list is a few hundred KB).
    public var responseTimeout: Duration

    public init(
        statusURL: UpstreamURL? = AndroidConfig.googleStatusURL, refresh: Duration = .seconds(3600), caFile: String? = nil,
        connectTimeout: Duration = .seconds(5), responseTimeout: Duration = .seconds(30)
    ) {
        self.statusURL = statusURL
        self.refresh = refresh
        self.caFile = caFile
        self.connectTimeout = connectTimeout
        self.responseTimeout = responseTimeout
    }

    /// Google's list: https://android.googleapis.com/attestation/status.
    public static let googleStatusURL = UpstreamURL(scheme: .https, host: "android.googleapis.com", port: 443, path: "/attestation/status")

    /// `refresh`'s range: a second (tests) to a day.
    public static let refreshRange = Duration.seconds(1)...Duration.seconds(86_400)
}
