import GatewayCrypto

/// The attested key as the leaf certificate carries it: its SubjectPublicKeyInfo DER and the
/// algorithm that DER names, read here rather than by OpenSSL so that keys OpenSSL 3.0 cannot
/// decode (ML-DSA, attestation version 500) are still reported. The key id is SHA-256 of `der`.
public struct SubjectPublicKeyInfo: Sendable, Equatable {
    public let der: [UInt8]
    /// `EC P-256`, `EC P-384`, `RSA`, `ML-DSA-65`, `Ed25519`, … or the algorithm's dotted OID.
    public let algorithm: String

    static let ecPublicKey: [UInt8] = [0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01]
    static let names: [[UInt8]: String] = [
        [0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01]: "RSA",
        [0x2b, 0x65, 0x70]: "Ed25519",
        [0x2b, 0x65, 0x6e]: "X25519",
        [0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x03, 0x11]: "ML-DSA-44",
        [0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x03, 0x12]: "ML-DSA-65",
        [0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x03, 0x13]: "ML-DSA-87",
    ]
    static let curves: [[UInt8]: String] = [
        [0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07]: "P-256",
        [0x2b, 0x81, 0x04, 0x00, 0x22]: "P-384",
        [0x2b, 0x81, 0x04, 0x00, 0x23]: "P-521",
        [0x2b, 0x81, 0x04, 0x00, 0x21]: "P-224",
    ]

    /// `SubjectPublicKeyInfo ::= SEQUENCE { SEQUENCE { algorithm OID, parameters ANY OPTIONAL }, BIT STRING }`.
    init(certificate: X509Certificate) throws(AndroidAttestError) {
        der = certificate.subjectPublicKeyInfoDER
        do throws(DERCursor.Problem) {
            var outer = DERCursor(der)
            var spki = try outer.sequence()
            var algorithmID = try spki.sequence()
            let oid = Array(try algorithmID.next(DERCursor.Universal.objectIdentifier).contents)
            if oid == Self.ecPublicKey {
                let curve = try algorithmID.next(DERCursor.Universal.objectIdentifier).contents
                algorithm = "EC " + (Self.curves[Array(curve)] ?? DERCursor.dotted(curve))
            } else {
                algorithm = Self.names[oid] ?? DERCursor.dotted(oid[...])
            }
            _ = try spki.next(DERCursor.Universal.bitString)
        } catch {
            throw AndroidAttestError(.malformed, "the leaf's SubjectPublicKeyInfo: \(error.reason)")
        }
    }
}
