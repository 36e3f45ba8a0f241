import GatewayWire

/// A parsed, **unverified** attestation object:
/// `{"fmt": "apple-appattest", "attStmt": {"x5c": [leaf, intermediate…], "receipt": bytes}, "authData": bytes}`.
public struct AttestationObject: Sendable {
    public static let format = "apple-appattest"

    public let format: String
    /// DER certificates, leaf first.
    public let x5c: [[UInt8]]
    public let receipt: [UInt8]
    public let authenticatorData: AuthenticatorData

    /// Hard bounds: an attestation object is about 5.5 KB; anything far larger is refused before decoding.
    public static let maxSize = 64 * 1024
    static let cborLimits = CBORDecoder.Limits(maxDepth: 8, maxItems: 256, maxStringLength: 32 * 1024)

    public static func parse(_ bytes: [UInt8]) throws(AppAttestError) -> AttestationObject {
        guard bytes.count <= maxSize else {
            throw AppAttestError(.malformed, "attestation object of \(bytes.count) bytes exceeds \(maxSize)")
        }
        let root: CBORValue
        do {
            root = try CBORDecoder(limits: cborLimits).decode(bytes)
        } catch {
            throw AppAttestError(.malformed, "attestation object: \(error)")
        }
        guard case .map(let map) = root else {
            throw AppAttestError(.malformed, "attestation object is a CBOR \(root.kindName), not a map")
        }
        // The format decides everything else, so it is checked first: a "packed" or "none" object gets
        // unsupported_format, not a complaint about its statement.
        guard let fmtValue = map[text: "fmt"] else { throw AppAttestError(.malformed, "attestation object has no \"fmt\"") }
        guard case .text(let fmt) = fmtValue else {
            throw AppAttestError(.malformed, "\"fmt\" is a CBOR \(fmtValue.kindName), not a text string")
        }
        guard fmt == format else {
            throw AppAttestError(.unsupportedFormat, "fmt is \"\(fmt.prefix(64))\", expected \"\(format)\"")
        }
        // Other top-level keys are ignored, as WebAuthn does: Apple has added fields before (iOS 27).
        guard case .map(let stmt)? = map[text: "attStmt"] else {
            throw AppAttestError(.malformed, "\"attStmt\" is missing or not a map")
        }
        guard case .array(let chain)? = stmt[text: "x5c"] else {
            throw AppAttestError(.malformed, "\"attStmt.x5c\" is missing or not an array")
        }
        guard chain.count >= 2 else {
            throw AppAttestError(.malformed, "\"attStmt.x5c\" holds \(chain.count) certificate(s); leaf and intermediate are required")
        }
        guard chain.count <= 4 else {
            throw AppAttestError(.malformed, "\"attStmt.x5c\" holds \(chain.count) certificates; at most 4 are accepted")
        }
        var x5c: [[UInt8]] = []
        for (i, c) in chain.enumerated() {
            guard case .bytes(let der) = c, !der.isEmpty else {
                throw AppAttestError(.malformed, "\"attStmt.x5c[\(i)]\" is not a non-empty byte string")
            }
            x5c.append(der)
        }
        guard case .bytes(let receipt)? = stmt[text: "receipt"] else {
            throw AppAttestError(.malformed, "\"attStmt.receipt\" is missing or not a byte string")
        }
        guard case .bytes(let authData)? = map[text: "authData"] else {
            throw AppAttestError(.malformed, "\"authData\" is missing or not a byte string")
        }
        return AttestationObject(
            format: fmt, x5c: x5c, receipt: receipt,
            authenticatorData: try AuthenticatorData.parse(authData, kind: .attestation))
    }
}
