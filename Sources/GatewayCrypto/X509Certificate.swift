import CGatewayOpenSSL
import Foundation
import GatewayWire

/// An X.509 certificate parsed by OpenSSL. Immutable; safe to share across threads.
public final class X509Certificate: @unchecked Sendable {
    @_spi(Issuing) public let x509: OpaquePointer
    public let der: [UInt8]

    public struct ParseError: Error, Equatable, Sendable, CustomStringConvertible {
        public let reason: String
        public var description: String { reason }
    }

    public init(der: [UInt8]) throws(ParseError) {
        let cert: OpaquePointer? = der.withUnsafeBufferPointer { buf in
            var p: UnsafePointer<UInt8>? = buf.baseAddress
            let c = d2i_X509(nil, &p, buf.count)
            // d2i stops at the end of the first certificate: trailing bytes are not a certificate.
            if let c, p != buf.baseAddress! + buf.count {
                X509_free(c)
                return nil
            }
            return c
        }
        guard let cert else {
            let why = OpenSSLError.drain()
            throw ParseError(reason: "not a DER X.509 certificate (\(why))")
        }
        x509 = cert
        self.der = der
    }

    /// Every certificate in a PEM text, in order; at least one.
    public static func parsePEM(_ pem: String) throws(ParseError) -> [X509Certificate] {
        var certs: [X509Certificate] = []
        var text = pem
        let ders: [[UInt8]] = text.withUTF8 { utf8 in
            guard let bio = BIO_new_mem_buf(utf8.baseAddress, Int32(utf8.count)) else { OpenSSLFatal.fail("BIO_new_mem_buf") }
            defer { BIO_free(bio) }
            var out: [[UInt8]] = []
            while let x = PEM_read_bio_X509(bio, nil, nil, nil) {
                defer { X509_free(x) }
                guard let der = derBytes(of: x) else { break }
                out.append(der)
            }
            OpenSSLError.clear()  // PEM_read_bio_X509 ends with "no start line" at EOF
            return out
        }
        for d in ders { certs.append(try X509Certificate(der: d)) }
        guard !certs.isEmpty else { throw ParseError(reason: "no PEM certificate found") }
        return certs
    }

    /// The DER encoding of an OpenSSL certificate (nil if OpenSSL cannot encode it).
    @_spi(Issuing) public static func derBytes(of x: OpaquePointer) -> [UInt8]? {
        let len = i2d_X509(x, nil)
        guard len > 0 else { return nil }
        var der = [UInt8](repeating: 0, count: Int(len))
        der.withUnsafeMutableBufferPointer { buf in
            var p: UnsafeMutablePointer<UInt8>? = buf.baseAddress
            _ = i2d_X509(x, &p)
        }
        return der
    }

    deinit { X509_free(x509) }

    /// Seconds since the epoch of notBefore and notAfter.
    public var notBefore: Int64 { Self.epochSeconds(X509_get0_notBefore(x509)) }
    public var notAfter: Int64 { Self.epochSeconds(X509_get0_notAfter(x509)) }

    static func epochSeconds(_ t: UnsafePointer<ASN1_TIME>?) -> Int64 {
        var tm = tm()
        guard let t, ASN1_TIME_to_tm(t, &tm) == 1 else { return 0 }
        return Int64(cgw_timegm(&tm))
    }

    /// The subject as a one-line RFC 2253 string, for details and logs.
    public var subject: String { Self.oneLine(X509_get_subject_name(x509)) }

    /// A name as a one-line RFC 2253 string.
    static func oneLine(_ name: OpaquePointer?) -> String {
        guard let bio = BIO_new(BIO_s_mem()) else { OpenSSLFatal.fail("BIO_new") }
        defer { BIO_free(bio) }
        X509_NAME_print_ex(bio, name, 0, cgw_XN_FLAG_RFC2253())
        var ptr: UnsafeMutablePointer<CChar>? = nil
        let n = cgw_BIO_get_mem_data(bio, &ptr)
        guard let ptr, n > 0 else { return "" }
        return String(decoding: UnsafeRawBufferPointer(start: ptr, count: Int(n)), as: UTF8.self)
    }

    public var serialHex: String {
        guard let bn = ASN1_INTEGER_to_BN(X509_get0_serialNumber(x509), nil) else { return "" }
        defer { BN_free(bn) }
        guard let hex = BN_bn2hex(bn) else { return "" }
        defer { CRYPTO_free(hex, #fileID, #line) }
        return String(cString: hex)
    }

    /// The subject public key when it is EC P-256, as an uncompressed point and a ready verifier.
    public func p256PublicKey() -> P256PublicKey? {
        guard let pkey = X509_get0_pubkey(x509), let point = P256PublicKey.uncompressedPoint(of: pkey) else { return nil }
        guard EVP_PKEY_up_ref(pkey) == 1 else { OpenSSLFatal.fail("EVP_PKEY_up_ref") }
        return P256PublicKey(owning: pkey, x962: point)
    }

    public enum ExtensionLookup: Equatable, Sendable {
        case absent
        case duplicated
        /// The extnValue contents (the DER inside the OCTET STRING) and the critical flag.
        case present(value: [UInt8], critical: Bool)
    }

    /// Looks up an extension by dotted OID; a certificate carrying it twice is reported as such.
    public func `extension`(oid: String) -> ExtensionLookup {
        guard let obj = OBJ_txt2obj(oid, 1) else { OpenSSLFatal.fail("OBJ_txt2obj(\(oid))") }
        defer { ASN1_OBJECT_free(obj) }
        let first = X509_get_ext_by_OBJ(x509, obj, -1)
        guard first >= 0 else { return .absent }
        if X509_get_ext_by_OBJ(x509, obj, first) >= 0 { return .duplicated }
        guard let ext = X509_get_ext(x509, first), let data = X509_EXTENSION_get_data(ext) else { return .absent }
        let len = Int(ASN1_STRING_length(data))
        let bytes: [UInt8] = len > 0 ? Array(UnsafeBufferPointer(start: ASN1_STRING_get0_data(data), count: len)) : []
        return .present(value: bytes, critical: X509_EXTENSION_get_critical(ext) == 1)
    }
}

extension X509Certificate {
    /// The certificates of PEM files, in order (trust roots given on the command line or in
    /// `trust.extra_roots`). Errors name the file: unreadable, not PEM certificates, or none in it.
    public static func loadPEMFiles(_ paths: [String]) throws(ParseError) -> [X509Certificate] {
        var out: [X509Certificate] = []
        for path in paths {
            guard let data = FileManager.default.contents(atPath: path) else {
                throw ParseError(reason: "\(path): cannot read the file")
            }
            let certs: [X509Certificate]
            do {
                certs = try parsePEM(String(decoding: data, as: UTF8.self))
            } catch {
                throw ParseError(reason: "\(path): \(error)")
            }
            guard !certs.isEmpty else { throw ParseError(reason: "\(path): no certificate in the file") }
            out += certs
        }
        return out
    }
}
