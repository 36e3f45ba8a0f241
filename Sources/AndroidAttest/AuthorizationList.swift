/// One of KeyDescription's two authorization lists: the key's properties as `[tag] EXPLICIT value`
/// elements, tag numbers in strictly ascending order (X.680 §8.6 canonical order; a list out of
/// order was not written by a Keystore and is refused as `malformed`, as is a tag given twice).
///
/// Every tag Android documents is read to its type (INTEGER, SET OF INTEGER, NULL, OCTET STRING,
/// RootOfTrust, AttestationApplicationId); a value of another type is `malformed`. A tag this code
/// does not know (a newer KeyMint's) is kept as bytes, provided it is one well-formed element:
/// new versions add tags, and refusing them would refuse new phones.
public struct AuthorizationList: Sendable, Equatable {
    /// Tag numbers of the documented schema (KeyMint's `Tag.aidl` without the type bits).
    public enum Tag: UInt32, CaseIterable, Sendable {
        case purpose = 1, algorithm = 2, keySize = 3, blockMode = 4, digest = 5, padding = 6, callerNonce = 7
        case minMacLength = 8, ecCurve = 10, rsaPublicExponent = 200, rsaOAEPMGFDigest = 203
        case rollbackResistance = 303, earlyBootOnly = 305
        case activeDateTime = 400, originationExpireDateTime = 401, usageExpireDateTime = 402, usageCountLimit = 405
        case noAuthRequired = 503, userAuthType = 504, authTimeout = 505, allowWhileOnBody = 506
        case trustedUserPresenceRequired = 507, trustedConfirmationRequired = 508, unlockedDeviceRequired = 509
        case allApplications = 600, applicationID = 601
        case creationDateTime = 701, origin = 702, rollbackResistant = 703, rootOfTrust = 704, osVersion = 705, osPatchLevel = 706
        case attestationApplicationID = 709, attestationIDBrand = 710, attestationIDDevice = 711, attestationIDProduct = 712
        case attestationIDSerial = 713, attestationIDIMEI = 714, attestationIDMEID = 715, attestationIDManufacturer = 716
        case attestationIDModel = 717, vendorPatchLevel = 718, bootPatchLevel = 719, deviceUniqueAttestation = 720
        case attestationIDSecondIMEI = 723, moduleHash = 724

        enum Kind { case integer, integerSet, null, octets, rootOfTrust, applicationID }

        var kind: Kind {
            switch self {
            case .purpose, .blockMode, .digest, .padding, .rsaOAEPMGFDigest: .integerSet
            case .callerNonce, .rollbackResistance, .earlyBootOnly, .noAuthRequired, .allowWhileOnBody, .trustedUserPresenceRequired,
                .trustedConfirmationRequired, .unlockedDeviceRequired, .allApplications, .rollbackResistant, .deviceUniqueAttestation:
                .null
            case .applicationID, .attestationIDBrand, .attestationIDDevice, .attestationIDProduct, .attestationIDSerial,
                .attestationIDIMEI, .attestationIDMEID, .attestationIDManufacturer, .attestationIDModel, .attestationIDSecondIMEI,
                .moduleHash:
                .octets
            case .rootOfTrust: .rootOfTrust
            case .attestationApplicationID: .applicationID
            default: .integer
            }
        }
    }

    public enum Value: Sendable, Equatable {
        case integer(Int64)
        case integerSet([Int64])
        /// A flag tag (NULL): present means set.
        case present
        case octets([UInt8])
        case rootOfTrust(RootOfTrust)
        case applicationID(AttestationApplicationID)
        /// A tag this code does not know: the contents octets of its one element.
        case unknown([UInt8])
    }

    /// The entries in the order read (ascending tag numbers).
    public let entries: [(tag: UInt32, value: Value)]

    public init(entries: [(tag: UInt32, value: Value)]) { self.entries = entries }

    public static func == (a: AuthorizationList, b: AuthorizationList) -> Bool {
        a.entries.count == b.entries.count && zip(a.entries, b.entries).allSatisfy { $0.tag == $1.tag && $0.value == $1.value }
    }

