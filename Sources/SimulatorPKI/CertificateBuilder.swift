import CGatewayOpenSSL
@_spi(Issuing) import GatewayCrypto
import GatewayWire

/// Builds and signs X.509 v3 certificates with EC keys (ecdsa-with-SHA256 when the issuer key is
/// P-256, ecdsa-with-SHA384 when it is P-384).
///
/// For tests, benchmarks and the App Attest simulator only: the gateway never issues certificates.
/// A self-signed certificate is one whose `issuer` equals its `subject` and that is signed with the
/// subject's own private key.
public struct CertificateBuilder: Sendable {
    /// A distinguished name as App Attest's certificates use them: CN, then O, OU and ST when given,
    /// each a UTF8String (Apple's order: `CN=…, OU=…, O=…, ST=…`).
    public struct Name: Sendable, Hashable {
        public var commonName: String
        public var organizationalUnit: String?
        public var organization: String?
        public var state: String?

        public init(commonName: String, organizationalUnit: String? = nil, organization: String? = nil, state: String? = nil) {
            self.commonName = commonName
            self.organizationalUnit = organizationalUnit
            self.organization = organization
            self.state = state
        }

        var attributes: [(String, String)] {
            var out = [("CN", commonName)]
            if let organizationalUnit { out.append(("OU", organizationalUnit)) }
            if let organization { out.append(("O", organization)) }
            if let state { out.append(("ST", state)) }
            return out
        }
    }

    /// Any extension: a dotted OID, the critical flag and the DER of its value (the bytes that go
    /// inside the extnValue OCTET STRING).
    public struct Extension: Sendable, Hashable {
        public var oid: String
        public var critical: Bool
        public var value: [UInt8]

        public init(oid: String, critical: Bool, value: [UInt8]) {
            self.oid = oid
            self.critical = critical
            self.value = value
        }
    }

    /// basicConstraints (2.5.29.19), always marked critical.
    public enum BasicConstraints: Sendable, Hashable {
        /// `cA` FALSE (the default, so the SEQUENCE is empty in DER).
        case endEntity
        /// `cA` TRUE, with an optional pathLenConstraint.
        case certificateAuthority(pathLength: Int?)
    }

    /// keyUsage (2.5.29.15) bits, always marked critical.
    public struct KeyUsage: OptionSet, Sendable, Hashable {
        public let rawValue: UInt16
        public init(rawValue: UInt16) { self.rawValue = rawValue }
        /// Bit n of RFC 5280's KeyUsage is `1 << n` here.
        public static let digitalSignature = KeyUsage(rawValue: 1 << 0)
        public static let nonRepudiation = KeyUsage(rawValue: 1 << 1)
        public static let keyEncipherment = KeyUsage(rawValue: 1 << 2)
        public static let dataEncipherment = KeyUsage(rawValue: 1 << 3)
        public static let keyAgreement = KeyUsage(rawValue: 1 << 4)
        public static let keyCertSign = KeyUsage(rawValue: 1 << 5)
        public static let cRLSign = KeyUsage(rawValue: 1 << 6)
        public static let encipherOnly = KeyUsage(rawValue: 1 << 7)
        public static let decipherOnly = KeyUsage(rawValue: 1 << 8)
    }

    public enum Error: Swift.Error, Equatable, Sendable, CustomStringConvertible {
        case invalidName(String)
        case invalidSerialNumber(String)
        case invalidExtension(String)
        case signingFailed(String)

        public var description: String {
            switch self {
            case .invalidName(let s): "invalid name: \(s)"
            case .invalidSerialNumber(let s): "invalid serial number: \(s)"
            case .invalidExtension(let s): "invalid extension: \(s)"
            case .signingFailed(let s): "signing failed: \(s)"
            }
        }
    }

    enum SubjectKey: Sendable {
        case privateKey(ECPrivateKey)
        case p256(P256PublicKey)

        var pkey: OpaquePointer {
            switch self {
            case .privateKey(let k): k.pkey
            case .p256(let k): k.pkey
            }
        }

        var x962: [UInt8] {
            switch self {
            case .privateKey(let k): k.publicKeyX962
            case .p256(let k): k.x962
            }
        }
    }

