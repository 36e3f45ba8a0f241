import CGatewayOpenSSL

/// A parsed P-256 public key, kept for repeated verification (parsing per call costs ~20 %).
/// Immutable after init; OpenSSL allows concurrent read-only use of an EVP_PKEY.
public final class P256PublicKey: @unchecked Sendable {
    @_spi(Issuing) public let pkey: OpaquePointer
    /// A digest-verify context initialised once (SHA-256, this key) and only ever read: each
    /// verification copies it, which costs less than initialising a fresh one (measured in bench/).
    private let verifyPrototype: OpaquePointer
    /// The uncompressed X9.62 point: 0x04 ‖ X ‖ Y (65 bytes).
    public let x962: [UInt8]

    public enum Error: Swift.Error, Equatable, Sendable { case invalidPoint(String) }

    /// P-256's domain parameters, made once and only read afterwards (by every thread).
    nonisolated(unsafe) private static let parameters: OpaquePointer = {
        guard let p = cgw_p256_parameters() else { OpenSSLFatal.fail("the P-256 parameters") }
        return p
    }()

    /// Parses an uncompressed point; OpenSSL checks that it lies on the curve.
    public init(x962 point: [UInt8]) throws(Error) {
        guard point.count == 65, point[0] == 0x04 else {
            throw .invalidPoint("expected a 65-byte uncompressed point (0x04 ‖ X ‖ Y), got \(point.count) bytes")
        }
        // The curve's parameters copied and the point set (not d2i_PUBKEY of the
        // SubjectPublicKeyInfo: the generic decoder chain costs twice a verification, nor an
        // import by group name, which builds the curve anew): every key a loop first sees pays it.
        let key: OpaquePointer? = point.withUnsafeBufferPointer { cgw_p256_public_key(Self.parameters, $0.baseAddress, $0.count) }
        guard let key else {
            OpenSSLError.clear()
            throw .invalidPoint("the point is not on the P-256 curve")
        }
        pkey = key
        x962 = point
        verifyPrototype = Self.makePrototype(key)
    }

    /// Takes ownership of one reference to `pkey` (already checked to be EC P-256).
    init(owning pkey: OpaquePointer, x962: [UInt8]) {
        self.pkey = pkey
        self.x962 = x962
        verifyPrototype = Self.makePrototype(pkey)
    }

    private static func makePrototype(_ pkey: OpaquePointer) -> OpaquePointer {
        guard let ctx = EVP_MD_CTX_new() else { OpenSSLFatal.fail("EVP_MD_CTX_new") }
        guard EVP_DigestVerifyInit(ctx, nil, SHA256.evpMD, nil, pkey) == 1 else { OpenSSLFatal.fail("EVP_DigestVerifyInit") }
        return ctx
    }

    deinit {
        EVP_MD_CTX_free(verifyPrototype)
        EVP_PKEY_free(pkey)
    }

    /// ECDSA with SHA-256 over `message` (the message is hashed here), signature in DER.
    /// OpenSSL refuses non-canonical DER and out-of-range r, s.
    public func isValidSignature(_ signatureDER: [UInt8], for message: [UInt8]) -> Bool {
        guard let ctx = EVP_MD_CTX_new() else { OpenSSLFatal.fail("EVP_MD_CTX_new") }
        defer { EVP_MD_CTX_free(ctx) }
        guard EVP_MD_CTX_copy_ex(ctx, verifyPrototype) == 1 else { OpenSSLFatal.fail("EVP_MD_CTX_copy_ex") }
        let r = signatureDER.withUnsafeBufferPointer { sig in
            message.withUnsafeBufferPointer { msg in
                EVP_DigestVerify(ctx, sig.baseAddress, sig.count, msg.baseAddress, msg.count)
            }
        }
        if r != 1 { OpenSSLError.clear() }
        return r == 1
    }

    /// Reads the uncompressed point of an EC P-256 EVP_PKEY, or nil if the key is anything else.
    static func uncompressedPoint(of pkey: OpaquePointer) -> [UInt8]? {
        guard ECPrivateKey.curve(of: pkey) == .p256 else { return nil }
        return ECPrivateKey.uncompressedPoint(of: pkey, curve: .p256)
    }
}
