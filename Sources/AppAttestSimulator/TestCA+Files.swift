import Foundation
import GatewayCrypto
import GatewayWire
import SimulatorPKI

/// Saving a `TestCA` to a directory and loading it back, so that `attest-sim ca` can create one the
/// gateway trusts (`root.pem` in `trust.extra_roots`) and later runs can issue under it.
///
/// Files: `root.pem` (the trust anchor), `intermediate.pem`, `root-key.pem` and `intermediate-key.pem`
/// (unencrypted PKCS#8, mode 0600), `ca.json` (`{"name":…,"leafLifetime":seconds}`); the receipt
/// chain: `receipt-root.pem` (for `trust.extra_receipt_roots`), `receipt-intermediate.pem`,
/// `receipt-signer.pem` and their keys `receipt-root-key.pem`, `receipt-intermediate-key.pem`,
/// `receipt-signer-key.pem` (mode 0600).
/// For tests, benchmarks and the simulator only: these keys are test keys, never Apple's.
extension TestCA {
    /// A CA directory that cannot be written or read back. For tests, benchmarks and the simulator only.
    public struct FileError: Swift.Error, Equatable, Sendable, CustomStringConvertible {
        public let path: String
        public let reason: String

        public init(path: String, reason: String) {
            self.path = path
            self.reason = reason
        }

        public var description: String { "\(path): \(reason)" }
    }

    public static let rootFile = "root.pem"
    public static let intermediateFile = "intermediate.pem"
    public static let rootKeyFile = "root-key.pem"
    public static let intermediateKeyFile = "intermediate-key.pem"
    public static let metadataFile = "ca.json"
    public static let receiptRootFile = "receipt-root.pem"
    public static let receiptIntermediateFile = "receipt-intermediate.pem"
    public static let receiptSignerFile = "receipt-signer.pem"
    public static let receiptRootKeyFile = "receipt-root-key.pem"
    public static let receiptIntermediateKeyFile = "receipt-intermediate-key.pem"
    public static let receiptSignerKeyFile = "receipt-signer-key.pem"
    static let allFiles = [
        rootFile, intermediateFile, rootKeyFile, intermediateKeyFile, metadataFile, receiptRootFile, receiptIntermediateFile,
        receiptSignerFile, receiptRootKeyFile, receiptIntermediateKeyFile, receiptSignerKeyFile,
    ]

    /// Writes the CA into `directory` (created if missing). Refuses, writing nothing, when any of
    /// the CA files already exists there, so an existing CA (trusted by some gateway) is never lost.
    public func write(to directory: URL) throws(FileError) {
        let fm = FileManager.default
        do {
            try fm.createDirectory(at: directory, withIntermediateDirectories: true)
        } catch {
            throw FileError(path: directory.path, reason: "cannot create the directory (\(error.localizedDescription))")
        }
        for f in Self.allFiles where fm.fileExists(atPath: directory.appendingPathComponent(f).path) {
            throw FileError(
                path: directory.appendingPathComponent(f).path, reason: "already exists; refusing to overwrite an existing CA")
        }
        var metaObject = JSONObject()
        metaObject.set("name", name)
        metaObject.set("leafLifetime", Int64(leafLifetime))
        let meta = metaObject.description + "\n"
        let contents: [(String, String, Int)] = [
            (Self.rootFile, root.pem, 0o644), (Self.intermediateFile, intermediate.pem, 0o644),
            (Self.rootKeyFile, rootKey.pkcs8PEM, 0o600), (Self.intermediateKeyFile, intermediateKey.pkcs8PEM, 0o600),
            (Self.metadataFile, meta, 0o644),
            (Self.receiptRootFile, receiptRoot.pem, 0o644), (Self.receiptIntermediateFile, receiptIntermediate.pem, 0o644),
            (Self.receiptSignerFile, receiptSigner.pem, 0o644), (Self.receiptRootKeyFile, receiptRootKey.pkcs8PEM, 0o600),
            (Self.receiptIntermediateKeyFile, receiptIntermediateKey.pkcs8PEM, 0o600),
            (Self.receiptSignerKeyFile, receiptSignerKey.pkcs8PEM, 0o600),
        ]
        for (file, text, mode) in contents {
            let url = directory.appendingPathComponent(file)
            guard fm.createFile(atPath: url.path, contents: Data(text.utf8), attributes: [.posixPermissions: mode]) else {
                throw FileError(path: url.path, reason: "cannot write the file")
            }
        }
    }

