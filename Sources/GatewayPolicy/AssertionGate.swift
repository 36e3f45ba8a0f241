import AndroidAttest
import AppAttest
import GatewayCrypto
import GatewayIO
import GatewayStore
import GatewayWire

/// What the gate needs of a protected request.
public struct GateRequest {
    public var method: String
    /// Exactly as in the request line.
    public var target: String
    public var body: [UInt8]
    public var keyID: String?
    public var challenge: String?
    public var assertion: String?
    /// The `Host` field (HTTP/1.1), or `:authority` else `host` (HTTP/2), as received.
    public var host: String?
    /// The scheme the request arrived with: `https` on a TLS listener, else `http`.
    public var scheme: String

    public init(
        method: String, target: String, body: [UInt8], keyID: String?, challenge: String?, assertion: String?,
        host: String? = nil, scheme: String = "http"
    ) {
        self.method = method
        self.target = target
        self.body = body
        self.keyID = keyID
        self.challenge = challenge
        self.assertion = assertion
        self.host = host
        self.scheme = scheme
    }
}

public struct AcceptedAssertion: Sendable {
    public let keyID: KeyID
    public let counter: UInt32
    public let appID: String
    /// The key's receipt dates and risk metric as read before the assertion was verified, or as the
    /// commit found them when the store returns the record with it (nil
    /// without a dated receipt): the route verdict's `max_risk_metric`, the upstream's
    /// `X-App-Attest-Risk-Metric`, explain.
    public let risk: KeyRisk?
    /// For `X-App-Attest-Next-Challenge`; nil when none could be issued (the request still passes).
    public let nextChallenge: IssuedChallenge?
    /// The key's environment as registered: the verdict token's `environment` (`VerdictClaims`).
    public var environment: KeyEnvironment? = nil
    /// The key's account and its key count (keys per account), as read with the key or returned by
    /// the commit; nil: no account was named for the key.
    public var account: KeyAccount? = nil
    /// The key id as the request sent it, when that is exactly `keyID.description` (standard
    /// base64, padded: 44 characters; the decoder is strict, so such a text is the canonical one).
    var presentedKeyIDText: String? = nil

    /// `keyID.description`, without encoding the key id again when the request sent it that way.
    public var keyIDText: String { presentedKeyIDText ?? keyID.description }
}

/// A protected request's assertion headers as step 1 read them from the head (`readHeaders`).
public struct AssertionHeaders {
    public let keyID: KeyID
    public let keyEncoding: BinaryEncoding
    /// The presented challenge, where the route's binding uses one.
    public let token: ChallengeToken?
    /// Its text ("" without one).
    public let challengeText: String
    public let assertion: PresentedAssertion
}

/// The `X-App-Assertion` header parsed: App Attest's `{signature, authenticatorData}` or an Android
/// key's `{counter, signature}` (docs/android.md). Which one a key must send is the key's platform,
/// checked once the key is read.
public enum PresentedAssertion {
    case appAttest(AssertionObject)
    case android(AndroidAssertion)
}

/// One protected request between the gate's steps: what step 1 read and the caller's context,
/// handed from the key lookup to the verification and the commit (and back, on a retry).
private struct Pending {
    let request: GateRequest
    let keyID: KeyID
    let keyEncoding: BinaryEncoding
    let assertion: PresentedAssertion
    let token: ChallengeToken?
    /// The presented challenge's text ("" without one).
    let challengeText: String
    /// The authority client data v2 binds ("" otherwise).
    let authority: String
    let route: PendingRoute
    let policy: AttestPolicy
    let nowMillis: Int64
    let completion: (GateOutcome) -> Void
}

/// What the gate's later steps read of the route: values only (the route's policy holds
/// references, which a copy into every pending request retained and released).
private struct PendingRoute {
    let bind: RoutePolicy.Binding
    let clientData: RoutePolicy.ClientData
    let counterWindow: Int
    let keyRate: KeyRateLimit?

    init(_ r: RoutePolicy) {
        bind = r.bind
        clientData = r.clientData
        counterWindow = r.counterWindow
        keyRate = r.keyRate
    }
}

public enum GateOutcome {
    case accepted(AcceptedAssertion)
    case refused(Explanation)
}

