import Foundation
import GatewayCrypto
import GatewayWire

/// Android hardware key attestation, checked the way Google's verifier checks it
/// (android/keyattestation; docs/android.md), each step a function, the first failure thrown:
///
/// 1. the chain's shape: 3 to 10 DER certificates, leaf first, root last (`malformed`);
/// 2. every link: certificate i names certificate i+1 as its issuer and is signed by its key —
///    RSA or EC, verified one link at a time: OpenSSL's chain building refuses real chains
///    (intermediates without CA:TRUE, leaves issued by an app's attestation key) (`bad_signature`);
/// 3. the last certificate's key is a pinned root: Google's or one the caller lists (`chain_untrusted`);
/// 4. the leading certificates, and only they, carry a KeyDescription: the leaf and its
///    attest-key certificates, which the device made (`malformed`);
/// 5. every certificate a CA issued is valid at the instant, bounds inclusive; those the device
///    made are not looked at, as the device sets their dates (1970 to 2048 or 2106, some already
///    expired in 1970) (`certificate_expired`, `certificate_not_yet_valid`);
/// 6. no certificate is in the attestation status list, when one is given (`revoked`);
/// 7. the KeyDescriptions parse (`malformed`); an attest-key certificate's key has the ATTEST_KEY
///    purpose, else its signature below is a forged link (`bad_signature`);
/// 8. the leaf's challenge is the one issued, compared in constant time (`challenge_mismatch`);
/// 9. hardware-backed: neither security level is Software, for the leaf and its attest keys (`software_key`).
///
/// Pure: the chain, the challenge, the instant and the status list come in; no clock, no file, no
/// network. Roots are fixed when the verifier is made.
public struct AndroidAttestationVerifier: Sendable {
    public static let minChainLength = 3
    public static let maxChainLength = 10
    /// ML-DSA-87 leaves are the largest real ones (about 4 KiB).
    public static let maxCertificateSize = 16 * 1024

    public let anchors: [AndroidTrustAnchor]

    /// - Parameter extraRoots: roots trusted besides Google's (tests, the simulator), pinned by key.
    public init(extraRoots: [X509Certificate] = []) {
        anchors = AndroidTrustAnchor.google + extraRoots.map(AndroidTrustAnchor.init(certificate:))
    }

    /// Exactly these anchors, Google's not included (tests: none, to see every chain refused).
    public init(anchors: [AndroidTrustAnchor]) { self.anchors = anchors }

    /// Verifies a Keystore chain (`KeyStore.getCertificateChain`, leaf first, DER) for `challenge`
    /// at `instant`, refusing any certificate `statusList` lists.
    public func verify(chain der: [[UInt8]], challenge: [UInt8], at instant: Date, statusList: AttestationStatusList? = nil)
        throws(AndroidAttestError) -> AndroidAttestation
    {
        let chain = try parseChain(der)
        try checkLinks(chain)
        let anchor = try checkRoot(chain)
        let deviceCount = try countDeviceCertificates(chain)
        try checkValidity(chain, deviceCount: deviceCount, at: instant)
        if let statusList { try checkStatus(chain, statusList) }
        let (leafDescription, attestKeys) = try readKeyDescriptions(chain, deviceCount: deviceCount)
        try checkChallenge(leafDescription, challenge)
        try checkHardware(leafDescription, attestKeys: attestKeys)
        let spki = try SubjectPublicKeyInfo(certificate: chain[0])
        return AndroidAttestation(
            keyDescription: leafDescription, securityLevel: leafDescription.securityLevel,
            applicationID: leafDescription.softwareEnforced.attestationApplicationID
                ?? leafDescription.hardwareEnforced.attestationApplicationID,
            rootOfTrust: leafDescription.hardwareEnforced.rootOfTrust, osVersion: leafDescription.value(\.osVersion),
            osPatchLevel: leafDescription.value(\.osPatchLevel), vendorPatchLevel: leafDescription.value(\.vendorPatchLevel),
            bootPatchLevel: leafDescription.value(\.bootPatchLevel), key: KeyCharacteristics(leafDescription),
            subjectPublicKeyInfo: spki, publicKey: chain[0].p256PublicKey(), keyID: SHA256.hash(spki.der), anchor: anchor,
            attestKeyCertificateCount: deviceCount - 1, chain: chain)
    }

