import GatewayWire

/// A parsed, **unverified** assertion: `{"signature": DER ECDSA, "authenticatorData": bytes}`.
public struct AssertionObject: Sendable {
    public let signature: [UInt8]
    public let authenticatorData: AuthenticatorData

    /// A real assertion is about 140 bytes; with iOS 27 extensions a little more.
    public static let maxSize = 4096
    static let cborLimits = CBORDecoder.Limits(maxDepth: 4, maxItems: 64, maxStringLength: 2048)

    public static func parse(_ bytes: [UInt8]) throws(AppAttestError) -> AssertionObject {
        guard bytes.count <= maxSize else {
            throw AppAttestError(.malformed, "assertion of \(bytes.count) bytes exceeds \(maxSize)")
        }
        let root: CBORValue
        do {
            root = try CBORDecoder(limits: cborLimits).decode(bytes)
        } catch {
            throw AppAttestError(.malformed, "assertion: \(error)")
        }
        guard case .map(let map) = root else {
            throw AppAttestError(.malformed, "assertion is a CBOR \(root.kindName), not a map")
        }
        guard case .bytes(let signature)? = map[text: "signature"], !signature.isEmpty else {
            throw AppAttestError(.malformed, "assertion \"signature\" is missing or not a non-empty byte string")
        }
        guard case .bytes(let authData)? = map[text: "authenticatorData"] else {
            throw AppAttestError(.malformed, "assertion \"authenticatorData\" is missing or not a byte string")
        }
        return AssertionObject(
            signature: signature, authenticatorData: try AuthenticatorData.parse(authData, kind: .assertion))
    }
}
