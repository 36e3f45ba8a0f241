/// Roots trusted for attestations besides Apple's App Attestation Root CA, for receipts besides
/// Apple Root CA - G3, and for Android attestations besides Google's; the Apple and Google roots are
/// built in, each trusted for its own job only.
public struct TrustConfig: Sendable, Equatable {
    /// PEM file paths, resolved against the config file's directory. Default: none.
    public var extraRoots: [String]
    /// PEM file paths of roots trusted for receipt signatures (the simulator's `receipt-root.pem`).
    /// Default: none.
    public var extraReceiptRoots: [String]

    /// PEM file paths of roots trusted for Android key attestation besides Google's pinned ones (the
    /// simulator's `android-root.pem`, in tests only). Default: none.
    public var extraAndroidRoots: [String]

    public init(extraRoots: [String] = [], extraReceiptRoots: [String] = [], extraAndroidRoots: [String] = []) {
        self.extraAndroidRoots = extraAndroidRoots
        self.extraRoots = extraRoots
        self.extraReceiptRoots = extraReceiptRoots
    }
}
