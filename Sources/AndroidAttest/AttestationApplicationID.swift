/// The app that asked for the key (`[709] attestationApplicationId`, an OCTET STRING holding DER),
/// as Keystore saw it from the package manager:
///
/// ```
/// AttestationApplicationId ::= SEQUENCE {
///     package_infos      SET OF AttestationPackageInfo,   -- every package of the app's user id
///     signature_digests  SET OF OCTET STRING,             -- SHA-256 of each signing certificate
/// }
/// AttestationPackageInfo ::= SEQUENCE { package_name OCTET STRING, version INTEGER }
/// ```
///
/// Several packages appear when apps share a user id; the digests are those of the certificates
/// that signed the APK, which only the developer's key can produce.
public struct AttestationApplicationID: Sendable, Equatable {
    public struct Package: Sendable, Equatable {
        public let name: String
        public let version: Int64
    }

    public let packages: [Package]
    public let signatureDigests: [[UInt8]]

    static func read(_ der: [UInt8]) throws(DERCursor.Problem) -> AttestationApplicationID {
        var outer = DERCursor(der)
        var seq = try outer.sequence()
        try outer.finish("attestationApplicationId")
        var infos = try seq.sequence(DERCursor.Universal.set)
        var packages: [Package] = []
        while !infos.isAtEnd {
            var info = try infos.sequence()
            let nameBytes = try info.octetString()
            guard let name = String(validating: nameBytes, as: UTF8.self) else {
                throw DERCursor.Problem(reason: "a package name is not UTF-8")
            }
            packages.append(Package(name: name, version: try info.integer()))
            try info.finish("AttestationPackageInfo")
        }
        var digestSet = try seq.sequence(DERCursor.Universal.set)
        var digests: [[UInt8]] = []
        while !digestSet.isAtEnd { digests.append(try digestSet.octetString()) }
        try seq.finish("attestationApplicationId")
        return AttestationApplicationID(packages: packages, signatureDigests: digests)
    }
}
