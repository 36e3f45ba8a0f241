import AndroidAttest
import Foundation
import GatewayCrypto
import GatewayStore
import GatewayWire

/// `POST /v1/attest/register` with `"platform": "android"` (docs/android.md, "Registration"):
/// `{"platform":"android","keyId","attestation":[certificates, base64 DER, leaf first],"challenge"}`
/// → the chain verified to a pinned Google root (`trust.extra_android_roots` in tests) at the
/// instant, none of its certificates in the status list, the KeyDescription's challenge equal to
/// the UTF-8 bytes of the challenge as issued, hardware-backed → the app's Android policy (package
/// and signer, security level, bootloader, verified boot, patch level, an EC P-256 signing key) →
/// the key id is SHA-256 of the leaf's SubjectPublicKeyInfo → the same atomic store step as App
/// Attest's (challenge consumed, key stored with app id `android:<package>` and counter 0).
extension Registrar {
    static func registerAndroid(
        _ object: [String: Any], policy: AttestPolicy, statusList: AttestationStatusList?, store: any AttestStore,
        nowMillis: Int64, completion: @escaping @Sendable (RegistrationResult) -> Void
    ) {
        let fields: [String: String]
        switch JSONBody.strings(object, required: ["keyId", "challenge"], except: ["attestation"]) {
        case .failure(let e): return completion(.refused(e))
        case .success(let f): fields = f
        }
        let challengeText = fields["challenge"]!
        let keyID: KeyID, keyEncoding: BinaryEncoding
        switch readKeyID(fields["keyId"]!, expected: "base64 of the 32-byte key id (SHA-256 of the leaf's public key)") {
        case .failure(let e): return completion(.refused(e))
        case .success(let k): (keyID, keyEncoding) = k
        }
        guard let items = object["attestation"] else {
            return completion(.refused(Explanation(step: "body", error: .missingField, fields: [("field", "attestation")])))
        }
        let expected = "an array of base64 DER certificates, leaf first"
        guard let texts = items as? [Any], texts.count <= AndroidAttestationVerifier.maxChainLength else {
            return completion(
                .refused(Explanation(step: "body", error: .badJSON, fields: [("field", "attestation"), ("expected", expected)])))
        }
        var chain: [[UInt8]] = []
        for (i, item) in texts.enumerated() {
            guard let text = item as? String, let der = try? Base64.decode(text) else {
                return completion(
                    .refused(
                        Explanation(
                            step: "body", error: .malformed, fields: [("field", "attestation[\(i)]"), ("expected", expected)])))
            }
            chain.append(der)
        }
        guard let token = ChallengeText.decode(challengeText) else {
            return completion(
                .refused(
                    Explanation(
                        step: "body", error: .challengeUnknown,
                        fields: [("challenge", Explanation.redact(challengeText)), ("reason", "not base64url of 16 to 64 bytes")])))
        }
        let base: [(String, String)] = [("key_id", keyID.description), ("key_id_encoding", keyEncoding.rawValue), ("platform", "android")]
        let checked: CheckedAndroidAttestation
        switch checkAndroid(
            chain: chain, keyID: keyID, challenge: Array(challengeText.utf8), policy: policy, statusList: statusList,
            at: Date(timeIntervalSince1970: Double(nowMillis) / 1000), fields: base)
        {
        case .failure(let e): return completion(.refused(e))
        case .success(let c): checked = c
        }
        let record = DeviceKeyRecord(
            keyID: keyID, publicKey: checked.publicKey.x962, counter: 0, appID: checked.app.appID, environment: .production,
            validationCategory: nil, bundleVersion: nil, firstSeenMillis: nowMillis, lastSeenMillis: nowMillis)
        let registration = Registration(record: record, receipt: [], challenge: token)
        commit(
            registration, refusalFields: checked.fields, challengeText: challengeText, store: store, nowMillis: nowMillis,
            completion: completion
        ) { existing in
            RegisteredKey(
                keyID: keyID, environment: .production, appID: record.appID, existing: existing, receipt: nil, keyAccessControl: nil)
        }
    }

    /// What an Android registration establishes before the store step.
    public struct CheckedAndroidAttestation: Sendable {
        public let attestation: AndroidAttestation
        public let app: AttestPolicy.AndroidApp
        /// The leaf's key, EC P-256 (the policy requires it).
        public let publicKey: P256PublicKey
        /// The fields an `explain` entry of a later refusal starts with.
        public let fields: [(String, String)]
    }

    /// Every check of an Android registration that needs no store, in order: the verdict
    /// (`AndroidAttestationVerifier`: chain, root, validity, status list, challenge, hardware), the
    /// key id, an app listing one of the attested packages, that app's policy. Pure.
    public static func checkAndroid(
        chain: [[UInt8]], keyID: KeyID, challenge: [UInt8], policy: AttestPolicy, statusList: AttestationStatusList?, at instant: Date,
        fields: [(String, String)] = []
    ) -> Result<CheckedAndroidAttestation, Explanation> {
        var base = fields
        let attestation: AndroidAttestation
        do {
            attestation = try policy.androidVerifier.verify(chain: chain, challenge: challenge, at: instant, statusList: statusList)
        } catch {
            return .failure(Explanation(step: "attestation", error: GateError(error), fields: base + [("detail", error.detail)]))
        }
        base.append(("security_level", attestation.securityLevel.name))
        guard ConstantTime.equals(attestation.keyID, keyID.bytes) else {
            return .failure(
                Explanation(
                    step: "attestation", error: .verification(.keyIDMismatch),
                    fields: base + [("detail", "keyId is not SHA-256 of the leaf certificate's SubjectPublicKeyInfo")]))
        }
        guard let app = attestation.packageNames.lazy.compactMap({ policy.androidApps[$0] }).first else {
            return .failure(
                Explanation(
                    step: "app_policy", error: .appNotAllowed,
                    fields: base + [("packages", attestation.packageNames.prefix(8).joined(separator: ","))]))
        }
        base.append(("app_id", app.appID))
        do {
            try app.policy.check(attestation)
        } catch {
            return .failure(Explanation(step: "app_policy", error: GateError(error), fields: base + [("detail", error.detail)]))
        }
        guard let publicKey = attestation.publicKey else {
            // The policy requires an EC P-256 key; kept as a check so that no path stores another.
            return .failure(
                Explanation(
                    step: "app_policy", error: .android(.unsupportedKey), fields: base + [("detail", "the leaf's key is not EC P-256")]))
        }
        return .success(CheckedAndroidAttestation(attestation: attestation, app: app, publicKey: publicKey, fields: base))
    }
}