    /// 1. The chain's shape: DER certificates, as many as a Keystore chain has.
    func parseChain(_ der: [[UInt8]]) throws(AndroidAttestError) -> [X509Certificate] {
        guard (Self.minChainLength...Self.maxChainLength).contains(der.count) else {
            throw AndroidAttestError(
                .malformed,
                "a chain of \(der.count) certificate(s); a Keystore chain has \(Self.minChainLength) to \(Self.maxChainLength), leaf first, root last"
            )
        }
        var out: [X509Certificate] = []
        for (i, bytes) in der.enumerated() {
            guard bytes.count <= Self.maxCertificateSize else {
                throw AndroidAttestError(.malformed, "certificate \(i) of \(bytes.count) bytes exceeds \(Self.maxCertificateSize)")
            }
            do {
                out.append(try X509Certificate(der: bytes))
            } catch {
                throw AndroidAttestError(.malformed, "certificate \(i): \(error.reason)")
            }
        }
        return out
    }

    /// 2. Each certificate names the next as its issuer and is signed by its key.
    func checkLinks(_ chain: [X509Certificate]) throws(AndroidAttestError) {
        for i in 0..<(chain.count - 1) {
            let cert = chain[i], issuer = chain[i + 1]
            guard cert.issuerNameMatchesSubject(of: issuer) else {
                throw AndroidAttestError(
                    .badSignature, "certificate \(i)'s issuer (\(cert.issuer)) is not certificate \(i + 1) (\(issuer.subject))")
            }
            switch cert.signatureCheck(issuer: issuer) {
            case .valid: continue
            case .invalid(let why), .unusableIssuerKey(let why):
                throw AndroidAttestError(.badSignature, "certificate \(i) (\(cert.subject)) is not signed by certificate \(i + 1): \(why)")
            }
        }
    }

    /// 3. The last certificate carries a pinned root key.
    func checkRoot(_ chain: [X509Certificate]) throws(AndroidAttestError) -> AndroidTrustAnchor {
        let root = chain[chain.count - 1]
        let pin = SHA256.hash(root.subjectPublicKeyInfoDER)
        guard let anchor = anchors.first(where: { ConstantTime.equals($0.spkiSHA256, pin) }) else {
            let pinned = anchors.count > AndroidTrustAnchor.google.count ? "Google's or an extra root" : "Google's"
            throw AndroidAttestError(
                .chainUntrusted,
                "the chain ends at \(root.subject), whose key (SHA-256 \(Hex.encode(pin))) is not a pinned root (\(pinned))")
        }
        return anchor
    }

    /// 4. How many leading certificates the device made (they carry a KeyDescription): the leaf,
    /// then its attest-key certificates. No certificate after them may carry one.
    func countDeviceCertificates(_ chain: [X509Certificate]) throws(AndroidAttestError) -> Int {
        var count = 0
        var seenCA = false
        for (i, cert) in chain.enumerated() {
            switch cert.extension(oid: KeyDescription.oid) {
            case .duplicated:
                throw AndroidAttestError(.malformed, "certificate \(i) carries the KeyDescription extension twice")
            case .present:
                guard !seenCA else {
                    throw AndroidAttestError(
                        .malformed, "certificate \(i) (\(cert.subject)) carries a KeyDescription above a CA certificate")
                }
                count += 1
            case .absent:
                seenCA = true
            }
        }
        guard count > 0 else {
            throw AndroidAttestError(.malformed, "the leaf has no KeyDescription extension (\(KeyDescription.oid))")
        }
        guard count < chain.count else {
            throw AndroidAttestError(.malformed, "every certificate carries a KeyDescription, the root too")
        }
        return count
    }

