import Foundation
import GatewayCrypto
import GatewayWire

/// Apple's attestation algorithm ("Validating apps that connect to your server"), every step, in
/// Apple's order. Each step is one function whose comment is Apple's sentence; the first failure is
/// thrown with its code. Trust roots and the verification instant are parameters; nothing is read from
/// a clock or a global here.
public struct AttestationVerifier: Sendable {
    public struct Policy: Sendable {
        /// App ids whose rpIdHash is accepted (an app and its App Clip share an identity).
        public var appIDs: [AppID]
        /// Environments whose aaguid is accepted.
        public var environments: Set<AttestEnvironment>

        public init(appIDs: [AppID], environments: Set<AttestEnvironment>) {
            self.appIDs = appIDs
            self.environments = environments
        }
    }

    public let policy: Policy
    public let chainVerifier: X509ChainVerifier

    /// OID of the nonce extension in the credential certificate.
    public static let nonceExtensionOID = "1.2.840.113635.100.8.2"

    /// - Parameter extraRoots: roots trusted besides Apple's built-in App Attestation Root CA (tests,
    ///   the simulator). Apple's root is always trusted.
    public init(policy: Policy, extraRoots: [X509Certificate] = []) {
        self.policy = policy
        self.chainVerifier = X509ChainVerifier(roots: Self.appleRoot + extraRoots)
    }

    /// Apple's root, parsed once per process.
    public static let appleRoot: [X509Certificate] = {
        do {
            return try X509Certificate.parsePEM(AppleAppAttestRoot.pem)
        } catch {
            fatalError("built-in Apple App Attestation Root CA does not parse: \(error)")
        }
    }()

    /// Verifies an attestation object for `keyID` with the given clientDataHash (opaque bytes of any
    /// length; normally SHA256(challenge)), at `instant`.
    public func verify(attestation bytes: [UInt8], keyID: [UInt8], clientDataHash: [UInt8], at instant: Date)
        throws(AppAttestError) -> VerifiedAttestation
    {
        let object = try AttestationObject.parse(bytes)
        return try verify(object, keyID: keyID, clientDataHash: clientDataHash, at: instant)
    }

    public func verify(_ object: AttestationObject, keyID: [UInt8], clientDataHash: [UInt8], at instant: Date)
        throws(AppAttestError) -> VerifiedAttestation
    {
        let authData = object.authenticatorData
        guard let credential = authData.attestedCredentialData else {
            throw AppAttestError(.malformed, "attestation authenticator data has no attested credential data")
        }
        let leaf = try checkCertificateChain(object, at: instant)
        let nonce = computeNonce(authData: authData, clientDataHash: clientDataHash)
        try checkNonce(leaf: leaf, nonce: nonce)
        let publicKey = try checkKeyID(leaf: leaf, credential: credential, keyID: keyID)
        let appID = try checkRPIDHash(authData)
        try checkCounterIsZero(authData)
        let environment = try checkAAGUID(credential)
        try checkCredentialID(credential, keyID: keyID)
        return VerifiedAttestation(
            keyID: keyID, publicKey: publicKey, receipt: object.receipt, appID: appID, environment: environment,
            signCount: authData.signCount, validationCategory: authData.extensions?.validationCategory,
            bundleVersion: authData.extensions?.bundleVersion, leafNotAfter: leaf.notAfter, leafSerialHex: leaf.serialHex,
            credentialCertificate: leaf, keyAccessControl: try readKeyAccessControl(leaf))
    }

    /// macOS 27 and later (WWDC 2026): the key access-control property, extension
    /// 1.2.840.113635.100.8.6, read when present. Not a check: the app's policy decides
    /// (`apps[].require_macos_security`); a certificate carrying it twice is malformed.
    func readKeyAccessControl(_ leaf: X509Certificate) throws(AppAttestError) -> KeyAccessControl? {
        switch leaf.extension(oid: KeyAccessControl.oid) {
        case .absent: return nil
        case .duplicated:
            throw AppAttestError(.malformed, "the credential certificate carries the key access-control extension twice")
        case .present(let value, _): return KeyAccessControl(extensionValue: value)
        }
    }

