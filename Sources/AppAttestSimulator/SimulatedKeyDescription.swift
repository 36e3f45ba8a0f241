import AndroidAttest
import GatewayCrypto
import SimulatorPKI

/// The KeyDescription (OID 1.3.6.1.4.1.11129.2.1.17) a simulated Android Keystore writes into a
/// key's certificate, encoded to Android's schema as a KeyMint 3 (version 300) TEE does by
/// default: softwareEnforced holds the creation time and the attestationApplicationId;
/// hardwareEnforced holds the key's purposes, algorithm, size, digest, curve, noAuthRequired, its
/// origin, the root of trust, the OS version and the three patch levels, tags in ascending order.
///
/// For tests and the simulator only. Every field a test varies is a property; `unorderedTags`
/// writes the hardware list out of order (as forged chains have it).
public struct SimulatedKeyDescription: Sendable {
    public var attestationVersion: Int64 = 300
    public var keyMintVersion: Int64 = 300
    /// Both security levels unless `keyMintSecurityLevel` is set.
    public var securityLevel: SecurityLevel = .trustedEnvironment
    public var keyMintSecurityLevel: SecurityLevel?
    public var packageName: String
    public var packageVersion: Int64 = 1
    public var signingCertificateSHA256: [UInt8]
    public var deviceLocked = true
    public var verifiedBootState: VerifiedBootState = .verified
    public var verifiedBootKey: [UInt8] = Array(repeating: 0x5a, count: 32)
    public var osVersion: Int64 = 150_000
    public var osPatchLevel: Int64 = 202_501
    public var vendorPatchLevel: Int64 = 20_250_105
    public var bootPatchLevel: Int64 = 20_250_105
    public var algorithm: Int64 = KeyCharacteristics.Algorithm.ec
    public var ecCurve: Int64 = KeyCharacteristics.Curve.p256
    public var keySize: Int64 = 256
    public var purposes: [Int64] = [KeyCharacteristics.Purpose.sign, KeyCharacteristics.Purpose.verify]
    public var unorderedTags = false
    /// Milliseconds since the epoch (softwareEnforced `[701] creationDateTime`).
    public var creationDateTime: Int64 = 1_736_000_000_000

    public init(packageName: String, signingCertificateSHA256: [UInt8]) {
        self.packageName = packageName
        self.signingCertificateSHA256 = signingCertificateSHA256
    }

    /// The extension's DER value for `challenge`.
    public func encoded(challenge: [UInt8]) -> [UInt8] {
        typealias D = AndroidDER
        let applicationID = D.sequence([
            D.set([D.sequence([D.octets(Array(packageName.utf8)), D.integer(packageVersion)])]),
            D.set([D.octets(signingCertificateSHA256)]),
        ])
        let software = D.sequence([
            D.tagged(701, D.integer(creationDateTime)),
            D.tagged(709, D.octets(applicationID)),
        ])
        let rootOfTrust = D.sequence([
            D.octets(verifiedBootKey), D.boolean(deviceLocked), D.enumerated(Int64(verifiedBootState.rawValue)),
            D.octets(Array(repeating: 0xb0, count: 32)),
        ])
        var hardware: [[UInt8]] = [
            D.tagged(1, D.set(purposes.map(D.integer))),
            D.tagged(2, D.integer(algorithm)),
            D.tagged(3, D.integer(keySize)),
            D.tagged(5, D.set([D.integer(4)])),
            D.tagged(10, D.integer(ecCurve)),
            D.tagged(503, D.null),
            D.tagged(702, D.integer(0)),
            D.tagged(704, rootOfTrust),
            D.tagged(705, D.integer(osVersion)),
            D.tagged(706, D.integer(osPatchLevel)),
            D.tagged(718, D.integer(vendorPatchLevel)),
            D.tagged(719, D.integer(bootPatchLevel)),
        ]
        if unorderedTags { hardware.swapAt(0, 1) }
        return D.sequence([
            D.integer(attestationVersion), D.enumerated(Int64(securityLevel.rawValue)), D.integer(keyMintVersion),
            D.enumerated(Int64((keyMintSecurityLevel ?? securityLevel).rawValue)), D.octets(challenge), D.octets([]),
            software, D.sequence(hardware),
        ])
    }
}

/// A DER writer for the KeyDescription's types, with the high tag numbers AuthorizationList uses
/// (`CertificateBuilder.DER` writes single-byte tags only). For tests and the simulator only.
public enum AndroidDER {
    /// Identifier ‖ length ‖ contents (the length as `CertificateBuilder.DER` writes it).
    public static func element(_ identifier: [UInt8], _ contents: [UInt8]) -> [UInt8] {
        identifier + CertificateBuilder.DER.element(tag: 0, contents).dropFirst()
    }

    public static func sequence(_ elements: [[UInt8]]) -> [UInt8] { element([0x30], elements.flatMap { $0 }) }
    public static func set(_ elements: [[UInt8]]) -> [UInt8] { element([0x31], elements.flatMap { $0 }) }
    public static func octets(_ bytes: [UInt8]) -> [UInt8] { element([0x04], bytes) }
    public static func boolean(_ value: Bool) -> [UInt8] { [0x01, 0x01, value ? 0xff : 0x00] }
    public static let null: [UInt8] = [0x05, 0x00]
    public static func integer(_ value: Int64) -> [UInt8] { element([0x02], minimal(value)) }
    public static func enumerated(_ value: Int64) -> [UInt8] { element([0x0a], minimal(value)) }

    /// `[number] EXPLICIT` around one element (context-specific, constructed).
    public static func tagged(_ number: UInt32, _ inner: [UInt8]) -> [UInt8] {
        guard number >= 31 else { return element([0xa0 | UInt8(number)], inner) }
        var digits: [UInt8] = []
        var n = number
        repeat {
            digits.insert(UInt8(n & 0x7f) | (digits.isEmpty ? 0 : 0x80), at: 0)
            n >>= 7
        } while n > 0
        return element([0xbf] + digits, inner)
    }

    /// Two's complement, shortest form.
    static func minimal(_ value: Int64) -> [UInt8] {
        var bytes = withUnsafeBytes(of: value.bigEndian, Array.init)
        while bytes.count > 1 && ((bytes[0] == 0 && bytes[1] & 0x80 == 0) || (bytes[0] == 0xff && bytes[1] & 0x80 != 0)) {
            bytes.removeFirst()
        }
        return bytes
    }
}
