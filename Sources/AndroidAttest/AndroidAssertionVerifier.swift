import GatewayCrypto

/// Verifies an Android assertion with the key an Android attestation registered, App Attest's
/// assertion algorithm without authenticator data: signature over `counter ‖ clientDataHash`,
/// then counter strictly greater than the stored one. Pure: the stored key and counter come in,
/// the new counter goes out; storing it, atomically with consuming the challenge, is the caller's.
public struct AndroidAssertionVerifier: Sendable {
    public init() {}

    /// - Parameters:
    ///   - clientDataHash: SHA256(clientData), the same client data App Attest requests sign.
    ///   - previousCounter: the stored counter (0 after registration); `nil` skips the check
    ///     (offline inspection only).
    public func verify(assertion bytes: [UInt8], publicKey: P256PublicKey, clientDataHash: [UInt8], previousCounter: UInt32?)
        throws(AndroidAttestError) -> AndroidAssertion
    {
        try verify(AndroidAssertion.parse(bytes), publicKey: publicKey, clientDataHash: clientDataHash, previousCounter: previousCounter)
    }

    /// The same for an assertion parsed already (the gateway reads the header before it knows the
    /// key's platform).
    public func verify(_ assertion: AndroidAssertion, publicKey: P256PublicKey, clientDataHash: [UInt8], previousCounter: UInt32?)
        throws(AndroidAttestError) -> AndroidAssertion
    {
        let message = AndroidAssertion.signedMessage(counter: assertion.counter, clientDataHash: clientDataHash)
        guard publicKey.isValidSignature(assertion.signature, for: message) else {
            throw AndroidAttestError(.badSignature, "the signature does not verify over counter ‖ clientDataHash with the registered key")
        }
        if let previousCounter, assertion.counter <= previousCounter {
            throw AndroidAttestError(.counterReplay, "counter \(assertion.counter) is not greater than the stored \(previousCounter)")
        }
        return assertion
    }
}
