import CGatewayOpenSSL

/// Verifies CMS SignedData (RFC 5652, PKCS#7) with one signer, as Apple signs App Attest receipts:
/// OpenSSL's `CMS_verify` checks the signature over the encapsulated content and the signer's
/// certificate chain to one of `roots`, at a caller-given instant. The roots are the only trust
/// anchors: no system trust store, no partial chains (an intermediate is never an anchor); the
/// certificates inside the message are untrusted candidates for the chain only (a copy of the root
/// among them counts for nothing). Immutable; safe to share across threads (each call builds its own
/// `X509_STORE`, so that the verification instant is per call).
public final class CMSSignedDataVerifier: @unchecked Sendable {
    public let roots: [X509Certificate]

    /// Larger messages are refused before OpenSSL parses them (Apple's receipts are about 4 KiB).
    public static let maxBytes = 64 * 1024

    public enum Failure: Error, Equatable, Sendable, CustomStringConvertible {
        /// Not a CMS SignedData with exactly one signer and encapsulated `id-data` content.
        case malformed(String)
        /// The signature does not verify over the content with the signer's certificate.
        case badSignature(String)
        /// No chain from the signer to one of the roots (unknown issuer, bad certificate signature,
        /// not a CA, wrong purpose, signer certificate missing…).
        case untrusted(String)
        /// A certificate of the chain expired before the instant.
        case expired(String)
        /// A certificate of the chain is not valid yet at the instant.
        case notYetValid(String)

        public var description: String {
            switch self {
            case .malformed(let s), .badSignature(let s), .untrusted(let s), .expired(let s), .notYetValid(let s): s
            }
        }
    }

    /// What a verified message establishes.
    public struct Verified: Sendable {
        /// The encapsulated content (`eContent`), the bytes the signature covers.
        public let content: [UInt8]
        /// The signer's chain as OpenSSL built it: the signer first, the trusted root last.
        public let chain: [X509Certificate]
    }

    public init(roots: [X509Certificate]) {
        precondition(!roots.isEmpty, "CMSSignedDataVerifier needs at least one root")
        self.roots = roots
    }

    /// Verifies `der` (DER or BER, as Apple's indefinite-length receipts are) at `instant` (seconds
    /// since the epoch; OpenSSL compares whole seconds).
    public func verify(_ der: [UInt8], at instant: Int64) throws(Failure) -> Verified {
        let cms = try Self.parse(der)
        defer { CMS_ContentInfo_free(cms) }
        guard let store = X509_STORE_new() else { OpenSSLFatal.fail("X509_STORE_new") }
        defer { X509_STORE_free(store) }
        for r in roots where X509_STORE_add_cert(store, r.x509) != 1 { OpenSSLError.clear() }  // duplicates are harmless
        guard let param = X509_STORE_get0_param(store) else { OpenSSLFatal.fail("X509_STORE_get0_param") }
        X509_VERIFY_PARAM_set_time(param, time_t(instant))

        // The signer's chain, verified once as CMS_verify would (same store, the message's
        // certificates, the smime_sign purpose) and kept for the caller; then the signature alone.
        let chain = try Self.verifiedChain(cms, store: store).get()
        guard let out = BIO_new(BIO_s_mem()) else { OpenSSLFatal.fail("BIO_new") }
        defer { BIO_free(out) }
        OpenSSLError.clear()
        guard CMS_verify(cms, nil, store, nil, out, UInt32(CMS_BINARY | CMS_NO_SIGNER_CERT_VERIFY)) == 1 else {
            throw diagnose()
        }
        OpenSSLError.clear()
        var ptr: UnsafeMutablePointer<CChar>? = nil
        let n = cgw_BIO_get_mem_data(out, &ptr)
        let content: [UInt8] = n > 0 && ptr != nil ? Array(UnsafeRawBufferPointer(start: ptr, count: Int(n))) : []
        return Verified(content: content, chain: chain)
    }

    /// The encapsulated content of a SignedData without verifying anything: for receipts verified
    /// before and stored (re-reading their dates later), never for a decision about a new message.
    public static func unverifiedContent(_ der: [UInt8]) throws(Failure) -> [UInt8] {
        let cms = try parse(der)
        defer { CMS_ContentInfo_free(cms) }
        guard let slot = CMS_get0_content(cms), let octets = slot.pointee else { throw .malformed("the SignedData has no content") }
        let len = Int(ASN1_STRING_length(octets))
        return len > 0 ? Array(UnsafeBufferPointer(start: ASN1_STRING_get0_data(octets), count: len)) : []
    }

