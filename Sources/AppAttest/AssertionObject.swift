import GatewayWire

/// A parsed, **unverified** assertion: `{"signature": DER ECDSA, "authenticatorData": bytes}`.
public struct AssertionObject: Sendable {
    public let signature: [UInt8]
    public let authenticatorData: AuthenticatorData

    /// A real assertion is about 140 bytes; with iOS 27 extensions a little more.
    public static let maxSize = 4096
    @_spi(Fuzzing) public static let cborLimits = CBORDecoder.Limits(maxDepth: 4, maxItems: 64, maxStringLength: 2048)

    public static func parse(_ bytes: [UInt8]) throws(AppAttestError) -> AssertionObject {
        guard bytes.count <= maxSize else {
            throw AppAttestError(.malformed, "assertion of \(bytes.count) bytes exceeds \(maxSize)")
        }
        // Every real assertion is a definite map of exactly these two byte strings: read directly.
        // Anything else (other keys, other encodings of the lengths, errors) goes through the
        // general decoder, which gives the same answer for this shape (MalformedInputTests hold the
        // two to each other on mutated assertions) and the precise error for anything wrong.
        let signature: [UInt8]
        let authData: [UInt8]
        if let (s, a) = twoByteStrings(bytes) {
            (signature, authData) = (s, a)
        } else {
            let root: CBORValue
            do {
                root = try CBORDecoder(limits: cborLimits).decode(bytes)
            } catch {
                throw AppAttestError(.malformed, "assertion: \(error)")
            }
            guard case .map(let map) = root else {
                throw AppAttestError(.malformed, "assertion is a CBOR \(root.kindName), not a map")
            }
            guard case .bytes(let s)? = map[text: "signature"] else {
                throw AppAttestError(.malformed, "assertion \"signature\" is missing or not a non-empty byte string")
            }
            guard case .bytes(let a)? = map[text: "authenticatorData"] else {
                throw AppAttestError(.malformed, "assertion \"authenticatorData\" is missing or not a byte string")
            }
            (signature, authData) = (s, a)
        }
        guard !signature.isEmpty else {
            throw AppAttestError(.malformed, "assertion \"signature\" is missing or not a non-empty byte string")
        }
        return AssertionObject(signature: signature, authenticatorData: try AuthenticatorData.parse(authData, kind: .assertion))
    }

    private static func equal(_ bytes: UnsafeBufferPointer<UInt8>, _ name: StaticString) -> Bool {
        name.withUTF8Buffer { n in
            guard bytes.count == n.count else { return false }
            for i in 0..<n.count where bytes[i] != n[i] { return false }
            return true
        }
    }

    /// `{"signature": bytes, "authenticatorData": bytes}` (either order, each once), as a map of two
    /// entries with a one-byte head, short text keys and byte strings within the decoder's limit,
    /// nothing after it; nil for anything else.
    @_spi(Fuzzing) public static func twoByteStrings(_ bytes: [UInt8]) -> ([UInt8], [UInt8])? {
        bytes.withUnsafeBufferPointer { p -> ([UInt8], [UInt8])? in
            guard p.count > 1, p[0] == 0xA2 else { return nil }
            var pos = 1
            var signature: [UInt8]? = nil
            var authData: [UInt8]? = nil
            for _ in 0..<2 {
                guard pos < p.count, p[pos] & 0xE0 == 0x60, p[pos] & 0x1F < 24 else { return nil }
                let keyLength = Int(p[pos] & 0x1F)
                pos += 1
                guard p.count - pos >= keyLength else { return nil }
                let key = UnsafeBufferPointer(rebasing: p[pos..<(pos + keyLength)])
                let isSignature = equal(key, "signature")
                guard isSignature || equal(key, "authenticatorData") else { return nil }
                pos += keyLength
                guard pos < p.count, p[pos] & 0xE0 == 0x40 else { return nil }
                var length = Int(p[pos] & 0x1F)
                pos += 1
                if length == 24 {
                    guard pos < p.count else { return nil }
                    length = Int(p[pos])
                    pos += 1
                } else if length == 25 {
                    guard p.count - pos >= 2 else { return nil }
                    length = Int(p[pos]) << 8 | Int(p[pos + 1])
                    pos += 2
                } else if length > 25 {
                    return nil
                }
                guard length <= cborLimits.maxStringLength, p.count - pos >= length else { return nil }
                let value = Array(p[pos..<(pos + length)])
                pos += length
                if isSignature {
                    guard signature == nil else { return nil }
                    signature = value
                } else {
                    guard authData == nil else { return nil }
                    authData = value
                }
            }
            guard pos == p.count, let signature, let authData else { return nil }
            return (signature, authData)
        }
    }
}
