import CGatewayOpenSSL
import Synchronization

/// An EC private key on P-256 or P-384, made by OpenSSL's key generator or read from PEM.
///
/// The gateway signs with one key only: the team's key for Apple's device services (`apple.private_key`,
/// a PKCS#8 `.p8` file), for the ES256 tokens of the App Attest data service (`ES256JWT`). Tests,
/// benchmarks and the simulator generate keys. Immutable after init; OpenSSL allows concurrent use
/// of one EVP_PKEY for signing.
public final class ECPrivateKey: @unchecked Sendable {
    /// The curves App Attest uses: P-256 for device keys, P-384 for Apple's CA keys.
    public enum Curve: String, CaseIterable, Sendable {
        case p256 = "P-256"
        case p384 = "P-384"

        /// Bytes of one coordinate.
        public var coordinateByteCount: Int { self == .p256 ? 32 : 48 }
        /// Bytes of the uncompressed point 0x04 ‖ X ‖ Y.
        public var uncompressedPointByteCount: Int { 1 + 2 * coordinateByteCount }
        /// The hash that goes with the curve in ECDSA: SHA-256 for P-256, SHA-384 for P-384.
        public var digestName: String { self == .p256 ? "SHA256" : "SHA384" }

        /// OpenSSL's group name.
        var groupName: String { self == .p256 ? "prime256v1" : "secp384r1" }
    }

    public enum Error: Swift.Error, Equatable, Sendable, CustomStringConvertible {
        /// The PEM text is not a private key, or the key is not EC on P-256 or P-384.
        case invalidKey(String)

        public var description: String {
            switch self {
            case .invalidKey(let why): "invalid EC private key: \(why)"
            }
        }
    }

    /// `@_spi(Issuing)`: the test CAs' issuance (SimulatorPKI) signs with it.
    @_spi(Issuing) public let pkey: OpaquePointer
    public let curve: Curve
    /// The public key as an uncompressed X9.62 point: 0x04 ‖ X ‖ Y (65 bytes on P-256, 97 on P-384).
    public let publicKeyX962: [UInt8]
    /// P-256: a sign context of this key (ECDSA over a SHA-256 digest), initialised once and reused
    /// by every signature that finds it free, as `P256PublicKey`'s verify context: taken out of the
    /// slot for the call and put back after, so two threads never share it (the signed verdict signs
    /// once per forwarded request: a digest-sign context fetched by name per call took 23.6 µs per
    /// signature, this 20.8 µs, against `openssl speed`'s 19.7 µs: docs/performance.md). 0 for P-384.
    private let signContext: Atomic<UInt>

    /// Generates a fresh key from OpenSSL's CSPRNG.
    public init(curve: Curve) {
        guard let ctx = EVP_PKEY_CTX_new_from_name(nil, "EC", nil) else { OpenSSLFatal.fail("EVP_PKEY_CTX_new_from_name(EC)") }
        defer { EVP_PKEY_CTX_free(ctx) }
        guard EVP_PKEY_keygen_init(ctx) == 1 else { OpenSSLFatal.fail("EVP_PKEY_keygen_init") }
        guard EVP_PKEY_CTX_set_group_name(ctx, curve.groupName) == 1 else {
            OpenSSLFatal.fail("EVP_PKEY_CTX_set_group_name(\(curve.groupName))")
        }
        var key: OpaquePointer? = nil
        guard EVP_PKEY_generate(ctx, &key) == 1, let key else { OpenSSLFatal.fail("EVP_PKEY_generate") }
        guard let point = Self.uncompressedPoint(of: key, curve: curve) else {
            EVP_PKEY_free(key)
            OpenSSLFatal.fail("reading the public point of a generated \(curve.rawValue) key")
        }
        self.pkey = key
        self.curve = curve
        self.publicKeyX962 = point
        signContext = Atomic(curve == .p256 ? UInt(bitPattern: Self.makeSignContext(key)) : 0)
    }

