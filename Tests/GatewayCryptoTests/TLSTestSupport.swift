import Foundation
import GatewayCrypto

/// Test certificates on disk (a private CA and leaves with subjectAltName), in a fresh directory
/// removed at deinit. Keys are written with mode 0600 unless a test asks otherwise.
final class TLSTestPKI {
    let directory: String
    let caKey = ECPrivateKey(curve: .p256)
    let ca: X509Certificate
    let caPath: String
    private let caName: CertificateBuilder.Name

    init(caName: String = "attest-gateway test CA") throws {
        directory = NSTemporaryDirectory() + "tls-tests-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        self.caName = .init(commonName: caName)
        let now = Int64(Date().timeIntervalSince1970)
        ca = try CertificateBuilder(
            subject: self.caName, issuer: self.caName, serialNumber: CertificateBuilder.randomSerialNumber(),
            notBefore: now - 3600, notAfter: now + 30 * 86400, subjectKey: caKey,
            basicConstraints: .certificateAuthority(pathLength: nil), keyUsage: [.keyCertSign, .cRLSign]
        ).sign(with: caKey)
        caPath = directory + "/ca.pem"
        try ca.pem.write(toFile: caPath, atomically: true, encoding: .utf8)
    }

    deinit { try? FileManager.default.removeItem(atPath: directory) }

    struct Leaf {
        let certificatePath: String
        let keyPath: String
        let certificate: X509Certificate
        let key: ECPrivateKey
    }

    /// A leaf signed by this CA for `dnsNames` and `ipAddresses` (subjectAltName), chain = leaf + CA.
    func issue(
        _ commonName: String, dnsNames: [String] = [], ipAddresses: [[UInt8]] = [], keyMode: Int = 0o600
    ) throws -> Leaf {
        let key = ECPrivateKey(curve: .p256)
        let now = Int64(Date().timeIntervalSince1970)
        let names = dnsNames.map { CertificateBuilder.DER.element(tag: 0x82, Array($0.utf8)) }
            + ipAddresses.map { CertificateBuilder.DER.element(tag: 0x87, $0) }
        let san = CertificateBuilder.Extension(oid: "2.5.29.17", critical: false, value: CertificateBuilder.DER.sequence(names))
        let cert = try CertificateBuilder(
            subject: .init(commonName: commonName), issuer: caName, serialNumber: CertificateBuilder.randomSerialNumber(),
            notBefore: now - 3600, notAfter: now + 30 * 86400, subjectKey: key, basicConstraints: .endEntity,
            keyUsage: [.digitalSignature], extensions: names.isEmpty ? [] : [san]
        ).sign(with: caKey)
        let base = directory + "/" + commonName.replacingOccurrences(of: "*", with: "star") + "-" + UUID().uuidString.prefix(8)
        let certPath = base + ".crt"
        let keyPath = base + ".key"
        try X509Certificate.pem([cert, ca]).write(toFile: certPath, atomically: true, encoding: .utf8)
        try writeKey(key, to: keyPath, mode: keyMode)
        return Leaf(certificatePath: certPath, keyPath: keyPath, certificate: cert, key: key)
    }

    func writeKey(_ key: ECPrivateKey, to path: String, mode: Int = 0o600) throws {
        FileManager.default.createFile(atPath: path, contents: Data(key.pkcs8PEM.utf8), attributes: [.posixPermissions: 0o600])
        try FileManager.default.setAttributes([.posixPermissions: mode], ofItemAtPath: path)
    }

    func write(_ text: String, named name: String) throws -> String {
        let path = directory + "/" + name
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    /// A server context with one certificate per entry (the first is the default).
    func server(
        _ leaves: [(Leaf, [String])], alpn: [String] = ["h2", "http/1.1"], clientCA: String? = nil,
        ticketKeys: TLSTicketKeys = TLSTicketKeys()
    ) throws -> TLSServerContext {
        try TLSServerContext(
            configuration: TLSServerConfiguration(
                certificates: leaves.map { .init(certificatePath: $0.0.certificatePath, privateKeyPath: $0.0.keyPath, serverNames: $0.1) },
                alpnProtocols: alpn, clientCertificateCAFile: clientCA),
            ticketKeys: ticketKeys)
    }

    func client(
        alpn: [String] = ["h2", "http/1.1"], maximumVersion: TLSVersion = .tls13, caFile: String? = nil, verify: Bool = true,
        clientLeaf: Leaf? = nil
    ) throws -> TLSClientContext {
        try TLSClientContext(
            configuration: TLSClientConfiguration(
                caFile: caFile ?? caPath, verify: verify, clientCertificatePath: clientLeaf?.certificatePath,
                clientKeyPath: clientLeaf?.keyPath, alpnProtocols: alpn, maximumVersion: maximumVersion))
    }
}

/// Moves ciphertext both ways until neither side has anything to send; reads plaintext on both sides
/// (which also processes TLS 1.3 tickets). Returns the plaintext each side received.
@discardableResult
func pump(_ client: TLSSession, _ server: TLSSession, rounds: Int = 64) -> (client: [UInt8], server: [UInt8]) {
    var toClient: [UInt8] = []
    var toServer: [UInt8] = []
    for _ in 0..<rounds {
        let c = client.takeCiphertext()
        if !c.isEmpty { server.feed(c) }
        _ = server.readPlaintext { toServer.append(contentsOf: $0) }
        let s = server.takeCiphertext()
        if !s.isEmpty { client.feed(s) }
        _ = client.readPlaintext { toClient.append(contentsOf: $0) }
        if c.isEmpty && s.isEmpty && client.pendingCiphertextCount == 0 && server.pendingCiphertextCount == 0 { break }
    }
    return (toClient, toServer)
}

extension TLSHandshakeState {
    var info: TLSConnectionInfo? {
        if case .done(let i) = self { return i }
        return nil
    }

    var failure: TLSFailure? {
        if case .failed(let f) = self { return f }
        return nil
    }
}
