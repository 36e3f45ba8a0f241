/// Roots trusted for attestations besides Apple's App Attestation Root CA, and for receipts besides
/// Apple Root CA - G3; both Apple roots are built in, each trusted for its own job only.
public struct TrustConfig: Sendable, Equatable {
    /// PEM file paths, resolved against the config file's directory. Default: none.
    public var extraRoots: [String]
    /// PEM file paths of roots trusted for receipt signatures (the simulator's `receipt-root.pem`).
    /// Default: none.
    public var extraReceiptRoots: [String]

    public init(extraRoots: [String] = [], extraReceiptRoots: [String] = []) {
        self.extraRoots = extraRoots
        self.extraReceiptRoots = extraReceiptRoots
    }
}
