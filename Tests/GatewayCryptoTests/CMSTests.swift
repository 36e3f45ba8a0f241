import Foundation
import GatewayCrypto
import SimulatorPKI
import Testing

/// CMS SignedData verification on its own: the shapes refused before any signature is checked, the
/// roots as the only anchors, and both encodings of `CMSSigner`.
@Suite("CMS SignedData")
struct CMSTests {
    /// A P-384 root and a P-256 signer under it, and a second root that signs nothing here.
    struct PKI {
        let root: X509Certificate
        let other: X509Certificate
        let signer: X509Certificate
        let key: ECPrivateKey
        let rootKey: ECPrivateKey

        init() throws {
            let rootKey = ECPrivateKey(curve: .p384)
            self.rootKey = rootKey
            let name = CertificateBuilder.Name(commonName: "CMS Test Root", organization: "CMS TEST")
            root = try CertificateBuilder(
                subject: name, issuer: name, serialNumber: CertificateBuilder.randomSerialNumber(), notBefore: 1_600_000_000,
                notAfter: 2_000_000_000, subjectKey: rootKey, basicConstraints: .certificateAuthority(pathLength: nil),
                keyUsage: [.keyCertSign, .cRLSign]
            ).sign(with: rootKey)
            let otherKey = ECPrivateKey(curve: .p384)
            other = try CertificateBuilder(
                subject: name, issuer: name, serialNumber: CertificateBuilder.randomSerialNumber(), notBefore: 1_600_000_000,
                notAfter: 2_000_000_000, subjectKey: otherKey, basicConstraints: .certificateAuthority(pathLength: nil),
                keyUsage: [.keyCertSign, .cRLSign]
            ).sign(with: otherKey)
            key = ECPrivateKey(curve: .p256)
            signer = try CertificateBuilder(
                subject: CertificateBuilder.Name(commonName: "CMS Test Signer", organization: "CMS TEST"), issuer: name,
                serialNumber: CertificateBuilder.randomSerialNumber(), notBefore: 1_700_000_000, notAfter: 1_800_000_000, subjectKey: key,
                basicConstraints: .endEntity, keyUsage: [.digitalSignature]
            ).sign(with: rootKey)
        }
    }

    static let at: Int64 = 1_750_000_000
    static let content = Array("SET OF fields".utf8)

    @Test("BER and DER messages verify to the given root only, at an instant inside every validity")
    func encodingsAndRoots() throws {
        let pki = try PKI()
        for encoding in [CMSSigner.Encoding.ber, .der] {
            let signed = try CMSSigner.sign(Self.content, certificate: pki.signer, key: pki.key, chain: [pki.root], encoding: encoding)
            #expect(signed[1] == (encoding == .ber ? 0x80 : 0x82))
            let ok = try CMSSignedDataVerifier(roots: [pki.root]).verify(signed, at: Self.at)
            #expect(ok.content == Self.content)
            #expect(ok.chain.map(\.der) == [pki.signer.der, pki.root.der])
            #expect(try CMSSignedDataVerifier.unverifiedContent(signed) == Self.content)
            // The root inside the message is no anchor: another root refuses it.
            #expect(throws: CMSSignedDataVerifier.Failure.self) {
                try CMSSignedDataVerifier(roots: [pki.other]).verify(signed, at: Self.at)
            }
            do {
                _ = try CMSSignedDataVerifier(roots: [pki.root]).verify(signed, at: 1_900_000_000)
                Issue.record("verified after the signer expired")
            } catch {
                guard case .expired = error else { return #expect(Bool(false), "\(error)") }
            }
        }
    }

    @Test("wrong shapes are malformed: not SignedData, detached, two signers, trailing bytes, empty, too large")
    func shapes() throws {
        let pki = try PKI()
        let verifier = CMSSignedDataVerifier(roots: [pki.root])
        func failure(_ bytes: [UInt8]) -> CMSSignedDataVerifier.Failure? {
            do {
                _ = try verifier.verify(bytes, at: Self.at)
                return nil
            } catch {
                return error
            }
        }
        func isMalformed(_ f: CMSSignedDataVerifier.Failure?, _ saying: String = "") -> Bool {
            if case .malformed(let why)? = f { return saying.isEmpty || why.contains(saying) }
            return false
        }
        let signed = try CMSSigner.sign(Self.content, certificate: pki.signer, key: pki.key, chain: [], encoding: .der)
        #expect(failure(signed) == nil)
        #expect(isMalformed(failure(signed + [0])))
        #expect(isMalformed(failure([])))
        #expect(isMalformed(failure(pki.root.der)))
        #expect(isMalformed(failure([UInt8](repeating: 0x30, count: CMSSignedDataVerifier.maxBytes + 1))))

        // Detached and two-signer messages, and a non-SignedData ContentInfo, made by the openssl binary.
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("cms-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        func file(_ name: String, _ text: String) throws -> String {
            let url = dir.appendingPathComponent(name)
            try text.write(to: url, atomically: true, encoding: .utf8)
            return url.path
        }
        let data = try file("content.bin", "SET OF fields")
        let cert = try file("signer.pem", pki.signer.pem)
        let key = try file("signer-key.pem", pki.key.pkcs8PEM)
        let rootCert = try file("root.pem", pki.root.pem)
        let rootKey = try file("root-key.pem", pki.rootKey.pkcs8PEM)
        func openssl(_ args: [String]) throws -> [UInt8] {
            let out = dir.appendingPathComponent("out-\(UUID().uuidString).der")
            let p = Process()
            p.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
            p.arguments = ["cms"] + args + ["-binary", "-outform", "DER", "-in", data, "-out", out.path]
            try p.run()
            p.waitUntilExit()
            try #require(p.terminationStatus == 0, "openssl cms \(args)")
            return Array(try Data(contentsOf: out))
        }
        let sign = ["-sign", "-noattr", "-signer", cert, "-inkey", key]
        #expect(isMalformed(failure(try openssl(sign)), "detached"))
        #expect(isMalformed(failure(try openssl(sign + ["-nodetach", "-signer", rootCert, "-inkey", rootKey])), "exactly one signer"))
        #expect(isMalformed(failure(try openssl(["-data_create"])), "not SignedData"))
        #expect(failure(try openssl(sign + ["-nodetach"])) == nil)  // the same tool's one-signer message verifies
    }
}
