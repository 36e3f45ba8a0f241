/// The device's boot state as the secure hardware saw it (`[704] rootOfTrust`, hardwareEnforced):
///
/// ```
/// RootOfTrust ::= SEQUENCE {
///     verifiedBootKey    OCTET STRING,   -- the key that verified the boot image (all zeros when unlocked)
///     deviceLocked       BOOLEAN,        -- the bootloader is locked
///     verifiedBootState  VerifiedBootState,
///     verifiedBootHash   OCTET STRING,   -- version 3 and later
/// }
/// ```
///
/// `deviceLocked` must be DER (0xFF or 0x00): a BOOLEAN 0x01 there is a root of trust encoded
/// wrongly, and refused as `malformed`, as Google's verifier refuses it.
public struct RootOfTrust: Sendable, Equatable {
    public let verifiedBootKey: [UInt8]
    public let deviceLocked: Bool
    public let verifiedBootState: VerifiedBootState
    /// Absent before attestation version 3.
    public let verifiedBootHash: [UInt8]?

    static func read(_ cursor: inout DERCursor) throws(DERCursor.Problem) -> RootOfTrust {
        var seq = try cursor.sequence()
        let key = try seq.octetString()
        let locked = try seq.boolean()
        let raw = try seq.integer(as: DERCursor.Universal.enumerated)
        guard let state = VerifiedBootState(rawValue: Int(truncatingIfNeeded: raw)), Int64(state.rawValue) == raw else {
            throw DERCursor.Problem(reason: "unknown verified boot state \(raw)")
        }
        let hash = seq.isAtEnd ? nil : try seq.octetString()
        try seq.finish("RootOfTrust")
        return RootOfTrust(verifiedBootKey: key, deviceLocked: locked, verifiedBootState: state, verifiedBootHash: hash)
    }
}

/// Android Verified Boot's state: green (Verified), yellow (SelfSigned: a user-installed key),
/// orange (Unverified: bootloader unlocked, anything boots), red (Failed).
public enum VerifiedBootState: Int, CaseIterable, Sendable {
    case verified = 0
    case selfSigned = 1
    case unverified = 2
    case failed = 3

    public var name: String {
        switch self {
        case .verified: "Verified"
        case .selfSigned: "SelfSigned"
        case .unverified: "Unverified"
        case .failed: "Failed"
        }
    }
}
