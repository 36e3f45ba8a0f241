import GatewayWire

/// The key access-control property Apple writes into the credential certificate since macOS 27
/// (WWDC 2026, "Secure your apps with App Attest": the "ACL Blob OID"), extension
/// 1.2.840.113635.100.8.6: the security conditions the Secure Enclave enforced for the key when it
/// was attested. On macOS, App Attest gives every key a policy that requires Full Security mode and
/// System Integrity Protection; Apple's "Validating apps that connect to your server" documents that
/// policy's exact bytes (`macOSFullSecurityBlob`, as the verifiers citing that page pin them). Other
/// platforms may carry the extension with other contents, whose meaning Apple does not document.
///
/// The extension value is `SEQUENCE { [3] EXPLICIT OCTET STRING aclBlob }` (the layout of the nonce
/// extension, tag 3). A value of another shape is kept raw (`blob` nil): the key registers, but an
/// app that requires the macOS policy refuses it. Parsing never fails an attestation.
public struct KeyAccessControl: Sendable, Equatable {
    public static let oid = "1.2.840.113635.100.8.6"

    /// The ACL blob of a macOS key that requires Full Security mode and System Integrity Protection,
    /// as Apple documents it: `SEQUENCE { "11", SEQUENCE { {"ok",[1] TRUE}, {"oa",[1] TRUE},
    /// {"odel",[1] TRUE}, {"osgn",[0] "rsec",{[6] 1}} } }`.
    public static let macOSFullSecurityBlob: [UInt8] = try! Base64.decode(
        "MEAMAjExMDowCQwCb2uhAwEB/zAJDAJvYaEDAQH/MAsMBG9kZWyhAwEB/zAVDARvc2duoAYMBHJzZWMwBaYDAgEB")

    /// The extension's value (the DER inside extnValue), as found.
    public let extensionValue: [UInt8]
    /// The ACL blob, when the value has the documented shape.
    public let blob: [UInt8]?

    /// The blob is Apple's macOS policy: Full Security mode and System Integrity Protection.
    public var requiresMacOSFullSecurity: Bool { blob == Self.macOSFullSecurityBlob }

    public init(extensionValue: [UInt8]) {
        self.extensionValue = extensionValue
        blob = Self.parseBlob(extensionValue)
    }

    /// The extension value of a certificate carrying `blob` (the simulator writes macOS leaves with it).
    public static func extensionValue(blob: [UInt8]) -> [UInt8] {
        der(0x30, der(0xa3, der(0x04, blob)))
    }

    /// The blob under [3] (`TaggedOctetString`, the nonce extension's shape); nil when not of that shape.
    static func parseBlob(_ value: [UInt8]) -> [UInt8]? {
        try? TaggedOctetString.value(value, tag: 3).get()
    }

    /// A one-line rendering for logs and `explain`: `macos_full_security`, or the blob's operations
    /// as Apple's ACL writes them (`v11: ok oa odel osgn:rsec(6=1)`) when it has that structure, or
    /// its length.
    public var summary: String {
        if requiresMacOSFullSecurity { return "macos_full_security (\(Self.render(Self.macOSFullSecurityBlob) ?? ""))" }
        guard let blob else { return "unrecognized (\(extensionValue.count) bytes)" }
        return Self.render(blob) ?? "unrecognized blob (\(blob.count) bytes)"
    }

    /// `SEQUENCE { UTF8String version, SEQUENCE OF SEQUENCE { UTF8String operation, constraint… } }`,
    /// best effort: nil when the blob is not of that form.
    static func render(_ blob: [UInt8]) -> String? {
        func text(_ el: DERReader.Element) -> String? {
            guard el.tag == 0x0c else { return nil }
            let s = String(decoding: el.contents, as: UTF8.self)
            return s.unicodeScalars.allSatisfy({ $0.value >= 0x20 && $0.value < 0x7f }) ? s : nil
        }
        do {
            var outer = DERReader(blob)
            var top = DERReader(try outer.read(tag: DERReader.Tag.sequence).contents)
            try outer.finish()
            guard let version = text(try top.read()) else { return nil }
            var ops = DERReader(try top.read(tag: DERReader.Tag.sequence).contents)
            try top.finish()
            var parts: [String] = []
            while !ops.isAtEnd {
                var op = DERReader(try ops.read(tag: DERReader.Tag.sequence).contents)
                guard var part = text(try op.read()) else { return nil }
                while !op.isAtEnd {
                    let c = try op.read()
                    switch c.tag {
                    case 0xa1:  // [1] BOOLEAN: the operation is allowed (TRUE) or not
                        var b = DERReader(c.contents)
                        let v = try b.read(tag: 0x01)
                        if v.contents != [0xff] { part += "=false" }
                    case 0xa0:  // [0] UTF8String: a named requirement
                        var r = DERReader(c.contents)
                        guard let name = text(try r.read()) else { return nil }
                        part += ":" + name
                    case 0x30:  // SEQUENCE { [n] INTEGER … }: the requirement's parameters
                        var ps = DERReader(c.contents)
                        var params: [String] = []
                        while !ps.isAtEnd {
                            let p = try ps.read()
                            guard p.tag & 0xe0 == 0xa0 else { return nil }
                            var iv = DERReader(p.contents)
                            let n = try iv.read(tag: 0x02)
                            guard n.contents.count <= 8 else { return nil }
                            params.append("\(p.tag & 0x1f)=\(n.contents.reduce(0) { $0 << 8 | UInt64($1) })")
                        }
                        part += "(\(params.joined(separator: ",")))"
                    default:
                        return nil
                    }
                }
                parts.append(part)
            }
            return "v\(version): \(parts.joined(separator: " "))"
        } catch {
            return nil
        }
    }

    private static func der(_ tag: UInt8, _ contents: [UInt8]) -> [UInt8] {
        var len: [UInt8]
        if contents.count < 0x80 {
            len = [UInt8(contents.count)]
        } else {
            var v = contents.count
            len = []
            while v > 0 {
                len.insert(UInt8(v & 0xff), at: 0)
                v >>= 8
            }
            len.insert(0x80 | UInt8(len.count), at: 0)
        }
        return [tag] + len + contents
    }
}