    /// 5. Every CA-issued certificate below the root is valid at the instant (bounds inclusive;
    /// a fractional instant compared exactly, as `X509ChainVerifier` does).
    func checkValidity(_ chain: [X509Certificate], deviceCount: Int, at instant: Date) throws(AndroidAttestError) {
        let t = instant.timeIntervalSince1970
        let floorT = Int64(t.rounded(.down)), ceilT = Int64(t.rounded(.up))
        for i in deviceCount..<(chain.count - 1) {
            let cert = chain[i]
            if cert.notBefore > floorT {
                throw AndroidAttestError(
                    .certificateNotYetValid,
                    "certificate \(i) (\(cert.subject)) is valid from \(Self.iso(cert.notBefore)), after \(instant.formatted(.iso8601))")
            }
            if cert.notAfter < ceilT {
                throw AndroidAttestError(
                    .certificateExpired,
                    "certificate \(i) (\(cert.subject)) expired at \(Self.iso(cert.notAfter)), before \(instant.formatted(.iso8601))")
            }
        }
    }

    /// 6. No certificate of the chain is listed.
    func checkStatus(_ chain: [X509Certificate], _ list: AttestationStatusList) throws(AndroidAttestError) {
        for (i, cert) in chain.enumerated() {
            guard let (key, entry) = list.entry(serial: cert.serialNumber) else { continue }
            throw AndroidAttestError(
                .revoked,
                "certificate \(i) (\(cert.subject), serial \(key)) is listed \(entry.status)\(entry.reason.map { " (\($0))" } ?? "") in the attestation status list"
            )
        }
    }

    /// 7. The leaf's KeyDescription and its attest keys'; each attest key may attest.
    func readKeyDescriptions(_ chain: [X509Certificate], deviceCount: Int) throws(AndroidAttestError)
        -> (leaf: KeyDescription, attestKeys: [KeyDescription])
    {
        var descriptions: [KeyDescription] = []
        for i in 0..<deviceCount {
            guard case .present(let value, _) = chain[i].extension(oid: KeyDescription.oid) else { continue }
            do {
                descriptions.append(try KeyDescription.parse(value))
            } catch {
                throw AndroidAttestError(.malformed, i == 0 ? error.detail : "certificate \(i): \(error.detail)")
            }
        }
        for (i, d) in descriptions.enumerated().dropFirst()
        where !((d.hardwareEnforced.purposes ?? []) + (d.softwareEnforced.purposes ?? [])).contains(KeyCharacteristics.Purpose.attestKey) {
            // A key without ATTEST_KEY signing a KeyDescription is a forged link (Google's
            // fake_cert_chain_with_attest_keys: an app's SIGN key issuing a "leaf").
            throw AndroidAttestError(
                .badSignature,
                "certificate \(i - 1) is signed by certificate \(i), whose key is not an attestation key (no ATTEST_KEY purpose)")
        }
        return (descriptions[0], Array(descriptions.dropFirst()))
    }

    /// 8. The challenge the server issued is the one the Keystore signed into the leaf.
    func checkChallenge(_ d: KeyDescription, _ challenge: [UInt8]) throws(AndroidAttestError) {
        guard ConstantTime.equals(d.attestationChallenge, challenge) else {
            throw AndroidAttestError(
                .challengeMismatch,
                "the leaf's attestation challenge (\(d.attestationChallenge.count) bytes, SHA-256 \(Hex.encode(SHA256.hash(d.attestationChallenge).prefix(8)))…) is not the challenge issued"
            )
        }
    }

    /// 9. Secure hardware made the key and signed its attestation.
    func checkHardware(_ d: KeyDescription, attestKeys: [KeyDescription]) throws(AndroidAttestError) {
        for (i, k) in ([d] + attestKeys).enumerated() where k.securityLevel == .software {
            throw AndroidAttestError(
                .softwareKey,
                "\(i == 0 ? "the key" : "attest key \(i)") is software-backed: attestation \(k.attestationSecurityLevel.name), KeyMint \(k.keyMintSecurityLevel.name)"
            )
        }
    }

    static func iso(_ epoch: Int64) -> String { Date(timeIntervalSince1970: TimeInterval(epoch)).formatted(.iso8601) }
}
