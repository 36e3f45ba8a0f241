/// A strict, bounded DER reader for the structures Android writes into attestation certificates
/// (KeyDescription, AuthorizationList, RootOfTrust, AttestationApplicationId, SubjectPublicKeyInfo).
///
/// Unlike GatewayWire's `DERReader` it reads high tag numbers, which AuthorizationList uses for
/// every tag above 30 (`[704] rootOfTrust` is `BF 85 40`). X.690 §10 rules are enforced: definite
/// lengths in their shortest form (at most four length bytes), tag numbers in their shortest form,
/// BOOLEAN 0x00 or 0xFF, INTEGER in its minimal two's complement, primitive strings. Every length
/// is checked against what remains before anything is read, so no input can make it trap or
/// allocate more than it was given; structures are read by schema, never by generic recursion.
struct DERCursor {
    enum TagClass: UInt8 {
        case universal = 0, application = 1, contextSpecific = 2, `private` = 3
    }

    struct Element {
        let tagClass: TagClass
        let isConstructed: Bool
        let number: UInt32
        let contents: ArraySlice<UInt8>
        /// Where the element's identifier starts in the cursor's input (for details).
        let offset: Int

        /// How details name the element: `INTEGER`, `[704]`.
        var name: String {
            switch tagClass {
            case .universal: DERCursor.universalNames[number] ?? "universal \(number)"
            case .contextSpecific: "[\(number)]"
            case .application: "[APPLICATION \(number)]"
            case .private: "[PRIVATE \(number)]"
            }
        }
    }

    /// Why bytes are not the DER expected; `reason` names the offset.
    struct Problem: Error {
        let reason: String
    }

    enum Universal {
        static let boolean: UInt32 = 1, integer: UInt32 = 2, bitString: UInt32 = 3, octetString: UInt32 = 4, null: UInt32 = 5
        static let objectIdentifier: UInt32 = 6, enumerated: UInt32 = 10, sequence: UInt32 = 16, set: UInt32 = 17
    }

    static let universalNames: [UInt32: String] = [
        1: "BOOLEAN", 2: "INTEGER", 3: "BIT STRING", 4: "OCTET STRING", 5: "NULL", 6: "OBJECT IDENTIFIER", 10: "ENUMERATED",
        12: "UTF8String", 16: "SEQUENCE", 17: "SET", 19: "PrintableString",
    ]

    private let bytes: ArraySlice<UInt8>
    private var position: Int

    init(_ bytes: ArraySlice<UInt8>) {
        self.bytes = bytes
        position = bytes.startIndex
    }

    init(_ bytes: [UInt8]) { self.init(bytes[...]) }

    var isAtEnd: Bool { position == bytes.endIndex }

    mutating func next() throws(Problem) -> Element {
        let start = position
        var p = position
        guard p < bytes.endIndex else { throw Problem(reason: "unexpected end of input at byte \(p)") }
        let first = bytes[p]
        p += 1
        var number = UInt32(first & 0x1f)
        if number == 0x1f {
            // High tag number: base-128 digits, the last without bit 8; shortest form, at most 4 digits.
            number = 0
            var digits = 0
            while true {
                guard p < bytes.endIndex else { throw Problem(reason: "truncated tag number at byte \(start)") }
                let b = bytes[p]
                p += 1
                if digits == 0 && b == 0x80 { throw Problem(reason: "tag number with a leading zero digit at byte \(start)") }
                digits += 1
                guard digits <= 4 else { throw Problem(reason: "tag number longer than 4 digits at byte \(start)") }
                number = number << 7 | UInt32(b & 0x7f)
                if b & 0x80 == 0 { break }
            }
            guard number >= 31 else { throw Problem(reason: "tag number \(number) in the long form at byte \(start)") }
        }
        guard p < bytes.endIndex else { throw Problem(reason: "missing length at byte \(p)") }
        let lengthByte = bytes[p]
        p += 1
        var length = 0
        if lengthByte < 0x80 {
            length = Int(lengthByte)
        } else {
            let n = Int(lengthByte & 0x7f)
            guard n >= 1 else { throw Problem(reason: "indefinite length at byte \(p - 1)") }
            guard n <= 4 else { throw Problem(reason: "length of \(n) bytes at byte \(p - 1)") }
            guard bytes.endIndex - p >= n else { throw Problem(reason: "truncated length at byte \(p)") }
            guard bytes[p] != 0 else { throw Problem(reason: "non-minimal length at byte \(p)") }
            for _ in 0..<n {
                length = length << 8 | Int(bytes[p])
                p += 1
            }
            guard length >= 0x80 else { throw Problem(reason: "non-minimal length at byte \(p - n)") }
        }
        guard bytes.endIndex - p >= length else {
            throw Problem(reason: "length \(length) at byte \(start) runs past the end (\(bytes.endIndex - p) bytes remain)")
        }
        position = p + length
        return Element(
            tagClass: TagClass(rawValue: first >> 6)!, isConstructed: first & 0x20 != 0, number: number,
            contents: bytes[p..<p + length], offset: start)
    }

