import GatewayCrypto
import GatewayWire

/// Apple's assertion algorithm ("Verify the assertion"), in Apple's order. Pure: the stored key and
/// counter come in, the new counter goes out; storing it (atomically with consuming the challenge) is
/// the caller's job and must happen only after this returns.
public struct AssertionVerifier: Sendable {
    /// App ids whose rpIdHash is accepted (normally just the app id the key was attested for).
    public let appIDs: [AppID]

    public init(appIDs: [AppID]) {
        self.appIDs = appIDs
    }

    /// - Parameters:
    ///   - clientDataHash: SHA256(clientData), the client data the app signed.
    ///   - previousCounter: the stored counter; the assertion's must be strictly greater. `nil` skips
    ///     the check (offline inspection only; the gateway always passes the stored value).
    public func verify(
        assertion bytes: [UInt8], publicKey: P256PublicKey, clientDataHash: [UInt8], previousCounter: UInt32?
    ) throws(AppAttestError) -> VerifiedAssertion {
        let object = try AssertionObject.parse(bytes)
        return try verify(object, publicKey: publicKey, clientDataHash: clientDataHash, previousCounter: previousCounter)
    }

    public func verify(
        _ object: AssertionObject, publicKey: P256PublicKey, clientDataHash: [UInt8], previousCounter: UInt32?
    ) throws(AppAttestError) -> VerifiedAssertion {
        let authData = object.authenticatorData
        // 1. Compute clientDataHash as the SHA256 hash of clientData. (Done by the caller.)
        // 2. Concatenate authenticatorData and clientDataHash, and apply a SHA256 hash over the result
        //    to form nonce.
        // (The nonce stays on the stack: the signature is checked over it in place.)
        let signed = authData.bytes.withUnsafeBytes { a in
            clientDataHash.withUnsafeBytes { c in
                SHA256.withDigest(a, c) { nonce in publicKey.isValidSignature(object.signature, forMessage: nonce) }
            }
        }
        try checkSignature(signed)
        let appID = try checkRPIDHash(authData)
        try checkCounter(authData, previous: previousCounter)
        return VerifiedAssertion(
            signCount: authData.signCount, appID: appID, validationCategory: authData.extensions?.validationCategory,
            bundleVersion: authData.extensions?.bundleVersion)
    }

    /// 3. Use the public key that you store from the attestation object to verify that the assertion's
    /// signature is valid for nonce. (ECDSA P-256 with SHA-256 over nonce: the signed digest is
    /// SHA256(nonce), confirmed on every real vector.)
    func checkSignature(_ valid: Bool) throws(AppAttestError) {
        guard valid else {
            throw AppAttestError(
                .badSignature, "the signature does not verify over SHA256(authenticatorData ‖ clientDataHash) with the stored key")
        }
    }

    /// 4. Compute the SHA256 hash of the client's App ID, and verify that it matches the RP ID in the
    /// authenticator data.
    func checkRPIDHash(_ authData: AuthenticatorData) throws(AppAttestError) -> AppID {
        var match: AppID? = nil
        for id in appIDs where ConstantTime.equals(id.rpIDHash, authData.rpIDHash) { match = id }
        guard let match else {
            throw AppAttestError(
                .appIDMismatch,
                "rpIdHash \(Hex.encode(authData.rpIDHash)) is not SHA256 of any allowed app id (\(appIDs.map(\.description).joined(separator: ", ")))"
            )
        }
        return match
    }

    /// 5. Verify that the authenticator data's counter value is greater than the value from the
    /// previous assertion, or greater than 0 on the first assertion.
    func checkCounter(_ authData: AuthenticatorData, previous: UInt32?) throws(AppAttestError) {
        guard let previous else { return }
        guard authData.signCount > previous else {
            throw AppAttestError(.counterReplay, "counter \(authData.signCount) is not greater than the stored \(previous)")
        }
    }
}

public struct VerifiedAssertion: Sendable, Equatable {
    /// The new counter, to store once the request is committed.
    public let signCount: UInt32
    public let appID: AppID
    public let validationCategory: ValidationCategory?
    public let bundleVersion: String?
}