/// Checks one protected request, in order: headers → key lookup → app policy → Apple's assertion
/// algorithm (signature over SHA256(authenticatorData ‖ SHA256(clientData)), rpIdHash, counter) →
/// iOS 27 signals → the atomic commit (challenge consumed and counter advanced together, only now)
/// → next challenge. Nothing is changed in the store unless every check passed.
///
/// One gate per event loop (loop-confined: it caches parsed public keys without locks). Every store
/// completion is brought back to the loop through `onLoop` before the next step runs.
public final class AssertionGate {
    private let store: any AttestStore
    private let executor: any LoopExecutor
    private var keys: [KeyID: P256PublicKey] = [:]
    private let keyCacheLimit: Int

    public init(store: any AttestStore, executor: any LoopExecutor, keyCacheLimit: Int = 16_384) {
        self.store = store
        self.keyCacheLimit = keyCacheLimit
        self.executor = executor
    }

    /// A store completion that continues on this gate's loop.
    private func onLoop<T: Sendable>(_ body: @escaping (T) -> Void) -> @Sendable (T) -> Void {
        let box = LoopBound(body)
        let executor = self.executor
        return { value in executor.run { box.value(value) } }
    }

    public func evaluate(
        _ request: consuming GateRequest, route: RoutePolicy, policy: AttestPolicy, nowMillis: Int64,
        completion: @escaping (GateOutcome) -> Void
    ) {
        // 1. Headers: what the head alone decides, then (below) what needs the body.
        let headers = Self.readHeaders(keyID: request.keyID, challenge: request.challenge, assertion: request.assertion, route: route)
        evaluate(request, headers: headers, route: route, policy: policy, nowMillis: nowMillis, completion: completion)
    }

    /// The same with step 1's head part already done (`readHeaders`, by the router before the body
    /// was read): the rest of step 1 (a `bind: body` challenge must be in the body), then steps 2-7.
    /// `request` is consumed: it moves into the request's pending state without a copy of its fields.
    public func evaluate(
        _ request: consuming GateRequest, headers: Result<AssertionHeaders, Explanation>, route: RoutePolicy, policy: AttestPolicy,
        nowMillis: Int64, completion: @escaping (GateOutcome) -> Void
    ) {
        let h: AssertionHeaders
        switch headers {
        case .failure(let e): return completion(.refused(e))
        case .success(let read): h = read
        }
        let keyID = h.keyID
        let keyEncoding = h.keyEncoding
        let token = h.token
        let challengeText = h.challengeText
        // With `bind: body`, a presented challenge must be in the signed body.
        if token != nil, route.bind == .body, !Self.contains(request.body, challengeText) {
            var e = Explanation(step: "headers", error: .challengeNotBound)
            e.add("challenge", Explanation.redact(challengeText))
            e.add("reason", "with bind: body the signed body must contain the challenge it presents")
            return completion(.refused(e))
        }
        // Version 2 of the request client data binds the authority the request is addressed to.
        var authority = ""
        if route.bind == .request, route.clientData == .v2 {
            switch RequestAuthority.of(target: request.target, host: request.host, scheme: request.scheme) {
            case .success(let a):
                authority = a
            case .failure(let problem):
                var e = Explanation(step: "headers", error: .malformed)
                e.add("key_id", keyID.description)
                e.add("detail", problem.description)
                e.add("client_data", route.clientData.rawValue)
                return completion(.refused(e))
            }
        }

        lookUp(
            Pending(
                request: request, keyID: keyID, keyEncoding: keyEncoding, assertion: h.assertion, token: token,
                challengeText: challengeText, authority: authority, route: PendingRoute(route), policy: policy, nowMillis: nowMillis,
                completion: completion),
            attempt: 0)
    }

    /// Step 2, the key; again (at most `maxKeyChangedRetries` times) when the store's commit found
    /// the key's policy fields changed since they were read (a store that reads keys from a cache).
    private func lookUp(_ p: Pending, attempt: Int) {
        // The memory store answers inline: no completion, no hop back to the loop.
        if let now = store.assertionKeyNow(p.keyID) { return looked(now, p, attempt: attempt) }
        store.assertionKey(
            p.keyID, completion: onLoop { (result: Result<DeviceKeyRecord?, StoreError>) in self.looked(result, p, attempt: attempt) })
    }

