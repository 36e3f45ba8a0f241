import AppAttest
import AppAttestSimulator
import AttestSim
import Foundation
import GatewayCrypto
import GatewayWire

/// The client contract of the gateway (challenge, register, protected requests), implemented in a
/// few lines over the real verifiers, so that the load and attack runners can be tested before and
/// independently of gatewayd. Checks, in order: key, challenge, signature, counter.
final class FakeGateway: @unchecked Sendable {
    struct Challenge {
        let purpose: String?
        let keyID: String?
        let expires: Date
        var consumed = false
    }

    struct Key {
        let publicKey: P256PublicKey
        var counter: UInt32
    }

    let attestationVerifier: AttestationVerifier
    let assertionVerifier: AssertionVerifier
    let ttl: TimeInterval
    /// A deliberately broken gateway: challenges can be used again.
    let reusableChallenges: Bool
    /// The client data version its protected route verifies.
    let clientData: ClientDataVersion
    private let lock = NSLock()
    private var challenges: [String: Challenge] = [:]
    private var keys: [String: Key] = [:]
    private(set) var forwarded = 0
    var server: LoopbackServer!

    init(appID: AppID, ca: TestCA, ttl: TimeInterval = 60, reusableChallenges: Bool = false, clientData: ClientDataVersion = .v2) throws {
        self.clientData = clientData
        attestationVerifier = AttestationVerifier(
            policy: .init(appIDs: [appID], environments: [.development, .production]), extraRoots: [ca.root])
        assertionVerifier = AssertionVerifier(appIDs: [appID])
        self.ttl = ttl
        self.reusableChallenges = reusableChallenges
        server = try LoopbackServer { [unowned self] r in .bytes(self.handle(r), close: false) }
    }

    var endpoint: HTTPEndpoint { HTTPEndpoint(host: "127.0.0.1", port: server.port) }
    var forwardedCount: Int { lock.withLock { forwarded } }

    func stop() { server.stop() }

    static func json(_ status: Int, _ fields: [String: String], headers: [(String, String)] = []) -> [UInt8] {
        var o = JSONObject()
        for (k, v) in fields.sorted(by: { $0.key < $1.key }) { o.set(k, v) }
        return httpResponse(status, "X", headers: [("Content-Type", "application/json")] + headers, body: o.description)
    }

    static func refuse(_ status: Int, _ code: String) -> [UInt8] { json(status, ["error": code, "action": "none"]) }

    func issue(purpose: String?, keyID: String?) -> (String, String) {
        var bytes = [UInt8](repeating: 0, count: 16)
        for i in bytes.indices { bytes[i] = UInt8.random(in: 0...255) }
        let value = Base64.encodeURL(bytes)
        let expires = Date().addingTimeInterval(ttl)
        lock.withLock { challenges[value] = Challenge(purpose: purpose, keyID: keyID, expires: expires) }
        return (value, ISO8601DateFormatter().string(from: expires))
    }

    /// nil when the challenge may be used (and marks it consumed when `consume`), else the refusal code.
    func check(challenge: String, purpose: String, keyID: String, consume: Bool) -> String? {
        lock.withLock {
            guard var c = challenges[challenge] else { return "challenge_unknown" }
            if c.consumed && !reusableChallenges { return "challenge_consumed" }
            if c.expires < Date() { return "challenge_expired" }
            if let p = c.purpose, p != purpose { return "challenge_wrong_purpose" }
            if let k = c.keyID, k != keyID { return "challenge_wrong_key" }
            if consume {
                c.consumed = true
                challenges[challenge] = c
            }
            return nil
        }
    }

    func handle(_ r: ServerRequest) -> [UInt8] {
        switch r.target {
        case "/open":
            lock.withLock { forwarded += 1 }
            return Self.json(200, ["target": r.target])
        case "/v1/attest/challenge":
            let body = (try? JSONSerialization.jsonObject(with: Data(r.body))) as? [String: String]
            let (value, expires) = issue(purpose: body?["purpose"], keyID: body?["keyId"])
            return Self.json(201, ["challenge": value, "expiresAt": expires])
        case "/v1/attest/register":
            guard let body = (try? JSONSerialization.jsonObject(with: Data(r.body))) as? [String: String],
                let keyB64 = body["keyId"], let attB64 = body["attestation"], let challenge = body["challenge"]
            else { return Self.refuse(400, "missing_field") }
            guard let keyID = try? Base64.decode(keyB64), let att = try? Base64.decode(attB64) else {
                return Self.refuse(400, "malformed")
            }
            if let code = check(challenge: challenge, purpose: "register", keyID: keyB64, consume: true) {
                return Self.refuse(401, code)
            }
            do {
                let v = try attestationVerifier.verify(
                    attestation: att, keyID: keyID, clientDataHash: SHA256.hash(Array(challenge.utf8)), at: Date())
                lock.withLock { keys[keyB64] = Key(publicKey: v.publicKey, counter: 0) }
                return Self.json(201, ["keyId": keyB64, "environment": v.environment.rawValue])
            } catch {
                return Self.refuse(401, error.code.rawValue)
            }
        default:
            guard let keyB64 = r.header(AttestHeaders.keyID), let assertionB64 = r.header(AttestHeaders.assertion),
                let challenge = r.header(AttestHeaders.challenge)
            else { return Self.refuse(401, "assertion_missing") }
            guard let key = lock.withLock({ keys[keyB64] }) else { return Self.refuse(401, "key_unknown") }
            if let code = check(challenge: challenge, purpose: "assert", keyID: keyB64, consume: false) {
                return Self.refuse(401, code)
            }
            guard let assertion = try? Base64.decode(assertionB64) else { return Self.refuse(401, "malformed") }
            let authority = RequestAuthority.normalize(r.header("Host") ?? "", scheme: "http") ?? ""
            let clientData = ClientData.forRequest(
                self.clientData, challenge: challenge, method: r.method, target: r.target, authority: authority, body: r.body)
            do {
                let v = try assertionVerifier.verify(
                    assertion: assertion, publicKey: key.publicKey, clientDataHash: SHA256.hash(clientData),
                    previousCounter: key.counter)
                let committed: Bool = lock.withLock {
                    guard let k = keys[keyB64], v.signCount > k.counter else { return false }
                    keys[keyB64]!.counter = v.signCount
                    forwarded += 1
                    return true
                }
                guard committed else { return Self.refuse(401, "counter_replay") }
                _ = check(challenge: challenge, purpose: "assert", keyID: keyB64, consume: true)
                let (next, expires) = issue(purpose: "assert", keyID: keyB64)
                return Self.json(
                    200, ["target": r.target],
                    headers: [(AttestHeaders.nextChallenge, next), (AttestHeaders.nextChallengeExpires, expires)])
            } catch {
                return Self.refuse(401, error.code.rawValue)
            }
        }
    }
}