    public var subject: Name
    public var issuer: Name
    /// The serial number as big-endian magnitude bytes (a positive INTEGER; leading zeros are dropped).
    public var serialNumber: [UInt8]
    /// Seconds since the epoch.
    public var notBefore: Int64
    /// Seconds since the epoch.
    public var notAfter: Int64
    /// Added (critical) when not nil.
    public var basicConstraints: BasicConstraints?
    /// Added (critical) when not nil and not empty.
    public var keyUsage: KeyUsage?
    /// Adds subjectKeyIdentifier and authorityKeyIdentifier (non-critical), each the first 20 bytes of
    /// SHA-256 of the key's uncompressed point (RFC 7093 §2 method 1, on the point).
    public var includesKeyIdentifiers: Bool
    /// Further extensions, after the ones above, in this order.
    public var extensions: [Extension]
    let subjectKey: SubjectKey

    /// A certificate for the public half of `subjectKey` (P-256 or P-384).
    public init(
        subject: Name, issuer: Name, serialNumber: [UInt8], notBefore: Int64, notAfter: Int64, subjectKey: ECPrivateKey,
        basicConstraints: BasicConstraints? = nil, keyUsage: KeyUsage? = nil, includesKeyIdentifiers: Bool = true,
        extensions: [Extension] = []
    ) {
        self.init(
            subject: subject, issuer: issuer, serialNumber: serialNumber, notBefore: notBefore, notAfter: notAfter,
            key: .privateKey(subjectKey), basicConstraints: basicConstraints, keyUsage: keyUsage,
            includesKeyIdentifiers: includesKeyIdentifiers, extensions: extensions)
    }

    /// A certificate for a P-256 public key whose private half is not at hand.
    public init(
        subject: Name, issuer: Name, serialNumber: [UInt8], notBefore: Int64, notAfter: Int64, subjectKey: P256PublicKey,
        basicConstraints: BasicConstraints? = nil, keyUsage: KeyUsage? = nil, includesKeyIdentifiers: Bool = true,
        extensions: [Extension] = []
    ) {
        self.init(
            subject: subject, issuer: issuer, serialNumber: serialNumber, notBefore: notBefore, notAfter: notAfter,
            key: .p256(subjectKey), basicConstraints: basicConstraints, keyUsage: keyUsage,
            includesKeyIdentifiers: includesKeyIdentifiers, extensions: extensions)
    }

    init(
        subject: Name, issuer: Name, serialNumber: [UInt8], notBefore: Int64, notAfter: Int64, key: SubjectKey,
        basicConstraints: BasicConstraints?, keyUsage: KeyUsage?, includesKeyIdentifiers: Bool, extensions: [Extension]
    ) {
        self.subject = subject
        self.issuer = issuer
        self.serialNumber = serialNumber
        self.notBefore = notBefore
        self.notAfter = notAfter
        self.subjectKey = key
        self.basicConstraints = basicConstraints
        self.keyUsage = keyUsage
        self.includesKeyIdentifiers = includesKeyIdentifiers
        self.extensions = extensions
    }

    /// The uncompressed point of the key being certified.
    public var subjectPublicKeyX962: [UInt8] { subjectKey.x962 }

    /// 16 random bytes with the top bit clear and a non-zero first byte (a positive 128-bit serial,
    /// as Apple's CAs use).
    public static func randomSerialNumber() -> [UInt8] {
        var s = SecureRandom.bytes(16)
        s[0] = (s[0] & 0x7f) | 0x01
        return s
    }

    /// The key identifier used for subjectKeyIdentifier / authorityKeyIdentifier.
    public static func keyIdentifier(x962 point: [UInt8]) -> [UInt8] { Array(SHA256.hash(point).prefix(20)) }

    /// Builds the certificate and signs it with `issuerKey`.
    public func sign(with issuerKey: ECPrivateKey) throws(Error) -> X509Certificate {
        guard let x = X509_new() else { OpenSSLFatal.fail("X509_new") }
        defer { X509_free(x) }
        guard X509_set_version(x, 2) == 1 else { OpenSSLFatal.fail("X509_set_version") }
        try setSerial(x)
        let subjectName = try Self.makeName(subject)
        defer { X509_NAME_free(subjectName) }
        let issuerName = try Self.makeName(issuer)
        defer { X509_NAME_free(issuerName) }
        guard X509_set_subject_name(x, subjectName) == 1, X509_set_issuer_name(x, issuerName) == 1 else {
            OpenSSLFatal.fail("X509_set_subject_name/X509_set_issuer_name")
        }
        try Self.setTime(notBefore, on: x, X509_set1_notBefore)
        try Self.setTime(notAfter, on: x, X509_set1_notAfter)
        guard X509_set_pubkey(x, subjectKey.pkey) == 1 else { OpenSSLFatal.fail("X509_set_pubkey") }

        for ext in allExtensions(issuerKey: issuerKey) { try Self.add(ext, to: x) }

        let md = issuerKey.curve == .p256 ? EVP_sha256() : EVP_sha384()
        guard X509_sign(x, issuerKey.pkey, md) > 0 else {
            throw .signingFailed(OpenSSLError.drain())
        }
        guard let der = X509Certificate.derBytes(of: x) else { OpenSSLFatal.fail("i2d_X509") }
        do {
            return try X509Certificate(der: der)
        } catch {
            OpenSSLFatal.fail("a certificate just built does not parse: \(error.reason)")
        }
    }

