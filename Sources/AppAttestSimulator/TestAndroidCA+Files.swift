import AndroidAttest
import Foundation
import GatewayCrypto
import GatewayWire
import SimulatorPKI

/// Saving a `TestAndroidCA` to a directory (the one `attest-sim ca` makes, beside the App Attest CA)
/// and loading it back, so that `attest-sim run --platform android` issues under the root a gateway
/// trusts (`android-root.pem` in `trust.extra_android_roots`), and `attest-sim google` lists the
/// CA's revoked batch.
///
/// Files: `android-root.pem`, `android-intermediate.pem`, their keys `android-root-key.pem` and
/// `android-intermediate-key.pem` (unencrypted PKCS#8, mode 0600), `android-ca.json` (`{"name":…}`),
/// and the revoked batch: `android-revoked-batch.pem` (an attestation certificate of the CA, TEE) and
/// its key `android-revoked-batch-key.pem` (mode 0600).
/// For tests, benchmarks and the simulator only: these keys are test keys, never Google's.
extension TestAndroidCA {
    /// A batch of devices sharing one attestation key and certificate, whose certificate's serial
    /// `attest-sim google` lists as REVOKED from its start: every device made with it
    /// (`SimulatedAndroidDevice(ca:securityLevel:attestationKey:attestationCertificate:)`) has a
    /// chain a gateway that fetched the list refuses with `revoked`.
    public struct RevokedBatch: Sendable {
        public let key: ECPrivateKey
        public let certificate: X509Certificate

        public init(key: ECPrivateKey, certificate: X509Certificate) {
            self.key = key
            self.certificate = certificate
        }

        /// The certificate's serial as the status list keys it: lowercase hex, no leading zeros.
        public var serial: String { TestAndroidCA.statusListSerial(certificate) }

        /// A device of the batch (TEE, a fresh Keystore key).
        public func device(ca: TestAndroidCA) -> SimulatedAndroidDevice {
            SimulatedAndroidDevice(ca: ca, securityLevel: .trustedEnvironment, attestationKey: key, attestationCertificate: certificate)
        }
    }

    public static let rootFile = "android-root.pem"
    public static let intermediateFile = "android-intermediate.pem"
    public static let rootKeyFile = "android-root-key.pem"
    public static let intermediateKeyFile = "android-intermediate-key.pem"
    public static let metadataFile = "android-ca.json"
    public static let revokedBatchFile = "android-revoked-batch.pem"
    public static let revokedBatchKeyFile = "android-revoked-batch-key.pem"
    static let allFiles = [
        rootFile, intermediateFile, rootKeyFile, intermediateKeyFile, metadataFile, revokedBatchFile, revokedBatchKeyFile,
    ]

    /// A serial as the status list keys it: lowercase hex without leading zeros ("0" for zero).
    public static func statusListSerial(_ certificate: X509Certificate) -> String {
        AttestationStatusList.hex(certificate.serialNumber.magnitude)
    }

    /// A new revoked batch: an attestation certificate (TEE) for a fresh key.
    public func issueRevokedBatch() throws(CertificateBuilder.Error) -> RevokedBatch {
        let key = ECPrivateKey(curve: .p256)
        return RevokedBatch(
            key: key,
            certificate: try issueAttestationCertificate(for: key, securityLevel: .trustedEnvironment, validity: TestCA.defaultValidity))
    }

    /// Whether `directory` holds an Android CA (its root file).
    public static func exists(in directory: URL) -> Bool {
        FileManager.default.fileExists(atPath: directory.appendingPathComponent(rootFile).path)
    }

    /// Writes the CA and its revoked batch into `directory` (created if missing). Refuses, writing
    /// nothing, when any of the files already exists there.
    public func write(to directory: URL, revokedBatch: RevokedBatch) throws(TestCA.FileError) {
        let fm = FileManager.default
        do {
            try fm.createDirectory(at: directory, withIntermediateDirectories: true)
        } catch {
            throw TestCA.FileError(path: directory.path, reason: "cannot create the directory (\(error.localizedDescription))")
        }
        for f in Self.allFiles where fm.fileExists(atPath: directory.appendingPathComponent(f).path) {
            throw TestCA.FileError(
                path: directory.appendingPathComponent(f).path, reason: "already exists; refusing to overwrite an existing CA")
        }
        var meta = JSONObject()
        meta.set("name", name)
        let contents: [(String, String, Int)] = [
            (Self.rootFile, root.pem, 0o644), (Self.intermediateFile, intermediate.pem, 0o644),
            (Self.rootKeyFile, rootKey.pkcs8PEM, 0o600), (Self.intermediateKeyFile, intermediateKey.pkcs8PEM, 0o600),
            (Self.metadataFile, meta.description + "\n", 0o644),
            (Self.revokedBatchFile, revokedBatch.certificate.pem, 0o644), (Self.revokedBatchKeyFile, revokedBatch.key.pkcs8PEM, 0o600),
        ]
        for (file, text, mode) in contents {
            let url = directory.appendingPathComponent(file)
            guard fm.createFile(atPath: url.path, contents: Data(text.utf8), attributes: [.posixPermissions: mode]) else {
                throw TestCA.FileError(path: url.path, reason: "cannot write the file")
            }
        }
    }

