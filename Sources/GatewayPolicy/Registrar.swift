import AndroidAttest
import AppAttest
import Foundation
import GatewayCrypto
import GatewayStore
import GatewayWire

/// `POST /v1/attest/register`: `{"keyId","attestation","challenge"}` → Apple's attestation
/// algorithm with clientDataHash = SHA256(UTF-8 bytes of the challenge as issued) → the app's policy
/// (environment, iOS 27 signals, macOS key policy) → the attestation's receipt (Apple's receipt
/// checks, unless the app ignores receipts) → one atomic store step (challenge consumed, key
/// stored) that completes once durable.
///
/// Chain verification costs milliseconds: the gateway runs this off its event loops.
public enum Registrar {
    /// Bodies larger than this are refused before parsing (an attestation is a few KiB).
    public static let maxBody = 128 * 1024
    /// `Retry-After` of a `key_capacity` refusal: keys are freed by idle eviction or by an operator.
    public static let keyCapacityRetryAfterSeconds = 600

    /// The challenge a registration body presents, when it parses as one (the registration budget
    /// looks it up before the attestation is verified); nil otherwise (`register` then refuses it).
    public static func presentedChallenge(body: [UInt8]) -> ChallengeToken? {
        guard case .success(let object) = JSONBody.object(body), let text = object["challenge"] as? String else { return nil }
        return ChallengeText.decode(text)
    }

    /// - Parameter androidStatusList: the latest attestation status list, for Android registrations
    ///   (nil: none fetched yet; no certificate is then known revoked).
    public static func register(
        body: [UInt8], policy: AttestPolicy, store: any AttestStore, nowMillis: Int64,
        androidStatusList: AttestationStatusList? = nil,
        completion: @escaping @Sendable (RegistrationResult) -> Void
    ) {
        let object: [String: Any]
        switch JSONBody.object(body) {
        case .failure(let e): return completion(.refused(e))
        case .success(let o): object = o
        }
        switch object["platform"] {
        case nil, "ios" as String:
            break
        case "android" as String:
            return registerAndroid(
                object, policy: policy, statusList: androidStatusList, store: store, nowMillis: nowMillis, completion: completion)
        default:
            return completion(
                .refused(
                    Explanation(
                        step: "body", error: .badJSON,
                        fields: [("field", "platform"), ("expected", "\"ios\" (the default) or \"android\"")])))
        }
        let fields: [String: String]
        switch JSONBody.strings(object, required: ["keyId", "attestation", "challenge"]) {
        case .failure(let e): return completion(.refused(e))
        case .success(let f): fields = f
        }
        let challengeText = fields["challenge"]!
        let keyID: KeyID, keyEncoding: BinaryEncoding
        switch readKeyID(fields["keyId"]!, expected: "base64 of the 32-byte key id") {
        case .failure(let e): return completion(.refused(e))
        case .success(let k): (keyID, keyEncoding) = k
        }
        guard let attestation = try? Base64.decode(fields["attestation"]!) else {
            return completion(
                .refused(Explanation(step: "body", error: .malformed, fields: [("field", "attestation"), ("expected", "base64")])))
        }
        guard let token = ChallengeText.decode(challengeText) else {
            return completion(
                .refused(
                    Explanation(
                        step: "body", error: .challengeUnknown,
                        fields: [("challenge", Explanation.redact(challengeText)), ("reason", "not base64url of 16 to 64 bytes")])))
        }
        let base: [(String, String)] = [("key_id", keyID.description), ("key_id_encoding", keyEncoding.rawValue)]
        let checked: CheckedAttestation
        switch check(
            attestation: attestation, keyID: keyID, clientDataHash: ClientData.registrationHash(challenge: challengeText), policy: policy,
            at: Date(timeIntervalSince1970: Double(nowMillis) / 1000), fields: base)
        {
        case .failure(let e): return completion(.refused(e))
        case .success(let c): checked = c
        }
        let verified = checked.attestation
        let environment = checked.environment
        let record = DeviceKeyRecord(
            keyID: keyID, publicKey: verified.publicKey.x962, counter: verified.signCount, appID: verified.appID.description,
            environment: environment, validationCategory: verified.validationCategory?.rawValue,
            bundleVersion: verified.bundleVersion, firstSeenMillis: nowMillis, lastSeenMillis: nowMillis,
            risk: checked.receipt.map {
                RiskSchedule.registered(receipt: $0, keyID: keyID, nowMillis: nowMillis, spreadMillis: policy.firstRefreshSpreadMillis)
            })
        let registration = Registration(record: record, receipt: verified.receipt, challenge: token)
        commit(
            registration, refusalFields: checked.fields, challengeText: challengeText, store: store, nowMillis: nowMillis,
            completion: completion
        ) { existing in
            RegisteredKey(
                keyID: keyID, environment: environment, appID: record.appID, existing: existing, receipt: checked.receipt,
                keyAccessControl: verified.keyAccessControl)
        }
    }

    /// A registration body's `keyId`: 32 bytes in base64 (or hex, reported), else `malformed` saying
    /// what was `expected`.
    static func readKeyID(_ text: String, expected: String) -> Result<(KeyID, BinaryEncoding), Explanation> {
        let (keyBytes, keyEncoding) = BinaryEncoding.decode(text)
        guard let keyBytes, let keyID = KeyID(keyBytes) else {
            return .failure(
                Explanation(
                    step: "body", error: .malformed,
                    fields: [("field", "keyId"), ("key_id_encoding", keyEncoding.rawValue), ("expected", expected)]))
        }
        return .success((keyID, keyEncoding))
    }