    /// The extensions in the order they are written.
    func allExtensions(issuerKey: ECPrivateKey) -> [Extension] {
        var out: [Extension] = []
        if let basicConstraints {
            var fields: [[UInt8]] = []
            if case .certificateAuthority(let pathLength) = basicConstraints {
                fields.append(DER.boolean(true))
                if let pathLength { fields.append(DER.integer(UInt64(max(0, pathLength)))) }
            }
            out.append(Extension(oid: "2.5.29.19", critical: true, value: DER.sequence(fields)))
        }
        if let keyUsage, !keyUsage.isEmpty {
            out.append(Extension(oid: "2.5.29.15", critical: true, value: DER.namedBitString(keyUsage.rawValue)))
        }
        if includesKeyIdentifiers {
            out.append(Extension(oid: "2.5.29.14", critical: false, value: DER.octetString(Self.keyIdentifier(x962: subjectKey.x962))))
            let aki = DER.element(tag: 0x80, Self.keyIdentifier(x962: issuerKey.publicKeyX962))
            out.append(Extension(oid: "2.5.29.35", critical: false, value: DER.sequence([aki])))
        }
        return out + extensions
    }

    private func setSerial(_ x: OpaquePointer) throws(Error) {
        let magnitude = Array(serialNumber.drop { $0 == 0 })
        guard !serialNumber.isEmpty else { throw .invalidSerialNumber("empty") }
        guard magnitude.count <= 20 else {
            throw .invalidSerialNumber("\(magnitude.count) bytes; RFC 5280 allows at most 20")
        }
        let bn: OpaquePointer? = magnitude.withUnsafeBufferPointer { BN_bin2bn($0.baseAddress, Int32($0.count), nil) }
        guard let bn else { OpenSSLFatal.fail("BN_bin2bn") }
        defer { BN_free(bn) }
        guard let serial = BN_to_ASN1_INTEGER(bn, nil) else { OpenSSLFatal.fail("BN_to_ASN1_INTEGER") }
        defer { ASN1_INTEGER_free(serial) }
        guard X509_set_serialNumber(x, serial) == 1 else { OpenSSLFatal.fail("X509_set_serialNumber") }
    }

    private static func makeName(_ name: Name) throws(Error) -> OpaquePointer {
        guard let n = X509_NAME_new() else { OpenSSLFatal.fail("X509_NAME_new") }
        for (field, value) in name.attributes {
            guard !value.isEmpty else {
                X509_NAME_free(n)
                throw .invalidName("\(field) is empty")
            }
            let bytes = Array(value.utf8)
            let ok = bytes.withUnsafeBufferPointer { buf in
                X509_NAME_add_entry_by_txt(n, field, MBSTRING_UTF8, buf.baseAddress, Int32(buf.count), -1, 0)
            }
            guard ok == 1 else {
                X509_NAME_free(n)
                throw .invalidName("\(field)=\(value): \(OpenSSLError.drain())")
            }
        }
        return n
    }

    private static func setTime(
        _ epoch: Int64, on x: OpaquePointer, _ setter: (OpaquePointer?, UnsafePointer<ASN1_TIME>?) -> Int32
    ) throws(Error) {
        guard let t = ASN1_TIME_set(nil, time_t(epoch)) else {
            throw .signingFailed("time \(epoch) cannot be encoded: \(OpenSSLError.drain())")
        }
        defer { ASN1_TIME_free(t) }
        guard setter(x, t) == 1 else { OpenSSLFatal.fail("X509_set1_notBefore/notAfter") }
    }

