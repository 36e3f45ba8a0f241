import AppAttest
import Foundation
import GatewayCrypto
import GatewayStore
import GatewayWire

public struct RegisteredKey: Sendable {
    public let keyID: KeyID
    public let environment: KeyEnvironment
    public let appID: String
    /// The key had been registered before; its counter was kept.
    public let existing: Bool
    /// The attestation's receipt as verified (`apps[].receipts: verify`); nil when the app ignores
    /// receipts. The store keeps the receipt's bytes: its dates and fields can be read again from
    /// there (`AppAttestReceipt.parseStored`).
    public let receipt: AppAttestReceipt?
    /// macOS 27's key access-control property of the credential certificate, when present. Not in
    /// the key record: the stored receipt's field 3 is the credential certificate that carries it.
    public let keyAccessControl: KeyAccessControl?
}

public enum RegistrationResult: Sendable {
    case registered(RegisteredKey)
    case refused(Explanation)
}

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
        guard case .success(let fields) = JSONBody.strings(body, required: []), let text = fields["challenge"] else { return nil }
        return ChallengeText.decode(text)
    }

    public static func register(
        body: [UInt8], policy: AttestPolicy, store: any AttestStore, nowMillis: Int64,
        completion: @escaping @Sendable (RegistrationResult) -> Void
    ) {
        let fields: [String: String]
        switch JSONBody.strings(body, required: ["keyId", "attestation", "challenge"]) {
        case .failure(let e): return completion(.refused(e))
        case .success(let f): fields = f
        }
        let keyText = fields["keyId"]!, challengeText = fields["challenge"]!
        let (keyBytes, keyEncoding) = BinaryEncoding.decode(keyText)
        guard let keyBytes, let keyID = KeyID(keyBytes) else {
            return completion(.refused(Explanation(
                step: "body", error: .malformed,
                fields: [("field", "keyId"), ("key_id_encoding", keyEncoding.rawValue), ("expected", "base64 of the 32-byte key id")])))
        }
        guard let attestation = try? Base64.decode(fields["attestation"]!) else {
            return completion(.refused(Explanation(step: "body", error: .malformed, fields: [("field", "attestation"), ("expected", "base64")])))
        }
        guard let token = ChallengeText.decode(challengeText) else {
            return completion(.refused(Explanation(
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
        let refusalFields = checked.fields
        let verifiedReceipt = checked.receipt
        store.register(registration, nowMillis: nowMillis) { result in
            switch result {
            case .failure(let error):
                completion(.refused(Explanation(step: "store", error: GateError(error), fields: refusalFields + [("detail", error.detail)])))
            case .success(.challengeRejected(let why)):
                completion(.refused(Explanation(
                    step: "commit", error: GateError(why), fields: refusalFields + [("challenge", Explanation.redact(challengeText))])))
            case .success(.registered(let existing)):
                completion(.registered(RegisteredKey(
                    keyID: keyID, environment: environment, appID: record.appID, existing: existing, receipt: verifiedReceipt,
                    keyAccessControl: verified.keyAccessControl)))
            case .success(.appConflict(let registered)):
                completion(.refused(Explanation(
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
                return .failure(Explanation(
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
                return .failure(Explanation(
                    step: "receipt", error: .receiptInvalid,
                    fields: base + [("reason", error.code.rawValue), ("detail", error.detail), ("receipt_bytes", String(verified.receipt.count))]))
            }
        }
        return .success(CheckedAttestation(attestation: verified, app: app, environment: environment, receipt: receipt, fields: base))
    }
}

/// `POST /v1/attest/challenge` with an optional body `{"purpose":"register"|"assert","keyId":"<base64>"}`.
public enum ChallengeEndpoint {
    public static let maxBody = 4 * 1024

    /// With `requireKeyID` (a Redis Cluster store, where a challenge must carry its key's hash tag) a
    /// request without `keyId` is refused with 400 `key_id_required`.
    public static func request(body: [UInt8], ttlMillis: Int64, requireKeyID: Bool = false) -> Result<ChallengeRequest, Explanation> {
        let keyRequired = Explanation(
            step: "body", error: .keyIDRequired,
            fields: [("field", "keyId"), ("reason", "this gateway's store binds every challenge to a key: send {\"keyId\":\"<base64 key id>\"}")])
        if body.allSatisfy({ $0 == 0x20 || $0 == 0x0a || $0 == 0x0d || $0 == 0x09 }) {
            if requireKeyID { return .failure(keyRequired) }
            return .success(ChallengeRequest(purpose: nil, keyID: nil, ttlMillis: ttlMillis))
        }
        let fields: [String: String]
        switch JSONBody.strings(body, required: []) {
        case .failure(let e): return .failure(e)
        case .success(let f): fields = f
        }
        var purpose: ChallengePurpose? = nil
        if let p = fields["purpose"] {
            guard let parsed = ChallengePurpose(rawValue: p) else {
                return .failure(Explanation(step: "body", error: .badJSON, fields: [("field", "purpose"), ("expected", "register or assert")]))
            }
            purpose = parsed
        }
        var keyID: KeyID? = nil
        if let k = fields["keyId"] {
            let (bytes, encoding) = BinaryEncoding.decode(k)
            guard let bytes, let id = KeyID(bytes) else {
                return .failure(Explanation(
                    step: "body", error: .malformed,
                    fields: [("field", "keyId"), ("key_id_encoding", encoding.rawValue), ("expected", "base64 of the 32-byte key id")]))
            }
            keyID = id
        }
        if requireKeyID && keyID == nil { return .failure(keyRequired) }
        return .success(ChallengeRequest(purpose: purpose, keyID: keyID, ttlMillis: ttlMillis))
    }

    /// `{"challenge":"<base64url>","expiresAt":"<RFC 3339>"}`.
    public static func json(_ issued: IssuedChallenge) -> String {
        var o = JSONObject()
        o.set("challenge", ChallengeText.encode(issued.token))
        o.set("expiresAt", RFC3339.format(millis: issued.expiresAtMillis))
        return o.description
    }
}

public enum RFC3339 {
    /// `2026-11-23T14:05:09.123Z` (UTC, milliseconds).
    public static func format(millis: Int64) -> String {
        if millis >= 0 {
            var written = false
            let text = String(unsafeUninitializedCapacity: 24) { out in
                guard writePrefix(seconds: Int(millis / 1000), into: UnsafeMutableRawBufferPointer(out)) else { return 0 }
                let ms = Int(millis % 1000)
                out[20] = UInt8(truncatingIfNeeded: 0x30 + ms / 100)
                out[21] = UInt8(truncatingIfNeeded: 0x30 + ms / 10 % 10)
                out[22] = UInt8(truncatingIfNeeded: 0x30 + ms % 10)
                out[23] = UInt8(ascii: "Z")
                written = true
                return 24
            }
            if written { return text }
        }
        // Before 1970 or after 9999 (never a challenge's or a receipt's): the padded decimal form.
        var t = time_t(millis / 1000)
        var parts = tm()
        gmtime_r(&t, &parts)
        func pad(_ v: Int32, _ width: Int) -> String {
            let s = String(v)
            return String(repeating: "0", count: max(0, width - s.count)) + s
        }
        return "\(pad(parts.tm_year + 1900, 4))-\(pad(parts.tm_mon + 1, 2))-\(pad(parts.tm_mday, 2))T"
            + "\(pad(parts.tm_hour, 2)):\(pad(parts.tm_min, 2)):\(pad(parts.tm_sec, 2)).\(pad(Int32(millis % 1000), 3))Z"
    }

    /// Writes `2026-11-23T14:05:09.` (20 bytes: UTC, up to the milliseconds' dot) for `seconds`
    /// since 1970 into the start of `out`; false, with nothing written, for a year after 9999. The
    /// one RFC 3339 writer: `format` and the access log's clock (once a second) use it.
    public static func writePrefix(seconds: Int, into out: UnsafeMutableRawBufferPointer) -> Bool {
        var t = time_t(seconds)
        var parts = tm()
        gmtime_r(&t, &parts)
        let year = Int(parts.tm_year) + 1900
        guard seconds >= 0, year <= 9999, out.count >= 20 else { return false }
        func put(_ value: Int, _ width: Int, at offset: Int, then separator: UInt8) {
            var v = value
            for k in stride(from: offset + width - 1, through: offset, by: -1) {
                out[k] = UInt8(truncatingIfNeeded: 0x30 + v % 10)
                v /= 10
            }
            out[offset + width] = separator
        }
        put(year, 4, at: 0, then: UInt8(ascii: "-"))
        put(Int(parts.tm_mon) + 1, 2, at: 5, then: UInt8(ascii: "-"))
        put(Int(parts.tm_mday), 2, at: 8, then: UInt8(ascii: "T"))
        put(Int(parts.tm_hour), 2, at: 11, then: UInt8(ascii: ":"))
        put(Int(parts.tm_min), 2, at: 14, then: UInt8(ascii: ":"))
        put(Int(parts.tm_sec), 2, at: 17, then: UInt8(ascii: "."))
        return true
    }
}

/// The endpoints' JSON bodies: one object whose listed members are strings. Unknown members are
/// ignored (clients may send more); a wrong type is an error that names the member.
enum JSONBody {
    static func strings(_ body: [UInt8], required: [String]) -> Result<[String: String], Explanation> {
        let object: Any
        do {
            object = try JSONSerialization.jsonObject(with: Data(body), options: [])
        } catch {
            return .failure(Explanation(step: "body", error: .badJSON, fields: [("detail", "the body is not JSON")]))
        }
        guard let dict = object as? [String: Any] else {
            return .failure(Explanation(step: "body", error: .badJSON, fields: [("detail", "the body is not a JSON object")]))
        }
        var out: [String: String] = [:]
        for (k, v) in dict {
            guard ["keyId", "attestation", "challenge", "purpose"].contains(k) else { continue }
            guard let s = v as? String else {
                return .failure(Explanation(step: "body", error: .badJSON, fields: [("field", k), ("expected", "a string")]))
            }
            out[k] = s
        }
        for r in required where out[r] == nil {
            return .failure(Explanation(step: "body", error: .missingField, fields: [("field", r)]))
        }
        return .success(out)
    }
}
