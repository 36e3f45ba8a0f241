import GatewayWire

/// A registered device key. The receipt is kept by the store but not carried here (it is read
/// rarely, and at a million keys it would dominate memory).
public struct DeviceKeyRecord: Sendable, Equatable {
    public var keyID: KeyID
    /// Uncompressed X9.62 point, 65 bytes.
    public var publicKey: [UInt8]
    /// The highest accepted counter (0 right after attestation).
    public var counter: UInt32
    /// `TEAMID.bundle.id`.
    public var appID: String
    public var environment: KeyEnvironment
    /// iOS 27 `apple_validation_category_01`, raw value, when the attestation carried one.
    public var validationCategory: UInt32?
    /// iOS 27 `apple_bundle_version_01`, when the attestation carried one.
    public var bundleVersion: String?
    public var firstSeenMillis: Int64
    public var lastSeenMillis: Int64
    /// The key's receipt dates and Apple's risk metric (`KeyRisk`); nil when no verified receipt
    /// was stored with it (`apps[].receipts: ignore`, or a key registered before receipts were dated).
    public var risk: KeyRisk?
    /// The account an upstream named for the key and its key count (`KeyAccount`); nil: none named.
    public var account: KeyAccount?

    public init(
        keyID: KeyID, publicKey: [UInt8], counter: UInt32, appID: String, environment: KeyEnvironment,
        validationCategory: UInt32?, bundleVersion: String?, firstSeenMillis: Int64, lastSeenMillis: Int64,
        risk: KeyRisk? = nil, account: KeyAccount? = nil
    ) {
        self.keyID = keyID
        self.publicKey = publicKey
        self.counter = counter
        self.appID = appID
        self.environment = environment
        self.validationCategory = validationCategory
        self.bundleVersion = bundleVersion
        self.firstSeenMillis = firstSeenMillis
        self.lastSeenMillis = lastSeenMillis
        self.risk = risk
        self.account = account
    }
}