    /// Step 2's answer.
    /// (`result` is consumed: the key's record moves out of it instead of being copied.)
    private func looked(_ result: consuming Result<DeviceKeyRecord?, StoreError>, _ p: Pending, attempt: Int) {
        let completion = p.completion
        switch consume result {
        case .failure(let error):
            completion(.refused(Explanation(step: "store", error: GateError(error), fields: [("detail", error.detail)])))
        case .success(nil):
            completion(
                .refused(
                    Explanation(
                        step: "key_lookup", error: .keyUnknown,
                        fields: [("key_id", p.keyID.description), ("key_id_encoding", p.keyEncoding.rawValue)])))
        case .success(let record?):
            verify(p, record: record, attempt: attempt)
        }
    }

    /// How often a request reads its key again when the commit finds it changed (a re-registration
    /// on another instance between the read and the commit); then the store's answer is a failure.
    static let maxKeyChangedRetries = 2

    private func verify(_ p: Pending, record: DeviceKeyRecord, attempt: Int) {
        if let package = AndroidAppID.package(of: record.appID) {
            return verifyAndroid(p, record: record, package: String(package), attempt: attempt)
        }
        guard case .appAttest(let object) = p.assertion else {
            return p.completion(.refused(Self.wrongPlatform(p, record: record, sent: "an Android assertion", key: "an App Attest key")))
        }
        let keyEncoding = p.keyEncoding
        let (policy, completion) = (p.policy, p.completion)
        let keyID = record.keyID
        // What every refusal from here on names (built only when one is made: an accepted request
        // never needs the key id in base64 or the counters as text).
        let appID = record.appID
        var base: [(String, String)] { [("key_id", keyID.description), ("key_id_encoding", keyEncoding.rawValue), ("app_id", appID)] }
        // 3. The key's app must still be allowed, in an allowed environment.
        guard let app = policy.apps[record.appID] else {
            return completion(.refused(Explanation(step: "app_policy", error: .appNotAllowed, fields: base)))
        }
        if let refusal = policy.refusal(
            app: app, environment: record.environment, validationCategory: record.validationCategory,
            bundleVersion: record.bundleVersion)
        {
            var e = refusal
            e.fields = base + e.fields
            return completion(.refused(e))
        }
        guard let publicKey = publicKey(for: record) else {
            return completion(.refused(Explanation(step: "key_lookup", error: .verification(.invalidPublicKey), fields: base)))
        }
        // 4. Apple's assertion algorithm over the bound client data.
        let clientData = Self.clientData(p)
        // Apple's step 5 (the counter above the previous one) against the route's counter window:
        // with `counter_window: N` a counter above the stored one minus N may pass here, and the
        // store's commit decides atomically whether it is one never accepted.
        let width = p.route.counterWindow
        let previousCounter = width > 1 ? CounterWindow(highest: record.counter).floor(width: width) - 1 : record.counter
        let verified: VerifiedAssertion
        do {
            verified = try app.assertionVerifier.verify(
                object, publicKey: publicKey, clientDataHash: SHA256.hash(clientData), previousCounter: previousCounter)
        } catch {
            var e = Explanation(step: "verify", error: GateError(error), fields: base)
            let presented = object.authenticatorData
            switch error.code {
            case .appIDMismatch:
                e.add("rp_id_hash_presented", Hex.encode(presented.rpIDHash))
                e.add("rp_id_hash_expected", Hex.encode(app.appID.rpIDHash))
            case .counterReplay:
                e.fields += Self.replayFields(presented: presented.signCount, stored: record.counter, width: width, below: previousCounter)
            case .badSignature:
                e.fields += Self.badSignatureFields(p, signed: nil)
            default:
                e.add("detail", error.detail)
            }
            return completion(.refused(e))
        }
        // 5. The iOS 27 signals of this assertion, when it carries them (an updated app reports its
        // new bundle version here).
        if verified.validationCategory != nil || verified.bundleVersion != nil,
            let refusal = policy.refusal(
                app: app, environment: record.environment, validationCategory: verified.validationCategory?.rawValue,
                bundleVersion: verified.bundleVersion)
        {
            var e = refusal
            e.fields = base + e.fields
            return completion(.refused(e))
        }
        commit(p, record: record, counter: verified.signCount, attempt: attempt)
    }