    /// 1. Verify that the x5c array contains the intermediate and leaf certificates for App Attest,
    /// starting from the credential certificate in the first data buffer in the array (credcert).
    /// Verify the validity of the certificates using Apple's App Attest root certificate.
    func checkCertificateChain(_ object: AttestationObject, at instant: Date) throws(AppAttestError) -> X509Certificate {
        var certs: [X509Certificate] = []
        for (i, der) in object.x5c.enumerated() {
            do {
                certs.append(try X509Certificate(der: der))
            } catch {
                throw AppAttestError(.malformed, "x5c[\(i)]: \(error.reason)")
            }
        }
        do {
            try chainVerifier.verify(leaf: certs[0], intermediates: Array(certs.dropFirst()), at: instant.timeIntervalSince1970)
        } catch {
            switch error {
            case .untrusted(let why):
                throw AppAttestError(.chainUntrusted, "x5c does not chain to a trusted App Attest root: \(why)")
            case .expired(let subject, let notAfter):
                throw AppAttestError(.certificateExpired, "\(subject) expired at \(Self.iso(notAfter)), before \(Self.iso(instant))")
            case .notYetValid(let subject, let notBefore):
                throw AppAttestError(
                    .certificateNotYetValid, "\(subject) is valid from \(Self.iso(notBefore)), after \(Self.iso(instant))")
            }
        }
        return certs[0]
    }

    /// 2. Create clientDataHash as the SHA256 hash of the one-time challenge your server sends to your
    /// app before performing the attestation, and append that hash to the end of the authenticator data.
    /// 3. Generate a new SHA256 hash of the composite item to create nonce.
    /// (clientDataHash is taken as given: the caller hashes the challenge, or passes raw bytes.)
    func computeNonce(authData: AuthenticatorData, clientDataHash: [UInt8]) -> [UInt8] {
        SHA256.hash(authData.bytes, clientDataHash)
    }

    /// 4. Obtain the value of the credCert extension with OID 1.2.840.113635.100.8.2, which is a
    /// DER-encoded ASN.1 sequence. Decode the sequence and extract the single octet string that it
    /// contains. Verify that the string equals nonce.
    func checkNonce(leaf: X509Certificate, nonce: [UInt8]) throws(AppAttestError) {
        let value: [UInt8]
        switch leaf.extension(oid: Self.nonceExtensionOID) {
        case .absent:
            throw AppAttestError(.nonceMismatch, "the credential certificate has no nonce extension (\(Self.nonceExtensionOID))")
        case .duplicated:
            throw AppAttestError(.malformed, "the credential certificate carries the nonce extension twice")
        case .present(let v, _):
            value = v
        }
        let embedded = try Self.parseNonceExtension(value)
        guard ConstantTime.equals(embedded, nonce) else {
            throw AppAttestError(
                .nonceMismatch,
                "certificate nonce \(Hex.encode(embedded)) is not SHA256(authData ‖ clientDataHash) = \(Hex.encode(nonce))")
        }
    }

    /// The nonce under [1] (`TaggedOctetString`: `SEQUENCE { [1] EXPLICIT OCTET STRING }`, strictly).
    static func parseNonceExtension(_ der: [UInt8]) throws(AppAttestError) -> [UInt8] {
        switch TaggedOctetString.value(der, tag: 1) {
        case .success(let nonce): return nonce
        case .failure(let p): throw AppAttestError(.malformed, "nonce extension \(p.why)")
        }
    }