    /// The next element, which must be the universal type `number`, primitive or constructed as
    /// DER has it (SEQUENCE and SET constructed, every other type here primitive).
    mutating func next(_ number: UInt32) throws(Problem) -> Element {
        let e = try next()
        let constructed = number == Universal.sequence || number == Universal.set
        guard e.tagClass == .universal, e.number == number, e.isConstructed == constructed else {
            throw Problem(reason: "expected \(Self.universalNames[number] ?? "\(number)") at byte \(e.offset), found \(e.name)")
        }
        return e
    }

    func finish(_ what: String) throws(Problem) {
        guard isAtEnd else { throw Problem(reason: "\(bytes.endIndex - position) byte(s) after the \(what)") }
    }

    // MARK: Typed reads

    /// An INTEGER (or ENUMERATED, `as: Universal.enumerated`) that fits in 64 bits.
    mutating func integer(as number: UInt32 = Universal.integer) throws(Problem) -> Int64 {
        let e = try next(number)
        return try Self.integerValue(e)
    }

    static func integerValue(_ e: Element) throws(Problem) -> Int64 {
        let c = e.contents
        guard let first = c.first else { throw Problem(reason: "empty \(e.name) at byte \(e.offset)") }
        if c.count > 1 {
            let second = c[c.startIndex + 1]
            guard !(first == 0x00 && second & 0x80 == 0) && !(first == 0xff && second & 0x80 != 0) else {
                throw Problem(reason: "non-minimal \(e.name) at byte \(e.offset)")
            }
        }
        guard c.count <= 8 else { throw Problem(reason: "\(e.name) of \(c.count) bytes at byte \(e.offset) does not fit 64 bits") }
        var v: Int64 = first & 0x80 != 0 ? -1 : 0
        for b in c { v = v << 8 | Int64(b) }
        return v
    }

    mutating func boolean() throws(Problem) -> Bool {
        let e = try next(Universal.boolean)
        guard e.contents.count == 1 else { throw Problem(reason: "BOOLEAN of \(e.contents.count) bytes at byte \(e.offset)") }
        switch e.contents.first! {
        case 0x00: return false
        case 0xff: return true
        case let v: throw Problem(reason: "BOOLEAN 0x\(String(v, radix: 16)) at byte \(e.offset) is not DER (0x00 or 0xFF)")
        }
    }

    mutating func octetString() throws(Problem) -> [UInt8] { Array(try next(Universal.octetString).contents) }

    static func null(_ e: Element) throws(Problem) {
        guard e.tagClass == .universal, e.number == Universal.null, !e.isConstructed, e.contents.isEmpty else {
            throw Problem(reason: "expected NULL at byte \(e.offset), found \(e.name)")
        }
    }

    /// The contents of the next SEQUENCE (or SET), as a cursor over its elements.
    mutating func sequence(_ number: UInt32 = Universal.sequence) throws(Problem) -> DERCursor {
        DERCursor(try next(number).contents)
    }

    /// A dotted OBJECT IDENTIFIER (for details and unknown algorithms).
    static func dotted(_ oid: ArraySlice<UInt8>) -> String {
        var arcs: [UInt64] = []
        var value: UInt64 = 0
        for b in oid {
            guard value < (1 << 56) else { return "invalid OID" }
            value = value << 7 | UInt64(b & 0x7f)
            if b & 0x80 == 0 {
                if arcs.isEmpty {
                    let first = min(value / 40, 2)
                    arcs = [first, value - first * 40]
                } else {
                    arcs.append(value)
                }
                value = 0
            }
        }
        return arcs.map(String.init).joined(separator: ".")
    }
}
