/// A strict reader of DER TLVs (X.690 §10): single-byte tags (low tag numbers), definite lengths in
/// their shortest form, and contents that never run past the end. Enough for the App Attest nonce
/// extension and SubjectPublicKeyInfo; certificates themselves are parsed by OpenSSL.
public struct DERReader: Sendable {
    public struct Element: Sendable, Equatable {
        /// The identifier octet: class (bits 8–7), constructed (bit 6), tag number (bits 5–1).
        public let tag: UInt8
        public let contents: ArraySlice<UInt8>

        public var isConstructed: Bool { tag & 0x20 != 0 }
    }

    public enum Tag {
        public static let octetString: UInt8 = 0x04
        public static let bitString: UInt8 = 0x03
        public static let objectIdentifier: UInt8 = 0x06
        public static let sequence: UInt8 = 0x30
        /// Context-specific, constructed, tag number `n` (an EXPLICIT tag).
        public static func contextConstructed(_ n: UInt8) -> UInt8 { 0xa0 | n }
    }

    public struct Error: Swift.Error, Equatable, Sendable, CustomStringConvertible {
        public let offset: Int
        public let reason: String
        public var description: String { "DER: \(reason) (at byte \(offset))" }
    }

    private let bytes: ArraySlice<UInt8>
    private var pos: Int

    public init(_ bytes: ArraySlice<UInt8>) {
        self.bytes = bytes
        self.pos = bytes.startIndex
    }

    public init(_ bytes: [UInt8]) { self.init(bytes[...]) }

    public var isAtEnd: Bool { pos == bytes.endIndex }

    public mutating func read() throws(Error) -> Element {
        guard pos < bytes.endIndex else { throw Error(offset: pos, reason: "unexpected end of input") }
        let tag = bytes[pos]
        guard tag & 0x1f != 0x1f else { throw Error(offset: pos, reason: "high tag numbers are not supported") }
        var p = pos + 1
        guard p < bytes.endIndex else { throw Error(offset: p, reason: "missing length") }
        let first = bytes[p]
        p += 1
        var length: Int
        if first < 0x80 {
            length = Int(first)
        } else {
            let n = Int(first & 0x7f)
            guard n >= 1 && n <= 4 else { throw Error(offset: p - 1, reason: "unsupported length of length \(n)") }
            guard bytes.endIndex - p >= n else { throw Error(offset: p, reason: "truncated length") }
            guard bytes[p] != 0 else { throw Error(offset: p, reason: "non-minimal length encoding") }
            length = 0
            for _ in 0..<n { length = length << 8 | Int(bytes[p]); p += 1 }
            guard length >= 0x80 else { throw Error(offset: p - n, reason: "non-minimal length encoding") }
        }
        guard bytes.endIndex - p >= length else {
            throw Error(offset: p, reason: "length \(length) runs past the end (\(bytes.endIndex - p) bytes remain)")
        }
        let el = Element(tag: tag, contents: bytes[p..<p + length])
        pos = p + length
        return el
    }

    /// Reads one element and requires its tag.
    public mutating func read(tag expected: UInt8) throws(Error) -> Element {
        let at = pos
        let el = try read()
        guard el.tag == expected else {
            throw Error(offset: at, reason: "expected tag 0x\(String(expected, radix: 16)), found 0x\(String(el.tag, radix: 16))")
        }
        return el
    }

    /// Requires that nothing follows.
    public func finish() throws(Error) {
        guard isAtEnd else { throw Error(offset: pos, reason: "\(bytes.endIndex - pos) trailing byte(s)") }
    }
}