    /// Reads a private key from PEM (`BEGIN PRIVATE KEY`, PKCS#8, or `BEGIN EC PRIVATE KEY`, SEC 1),
    /// unencrypted, on P-256 or P-384.
    public init(pem: String) throws(Error) {
        var text = pem
        let key: OpaquePointer? = text.withUTF8 { utf8 in
            guard let bio = BIO_new_mem_buf(utf8.baseAddress, Int32(utf8.count)) else { OpenSSLFatal.fail("BIO_new_mem_buf") }
            defer { BIO_free(bio) }
            return PEM_read_bio_PrivateKey(bio, nil, nil, nil)
        }
        guard let key else {
            let why = OpenSSLError.drain()
            throw .invalidKey("not an unencrypted PEM private key (\(why))")
        }
        guard let curve = Self.curve(of: key) else {
            EVP_PKEY_free(key)
            throw .invalidKey("the key is not EC on P-256 or P-384")
        }
        guard let point = Self.uncompressedPoint(of: key, curve: curve) else {
            EVP_PKEY_free(key)
            OpenSSLError.clear()
            throw .invalidKey("the public point of the key cannot be read")
        }
        self.pkey = key
        self.curve = curve
        self.publicKeyX962 = point
        signContext = Atomic(curve == .p256 ? UInt(bitPattern: Self.makeSignContext(key)) : 0)
    }

    deinit {
        if let ctx = OpaquePointer(bitPattern: signContext.load(ordering: .acquiring)) { EVP_PKEY_CTX_free(ctx) }
        EVP_PKEY_free(pkey)
    }

    /// An `EVP_PKEY_sign` context of `pkey` for ECDSA over a SHA-256 digest (32 bytes).
    private static func makeSignContext(_ pkey: OpaquePointer) -> OpaquePointer {
        guard let ctx = EVP_PKEY_CTX_new(pkey, nil) else { OpenSSLFatal.fail("EVP_PKEY_CTX_new") }
        guard EVP_PKEY_sign_init(ctx) == 1 else { OpenSSLFatal.fail("EVP_PKEY_sign_init") }
        guard EVP_PKEY_CTX_set_signature_md(ctx, SHA256.evpMD) == 1 else { OpenSSLFatal.fail("EVP_PKEY_CTX_set_signature_md") }
        return ctx
    }

    /// P-256: ECDSA over SHA-256(`message`) with the reused context; the signature in DER.
    private func p256Signature(for message: [UInt8]) -> [UInt8] {
        message.withUnsafeBytes { msg in
            SHA256.withDigest(msg) { digest in
                let taken = OpaquePointer(bitPattern: signContext.exchange(0, ordering: .acquiring))
                let ctx = taken ?? Self.makeSignContext(pkey)
                var out = [UInt8](repeating: 0, count: 80)  // DER of two 32-byte integers: at most 72
                var length = out.count
                let ok = out.withUnsafeMutableBufferPointer { sig in
                    EVP_PKEY_sign(ctx, sig.baseAddress, &length, digest.baseAddress?.assumingMemoryBound(to: UInt8.self), digest.count)
                }
                if !signContext.compareExchange(expected: 0, desired: UInt(bitPattern: ctx), ordering: .releasing).exchanged {
                    EVP_PKEY_CTX_free(ctx)
                }
                guard ok == 1, length > 0, length <= out.count else { OpenSSLFatal.fail("EVP_PKEY_sign") }
                out.removeLast(out.count - length)
                return out
            }
        }
    }

    /// The public key as a ready verifier, for P-256 keys; nil for P-384.
    public var p256PublicKey: P256PublicKey? {
        guard curve == .p256 else { return nil }
        do {
            return try P256PublicKey(x962: publicKeyX962)
        } catch {
            OpenSSLFatal.fail("a generated P-256 point does not parse: \(error)")
        }
    }