    private static func add(_ ext: Extension, to x: OpaquePointer) throws(Error) {
        guard Self.isDottedOID(ext.oid), let obj = OBJ_txt2obj(ext.oid, 1) else {
            OpenSSLError.clear()
            throw .invalidExtension("\"\(ext.oid)\" is not a dotted OID")
        }
        defer { ASN1_OBJECT_free(obj) }
        guard let os = ASN1_OCTET_STRING_new() else { OpenSSLFatal.fail("ASN1_OCTET_STRING_new") }
        defer { ASN1_OCTET_STRING_free(os) }
        let set = ext.value.withUnsafeBufferPointer { ASN1_OCTET_STRING_set(os, $0.baseAddress, Int32($0.count)) }
        guard set == 1 else { OpenSSLFatal.fail("ASN1_OCTET_STRING_set") }
        guard let e = X509_EXTENSION_create_by_OBJ(nil, obj, ext.critical ? 1 : 0, os) else {
            throw .invalidExtension("\(ext.oid): \(OpenSSLError.drain())")
        }
        defer { X509_EXTENSION_free(e) }
        guard X509_add_ext(x, e, -1) == 1 else { OpenSSLFatal.fail("X509_add_ext") }
    }

    private static func isDottedOID(_ s: String) -> Bool {
        let arcs = s.split(separator: ".", omittingEmptySubsequences: false)
        return arcs.count >= 2 && arcs.allSatisfy { !$0.isEmpty && $0.allSatisfy(\.isASCII) && $0.allSatisfy(\.isNumber) }
    }

    /// A minimal DER writer for extension values (definite lengths, primitive encodings).
    /// For tests, benchmarks and the App Attest simulator only.
    public enum DER {
        /// Tag ‖ length ‖ contents.
        public static func element(tag: UInt8, _ contents: [UInt8]) -> [UInt8] {
            [tag] + length(contents.count) + contents
        }

        public static func sequence(_ elements: [[UInt8]]) -> [UInt8] { element(tag: 0x30, elements.flatMap { $0 }) }

        public static func octetString(_ bytes: [UInt8]) -> [UInt8] { element(tag: 0x04, bytes) }

        public static func boolean(_ value: Bool) -> [UInt8] { element(tag: 0x01, [value ? 0xff : 0x00]) }

        /// `[n] EXPLICIT`: a constructed context-specific tag around one element.
        public static func explicit(_ n: UInt8, _ element: [UInt8]) -> [UInt8] { self.element(tag: 0xa0 | n, element) }

        /// A non-negative INTEGER in its minimal encoding.
        public static func integer(_ value: UInt64) -> [UInt8] {
            var bytes: [UInt8] = []
            var v = value
            repeat {
                bytes.insert(UInt8(v & 0xff), at: 0)
                v >>= 8
            } while v > 0
            if bytes[0] & 0x80 != 0 { bytes.insert(0, at: 0) }
            return element(tag: 0x02, bytes)
        }

        /// A BIT STRING of named bits (bit n is `1 << n`), trailing zero bits removed as DER requires.
        public static func namedBitString(_ bits: UInt16) -> [UInt8] {
            guard bits != 0 else { return element(tag: 0x03, [0]) }
            let highest = 15 - bits.leadingZeroBitCount
            let byteCount = highest / 8 + 1
            var bytes = [UInt8](repeating: 0, count: byteCount)
            for n in 0...highest where bits & (1 << n) != 0 { bytes[n / 8] |= 0x80 >> UInt8(n % 8) }
            let unused = UInt8(7 - highest % 8)
            return element(tag: 0x03, [unused] + bytes)
        }

        static func length(_ n: Int) -> [UInt8] {
            if n < 0x80 { return [UInt8(n)] }
            var bytes: [UInt8] = []
            var v = n
            while v > 0 {
                bytes.insert(UInt8(v & 0xff), at: 0)
                v >>= 8
            }
            return [0x80 | UInt8(bytes.count)] + bytes
        }
    }
}

extension X509Certificate {
    /// The certificate as PEM (`-----BEGIN CERTIFICATE-----`, base64 in 64-character lines).
    public var pem: String {
        let b64 = Array(Base64.encode(der).utf8)
        var out = "-----BEGIN CERTIFICATE-----\n"
        var i = 0
        while i < b64.count {
            out += String(decoding: b64[i..<min(i + 64, b64.count)], as: UTF8.self) + "\n"
            i += 64
        }
        return out + "-----END CERTIFICATE-----\n"
    }

    /// Several certificates as one PEM text, in the order given.
    public static func pem(_ certificates: [X509Certificate]) -> String { certificates.map(\.pem).joined() }
}
