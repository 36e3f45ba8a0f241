import Foundation
import GatewayCrypto
import GatewayWire

/// Why a receipt was refused: a stable code plus a detail for logs, `explain` and `verify-receipt`.
/// The gateway answers every one of them with `receipt_invalid`, the code going to `explain`.
public struct ReceiptError: Error, Equatable, Sendable, CustomStringConvertible {
    public enum Code: String, CaseIterable, Sendable {
        /// Not a CMS SignedData with one signer, or a payload that is not Apple's field set (a
        /// documented field missing, twice, or of the wrong form), or empty (no receipt at all).
        case malformed
        /// The CMS signature does not verify over the payload.
        case badSignature = "bad_signature"
        /// The signer's chain does not end at Apple Root CA - G3 (or a listed test root), or the
        /// signer is not a receipt-signing certificate.
        case chainUntrusted = "chain_untrusted"
        /// A certificate of the signer's chain expired before the verification instant.
        case certificateExpired = "certificate_expired"
        /// A certificate of the signer's chain is not valid yet at the verification instant.
        case certificateNotYetValid = "certificate_not_yet_valid"
        /// Field 2 is not the key's app id.
        case appIDMismatch = "app_id_mismatch"
        /// Field 3 is not this key's credential certificate (or does not certify the stored key):
        /// the receipt belongs to another key.
        case attestedKeyMismatch = "attested_key_mismatch"
        /// Field 6 is not the type expected (`ATTEST` in an attestation).
        case typeMismatch = "type_mismatch"
        /// Field 12 lies in the future (more than `ReceiptVerifier.allowedClockSkewMillis`), or is older
        /// than the caller's maximum age.
        case creationTimeInvalid = "creation_time_invalid"
        /// Field 4 of an `ATTEST` receipt is not the attestation's clientDataHash.
        case clientHashMismatch = "client_hash_mismatch"
    }

    public let code: Code
    public let detail: String

    public init(_ code: Code, _ detail: String) {
        self.code = code
        self.detail = detail
    }

    public var description: String { "\(code.rawValue): \(detail)" }

    /// Errors compare by code only, as `AppAttestError` does.
    public static func == (a: ReceiptError, b: ReceiptError) -> Bool { a.code == b.code }
}

/// Apple's receipt validation ("Assessing fraud risk", "Verify the receipt"), every step in Apple's
/// order, then the checks Apple added in 2026 and ours:
///
/// 1. the CMS signature verifies over the payload (OpenSSL `CMS_verify`);
/// 2. the signer's chain ends at Apple Root CA - G3, valid at the instant, and the signer carries
///    Apple's receipt-signing marker extension (1.2.840.113635.100.12.15);
/// 3. the payload parses (`AppAttestReceipt.parse`);
/// 4. field 2 is the app id;
/// 5. field 12 is not in the future (nor older than a maximum age, when the caller gives one:
///    Apple says five minutes for a receipt fresh from its data service);
/// 6. field 3 is the attested key: the attestation's credential certificate byte for byte, or a
///    certificate of the stored public key;
/// then field 6 is the expected type and, for an `ATTEST` receipt, field 4 is the attestation's
/// clientDataHash (WWDC 2026: "validate … your server challenge that is contained in the receipt";
/// never compared in `RECEIPT`s, where Apple returns it garbled).
///
/// Pure: bytes, roots and an instant in; nothing read from a clock or a file.
public struct ReceiptVerifier: Sendable {
    public let cms: CMSSignedDataVerifier

    /// Marker extension of Apple's "Application Attestation Fraud Receipt Signing" certificates. Other
    /// certificates under Apple Root CA - G3 are issued to developers (Apple Pay, …); only a
    /// receipt-signing certificate may sign a receipt.
    public static let receiptSigningMarkerOID = "1.2.840.113635.100.12.15"

    /// Apple's clock and ours: a creation time up to this far ahead of the instant is accepted.
    public static let allowedClockSkewMillis: Int64 = 60_000

    /// - Parameter extraRoots: roots trusted for receipts besides Apple Root CA - G3 (tests, the
    ///   simulator's receipt root). G3 is always trusted.
    public init(extraRoots: [X509Certificate] = []) {
        cms = CMSSignedDataVerifier(roots: Self.appleRoot + extraRoots)
    }

