import CBenchOpenSSL

/// Ways of doing one ECDSA P-256 / SHA-256 verification with OpenSSL 3, from what GatewayCrypto does
/// today to what `openssl speed ecdsap256` times. Used only to find where the per-request time goes
/// outside the elliptic-curve arithmetic; the gateway never links this.
public final class OpenSSLProbe: @unchecked Sendable {
    public enum Variant: String, CaseIterable, Sendable {
        /// What P256PublicKey.isValidSignature does: EVP_MD_CTX_new + EVP_DigestVerifyInit(fetched SHA256)
        /// + EVP_DigestVerify + EVP_MD_CTX_free, per call.
        case digestVerifyFresh = "digestverify_fresh_ctx"
        /// The same, with one EVP_MD_CTX kept and re-initialised per call.
        case digestVerifyReusedMDCtx = "digestverify_reused_md_ctx"
        /// DigestVerifyInit done once per key; per call EVP_MD_CTX_copy_ex of that template + EVP_DigestVerify.
        case digestVerifyCopiedTemplate = "digestverify_copy_of_initialised_ctx"
        /// SHA256(message) with a kept EVP_MD_CTX, then EVP_PKEY_CTX_new + EVP_PKEY_verify_init +
        /// EVP_PKEY_verify + free per call.
        case pkeyVerifyFreshCtx = "sha256_then_pkey_verify_fresh_ctx"
        /// SHA256(message) with a kept EVP_MD_CTX, then EVP_PKEY_verify on one EVP_PKEY_CTX initialised
        /// once (what openssl speed's verify loop does, plus the hash).
        case pkeyVerifyReusedCtx = "sha256_then_pkey_verify_reused_ctx"
        /// EVP_PKEY_verify on a reused EVP_PKEY_CTX with a precomputed digest: openssl speed's loop.
        case pkeyVerifyOnly = "pkey_verify_only_precomputed_digest"
    }

    let pkey: OpaquePointer
    let md: OpaquePointer
    let mdCtx: OpaquePointer
    let reusedVerifyMDCtx: OpaquePointer
    let templateCtx: OpaquePointer
    let verifyCtx: OpaquePointer

    static let spkiPrefix: [UInt8] = [
        0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a,
        0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
    ]

    /// d2i_PUBKEY of the point's SubjectPublicKeyInfo (what P256PublicKey did until it imported the
    /// point through the EC key manager): true when a key came out.
    public static func parseSPKI(_ point: [UInt8]) -> Bool {
        let der = spkiPrefix + point
        let key: OpaquePointer? = der.withUnsafeBufferPointer { buf in
            var p: UnsafePointer<UInt8>? = buf.baseAddress
            return d2i_PUBKEY(nil, &p, buf.count)
        }
        guard let key else { return false }
        EVP_PKEY_free(key)
        return true
    }

    public init?(x962 point: [UInt8]) {
        let der = Self.spkiPrefix + point
        let key: OpaquePointer? = der.withUnsafeBufferPointer { buf in
            var p: UnsafePointer<UInt8>? = buf.baseAddress
            return d2i_PUBKEY(nil, &p, buf.count)
        }
        guard let key, let md = EVP_MD_fetch(nil, "SHA256", nil), let mdCtx = EVP_MD_CTX_new(),
            let reusedVerifyMDCtx = EVP_MD_CTX_new(), let templateCtx = EVP_MD_CTX_new(), let verifyCtx = EVP_PKEY_CTX_new(key, nil)
        else { return nil }
        guard EVP_DigestVerifyInit(templateCtx, nil, md, nil, key) == 1, EVP_PKEY_verify_init(verifyCtx) == 1 else {
            return nil
        }
        self.pkey = key
        self.md = md
        self.mdCtx = mdCtx
        self.reusedVerifyMDCtx = reusedVerifyMDCtx
        self.templateCtx = templateCtx
        self.verifyCtx = verifyCtx
    }

    deinit {
        EVP_PKEY_CTX_free(verifyCtx)
        EVP_MD_CTX_free(templateCtx)
        EVP_MD_CTX_free(reusedVerifyMDCtx)
        EVP_MD_CTX_free(mdCtx)
        EVP_MD_free(md)
        EVP_PKEY_free(pkey)
    }

    /// SHA-256 with the kept context (EVP_DigestInit_ex on an existing EVP_MD_CTX, fetched EVP_MD).
    public func sha256(_ message: [UInt8]) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 32)
        var len: UInt32 = 0
        let ok = message.withUnsafeBufferPointer { m in
            out.withUnsafeMutableBufferPointer { o in
                EVP_DigestInit_ex(mdCtx, md, nil) == 1 && EVP_DigestUpdate(mdCtx, m.baseAddress, m.count) == 1
                    && EVP_DigestFinal_ex(mdCtx, o.baseAddress, &len) == 1
            }
        }
        precondition(ok && len == 32, "SHA-256 failed")
        return out
    }

    /// One verification of `signature` (DER) over `message` (hashed with SHA-256 inside, except for
    /// `.pkeyVerifyOnly`, where `message` must already be the 32-byte digest).
    public func verify(_ variant: Variant, signature: [UInt8], message: [UInt8]) -> Bool {
        let r: Int32 = signature.withUnsafeBufferPointer { sig in
            switch variant {
            case .digestVerifyFresh:
                guard let ctx = EVP_MD_CTX_new() else { return -1 }
                defer { EVP_MD_CTX_free(ctx) }
                guard EVP_DigestVerifyInit(ctx, nil, md, nil, pkey) == 1 else { return -1 }
                return message.withUnsafeBufferPointer { EVP_DigestVerify(ctx, sig.baseAddress, sig.count, $0.baseAddress, $0.count) }
            case .digestVerifyReusedMDCtx:
                guard EVP_DigestVerifyInit(reusedVerifyMDCtx, nil, md, nil, pkey) == 1 else { return -1 }
                return message.withUnsafeBufferPointer {
                    EVP_DigestVerify(reusedVerifyMDCtx, sig.baseAddress, sig.count, $0.baseAddress, $0.count)
                }
            case .digestVerifyCopiedTemplate:
                guard let ctx = EVP_MD_CTX_new() else { return -1 }
                defer { EVP_MD_CTX_free(ctx) }
                guard EVP_MD_CTX_copy_ex(ctx, templateCtx) == 1 else { return -1 }
                return message.withUnsafeBufferPointer { EVP_DigestVerify(ctx, sig.baseAddress, sig.count, $0.baseAddress, $0.count) }
            case .pkeyVerifyFreshCtx:
                let digest = sha256(message)
                guard let ctx = EVP_PKEY_CTX_new(pkey, nil) else { return -1 }
                defer { EVP_PKEY_CTX_free(ctx) }
                guard EVP_PKEY_verify_init(ctx) == 1 else { return -1 }
                return EVP_PKEY_verify(ctx, sig.baseAddress, sig.count, digest, digest.count)
            case .pkeyVerifyReusedCtx:
                let digest = sha256(message)
                return EVP_PKEY_verify(verifyCtx, sig.baseAddress, sig.count, digest, digest.count)
            case .pkeyVerifyOnly:
                return EVP_PKEY_verify(verifyCtx, sig.baseAddress, sig.count, message, message.count)
            }
        }
        if r != 1 { ERR_clear_error() }
        return r == 1
    }
}