    /// Reads a CA written by `write(to:)` and checks that its parts fit: the intermediate chains to
    /// the root, and each private key signs certificates that verify under it; the receipt chain
    /// likewise, and a receipt signed with its key verifies under its root. A directory written
    /// before receipts existed lacks the receipt files: create a new CA.
    public static func load(from directory: URL) throws(FileError) -> TestCA {
        func read(_ file: String) throws(FileError) -> String {
            let url = directory.appendingPathComponent(file)
            guard let data = FileManager.default.contents(atPath: url.path) else {
                throw FileError(path: url.path, reason: "cannot read the file (create the CA with `attest-sim ca --out DIR`)")
            }
            return String(decoding: data, as: UTF8.self)
        }
        func certificate(_ file: String) throws(FileError) -> X509Certificate {
            do {
                let certs = try X509Certificate.parsePEM(try read(file))
                guard certs.count == 1 else { throw FileError(path: file, reason: "holds \(certs.count) certificates, not 1") }
                return certs[0]
            } catch let e as FileError {
                throw e
            } catch {
                throw FileError(path: directory.appendingPathComponent(file).path, reason: "\(error)")
            }
        }
        func key(_ file: String, _ curve: ECPrivateKey.Curve = .p384) throws(FileError) -> ECPrivateKey {
            let text = try read(file)
            do {
                let k = try ECPrivateKey(pem: text)
                guard k.curve == curve else { throw FileError(path: file, reason: "the key must be \(curve.rawValue)") }
                return k
            } catch let e as FileError {
                throw FileError(path: directory.appendingPathComponent(e.path).path, reason: e.reason)
            } catch {
                throw FileError(path: directory.appendingPathComponent(file).path, reason: "\(error)")
            }
        }
        let metaPath = directory.appendingPathComponent(metadataFile).path
        let metaText = try read(metadataFile)
        guard let meta = (try? JSONSerialization.jsonObject(with: Data(metaText.utf8))) as? [String: Any],
            let name = meta["name"] as? String, !name.isEmpty, let lifetime = (meta["leafLifetime"] as? NSNumber)?.int64Value,
            lifetime > 0
        else {
            throw FileError(path: metaPath, reason: "expected {\"name\":<text>,\"leafLifetime\":<seconds > 0>}")
        }
        guard FileManager.default.fileExists(atPath: directory.appendingPathComponent(receiptRootFile).path) else {
            throw FileError(
                path: directory.appendingPathComponent(receiptRootFile).path,
                reason: "missing: this CA was made before simulated receipts; create a new one with `attest-sim ca --out DIR`")
        }
        let receipt = ReceiptChain(
            rootKey: try key(receiptRootKeyFile), intermediateKey: try key(receiptIntermediateKeyFile, .p256),
            signerKey: try key(receiptSignerKeyFile, .p256), root: try certificate(receiptRootFile),
            intermediate: try certificate(receiptIntermediateFile), signer: try certificate(receiptSignerFile))
        let ca = TestCA(
            name: name, rootKey: try key(rootKeyFile), intermediateKey: try key(intermediateKeyFile),
            root: try certificate(rootFile), intermediate: try certificate(intermediateFile),
            leafLifetime: TimeInterval(lifetime), receipt: receipt)
        try ca.checkConsistency(directory: directory)
        return ca
    }

