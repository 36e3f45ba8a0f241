import CGatewayOpenSSL

/// Verifies a certificate chain to a fixed set of trust roots at a given instant.
///
/// Signatures, issuer/subject chaining and CA constraints are checked by OpenSSL's `X509_verify_cert`.
/// Validity periods are checked here, for every certificate of the built chain, with **both bounds
/// inclusive** (OpenSSL treats the instant equal to notAfter as expired) and at a caller-given instant.
public final class X509ChainVerifier: @unchecked Sendable {
    public let roots: [X509Certificate]
    private let store: OpaquePointer

    public enum Failure: Error, Equatable, Sendable {
        /// No chain to a trusted root: bad signature, unknown issuer, not a CA, …
        case untrusted(String)
        case expired(subject: String, notAfter: Int64)
        case notYetValid(subject: String, notBefore: Int64)
    }

    public init(roots: [X509Certificate]) {
        precondition(!roots.isEmpty, "X509ChainVerifier needs at least one root")
        self.roots = roots
        guard let s = X509_STORE_new() else { OpenSSLFatal.fail("X509_STORE_new") }
        for r in roots where X509_STORE_add_cert(s, r.x509) != 1 {
            // A duplicate root is harmless; anything else is not.
            OpenSSLError.clear()
        }
        store = s
    }

    deinit { X509_STORE_free(store) }

    /// Verifies `leaf` through `intermediates` (untrusted) to one of the roots, valid at `instant`
    /// (seconds since the epoch; `instantCeil` lets a fractional instant be compared exactly).
    /// Returns the built chain, leaf first, root last.
    @discardableResult
    public func verify(leaf: X509Certificate, intermediates: [X509Certificate], at instant: Double) throws(Failure)
        -> [X509Certificate]
    {
        guard let ctx = X509_STORE_CTX_new() else { OpenSSLFatal.fail("X509_STORE_CTX_new") }
        defer { X509_STORE_CTX_free(ctx) }
        guard let untrusted = cgw_sk_X509_new_null() else { OpenSSLFatal.fail("sk_X509_new_null") }
        defer { cgw_sk_X509_free(untrusted) }
        for c in intermediates { _ = cgw_sk_X509_push(untrusted, c.x509) }
        guard X509_STORE_CTX_init(ctx, store, leaf.x509, untrusted) == 1 else { OpenSSLFatal.fail("X509_STORE_CTX_init") }
        let param = X509_STORE_CTX_get0_param(ctx)
        X509_VERIFY_PARAM_set_flags(param, UInt(X509_V_FLAG_NO_CHECK_TIME))
        let ok = X509_verify_cert(ctx)
        guard ok == 1 else {
            let err = X509_STORE_CTX_get_error(ctx)
            let depth = X509_STORE_CTX_get_error_depth(ctx)
            let msg = String(cString: X509_verify_cert_error_string(Int(err)))
            OpenSSLError.clear()
            throw .untrusted("\(msg) (certificate at depth \(depth))")
        }
        // The built chain: leaf … root. Every member must be valid at the instant, bounds inclusive.
        let chain = [leaf] + intermediates + roots
        let built = builtChain(ctx, candidates: chain)
        let floorT = Int64(instant.rounded(.down))
        let ceilT = Int64(instant.rounded(.up))
        for cert in built {
            if cert.notBefore > floorT { throw .notYetValid(subject: cert.subject, notBefore: cert.notBefore) }
            if cert.notAfter < ceilT { throw .expired(subject: cert.subject, notAfter: cert.notAfter) }
        }
        return built
    }

    /// Maps the X509* pointers of OpenSSL's built chain back to our wrappers.
    private func builtChain(_ ctx: OpaquePointer, candidates: [X509Certificate]) -> [X509Certificate] {
        guard let sk = X509_STORE_CTX_get0_chain(ctx) else { return candidates }
        var out: [X509Certificate] = []
        let n = OPENSSL_sk_num(sk)
        for i in 0..<n {
            guard let raw = OPENSSL_sk_value(sk, i) else { continue }
            let ptr = OpaquePointer(raw)
            if let c = candidates.first(where: { $0.x509 == ptr || X509_cmp($0.x509, ptr) == 0 }) { out.append(c) }
        }
        return out
    }
}