    /// Parses and checks the shape: SignedData, exactly one SignerInfo, encapsulated `id-data` content.
    static func parse(_ der: [UInt8]) throws(Failure) -> OpaquePointer {
        guard !der.isEmpty else { throw .malformed("empty input (no CMS SignedData)") }
        guard der.count <= maxBytes else { throw .malformed("\(der.count) bytes, more than the \(maxBytes) allowed") }
        let parsed: OpaquePointer? = der.withUnsafeBufferPointer { buf in
            var p: UnsafePointer<UInt8>? = buf.baseAddress
            let c = d2i_CMS_ContentInfo(nil, &p, buf.count)
            if let c, p != buf.baseAddress! + buf.count {
                CMS_ContentInfo_free(c)
                return nil
            }
            return c
        }
        guard let cms = parsed else {
            let why = OpenSSLError.drain()
            throw .malformed("not a CMS ContentInfo, or trailing bytes after it (\(why))")
        }
        func fail(_ why: String) -> Failure {
            CMS_ContentInfo_free(cms)
            return .malformed(why)
        }
        guard OBJ_obj2nid(CMS_get0_type(cms)) == NID_pkcs7_signed else {
            throw fail("the ContentInfo is not SignedData")
        }
        guard OBJ_obj2nid(CMS_get0_eContentType(cms)) == NID_pkcs7_data else {
            throw fail("the encapsulated content type is not id-data")
        }
        guard let signers = CMS_get0_SignerInfos(cms), cgw_sk_CMS_SignerInfo_num(signers) == 1 else {
            throw fail("the SignedData must have exactly one signer")
        }
        guard let slot = CMS_get0_content(cms), slot.pointee != nil else {
            throw fail("the SignedData has no encapsulated content (detached signature)")
        }
        OpenSSLError.clear()
        return cms
    }

    /// Why `CMS_verify` said no once the chain had verified: the signature, or the message's shape.
    private func diagnose() -> Failure {
        let code = ERR_peek_last_error()
        let text = OpenSSLError.drain()
        guard cgw_ERR_GET_LIB(code) == ERR_LIB_CMS else { return .malformed(text) }
        switch cgw_ERR_GET_REASON(code) {
        case CMS_R_SIGNER_CERTIFICATE_NOT_FOUND, CMS_R_NO_SIGNERS:
            return .untrusted("the signer's certificate is not in the SignedData (\(text))")
        case CMS_R_VERIFICATION_FAILURE, CMS_R_CONTENT_VERIFY_ERROR, CMS_R_NO_MATCHING_SIGNATURE:
            return .badSignature("the signature does not verify over the content (\(text))")
        default:
            return .malformed(text)
        }
    }

    /// The signer's chain verified as `CMS_verify` does (same store, untrusted certificates from the
    /// message, the `smime_sign` purpose): the chain as OpenSSL built it, signer first, or OpenSSL's
    /// exact reason (expired, not yet valid, or untrusted).
    private static func verifiedChain(_ cms: OpaquePointer, store: OpaquePointer) -> Result<[X509Certificate], Failure> {
        guard let leaf = signerCertificate(cms) else { return .failure(.untrusted("the signer's certificate is not in the SignedData")) }
        defer { X509_free(leaf) }
        guard let ctx = X509_STORE_CTX_new() else { OpenSSLFatal.fail("X509_STORE_CTX_new") }
        defer { X509_STORE_CTX_free(ctx) }
        let certs = CMS_get1_certs(cms)
        defer { if let certs { cgw_sk_X509_pop_free(certs) } }
        guard X509_STORE_CTX_init(ctx, store, leaf, certs) == 1 else { OpenSSLFatal.fail("X509_STORE_CTX_init") }
        _ = X509_STORE_CTX_set_default(ctx, "smime_sign")
        guard X509_verify_cert(ctx) == 1 else {
            let err = X509_STORE_CTX_get_error(ctx)
            let depth = X509_STORE_CTX_get_error_depth(ctx)
            let subject = X509_STORE_CTX_get_current_cert(ctx).map(Self.subject) ?? "?"
            let msg = "\(String(cString: X509_verify_cert_error_string(Int(err)))): \(subject) (certificate at depth \(depth))"
            OpenSSLError.clear()
            switch err {
            case X509_V_ERR_CERT_HAS_EXPIRED: return .failure(.expired(msg))
            case X509_V_ERR_CERT_NOT_YET_VALID: return .failure(.notYetValid(msg))
            default: return .failure(.untrusted(msg))
            }
        }
        OpenSSLError.clear()
        var out: [X509Certificate] = []
        if let sk = X509_STORE_CTX_get0_chain(ctx) {
            for i in 0..<cgw_sk_X509_num(sk) {
                guard let x = cgw_sk_X509_value(sk, i), let der = X509Certificate.derBytes(of: x),
                    let cert = try? X509Certificate(der: der)
                else { continue }
                out.append(cert)
            }
        }
        return .success(out)
    }

    /// The certificate in the message that the (single) SignerInfo names.
    private static func signerCertificate(_ cms: OpaquePointer) -> OpaquePointer? {
        guard let signers = CMS_get0_SignerInfos(cms), let si = OPENSSL_sk_value(signers, 0),
            let certs = CMS_get1_certs(cms)
        else { return nil }
        defer { cgw_sk_X509_pop_free(certs) }
        for i in 0..<cgw_sk_X509_num(certs) {
            guard let x = cgw_sk_X509_value(certs, i) else { continue }
            if CMS_SignerInfo_cert_cmp(OpaquePointer(si), x) == 0 {
                guard X509_up_ref(x) == 1 else { OpenSSLFatal.fail("X509_up_ref") }
                return x
            }
        }
        return nil
    }

    private static func subject(_ x: OpaquePointer) -> String {
        guard let der = X509Certificate.derBytes(of: x), let c = try? X509Certificate(der: der) else { return "?" }
        return c.subject
    }
}