    /// Steps 6 and 7, for either platform: the atomic commit (only now is anything changed) and with
    /// it the next challenge, bound to this key (saves the app a round trip): one step for the store
    /// (on Redis one script).
    private func commit(_ p: Pending, record: DeviceKeyRecord, counter: UInt32, attempt: Int) {
        let keyID = record.keyID
        let commit = AssertionCommit(
            keyID: keyID, counter: counter, challenge: p.token, counterWindow: p.route.counterWindow, keyRate: p.route.keyRate)
        let next = ChallengeRequest(purpose: .assert, keyID: keyID, ttlMillis: p.policy.challengeTTLMillis, chained: true)
        let checked = CheckedKey(record)
        if let now = store.commitAssertionNow(commit, checked: checked, issuing: next, nowMillis: p.nowMillis) {
            return finished(now, p, record: record, counter: counter, attempt: attempt)
        }
        store.commitAssertion(
            commit, checked: checked, issuing: next, nowMillis: p.nowMillis,
            completion: onLoop { (result: Result<CommitAndNext, StoreError>) in
                self.finished(result, p, record: record, counter: counter, attempt: attempt)
            })
    }

    /// Steps 6 and 7's answer: accepted with the next challenge, refused, or (the key's record changed
    /// since it was read) read again.
    private func finished(
        _ result: Result<CommitAndNext, StoreError>, _ p: Pending, record: DeviceKeyRecord, counter: UInt32, attempt: Int
    ) {
        let (keyID, keyEncoding, completion) = (record.keyID, p.keyEncoding, p.completion)
        let width = p.route.counterWindow
        let (presented, read) = (counter, record.counter)
        func committed() -> [(String, String)] {
            [
                ("key_id", keyID.description), ("key_id_encoding", keyEncoding.rawValue), ("app_id", record.appID),
                ("counter_presented", String(presented)), ("counter_stored", String(read)),
            ]
        }
        switch result {
        case .failure(let error):
            completion(
                .refused(Explanation(step: "store", error: GateError(error), fields: committed() + [("detail", error.detail)])))
        case .success(let done) where done.keyChanged:
            guard attempt < Self.maxKeyChangedRetries else {
                let detail = "the key's record changed under every commit of this request"
                return completion(
                    .refused(
                        Explanation(
                            step: "store", error: GateError(StoreError(.unavailable, detail)),
                            fields: committed() + [("detail", detail)])))
            }
            lookUp(p, attempt: attempt + 1)
        case .success(let done):
            switch done.outcome {
            case .unknownKey:
                completion(.refused(Explanation(step: "commit", error: .keyUnknown, fields: committed())))
            case .counterReplay(let stored, let open):
                var fields = committed() + [("counter_stored_at_commit", String(stored))]
                if width > 1 { fields += Self.windowFields(counter: counter, stored: stored, open: open, width: width) }
                completion(.refused(Explanation(step: "commit", error: .verification(.counterReplay), fields: fields)))
            case .challengeRejected(let why):
                completion(
                    .refused(
                        Explanation(
                            step: "commit", error: GateError(why),
                            fields: committed() + [("challenge", Explanation.redact(p.challengeText))])))
            case .keyRateLimited(let seconds):
                completion(.refused(Self.keyRateRefusal(committed(), limit: p.route.keyRate, retryAfterSeconds: seconds)))
            case .committed:
                completion(
                    .accepted(
                        AcceptedAssertion(
                            keyID: keyID, counter: counter, appID: record.appID,
                            risk: done.current.map(\.risk) ?? record.risk, nextChallenge: done.next,
                            environment: record.environment,
                            account: done.current.map(\.account) ?? record.account,
                            presentedKeyIDText: p.keyEncoding == .base64Standard && p.request.keyID?.utf8.count == 44
                                ? p.request.keyID : nil)))
            }
        }
    }