    /// Exactly these roots, G3 not among them unless given (tests of a wrong root).
    public init(roots: [X509Certificate]) {
        cms = CMSSignedDataVerifier(roots: roots)
    }

    /// Apple Root CA - G3, parsed once per process.
    public static let appleRoot: [X509Certificate] = {
        do {
            return try X509Certificate.parsePEM(AppleRootCAG3.pem)
        } catch {
            fatalError("built-in Apple Root CA - G3 does not parse: \(error)")
        }
    }()

    /// The key a receipt must be about.
    public enum AttestedKey: Sendable {
        /// The attestation's credential certificate (x5c[0]), DER, compared byte for byte.
        case certificate([UInt8])
        /// A stored key (uncompressed P-256 point): field 3 must certify it.
        case publicKey([UInt8])
    }

    /// What the caller knows; nil members are not checked.
    public struct Expectation: Sendable {
        public var appID: AppID?
        public var attestedKey: AttestedKey?
        public var kind: AppAttestReceipt.Kind?
        /// Compared with field 4 of an `ATTEST` receipt only.
        public var clientDataHash: [UInt8]?
        /// Field 12 no older than this before the instant.
        public var maxAgeMillis: Int64?

        public init(
            appID: AppID? = nil, attestedKey: AttestedKey? = nil, kind: AppAttestReceipt.Kind? = nil,
            clientDataHash: [UInt8]? = nil, maxAgeMillis: Int64? = nil
        ) {
            self.appID = appID
            self.attestedKey = attestedKey
            self.kind = kind
            self.clientDataHash = clientDataHash
            self.maxAgeMillis = maxAgeMillis
        }

        /// The receipt inside an attestation this verifier accepted.
        public static func attestation(_ a: VerifiedAttestation, clientDataHash: [UInt8]) -> Expectation {
            Expectation(
                appID: a.appID, attestedKey: .certificate(a.credentialCertificate.der), kind: .attest, clientDataHash: clientDataHash)
        }
    }

    public func verify(_ bytes: [UInt8], expecting e: Expectation, at instant: Date) throws(ReceiptError) -> VerifiedReceipt {
        let millis = Int64((instant.timeIntervalSince1970 * 1000).rounded(.down))
        let verified = try checkSignatureAndChain(bytes, at: Int64(instant.timeIntervalSince1970.rounded(.down)))
        let receipt = try AppAttestReceipt.parse(payload: verified.content)
        if let appID = e.appID { try checkAppID(receipt, appID) }
        try checkCreationTime(receipt, nowMillis: millis, maxAgeMillis: e.maxAgeMillis)
        if let key = e.attestedKey { try checkAttestedKey(receipt, key) }
        if let kind = e.kind { try checkType(receipt, kind) }
        if receipt.kind == .attest, let hash = e.clientDataHash { try checkClientHash(receipt, hash) }
        return VerifiedReceipt(receipt: receipt, bytes: bytes, chain: verified.chain)
    }

    /// 1–2. Verify the signature; evaluate the trustworthiness of the signing certificate up to Apple
    /// Root CA - G3.
    func checkSignatureAndChain(_ bytes: [UInt8], at seconds: Int64) throws(ReceiptError) -> CMSSignedDataVerifier.Verified {
        let verified: CMSSignedDataVerifier.Verified
        do {
            verified = try cms.verify(bytes, at: seconds)
        } catch {
            switch error {
            case .malformed(let why): throw ReceiptError(.malformed, "receipt: \(why)")
            case .badSignature(let why): throw ReceiptError(.badSignature, "receipt: \(why)")
            case .untrusted(let why): throw ReceiptError(.chainUntrusted, "receipt signer does not chain to Apple Root CA - G3: \(why)")
            case .expired(let why): throw ReceiptError(.certificateExpired, "receipt signer chain at \(Self.iso(seconds)): \(why)")
            case .notYetValid(let why): throw ReceiptError(.certificateNotYetValid, "receipt signer chain at \(Self.iso(seconds)): \(why)")
            }
        }
        guard let signer = verified.chain.first else {
            throw ReceiptError(.chainUntrusted, "receipt signer chain could not be rebuilt")
        }
        guard case .present = signer.extension(oid: Self.receiptSigningMarkerOID) else {
            throw ReceiptError(
                .chainUntrusted,
                "receipt signer \(signer.subject) is not a receipt-signing certificate (no extension \(Self.receiptSigningMarkerOID))")
        }
        return verified
    }

