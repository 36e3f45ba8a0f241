import CGatewayOpenSSL
import Synchronization

/// A parsed P-256 public key, kept for repeated verification (parsing per call costs ~20 %).
/// Immutable after init; OpenSSL allows concurrent read-only use of an EVP_PKEY.
public final class P256PublicKey: @unchecked Sendable {
    @_spi(Issuing) public let pkey: OpaquePointer
    /// A verify context of this key (ECDSA over a SHA-256 digest), initialised once and reused by
    /// every verification that finds it free (OpenSSL allows repeated `EVP_PKEY_verify` on one
    /// context): taken out of the slot for the call and put back after, so two threads never share
    /// it; a thread that finds the slot empty (another is verifying with this key) makes its own.
    /// Copying a digest-verify prototype instead cost 14 allocations per verification.
    private let verifyContext: Atomic<UInt>
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
        verifyContext = Atomic(UInt(bitPattern: Self.makeVerifyContext(key)))
    }

    /// Takes ownership of one reference to `pkey` (already checked to be EC P-256).
    init(owning pkey: OpaquePointer, x962: [UInt8]) {
        self.pkey = pkey
        self.x962 = x962
        verifyContext = Atomic(UInt(bitPattern: Self.makeVerifyContext(pkey)))
    }

    /// An `EVP_PKEY_verify` context of `pkey` for ECDSA over a SHA-256 digest (32 bytes).
    private static func makeVerifyContext(_ pkey: OpaquePointer) -> OpaquePointer {
        guard let ctx = EVP_PKEY_CTX_new(pkey, nil) else { OpenSSLFatal.fail("EVP_PKEY_CTX_new") }
        guard EVP_PKEY_verify_init(ctx) == 1 else { OpenSSLFatal.fail("EVP_PKEY_verify_init") }
        guard EVP_PKEY_CTX_set_signature_md(ctx, SHA256.evpMD) == 1 else { OpenSSLFatal.fail("EVP_PKEY_CTX_set_signature_md") }
        return ctx
    }

    deinit {
        if let ctx = OpaquePointer(bitPattern: verifyContext.load(ordering: .acquiring)) { EVP_PKEY_CTX_free(ctx) }
        EVP_PKEY_free(pkey)
    }

    /// ECDSA with SHA-256 over `message` (the message is hashed here), signature in DER.
    /// OpenSSL refuses non-canonical DER and out-of-range r, s.
    public func isValidSignature(_ signatureDER: [UInt8], for message: [UInt8]) -> Bool {
        message.withUnsafeBytes { isValidSignature(signatureDER, forMessage: $0) }
    }

    /// The same over bytes in place (the assertion's nonce, on the stack).
    public func isValidSignature(_ signatureDER: [UInt8], forMessage message: UnsafeRawBufferPointer) -> Bool {
        SHA256.withDigest(message) { digest in
            let taken = OpaquePointer(bitPattern: verifyContext.exchange(0, ordering: .acquiring))
            let ctx = taken ?? Self.makeVerifyContext(pkey)
            let r = signatureDER.withUnsafeBufferPointer { sig in
                EVP_PKEY_verify(ctx, sig.baseAddress, sig.count, digest.baseAddress?.assumingMemoryBound(to: UInt8.self), digest.count)
            }
            if r != 1 { OpenSSLError.clear() }
            // Back into the slot; a context made because the slot was empty is kept only if it still is.
            if !verifyContext.compareExchange(expected: 0, desired: UInt(bitPattern: ctx), ordering: .releasing).exchanged {
                EVP_PKEY_CTX_free(ctx)
            }
            return r == 1
        }
    }

    /// Reads the uncompressed point of an EC P-256 EVP_PKEY, or nil if the key is anything else.
    static func uncompressedPoint(of pkey: OpaquePointer) -> [UInt8]? {
        guard ECPrivateKey.curve(of: pkey) == .p256 else { return nil }
        return ECPrivateKey.uncompressedPoint(of: pkey, curve: .p256)
    }
}