    /// 5. Create the SHA256 hash of the public key in credCert, and verify that it matches the key
    /// identifier from your app. (The key as an uncompressed X9.62 point, not its DER SubjectPublicKeyInfo.)
    /// The credential public key in authData must be that same key.
    func checkKeyID(leaf: X509Certificate, credential: AuthenticatorData.AttestedCredentialData, keyID: [UInt8])
        throws(AppAttestError) -> P256PublicKey
    {
        guard let key = leaf.p256PublicKey() else {
            throw AppAttestError(.malformed, "the credential certificate's key is not an EC P-256 key")
        }
        let hash = SHA256.hash(key.x962)
        guard ConstantTime.equals(hash, keyID) else {
            throw AppAttestError(
                .keyIDMismatch, "SHA256(certificate public key) = \(Base64.encode(hash)) is not the key id \(Base64.encode(keyID))")
        }
        guard ConstantTime.equals(credential.credentialPublicKey, key.x962) else {
            throw AppAttestError(.publicKeyMismatch, "the COSE credential public key in authData is not the certificate's key")
        }
        return key
    }

    /// 6. Compute the SHA256 hash of your app's App ID, and verify that it's the same as the
    /// authenticator data's RP ID hash.
    func checkRPIDHash(_ authData: AuthenticatorData) throws(AppAttestError) -> AppID {
        var match: AppID? = nil
        for id in policy.appIDs where ConstantTime.equals(id.rpIDHash, authData.rpIDHash) { match = id }
        guard let match else {
            throw AppAttestError(
                .appIDMismatch,
                "rpIdHash \(Hex.encode(authData.rpIDHash)) is not SHA256 of any allowed app id (\(policy.appIDs.map(\.description).joined(separator: ", ")))"
            )
        }
        return match
    }

    /// 7. Verify that the authenticator data's counter field equals 0.
    func checkCounterIsZero(_ authData: AuthenticatorData) throws(AppAttestError) {
        guard authData.signCount == 0 else {
            throw AppAttestError(.counterNotZero, "attestation counter is \(authData.signCount), must be 0")
        }
    }

    /// 8. Verify that the authenticator data's aaguid field is either appattestdevelop if operating in
    /// the development environment, or appattest followed by seven 0x00 bytes if operating in the
    /// production environment.
    func checkAAGUID(_ credential: AuthenticatorData.AttestedCredentialData) throws(AppAttestError) -> AttestEnvironment {
        guard let env = AttestEnvironment(aaguid: credential.aaguid) else {
            throw AppAttestError(.environmentMismatch, "aaguid \(Hex.encode(credential.aaguid)) is neither development nor production")
        }
        guard policy.environments.contains(env) else {
            let allowed = policy.environments.map(\.rawValue).sorted().joined(separator: ", ")
            throw AppAttestError(.environmentMismatch, "key is from the \(env.rawValue) environment; allowed: \(allowed)")
        }
        return env
    }

    /// 9. Verify that the authenticator data's credentialId field is the same as the key identifier.
    func checkCredentialID(_ credential: AuthenticatorData.AttestedCredentialData, keyID: [UInt8]) throws(AppAttestError) {
        guard ConstantTime.equals(credential.credentialID, keyID) else {
            throw AppAttestError(.credentialIDMismatch, "credential id \(Base64.encode(credential.credentialID)) is not the key id")
        }
    }

    static func iso(_ epoch: Int64) -> String { iso(Date(timeIntervalSince1970: TimeInterval(epoch))) }
    static func iso(_ date: Date) -> String {
        date.formatted(.iso8601)
    }
}

/// What a verified attestation establishes, to be stored against the key id.
public struct VerifiedAttestation: Sendable {
    public let keyID: [UInt8]
    public let publicKey: P256PublicKey
    public let receipt: [UInt8]
    public let appID: AppID
    public let environment: AttestEnvironment
    public let signCount: UInt32
    public let validationCategory: ValidationCategory?
    public let bundleVersion: String?
    /// When the credential certificate expires (seconds since the epoch).
    public let leafNotAfter: Int64
    public let leafSerialHex: String
    /// x5c[0], the credential certificate (its receipt's field 3 must be these bytes).
    public let credentialCertificate: X509Certificate
    /// Extension 1.2.840.113635.100.8.6 of the credential certificate (macOS 27), when present.
    public let keyAccessControl: KeyAccessControl?
}
