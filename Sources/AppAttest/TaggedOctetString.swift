import GatewayWire

/// The shape Apple gives its values in the credential certificate's extensions: `SEQUENCE { [n]
/// EXPLICIT OCTET STRING }` (the nonce, 1.2.840.113635.100.8.2, under [1]; the key's access control
/// on macOS, 1.2.840.113635.100.8.6, under [3]). Strictly: exactly one [n] holding exactly one OCTET
/// STRING; other context-tagged elements are tolerated (room for Apple to grow); any other element,
/// trailing bytes or bad DER is refused.
enum TaggedOctetString {
    struct Problem: Error {
        let why: String
    }

    /// The OCTET STRING under [`tag`], or why `der` is not of that shape.
    static func value(_ der: [UInt8], tag: UInt8) -> Result<[UInt8], Problem> {
        do {
            var outer = DERReader(der)
            let seq = try outer.read(tag: DERReader.Tag.sequence)
            try outer.finish()
            var inner = DERReader(seq.contents)
            var found: [UInt8]? = nil
            while !inner.isAtEnd {
                let el = try inner.read()
                guard el.tag & 0xc0 == 0x80 else {
                    return .failure(Problem(why: "holds a non-context-tagged element 0x\(String(el.tag, radix: 16))"))
                }
                guard el.tag == DERReader.Tag.contextConstructed(tag) else { continue }
                guard found == nil else { return .failure(Problem(why: "holds [\(tag)] twice")) }
                var explicit = DERReader(el.contents)
                let octets = try explicit.read(tag: DERReader.Tag.octetString)
                try explicit.finish()
                found = Array(octets.contents)
            }
            guard let found else { return .failure(Problem(why: "has no [\(tag)] element")) }
            return .success(found)
        } catch {
            return .failure(Problem(why: "\(error)"))
        }
    }
}
