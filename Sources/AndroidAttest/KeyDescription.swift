/// The KeyDescription extension (OID 1.3.6.1.4.1.11129.2.1.17) the Android Keystore writes into an
/// attested key's certificate, read to Android's documented schema
/// (https://source.android.com/docs/security/features/keystore/attestation#schema):
///
/// ```
/// KeyDescription ::= SEQUENCE {
///     attestationVersion         INTEGER,        -- 1, 2, 3, 4 (Keymaster); 100, 200, 300, 400, 500 (KeyMint)
///     attestationSecurityLevel   SecurityLevel,
///     keyMintVersion             INTEGER,        -- keymasterVersion before version 100
///     keyMintSecurityLevel       SecurityLevel,
///     attestationChallenge       OCTET STRING,
///     uniqueId                   OCTET STRING,
///     softwareEnforced           AuthorizationList,
///     hardwareEnforced           AuthorizationList,  -- teeEnforced before version 100
/// }
/// ```
///
/// The outer schema is the same in every version; what versions add are AuthorizationList tags,
/// which `AuthorizationList` reads by tag number. A version this code does not know yet is read
/// the same way and reported as it is. Parsed is not verified: `AndroidAttestationVerifier` says
/// whether the certificate carrying it is trustworthy.
public struct KeyDescription: Sendable, Equatable {
    public static let oid = "1.3.6.1.4.1.11129.2.1.17"
    /// The versions Android documents; others are read all the same.
    public static let documentedVersions: [Int64] = [1, 2, 3, 4, 100, 200, 300, 400, 500]
    /// Real extensions are 0.3 to 1.5 KiB (many packages sharing a user id make the largest).
    public static let maxSize = 16 * 1024

    public let attestationVersion: Int64
    public let attestationSecurityLevel: SecurityLevel
    /// keymasterVersion in attestation versions 1 to 4 (2, 3, 4, 41), keyMintVersion since 100.
    public let keyMintVersion: Int64
    public let keyMintSecurityLevel: SecurityLevel
    public let attestationChallenge: [UInt8]
    public let uniqueID: [UInt8]
    public let softwareEnforced: AuthorizationList
    /// `teeEnforced` before version 100: what the secure hardware enforces and vouches for.
    public let hardwareEnforced: AuthorizationList

    /// Parses the extension's value (the DER inside extnValue). Every refusal is `malformed` and
    /// names the field.
    public static func parse(_ der: [UInt8]) throws(AndroidAttestError) -> KeyDescription {
        guard der.count <= maxSize else {
            throw AndroidAttestError(.malformed, "KeyDescription of \(der.count) bytes exceeds \(maxSize)")
        }
        var field = "KeyDescription"
        do throws(DERCursor.Problem) {
            var outer = DERCursor(der)
            var seq = try outer.sequence()
            try outer.finish("KeyDescription")
            field = "attestationVersion"
            let version = try seq.integer()
            guard version >= 1 else { throw DERCursor.Problem(reason: "attestation version \(version)") }
            field = "attestationSecurityLevel"
            let attestationLevel = try SecurityLevel.read(&seq)
            field = "keyMintVersion"
            let keyMintVersion = try seq.integer()
            field = "keyMintSecurityLevel"
            let keyMintLevel = try SecurityLevel.read(&seq)
            field = "attestationChallenge"
            let challenge = try seq.octetString()
            field = "uniqueId"
            let uniqueID = try seq.octetString()
            field = "softwareEnforced"
            let software = try AuthorizationList.read(&seq, name: field)
            field = "hardwareEnforced"
            let hardware = try AuthorizationList.read(&seq, name: field)
            field = "KeyDescription"
            try seq.finish("eighth field")
            return KeyDescription(
                attestationVersion: version, attestationSecurityLevel: attestationLevel, keyMintVersion: keyMintVersion,
                keyMintSecurityLevel: keyMintLevel, attestationChallenge: challenge, uniqueID: uniqueID, softwareEnforced: software,
                hardwareEnforced: hardware)
        } catch {
            throw AndroidAttestError(.malformed, "KeyDescription \(field): \(error.reason)")
        }
    }

    /// The lower of the two security levels: where the key lives and who signed the attestation.
    public var securityLevel: SecurityLevel { min(attestationSecurityLevel, keyMintSecurityLevel) }

    /// A value the hardware vouches for, else the one the Keystore reports (fields such as the OS
    /// version sat in softwareEnforced on some Keymaster 2 devices).
    func value<T>(_ read: (AuthorizationList) -> T?) -> T? { read(hardwareEnforced) ?? read(softwareEnforced) }
}

/// Where a key lives and who vouches for the attestation (`SecurityLevel ::= ENUMERATED`).
public enum SecurityLevel: Int, Comparable, CaseIterable, Sendable {
    case software = 0
    case trustedEnvironment = 1
    case strongBox = 2

    /// Android's names, as the documentation and the CLI output write them.
    public var name: String {
        switch self {
        case .software: "Software"
        case .trustedEnvironment: "TrustedEnvironment"
        case .strongBox: "StrongBox"
        }
    }

    public static func < (a: SecurityLevel, b: SecurityLevel) -> Bool { a.rawValue < b.rawValue }

    static func read(_ cursor: inout DERCursor) throws(DERCursor.Problem) -> SecurityLevel {
        let v = try cursor.integer(as: DERCursor.Universal.enumerated)
        guard let level = SecurityLevel(rawValue: Int(truncatingIfNeeded: v)), Int64(level.rawValue) == v else {
            throw DERCursor.Problem(reason: "unknown security level \(v)")
        }
        return level
    }
}
