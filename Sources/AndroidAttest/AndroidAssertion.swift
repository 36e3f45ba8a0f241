import GatewayWire

/// A parsed, **unverified** Android assertion: the `X-App-Assertion` header of a protected request
/// from an Android app, base64 of the CBOR map `{"counter": uint, "signature": bytes}` (text keys,
/// nothing else). The signature is ECDSA P-256 with SHA-256 (DER) by the attested Keystore key over
/// `counter ‖ SHA256(clientData)`, the counter as 4 bytes big-endian (`signedMessage`).
///
/// Android's Keystore keeps no counter of its own (App Attest's authenticator data does): the app
/// keeps it, next to the key, and the gateway's rule is the same as for App Attest, strictly
/// greater than the stored one. A replayed or reordered assertion is refused `counter_replay`.
public struct AndroidAssertion: Sendable, Equatable {
    public let counter: UInt32
    public let signature: [UInt8]

    public init(counter: UInt32, signature: [UInt8]) {
        self.counter = counter
        self.signature = signature
    }

    /// A real one is about 90 bytes (a DER ECDSA P-256 signature is at most 72).
    public static let maxSize = 512
    static let cborLimits = CBORDecoder.Limits(maxDepth: 2, maxItems: 8, maxStringLength: 256)

    public static func parse(_ bytes: [UInt8]) throws(AndroidAttestError) -> AndroidAssertion {
        guard bytes.count <= maxSize else {
            throw AndroidAttestError(.malformed, "assertion of \(bytes.count) bytes exceeds \(maxSize)")
        }
        let root: CBORValue
        do {
            root = try CBORDecoder(limits: cborLimits).decode(bytes)
        } catch {
            throw AndroidAttestError(.malformed, "assertion: \(error)")
        }
        guard case .map(let map) = root else {
            throw AndroidAttestError(.malformed, "assertion is a CBOR \(root.kindName), not a map")
        }
        guard map.count == 2 else {
            throw AndroidAttestError(.malformed, "assertion has \(map.count) entries; it is {\"counter\", \"signature\"}")
        }
        guard case .unsigned(let counter)? = map[text: "counter"], counter <= UInt64(UInt32.max) else {
            throw AndroidAttestError(.malformed, "assertion \"counter\" is missing or not an unsigned 32-bit integer")
        }
        guard case .bytes(let signature)? = map[text: "signature"], !signature.isEmpty else {
            throw AndroidAttestError(.malformed, "assertion \"signature\" is missing or not a non-empty byte string")
        }
        return AndroidAssertion(counter: UInt32(counter), signature: signature)
    }

    /// The CBOR the app sends (base64 of it in `X-App-Assertion`).
    public var encoded: [UInt8] {
        CBOREncoder.encode(.map(CBORMap([(.text("counter"), .unsigned(UInt64(counter))), (.text("signature"), .bytes(signature))])))
    }

    /// What the key signs: the counter as 4 bytes big-endian, then SHA256(clientData).
    public static func signedMessage(counter: UInt32, clientDataHash: [UInt8]) -> [UInt8] {
        [UInt8(counter >> 24), UInt8(counter >> 16 & 0xff), UInt8(counter >> 8 & 0xff), UInt8(counter & 0xff)] + clientDataHash
    }
}
