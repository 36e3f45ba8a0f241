import CGatewayOpenSSL
@_spi(Issuing) import GatewayCrypto

/// Signs content into a CMS SignedData the way Apple's App Attest receipts are made: one signer
/// identified by issuer and serial number, SHA-256, no signed attributes, the content encapsulated,
/// the signer's certificate and the given chain certificates included; the message in BER with
/// indefinite lengths (streamed) as in attestations' `ATTEST` receipts, or in DER as Apple's data
/// service returns `RECEIPT`s.
///
/// For tests, benchmarks and the App Attest simulator only: the gateway verifies and never signs.
public enum CMSSigner {
    public enum Error: Swift.Error, Equatable, Sendable, CustomStringConvertible {
        case signingFailed(String)

        public var description: String {
            switch self {
            case .signingFailed(let why): "CMS signing failed: \(why)"
            }
        }
    }

    /// - Parameters:
    ///   - content: the bytes to encapsulate and sign.
    ///   - certificate: the signer's certificate; `key` must be its private key.
    ///   - chain: further certificates to include (intermediate, root), in this order.
    public enum Encoding: Sendable {
        /// Indefinite lengths, the content as a constructed OCTET STRING (streamed).
        case ber
        /// Definite lengths throughout.
        case der
    }

    public static func sign(
        _ content: [UInt8], certificate: X509Certificate, key: ECPrivateKey, chain: [X509Certificate], encoding: Encoding = .ber
    ) throws(Error) -> [UInt8] {
        guard !content.isEmpty else { throw .signingFailed("empty content (OpenSSL streams no empty content)") }
        let flags = UInt32(CMS_BINARY | CMS_NOATTR | CMS_PARTIAL | (encoding == .ber ? CMS_STREAM : 0))
        guard let cms = CMS_sign(nil, nil, nil, nil, flags) else { throw .signingFailed(OpenSSLError.drain()) }
        defer { CMS_ContentInfo_free(cms) }
        // The signer's certificate first, then the chain: the order of Apple's receipts.
        guard CMS_add1_signer(cms, certificate.x509, key.pkey, EVP_sha256(), flags) != nil else {
            throw .signingFailed(OpenSSLError.drain())
        }
        for c in chain where CMS_add1_cert(cms, c.x509) != 1 { throw .signingFailed(OpenSSLError.drain()) }
        var input = content
        let bytes: [UInt8]? = input.withUnsafeMutableBufferPointer { buf in
            guard let data = BIO_new_mem_buf(buf.baseAddress, Int32(buf.count)), let out = BIO_new(BIO_s_mem()) else {
                OpenSSLFatal.fail("BIO_new")
            }
            defer {
                BIO_free(data)
                BIO_free(out)
            }
            switch encoding {
            case .ber:
                guard i2d_CMS_bio_stream(out, cms, data, Int32(flags)) == 1 else { return nil }
            case .der:
                guard CMS_final(cms, data, nil, flags) == 1, i2d_CMS_bio(out, cms) == 1 else { return nil }
            }
            var ptr: UnsafeMutablePointer<CChar>? = nil
            let n = cgw_BIO_get_mem_data(out, &ptr)
            guard let ptr, n > 0 else { return nil }
            return Array(UnsafeRawBufferPointer(start: ptr, count: Int(n)))
        }
        guard let bytes else { throw .signingFailed(OpenSSLError.drain()) }
        return bytes
    }
}
