/// Roots trusted for attestations besides Apple's App Attestation Root CA, which is built in.
public struct TrustConfig: Sendable, Equatable {
    /// PEM file paths, resolved against the config file's directory. Default: none.
    public var extraRoots: [String]

    public init(extraRoots: [String] = []) {
        self.extraRoots = extraRoots
    }
}
