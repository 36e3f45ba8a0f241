import Foundation
import GatewayCrypto
import GatewayWire
import SimulatorPKI

extension TestCA {
    /// A TLS server certificate for `hosts` (DNS names, or IPv4/IPv6 addresses in the subjectAltName),
    /// issued by the CA's intermediate, for the local stand-ins (`attest-sim apple`): a gateway that
    /// lists the CA's `root.pem` as the service's CA file (`apple.ca_file`) trusts it, nothing else
    /// does. Serve it with the intermediate after it (`X509Certificate.pem([leaf, intermediate])`).
    /// For tests, benchmarks and the simulator only.
    public func issueTLSServerCertificate(for hosts: [String], key: ECPrivateKey, validity: Validity) throws(CertificateBuilder.Error)
        -> X509Certificate
    {
        typealias DER = CertificateBuilder.DER
        let names: [[UInt8]] = hosts.map { host in
            if let v4 = Self.ipv4Bytes(host) { return DER.element(tag: 0x87, v4) }
            if let v6 = Self.ipv6Bytes(host) { return DER.element(tag: 0x87, v6) }
            return DER.element(tag: 0x82, Array(host.utf8))
        }
        // extendedKeyUsage: serverAuth.
        let serverAuth = DER.sequence([[0x06, 0x08, 0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x01]])
        return try CertificateBuilder(
            subject: CertificateBuilder.Name(commonName: hosts.first ?? "localhost", organization: name, state: "Test"),
            issuer: intermediateName, serialNumber: CertificateBuilder.randomSerialNumber(),
            notBefore: validity.epochNotBefore, notAfter: validity.epochNotAfter, subjectKey: key, basicConstraints: .endEntity,
            keyUsage: [.digitalSignature],
            extensions: [
                .init(oid: "2.5.29.17", critical: false, value: DER.sequence(names)),
                .init(oid: "2.5.29.37", critical: false, value: serverAuth),
            ]
        ).sign(with: intermediateKey)
    }

    static func ipv4Bytes(_ s: String) -> [UInt8]? {
        var a = in_addr()
        guard inet_pton(AF_INET, s, &a) == 1 else { return nil }
        return withUnsafeBytes(of: &a) { Array($0) }
    }

    static func ipv6Bytes(_ s: String) -> [UInt8]? {
        var a = in6_addr()
        guard inet_pton(AF_INET6, s, &a) == 1 else { return nil }
        return withUnsafeBytes(of: &a) { Array($0) }
    }
}