    /// The private key as unencrypted PKCS#8 PEM (`BEGIN PRIVATE KEY`), to persist a simulated device.
    public var pkcs8PEM: String {
        guard let bio = BIO_new(BIO_s_mem()) else { OpenSSLFatal.fail("BIO_new") }
        defer { BIO_free(bio) }
        guard PEM_write_bio_PKCS8PrivateKey(bio, pkey, nil, nil, 0, nil, nil) == 1 else {
            OpenSSLFatal.fail("PEM_write_bio_PKCS8PrivateKey")
        }
        var ptr: UnsafeMutablePointer<CChar>? = nil
        let n = cgw_BIO_get_mem_data(bio, &ptr)
        guard let ptr, n > 0 else { OpenSSLFatal.fail("BIO_get_mem_data") }
        return String(decoding: UnsafeRawBufferPointer(start: ptr, count: Int(n)), as: UTF8.self)
    }

    /// ECDSA over `message` (hashed here with SHA-256 on P-256, SHA-384 on P-384); the signature in DER.
    /// OpenSSL draws a fresh random nonce per signature, so two signatures of one message differ.
    public func signature(for message: [UInt8]) -> [UInt8] {
        if curve == .p256 { return p256Signature(for: message) }
        guard let ctx = EVP_MD_CTX_new() else { OpenSSLFatal.fail("EVP_MD_CTX_new") }
        defer { EVP_MD_CTX_free(ctx) }
        guard EVP_DigestSignInit_ex(ctx, nil, curve.digestName, nil, nil, pkey, nil) == 1 else {
            OpenSSLFatal.fail("EVP_DigestSignInit_ex(\(curve.digestName))")
        }
        var length = 0
        let sized = message.withUnsafeBufferPointer { msg in
            EVP_DigestSign(ctx, nil, &length, msg.baseAddress, msg.count)
        }
        guard sized == 1, length > 0 else { OpenSSLFatal.fail("EVP_DigestSign (size)") }
        var out = [UInt8](repeating: 0, count: length)
        let ok = out.withUnsafeMutableBufferPointer { sig in
            message.withUnsafeBufferPointer { msg in
                EVP_DigestSign(ctx, sig.baseAddress, &length, msg.baseAddress, msg.count)
            }
        }
        guard ok == 1 else { OpenSSLFatal.fail("EVP_DigestSign") }
        return Array(out.prefix(length))
    }

    /// The curve of an EC EVP_PKEY, when it is one of ours.
    static func curve(of pkey: OpaquePointer) -> Curve? {
        guard EVP_PKEY_is_a(pkey, "EC") == 1 else { return nil }
        var group = [CChar](repeating: 0, count: 64)
        var groupLen = 0
        guard EVP_PKEY_get_utf8_string_param(pkey, OSSL_PKEY_PARAM_GROUP_NAME, &group, group.count, &groupLen) == 1 else {
            OpenSSLError.clear()
            return nil
        }
        let name = String(decoding: group.prefix(groupLen).map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return Curve.allCases.first { $0.groupName == name }
    }

    /// Reads the public point as 0x04 ‖ X ‖ Y with fixed-width coordinates.
    static func uncompressedPoint(of pkey: OpaquePointer, curve: Curve) -> [UInt8]? {
        var x: OpaquePointer? = nil
        var y: OpaquePointer? = nil
        defer {
            BN_free(x)
            BN_free(y)
        }
        guard EVP_PKEY_get_bn_param(pkey, OSSL_PKEY_PARAM_EC_PUB_X, &x) == 1,
            EVP_PKEY_get_bn_param(pkey, OSSL_PKEY_PARAM_EC_PUB_Y, &y) == 1, let x, let y
        else {
            OpenSSLError.clear()
            return nil
        }
        let n = curve.coordinateByteCount
        var out = [UInt8](repeating: 0, count: 1 + 2 * n)
        out[0] = 0x04
        let ok = out.withUnsafeMutableBufferPointer { buf in
            BN_bn2binpad(x, buf.baseAddress! + 1, Int32(n)) == n && BN_bn2binpad(y, buf.baseAddress! + 1 + n, Int32(n)) == n
        }
        return ok ? out : nil
    }
}