    /// Reads a CA written by `write(to:revokedBatch:)` and checks that its parts fit: the
    /// intermediate chains to the root, each key signs what verifies under its certificate, and the
    /// revoked batch's certificate chains through the intermediate and is its key's.
    public static func load(from directory: URL) throws(TestCA.FileError) -> (ca: TestAndroidCA, revokedBatch: RevokedBatch) {
        func path(_ file: String) -> String { directory.appendingPathComponent(file).path }
        func read(_ file: String) throws(TestCA.FileError) -> String {
            guard let data = FileManager.default.contents(atPath: path(file)) else {
                throw TestCA.FileError(
                    path: path(file),
                    reason:
                        "cannot read the file (a CA made before Android support: add the Android CA with `attest-sim ca --out DIR --reuse`)"
                )
            }
            return String(decoding: data, as: UTF8.self)
        }
        func certificate(_ file: String) throws(TestCA.FileError) -> X509Certificate {
            let text = try read(file)
            do {
                let certs = try X509Certificate.parsePEM(text)
                guard certs.count == 1 else { throw TestCA.FileError(path: path(file), reason: "holds \(certs.count) certificates, not 1") }
                return certs[0]
            } catch let e as TestCA.FileError {
                throw e
            } catch {
                throw TestCA.FileError(path: path(file), reason: "\(error)")
            }
        }
        func key(_ file: String, _ curve: ECPrivateKey.Curve) throws(TestCA.FileError) -> ECPrivateKey {
            let text = try read(file)
            let k: ECPrivateKey
            do {
                k = try ECPrivateKey(pem: text)
            } catch {
                throw TestCA.FileError(path: path(file), reason: "\(error)")
            }
            guard k.curve == curve else { throw TestCA.FileError(path: path(file), reason: "the key must be \(curve.rawValue)") }
            return k
        }
        guard exists(in: directory) else {
            throw TestCA.FileError(
                path: path(rootFile),
                reason: "missing: a CA made before Android support; add the Android CA with `attest-sim ca --out DIR --reuse`")
        }
        let metaText = try read(metadataFile)
        guard let meta = (try? JSONSerialization.jsonObject(with: Data(metaText.utf8))) as? [String: Any],
            let name = meta["name"] as? String, !name.isEmpty
        else {
            throw TestCA.FileError(path: path(metadataFile), reason: "expected {\"name\":<text>}")
        }
        let ca = TestAndroidCA(
            name: name, rootKey: try key(rootKeyFile, .p384), intermediateKey: try key(intermediateKeyFile, .p384),
            root: try certificate(rootFile), intermediate: try certificate(intermediateFile))
        let batch = RevokedBatch(key: try key(revokedBatchKeyFile, .p256), certificate: try certificate(revokedBatchFile))
        try ca.checkConsistency(directory: directory, revokedBatch: batch)
        return (ca, batch)
    }

    /// The intermediate chains to the root; the root key signs what verifies under the root; an
    /// attestation certificate signed with the intermediate key verifies through it; the revoked
    /// batch chains through the intermediate and its key is its certificate's.
    func checkConsistency(directory: URL, revokedBatch: RevokedBatch) throws(TestCA.FileError) {
        let verifier = X509ChainVerifier(roots: [root])
        let now = Date().timeIntervalSince1970
        let path = directory.path
        do {
            try verifier.verify(leaf: intermediate, intermediates: [], at: now)
        } catch {
            throw TestCA.FileError(path: path, reason: "\(Self.intermediateFile) does not chain to \(Self.rootFile) now: \(error)")
        }
        do {
            let probe = ECPrivateKey(curve: .p384)
            let cert = try CertificateBuilder(
                subject: CertificateBuilder.Name(commonName: "\(name) Android key check", organization: name),
                issuer: rootName, serialNumber: CertificateBuilder.randomSerialNumber(),
                notBefore: Int64(now) - 60, notAfter: Int64(now) + 3600, subjectKey: probe,
                basicConstraints: .endEntity, keyUsage: [.digitalSignature]
            ).sign(with: rootKey)
            try verifier.verify(leaf: cert, intermediates: [], at: now)
        } catch {
            throw TestCA.FileError(path: path, reason: "\(Self.rootKeyFile) is not the key of \(Self.rootFile): \(error)")
        }
        do {
            let cert = try issueAttestationCertificate(
                for: ECPrivateKey(curve: .p256), securityLevel: .trustedEnvironment,
                validity: TestCA.Validity(from: Date(timeIntervalSince1970: now - 60), lifetime: 3600))
            try verifier.verify(leaf: cert, intermediates: [intermediate], at: now)
        } catch {
            throw TestCA.FileError(path: path, reason: "\(Self.intermediateKeyFile) is not the key of \(Self.intermediateFile): \(error)")
        }
        do {
            try verifier.verify(leaf: revokedBatch.certificate, intermediates: [intermediate], at: now)
        } catch {
            throw TestCA.FileError(path: path, reason: "\(Self.revokedBatchFile) does not chain to \(Self.rootFile) now: \(error)")
        }
        guard revokedBatch.certificate.p256PublicKey()?.x962 == revokedBatch.key.publicKeyX962 else {
            throw TestCA.FileError(path: path, reason: "\(Self.revokedBatchKeyFile) is not the key of \(Self.revokedBatchFile)")
        }
    }
}