    /// The intermediate chains to the root; a certificate signed with the root key verifies under
    /// the root; a credential certificate signed with the intermediate key verifies through it.
    func checkConsistency(directory: URL) throws(FileError) {
        let verifier = X509ChainVerifier(roots: [root])
        let now = Date().timeIntervalSince1970
        let path = directory.path
        do {
            try verifier.verify(leaf: intermediate, intermediates: [], at: now)
        } catch {
            throw FileError(path: path, reason: "\(Self.intermediateFile) does not chain to \(Self.rootFile) now: \(error)")
        }
        do {
            let probe = ECPrivateKey(curve: .p384)
            let cert = try CertificateBuilder(
                subject: CertificateBuilder.Name(commonName: "\(name) key check", organization: name, state: "Test"),
                issuer: rootName, serialNumber: CertificateBuilder.randomSerialNumber(),
                notBefore: Int64(now) - 60, notAfter: Int64(now) + 3600, subjectKey: probe,
                basicConstraints: .endEntity, keyUsage: [.digitalSignature]
            ).sign(with: rootKey)
            try verifier.verify(leaf: cert, intermediates: [], at: now)
        } catch {
            throw FileError(path: path, reason: "\(Self.rootKeyFile) is not the key of \(Self.rootFile): \(error)")
        }
        do {
            let device = ECPrivateKey(curve: .p256)
            let leaf = try issueCredentialCertificate(
                for: device.p256PublicKey!, nonce: [UInt8](repeating: 0, count: 32),
                validity: Validity(from: Date(timeIntervalSince1970: now - 60), lifetime: 3600))
            try verifier.verify(leaf: leaf, intermediates: [intermediate], at: now)
        } catch {
            throw FileError(
                path: path, reason: "\(Self.intermediateKeyFile) is not the key of \(Self.intermediateFile): \(error)")
        }
        try checkReceiptChain(directory: directory, now: now)
    }

    /// The receipt intermediate chains to the receipt root; its key issues signers that chain; the
    /// signer's key signs receipts that verify under the receipt root.
    func checkReceiptChain(directory: URL, now: Double) throws(FileError) {
        let path = directory.path
        let verifier = X509ChainVerifier(roots: [receiptRoot])
        do {
            try verifier.verify(leaf: receiptIntermediate, intermediates: [], at: now)
            try verifier.verify(leaf: receiptSigner, intermediates: [receiptIntermediate], at: now)
        } catch {
            throw FileError(path: path, reason: "the receipt chain does not verify now: \(error)")
        }
        do {
            let probe = try Self.issueReceiptSigner(
                name: name, key: ECPrivateKey(curve: .p256),
                validity: Validity(from: Date(timeIntervalSince1970: now - 60), lifetime: 3600),
                intermediateKey: receiptIntermediateKey)
            try verifier.verify(leaf: probe, intermediates: [receiptIntermediate], at: now)
        } catch {
            throw FileError(
                path: path, reason: "\(Self.receiptIntermediateKeyFile) is not the key of \(Self.receiptIntermediateFile): \(error)")
        }
        do {
            let probe = ECPrivateKey(curve: .p384)
            let cert = try CertificateBuilder(
                subject: CertificateBuilder.Name(commonName: "\(name) receipt key check", organization: name, state: "Test"),
                issuer: Self.receiptNames(name).root, serialNumber: CertificateBuilder.randomSerialNumber(),
                notBefore: Int64(now) - 60, notAfter: Int64(now) + 3600, subjectKey: probe,
                basicConstraints: .endEntity, keyUsage: [.digitalSignature]
            ).sign(with: receiptRootKey)
            try verifier.verify(leaf: cert, intermediates: [], at: now)
        } catch {
            throw FileError(path: path, reason: "\(Self.receiptRootKeyFile) is not the key of \(Self.receiptRootFile): \(error)")
        }
        do {
            let signed = try issueReceipt(payload: [0x31, 0x00])
            _ = try CMSSignedDataVerifier(roots: [receiptRoot]).verify(signed, at: Int64(now))
        } catch {
            throw FileError(
                path: path,
                reason: "\(Self.receiptSignerKeyFile) does not sign receipts that verify under \(Self.receiptRootFile): \(error)")
        }
    }
}