    /// Step 1 from the head alone: the headers the route requires are present and well formed (a
    /// key id of 32 bytes; a challenge of the right shape where the binding uses one; an assertion
    /// that parses). None of it depends on the body, so a protected request that fails here is
    /// refused before its body is read (the router's early refusal), with exactly the answer
    /// `evaluate` gives. Only `bind: body`'s "the body contains the challenge" needs the body.
    public static func readHeaders(keyID: String?, challenge: String?, assertion: String?, route: RoutePolicy)
        -> Result<AssertionHeaders, Explanation>
    {
        let usesChallenge: Bool =
            switch (route.bind, route.challenge) {
            case (.request, _), (.body, .required): true
            case (.body, .optional): challenge != nil
            case (.body, .off): false
            }
        guard let keyText = keyID, let assertionText = assertion else {
            var e = Explanation(step: "headers", error: .assertionMissing)
            e.add(
                "missing",
                [keyID == nil ? AttestHeaders.keyID : nil, assertion == nil ? AttestHeaders.assertion : nil]
                    .compactMap { $0 }.joined(separator: ","))
            return .failure(e)
        }
        let (keyBytes, keyEncoding) = BinaryEncoding.decode(keyText)
        guard let keyBytes, let keyID = KeyID(keyBytes) else {
            var e = Explanation(step: "headers", error: .malformed)
            e.add("key_id_encoding", keyEncoding.rawValue)
            e.add("key_id_bytes", keyBytes.map { String($0.count) } ?? "undecodable")
            e.add("expected", "base64 of the 32-byte key id")
            return .failure(e)
        }
        var token: ChallengeToken? = nil
        var challengeText = ""
        if usesChallenge {
            guard let text = challenge else {
                var e = Explanation(step: "headers", error: route.bind == .request ? .assertionMissing : .challengeMissing)
                e.add("missing", AttestHeaders.challenge)
                return .failure(e)
            }
            guard let t = ChallengeText.decode(text) else {
                var e = Explanation(step: "headers", error: .challengeUnknown)
                e.add("challenge", Explanation.redact(text))
                e.add("reason", "not base64url of 16 to 64 bytes")
                return .failure(e)
            }
            token = t
            challengeText = text
        }
        let presented: PresentedAssertion
        do throws(AppAttestError) {
            guard assertionText.utf8.count <= AssertionObject.maxSize * 2 else {
                throw AppAttestError(.malformed, "the assertion header is longer than any assertion")
            }
            let bytes: [UInt8]
            do {
                bytes = try Base64.decode(assertionText)
            } catch {
                throw AppAttestError(.malformed, "\(AttestHeaders.assertion) is not base64: \(error)")
            }
            do throws(AppAttestError) {
                presented = .appAttest(try AssertionObject.parse(bytes))
            } catch {
                // An Android key's `{counter, signature}` (a map App Attest's parser refuses).
                guard let android = try? AndroidAssertion.parse(bytes) else { throw error }
                presented = .android(android)
            }
        } catch {
            var e = Explanation(step: "headers", error: .malformed)
            e.add("key_id", keyID.description)
            e.add("detail", error.detail)
            return .failure(e)
        }
        return .success(
            AssertionHeaders(
                keyID: keyID, keyEncoding: keyEncoding, token: token, challengeText: challengeText, assertion: presented))
    }

    /// What `explain` shows of a counter the verification refused (either platform): presented,
    /// stored, and on a windowed route the window it fell below (`below`: the highest counter the
    /// window no longer accepts).
    static func replayFields(presented: UInt32, stored: UInt32, width: Int, below: UInt32) -> [(String, String)] {
        var fields = [
            ("counter_presented", String(presented)), ("counter_stored", String(stored)),
            ("counter_delta", String(Int64(presented) - Int64(stored))),
        ]
        if width > 1 {
            fields += [
                ("counter_window", String(width)), ("counter_window_floor", String(below + 1)), ("counter_window_reason", "below_window"),
            ]
        }
        return fields
    }

    /// What `explain` shows of the key's counter window when a windowed route refused a counter at
    /// the commit: the window, its floor, the counters it still had open, and why this one was not
    /// among them.
    static func windowFields(counter: UInt32, stored: UInt32, open: UInt64, width: Int) -> [(String, String)] {
        let window = CounterWindow(highest: stored, gaps: open)
        let floor = window.floor(width: width)
        let counters = window.openCounters(width: width)
        return [
            ("counter_window", String(width)),
            ("counter_window_floor", String(floor)),
            ("counter_window_open", counters.isEmpty ? "none" : counters.map(String.init).joined(separator: ",")),
            ("counter_window_reason", counter < floor ? "below_window" : "already_accepted"),
        ]
    }

    /// Parsed keys are kept per loop (parsing costs about a fifth of a verification); the cache is
    /// bounded and simply emptied when full.
    private func publicKey(for record: DeviceKeyRecord) -> P256PublicKey? {
        if let k = keys[record.keyID] { return k }
        guard let k = try? P256PublicKey(x962: record.publicKey) else { return nil }
        if keys.count >= keyCacheLimit { keys.removeAll(keepingCapacity: true) }
        keys[record.keyID] = k
        return k
    }