    public subscript(tag: Tag) -> Value? { entries.first { $0.tag == tag.rawValue }?.value }

    func integer(_ tag: Tag) -> Int64? { if case .integer(let v)? = self[tag] { v } else { nil } }
    func octets(_ tag: Tag) -> [UInt8]? { if case .octets(let v)? = self[tag] { v } else { nil } }

    public var purposes: [Int64]? { if case .integerSet(let v)? = self[.purpose] { v } else { nil } }
    public var digests: [Int64]? { if case .integerSet(let v)? = self[.digest] { v } else { nil } }
    public var algorithm: Int64? { integer(.algorithm) }
    public var keySize: Int64? { integer(.keySize) }
    public var ecCurve: Int64? { integer(.ecCurve) }
    public var origin: Int64? { integer(.origin) }
    public var creationDateTime: Int64? { integer(.creationDateTime) }
    public var osVersion: Int64? { integer(.osVersion) }
    public var osPatchLevel: Int64? { integer(.osPatchLevel) }
    public var vendorPatchLevel: Int64? { integer(.vendorPatchLevel) }
    public var bootPatchLevel: Int64? { integer(.bootPatchLevel) }
    public var moduleHash: [UInt8]? { octets(.moduleHash) }
    public var rootOfTrust: RootOfTrust? { if case .rootOfTrust(let v)? = self[.rootOfTrust] { v } else { nil } }
    public var attestationApplicationID: AttestationApplicationID? {
        if case .applicationID(let v)? = self[.attestationApplicationID] { v } else { nil }
    }
    /// Tags not in the documented schema, by number.
    public var unknownTags: [UInt32] { entries.compactMap { if case .unknown = $0.value { $0.tag } else { nil } } }

    /// Reads `AuthorizationList ::= SEQUENCE { [tag] EXPLICIT … OPTIONAL, … }` from `cursor`.
    static func read(_ cursor: inout DERCursor, name: String) throws(DERCursor.Problem) -> AuthorizationList {
        var list = try cursor.sequence()
        var entries: [(tag: UInt32, value: Value)] = []
        var previous: UInt32? = nil
        while !list.isAtEnd {
            let e = try list.next()
            guard e.tagClass == .contextSpecific, e.isConstructed else {
                throw DERCursor.Problem(reason: "element \(e.name) at byte \(e.offset) is not an EXPLICIT context tag")
            }
            if let previous, e.number <= previous {
                throw DERCursor.Problem(
                    reason: "tag [\(e.number)] after [\(previous)]: tags are not in ascending order (a Keystore writes them in order)")
            }
            previous = e.number
            var inner = DERCursor(e.contents)
            let value: Value
            do throws(DERCursor.Problem) {
                value = try readValue(&inner, tag: e.number)
                try inner.finish("value")
            } catch {
                throw DERCursor.Problem(reason: "[\(e.number)]\(Tag(rawValue: e.number).map { " \($0)" } ?? ""): \(error.reason)")
            }
            entries.append((e.number, value))
        }
        return AuthorizationList(entries: entries)
    }

    private static func readValue(_ c: inout DERCursor, tag number: UInt32) throws(DERCursor.Problem) -> Value {
        guard let tag = Tag(rawValue: number) else {
            let e = try c.next()
            // One element, kept whole; its contents are not looked into.
            return .unknown(Array(e.contents))
        }
        switch tag.kind {
        case .integer:
            return .integer(try c.integer())
        case .integerSet:
            var set = try c.sequence(DERCursor.Universal.set)
            var values: [Int64] = []
            while !set.isAtEnd { values.append(try set.integer()) }
            return .integerSet(values)
        case .null:
            try DERCursor.null(try c.next())
            return .present
        case .octets:
            return .octets(try c.octetString())
        case .rootOfTrust:
            return .rootOfTrust(try RootOfTrust.read(&c))
        case .applicationID:
            return .applicationID(try AttestationApplicationID.read(try c.octetString()))
        }
    }
}
