/// Every way an attestation or assertion can fail, as a stable code (also the metric `reason` and the
/// `error` of the gateway's JSON answers) plus a human-readable detail for logs and ops.
public struct AppAttestError: Error, Equatable, Sendable, CustomStringConvertible {
    public enum Code: String, CaseIterable, Sendable {
        /// Bad encoding anywhere: base64, CBOR, authenticator data, DER, missing or mistyped fields.
        case malformed
        /// The attestation statement format is not `apple-appattest`.
        case unsupportedFormat = "unsupported_format"
        /// The x5c chain does not lead to a trusted root (bad signature, unknown issuer, not a CA, …).
        case chainUntrusted = "chain_untrusted"
        /// A certificate of the chain expired before the verification instant.
        case certificateExpired = "certificate_expired"
        /// A certificate of the chain is not valid yet at the verification instant.
        case certificateNotYetValid = "certificate_not_yet_valid"
        /// The leaf's nonce extension (1.2.840.113635.100.8.2) is missing or differs from SHA256(authData ‖ clientDataHash).
        case nonceMismatch = "nonce_mismatch"
        /// SHA256 of the leaf's public key is not the key id the client reported.
        case keyIDMismatch = "key_id_mismatch"
        /// The credential public key in authData is not the leaf certificate's key.
        case publicKeyMismatch = "public_key_mismatch"
        /// rpIdHash is not SHA256 of any allowed app id.
        case appIDMismatch = "app_id_mismatch"
        /// An attestation's counter is not 0.
        case counterNotZero = "counter_not_zero"
        /// The aaguid is not that of an allowed environment (development, production).
        case environmentMismatch = "environment_mismatch"
        /// The credential id in authData is not the key id.
        case credentialIDMismatch = "credential_id_mismatch"
        /// The assertion's ECDSA signature does not verify with the stored key.
        case badSignature = "bad_signature"
        /// The assertion's counter is not strictly greater than the stored one.
        case counterReplay = "counter_replay"
        /// A stored or given public key is not a valid P-256 point.
        case invalidPublicKey = "invalid_public_key"
    }

    public let code: Code
    public let detail: String

    public init(_ code: Code, _ detail: String) {
        self.code = code
        self.detail = detail
    }

    public var description: String { "\(code.rawValue): \(detail)" }

    /// Errors compare by code only (swift-certificates' convention): details may be reworded.
    public static func == (a: AppAttestError, b: AppAttestError) -> Bool { a.code == b.code }
}