    /// The client data a route's assertion signs: the request's (challenge, method, target, body
    /// hash, and with v2 the authority) or, with `bind: body`, the body.
    private static func clientData(_ p: Pending) -> [UInt8] {
        guard p.route.bind == .request else { return p.request.body }
        let version: ClientDataVersion = p.route.clientData == .v1 ? .v1 : .v2
        return ClientData.forRequest(
            version, challenge: p.challengeText, method: p.request.method, target: p.request.target, authority: p.authority,
            body: p.request.body)
    }

    /// A key answered with the other platform's assertion.
    private static func wrongPlatform(_ p: Pending, record: DeviceKeyRecord, sent: String, key: String) -> Explanation {
        Explanation(
            step: "headers", error: .malformed,
            fields: [
                ("key_id", record.keyID.description), ("key_id_encoding", p.keyEncoding.rawValue), ("app_id", record.appID),
                ("detail", "\(AttestHeaders.assertion) is \(sent), the key is \(key)"),
            ])
    }

    /// Steps 3 to 5 for an Android key (docs/android.md, "Protected requests"): the key's package must
    /// still be an app's, then ECDSA P-256 SHA-256 over `counter ‖ SHA256(clientData)` with the
    /// registered key, then the counter above the stored one (the route's counter window as for App
    /// Attest); steps 6 and 7 are the same.
    private func verifyAndroid(_ p: Pending, record: DeviceKeyRecord, package: String, attempt: Int) {
        let completion = p.completion
        guard case .android(let assertion) = p.assertion else {
            return completion(.refused(Self.wrongPlatform(p, record: record, sent: "an App Attest assertion", key: "an Android key")))
        }
        var base: [(String, String)] {
            [("key_id", record.keyID.description), ("key_id_encoding", p.keyEncoding.rawValue), ("app_id", record.appID)]
        }
        guard p.policy.androidApps[package] != nil else {
            return completion(.refused(Explanation(step: "app_policy", error: .appNotAllowed, fields: base)))
        }
        guard let publicKey = publicKey(for: record) else {
            return completion(.refused(Explanation(step: "key_lookup", error: .verification(.invalidPublicKey), fields: base)))
        }
        let width = p.route.counterWindow
        let previousCounter = width > 1 ? CounterWindow(highest: record.counter).floor(width: width) - 1 : record.counter
        do {
            _ = try AndroidAssertionVerifier().verify(
                assertion, publicKey: publicKey, clientDataHash: SHA256.hash(Self.clientData(p)), previousCounter: previousCounter)
        } catch {
            var e = Explanation(step: "verify", error: GateError(error), fields: base)
            switch error.code {
            case .counterReplay:
                e.fields += Self.replayFields(presented: assertion.counter, stored: record.counter, width: width, below: previousCounter)
            case .badSignature:
                e.fields += Self.badSignatureFields(p, signed: "counter")
            default:
                e.add("detail", error.detail)
            }
            return completion(.refused(e))
        }
        commit(p, record: record, counter: assertion.counter, attempt: attempt)
    }

    /// What `explain` shows of a signature that did not verify (either platform): what the route
    /// binds (`signed`: what the platform signs besides the client data, Android's counter), the
    /// client data version, the method, the authority (v2), the body's hash and the challenge.
    private static func badSignatureFields(_ p: Pending, signed: String?) -> [(String, String)] {
        let lead = signed.map { $0 + ", " } ?? ""
        var fields: [(String, String)]
        switch (p.route.bind, p.route.clientData) {
        case (.body, _): fields = [("bound", lead + "body")]
        case (.request, .v1): fields = [("bound", lead + "challenge, method, target, sha256(body)"), ("client_data", "v1")]
        case (.request, .v2): fields = [("bound", lead + "challenge, method, target, sha256(body), authority"), ("client_data", "v2")]
        }
        fields.append(("method", String(p.request.method.prefix(32))))
        if p.route.bind == .request, p.route.clientData == .v2 { fields.append(("authority", p.authority)) }
        fields.append(("body_sha256", Hex.encode(SHA256.hash(p.request.body))))
        if !p.challengeText.isEmpty { fields.append(("challenge", Explanation.redact(p.challengeText))) }
        return fields
    }

    static func contains(_ haystack: [UInt8], _ needle: String) -> Bool {
        let n = Array(needle.utf8)
        guard !n.isEmpty, haystack.count >= n.count else { return false }
        var i = 0
        while i + n.count <= haystack.count {
            if haystack[i] == n[0], haystack[i..<(i + n.count)].elementsEqual(n) { return true }
            i += 1
        }
        return false
    }
}