    /// 4. Verify that the receipt contains the App ID of your app in field 2.
    func checkAppID(_ r: AppAttestReceipt, _ appID: AppID) throws(ReceiptError) {
        guard ConstantTime.equals(r.appID, Array(appID.description.utf8)) else {
            throw ReceiptError(
                .appIDMismatch, "receipt field 2 is \"\(String(decoding: r.appID.prefix(128), as: UTF8.self))\", not \(appID)")
        }
    }

    /// 5. Verify that the receipt's creation time, given in field 12, is not in the future (and no
    /// more than `maxAgeMillis` old when given).
    func checkCreationTime(_ r: AppAttestReceipt, nowMillis: Int64, maxAgeMillis: Int64?) throws(ReceiptError) {
        if r.creationTime.millis > nowMillis + Self.allowedClockSkewMillis {
            throw ReceiptError(
                .creationTimeInvalid, "receipt created at \(r.creationTime), after the verification instant \(Self.iso(millis: nowMillis))")
        }
        if let maxAgeMillis, r.creationTime.millis < nowMillis - maxAgeMillis {
            throw ReceiptError(
                .creationTimeInvalid,
                "receipt created at \(r.creationTime), more than \(maxAgeMillis / 1000) s before \(Self.iso(millis: nowMillis))")
        }
    }

    /// 6. Verify that the attested public key in field 3, encoded as a DER ASN.1 object, matches the
    /// one you stored after initial attestation (at registration: the credential certificate itself).
    func checkAttestedKey(_ r: AppAttestReceipt, _ key: AttestedKey) throws(ReceiptError) {
        switch key {
        case .certificate(let der):
            guard ConstantTime.equals(r.attestedCertificate, der) else {
                throw ReceiptError(
                    .attestedKeyMismatch,
                    "receipt field 3 (SHA-256 \(Hex.encode(SHA256.hash(r.attestedCertificate)))) is not this attestation's credential certificate (SHA-256 \(Hex.encode(SHA256.hash(der))))"
                )
            }
        case .publicKey(let point):
            let cert: X509Certificate
            do {
                cert = try X509Certificate(der: r.attestedCertificate)
            } catch {
                throw ReceiptError(.malformed, "receipt field 3 is not a certificate: \(error.reason)")
            }
            guard let k = cert.p256PublicKey(), ConstantTime.equals(k.x962, point) else {
                throw ReceiptError(
                    .attestedKeyMismatch, "receipt field 3 does not certify the stored key \(Base64.encode(SHA256.hash(point)))")
            }
        }
    }

    /// Field 6: `ATTEST` in an attestation, `RECEIPT` from Apple's data service.
    func checkType(_ r: AppAttestReceipt, _ kind: AppAttestReceipt.Kind) throws(ReceiptError) {
        guard r.kind == kind else {
            throw ReceiptError(.typeMismatch, "receipt field 6 is \"\(r.type.prefix(32))\", expected \(kind.rawValue)")
        }
    }

    /// Field 4 of an `ATTEST` receipt: the clientDataHash the attestation was made over.
    func checkClientHash(_ r: AppAttestReceipt, _ hash: [UInt8]) throws(ReceiptError) {
        guard let mine = r.clientHash else { throw ReceiptError(.clientHashMismatch, "the ATTEST receipt has no field 4 (client hash)") }
        guard ConstantTime.equals(mine, hash) else {
            throw ReceiptError(
                .clientHashMismatch,
                "receipt field 4 is \(Base64.encode(mine)), not the attestation's clientDataHash \(Base64.encode(hash))")
        }
    }

    static func iso(_ seconds: Int64) -> String { Date(timeIntervalSince1970: TimeInterval(seconds)).formatted(.iso8601) }
    static func iso(millis: Int64) -> String { iso(millis / 1000) }
}

/// A receipt whose signature, chain and fields were checked.
public struct VerifiedReceipt: Sendable {
    public let receipt: AppAttestReceipt
    /// The receipt as received (what the store keeps and Apple's data service takes back).
    public let bytes: [UInt8]
    /// The signer's chain, signer first, trusted root last.
    public let chain: [X509Certificate]
}