    /// The store step of a registration (either platform) and what each of its answers means.
    static func commit(
        _ registration: Registration, refusalFields: [(String, String)], challengeText: String, store: any AttestStore,
        nowMillis: Int64, completion: @escaping @Sendable (RegistrationResult) -> Void,
        registered: @escaping @Sendable (_ existing: Bool) -> RegisteredKey
    ) {
        let record = registration.record
        store.register(registration, nowMillis: nowMillis) { result in
            switch result {
            case .failure(let error):
                completion(
                    .refused(Explanation(step: "store", error: GateError(error), fields: refusalFields + [("detail", error.detail)])))
            case .success(.challengeRejected(let why)):
                completion(
                    .refused(
                        Explanation(
                            step: "commit", error: GateError(why),
                            fields: refusalFields + [("challenge", Explanation.redact(challengeText))])))
            case .success(.registered(let existing)):
                completion(.registered(registered(existing)))
            case .success(.appConflict(let registered)):
                completion(
                    .refused(
                        Explanation(
                            step: "store", error: .keyAppConflict,
                            fields: refusalFields + [
                                ("detail", "the key id is registered to another app id"), ("app_id", record.appID),
                                ("registered_app_id", registered),
                            ])))
            case .success(.reregistrationLimited(let retryAfterMillis)):
                var e = Explanation(
                    step: "store", error: .reregistrationLimited,
                    fields: refusalFields + [("detail", "this key was re-registered too often; it is registered and can be used")])
                e.retryAfterSeconds = Int((retryAfterMillis + 999) / 1000)
                completion(.refused(e))
            case .success(.keyCapacity(let maxKeys)):
                var e = Explanation(
                    step: "store", error: .keyCapacity,
                    fields: refusalFields + [("detail", "the store holds its maximum of \(maxKeys) keys"), ("max_keys", String(maxKeys))])
                e.retryAfterSeconds = Registrar.keyCapacityRetryAfterSeconds
                completion(.refused(e))
            }
        }
    }

    /// What a registration establishes before the store step.
    public struct CheckedAttestation: Sendable {
        public let attestation: VerifiedAttestation
        public let app: AttestPolicy.App
        public let environment: KeyEnvironment
        /// The verified receipt; nil when the app ignores receipts.
        public let receipt: AppAttestReceipt?
        /// The fields an `explain` entry of a later refusal starts with (key id, key access control).
        public let fields: [(String, String)]
    }

    /// Every check of a registration that needs no store, in order: Apple's attestation algorithm,
    /// the app's policy (environment, iOS 27 signals, macOS 27 key policy), then the attestation's
    /// receipt (`apps[].receipts: verify`: signature and chain to Apple Root CA - G3 at `instant`,
    /// app id, the credential certificate byte for byte, type `ATTEST`, creation time, and field 4 =
    /// clientDataHash). Pure: the refusal is returned with its `explain` fields after `fields`.
    public static func check(
        attestation: [UInt8], keyID: KeyID, clientDataHash: [UInt8], policy: AttestPolicy, at instant: Date,
        fields: [(String, String)] = []
    ) -> Result<CheckedAttestation, Explanation> {
        var base = fields
        let verified: VerifiedAttestation
        do {
            let object = try AttestationObject.parse(attestation)
            // The store keeps the receipt: its size is bounded before any certificate work.
            guard object.receipt.count <= policy.maxReceiptBytes else {
                return .failure(
                    Explanation(
                        step: "attestation", error: .receiptTooLarge,
                        fields: base + [
                            ("detail", "attStmt.receipt has \(object.receipt.count) bytes; at most \(policy.maxReceiptBytes) are accepted"),
                            ("receipt_bytes", String(object.receipt.count)), ("max_receipt", String(policy.maxReceiptBytes)),
                        ]))
            }
            verified = try policy.attestationVerifier.verify(object, keyID: keyID.bytes, clientDataHash: clientDataHash, at: instant)
        } catch {
            return .failure(Explanation(step: "attestation", error: GateError(error), fields: base + [("detail", error.detail)]))
        }
        if let acl = verified.keyAccessControl { base.append(("key_access_control", acl.summary)) }
        guard let app = policy.apps[verified.appID.description] else {
            return .failure(Explanation(step: "app_policy", error: .appNotAllowed, fields: base + [("app_id", verified.appID.description)]))
        }
        let environment: KeyEnvironment = verified.environment == .development ? .development : .production
        if var refusal = policy.refusal(
            app: app, environment: environment, validationCategory: verified.validationCategory?.rawValue,
            bundleVersion: verified.bundleVersion)
        {
            refusal.fields = base + refusal.fields
            return .failure(refusal)
        }
        if var refusal = policy.macOSSecurityRefusal(app: app, keyAccessControl: verified.keyAccessControl) {
            refusal.fields = base.filter { $0.0 != "key_access_control" } + refusal.fields
            return .failure(refusal)
        }
        var receipt: AppAttestReceipt? = nil
        if app.verifiesReceipts {
            do {
                receipt = try policy.receiptVerifier.verify(
                    verified.receipt, expecting: .attestation(verified, clientDataHash: clientDataHash), at: instant
                ).receipt
            } catch {
                return .failure(
                    Explanation(
                        step: "receipt", error: .receiptInvalid,
                        fields: base + [
                            ("reason", error.code.rawValue), ("detail", error.detail), ("receipt_bytes", String(verified.receipt.count)),
                        ]))
            }
        }
        return .success(CheckedAttestation(attestation: verified, app: app, environment: environment, receipt: receipt, fields: base))
    }
}
