import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// The app's side of the client contract (docs/client-contract.md, docs/client-library.md): one call,
/// `send`, protects a `URLRequest`.
///
/// Per account (one key each; nil: the app's single key) the client keeps the key id across
/// launches (`KeyIDStore`), generates and registers the key when needed, signs each request over the
/// route's client data with the last `X-App-Attest-Next-Challenge` (or a fetched challenge), and
/// resolves what the gateway asks: `rechallenge` once, `reattest` once (a new key), `429`/`503`
/// after `Retry-After` plus jitter, a bounded number of times. Everything else is thrown as an
/// `AppAttestClientError` carrying the gateway's `requestId`.
///
/// Concurrency: an actor, safe to call from any number of tasks. The requests of one account are
/// signed one at a time, in the order the calls reached the client (FIFO): the device's counter
/// increments at each assertion. A gateway route without a counter window refuses a counter that
/// arrives after a higher one (`counter_replay`), so there one key has at most one protected request
/// in flight. On a route configured with `counterWindow: N` (the gateway's `counter_window`) the
/// next request is signed and sent without waiting for the answers of the earlier ones, as long as
/// every request in flight stays within N of it in signing order (and, where a challenge is used,
/// at most `maxChallengesPerKey` are in flight, each with its own). Different accounts proceed in
/// parallel.
public actor AppAttestClient {
    public nonisolated let configuration: Configuration
    private let service: any AppAttestService
    private let keyStore: any KeyIDStore
    private let transport: any AppAttestTransport
    private let timing: Timing
    private var slots: [String: Slot] = [:]
    private var nextTicket = 0
    public private(set) var statistics = Statistics()

    public init(
        configuration: Configuration, service: any AppAttestService, keyStore: any KeyIDStore,
        transport: any AppAttestTransport = URLSessionTransport(), timing: Timing = .system
    ) {
        self.configuration = configuration
        self.service = service
        self.keyStore = keyStore
        self.transport = transport
        self.timing = timing
    }

    // MARK: - Public calls

    /// Sends `request` with the attestation headers of its route and returns the upstream's answer
    /// (any status: the upstream's own errors are returned, not thrown). The body is `httpBody`
    /// (a streamed body cannot be hashed before sending).
    public nonisolated func send(_ request: URLRequest, account: String? = nil) async throws(AppAttestClientError)
        -> (Data, HTTPURLResponse)
    {
        let prepared = try Prepared(request, configuration: configuration, makeBody: nil)
        return try await perform(prepared, account: account)
    }

    /// Like `send(_:account:)`, with the body built once the challenge is known: for `bind: body`
    /// routes with a challenge, whose signed body must contain the challenge text. `makeBody` is
    /// called once per signing (again after a rechallenge), with "" when no challenge is sent.
    public nonisolated func send(
        _ request: URLRequest, account: String? = nil, makeBody: @escaping @Sendable (String) throws -> Data
    ) async throws(AppAttestClientError) -> (Data, HTTPURLResponse) {
        let prepared = try Prepared(request, configuration: configuration, makeBody: makeBody)
        return try await perform(prepared, account: account)
    }

    /// Generates and registers the account's key now if it has none (e.g. at sign-in, off the path
    /// of the first protected request).
    public func prepare(account: String? = nil) async throws(AppAttestClientError) {
        let name = Self.slotName(account)
        await acquire(name)
        defer { release(name) }
        guard !Task.isCancelled else { throw .cancelled }
        guard service.isSupported else { throw .unsupported }
        _ = try await registeredKey(name, account: account)
    }

    /// Forgets the account's key id (e.g. when the account is deleted): its next request generates
    /// and registers a new key. The old key stays in the Secure Enclave, unused.
    public func forgetKey(account: String? = nil) async throws(AppAttestClientError) {
        let name = Self.slotName(account)
        await acquire(name)
        defer { release(name) }
        do {
            try keyStore.remove(account: account)
        } catch {
            throw .keyStore(error)
        }
        slots[name, default: Slot()].reset()
    }

    /// The account's key as kept (nil before the first registration).
    public func storedKey(account: String? = nil) throws(AppAttestClientError) -> StoredAttestKey? {
        let name = Self.slotName(account)
        try loadIfNeeded(name, account: account)
        return slots[name]?.key
    }

    // MARK: - One protected request

    private func perform(_ p: Prepared, account: String?) async throws(AppAttestClientError) -> (Data, HTTPURLResponse) {
        let name = Self.slotName(account)
        await acquire(name)
        // The turn orders the signatures. Without a counter window it is held until the answer (one
        // request of the key in flight); with one it is handed on once the request is signed.
        var holding = true
        defer { if holding { release(name) } }
        guard !Task.isCancelled else { throw .cancelled }
        guard service.isSupported else {
            guard configuration.whenUnsupported == .sendUnprotected else { throw .unsupported }
            var r = p.request
            r.httpBody = try p.body(challenge: nil)
            return try await exchange(r)
        }
        let usesChallenge = p.binding != .body(challenge: .off)
        let ticket = nextTicket
        nextTicket += 1
        var rechallenged = false
        var reattested = false
        var freshChallenge = false
        var replace: String?
        var waits = 0
        while true {
            if !holding {
                // A windowed request signed again: ahead of the calls that have not signed yet.
                await acquire(name, first: true)
                holding = true
                guard !Task.isCancelled else { throw .cancelled }
            }
            if let old = replace {
                replace = nil
                // Requests in flight on the old key all hear reattest: the first replaces it.
                if slots[name]?.key?.keyID == old { try replaceKey(name, account: account) }
            }
            let key = try await registeredKey(name, account: account)
            await waitForRoom(name, keyID: key.keyID, window: p.counterWindow, usesChallenge: usesChallenge, fetching: freshChallenge)
            var challenge: String?
            if usesChallenge { challenge = try await takeChallenge(name, keyID: key.keyID, fresh: freshChallenge) }
            freshChallenge = false
            let body = try p.body(challenge: challenge)
            let clientData: Data
            switch p.binding {
            case .request(let version):
                let hash = p.bodySHA256 ?? Digest.sha256(body ?? Data())
                clientData = AttestClientData.request(
                    version, challenge: challenge ?? "", method: p.method, target: p.target, authority: p.authority, bodySHA256: hash)
            case .body(let bodyChallenge):
                clientData = body ?? Data()
                if bodyChallenge == .embedded, let challenge, clientData.range(of: Data(challenge.utf8)) == nil {
                    throw .invalidRequest("the route binds the body with a challenge: makeBody must put the challenge text in the body")
                }
            }

            let assertion: Data
            do {
                assertion = try await service.generateAssertion(key.keyID, clientDataHash: AttestClientData.sha256(clientData))
            } catch AppAttestServiceError.invalidKey {
                // The key id survived (Keychain) but the key did not (reinstall, restore on another
                // device): a new key, registered, once per send.
                guard !reattested else { throw .service(AppAttestServiceError.invalidKey) }
                reattested = true
                try replaceKey(name, account: account)
                continue
            } catch AppAttestServiceError.unsupported {
                throw .unsupported
            } catch {
                throw .service(error)
            }

            var r = p.request
            r.httpBody = body
            r.setValue(key.keyID, forHTTPHeaderField: Header.keyID)
            if let challenge { r.setValue(challenge, forHTTPHeaderField: Header.challenge) }
            r.setValue(assertion.base64EncodedString(), forHTTPHeaderField: Header.assertion)
            statistics.protectedRequestsSent += 1
            startFlight(name, ticket: ticket, keyID: key.keyID, window: p.counterWindow, usesChallenge: usesChallenge)
            if p.counterWindow > 1 {
                release(name)
                holding = false
            }
            let sent: Result<(Data, HTTPURLResponse), AppAttestClientError>
            do {
                sent = .success(try await exchange(r))
            } catch {
                sent = .failure(error)
            }
            endFlight(name, ticket: ticket)
            let (data, response) = try sent.get()

            if let next = response.value(forHTTPHeaderField: Header.nextChallenge), !next.isEmpty {
                // Verified and forwarded: whatever the status, it is the upstream's answer.
                let expires = response.value(forHTTPHeaderField: Header.nextChallengeExpires).flatMap(Self.parseTimestamp)
                keep(KeptChallenge(value: next, expiresAt: expires, isNext: true), name, keyID: key.keyID)
                return (data, response)
            }
            guard let refusal = GatewayRefusal(endpoint: .protected, data: data, response: response, now: timing.now()) else {
                return (data, response)
            }
            switch refusal.action {
            case .rechallenge? where !rechallenged:
                rechallenged = true
                freshChallenge = true
                statistics.rechallenges += 1
            case .reattest? where !reattested:
                reattested = true
                if holding { try replaceKey(name, account: account) } else { replace = key.keyID }
            default:
                guard Self.isRetryable(refusal) else { throw .refused(refusal) }
                guard waits < configuration.retry.maxWaits else { throw .rateLimited(refusal) }
                try await wait(retryAfter: refusal.retryAfter, attempt: waits)
                waits += 1
            }
        }
    }

    /// `429`, and `503` (the store, or the gateway's upstream pool, busy: nothing was forwarded).
    static func isRetryable(_ r: GatewayRefusal) -> Bool {
        r.status == 429 || r.status == 503 || r.action == .retryLater
    }

    // MARK: - Keys and registration

    private func registeredKey(_ name: String, account: String?) async throws(AppAttestClientError) -> StoredAttestKey {
        try loadIfNeeded(name, account: account)
        if let k = slots[name]?.key, k.registered { return k }
        if let until = slots[name]?.registrationDeferredUntil, timing.now() < until {
            throw .registrationDeferred(until: until, lastFailure: slots[name]?.lastRegistrationFailure ?? "")
        }
        do {
            let key = try await register(name, account: account)
            slots[name, default: Slot()].registrationFailures = 0
            slots[name, default: Slot()].registrationDeferredUntil = nil
            return key
        } catch {
            switch error {
            case .transport, .cancelled, .keyStore, .invalidRequest, .unsupported:
                break  // not a verdict of the gateway or of Apple: the next call may try again at once
            default:
                var s = slots[name, default: Slot()]
                s.registrationFailures += 1
                s.registrationDeferredUntil = timing.now().addingTimeInterval(
                    configuration.retry.cooldown(failures: s.registrationFailures, random: timing.random()))
                s.lastRegistrationFailure = error.description
                slots[name] = s
            }
            throw error
        }
    }

    /// Attests the account's key (a new one if it has none) and registers it. Apple's rules: after
    /// `serverUnavailable`, the same key later; after any other attestation error, a new key.
    private func register(_ name: String, account: String?) async throws(AppAttestClientError) -> StoredAttestKey {
        var keyID: String
        if let kept = slots[name]?.key?.keyID {
            keyID = kept
        } else {
            keyID = try await newKey(name, account: account)
        }
        var newKeys = 0
        var rechallenged = false
        while true {
            let challenge = try await fetchChallenge(purpose: "register", keyID: keyID).value
            let attestation: Data
            switch try await attest(keyID, challenge: challenge) {
            case .success(let a):
                attestation = a
            case .failure(let error):
                guard newKeys == 0 else { throw .service(error) }
                newKeys += 1
                keyID = try await newKey(name, account: account)
                continue
            }
            var request = try endpointRequest(configuration.registerPath)
            request.httpBody = Self.json([("keyId", keyID), ("attestation", attestation.base64EncodedString()), ("challenge", challenge)])
            // A 429 is waited out and the registration sent again unchanged (same attestation, same challenge).
            let (data, response) = try await exchangeWaiting(request, endpoint: .register)
            if (200..<300).contains(response.statusCode) {
                let key = StoredAttestKey(keyID: keyID, registered: true)
                try save(key, account: account)
                slots[name, default: Slot()].key = key
                statistics.registrations += 1
                return key
            }
            guard let refusal = GatewayRefusal(endpoint: .register, data: data, response: response, now: timing.now()) else {
                throw .unexpectedResponse(endpoint: .register, status: response.statusCode, body: String(decoding: data, as: UTF8.self))
            }
            switch refusal.action {
            case .rechallenge? where !rechallenged:
                rechallenged = true
            case .reattest? where newKeys == 0:
                newKeys += 1
                keyID = try await newKey(name, account: account)
            default:
                throw Self.isRetryable(refusal) ? .rateLimited(refusal) : .refused(refusal)
            }
        }
    }

    /// The attestation, `.failure` when Apple refused this key (the caller takes a new key), thrown
    /// when the service is unsupported or stays unavailable after the policy's waits.
    private func attest(_ keyID: String, challenge: String) async throws(AppAttestClientError) -> Result<Data, any Error> {
        var waits = 0
        while true {
            do {
                return .success(try await service.attestKey(keyID, clientDataHash: AttestClientData.registrationHash(challenge: challenge)))
            } catch AppAttestServiceError.serverUnavailable {
                guard waits < configuration.retry.maxWaits else { throw .attestationServiceUnavailable }
                try await wait(retryAfter: nil, attempt: waits)
                waits += 1
            } catch AppAttestServiceError.unsupported {
                throw .unsupported
            } catch {
                return .failure(error)
            }
        }
    }

    private func newKey(_ name: String, account: String?) async throws(AppAttestClientError) -> String {
        let keyID: String
        do {
            keyID = try await service.generateKey()
        } catch AppAttestServiceError.unsupported {
            throw .unsupported
        } catch {
            throw .service(error)
        }
        let key = StoredAttestKey(keyID: keyID, registered: false)
        // Kept before it is attested: after a crash the same key is attested, not a new one.
        try save(key, account: account)
        var s = slots[name, default: Slot()]
        s.key = key
        s.challenges = []
        slots[name] = s
        statistics.keysGenerated += 1
        return keyID
    }

    /// The gateway asked for a new key (`reattest`) or the device lost it (`invalidKey`).
    private func replaceKey(_ name: String, account: String?) throws(AppAttestClientError) {
        do {
            try keyStore.remove(account: account)
        } catch {
            throw .keyStore(error)
        }
        var s = slots[name, default: Slot()]
        s.key = nil
        s.challenges = []
        s.loaded = true
        slots[name] = s
        statistics.reattestations += 1
    }

    private func loadIfNeeded(_ name: String, account: String?) throws(AppAttestClientError) {
        guard slots[name]?.loaded != true else { return }
        let key: StoredAttestKey?
        do {
            key = try keyStore.load(account: account)
        } catch {
            throw .keyStore(error)
        }
        slots[name, default: Slot()].key = key
        slots[name, default: Slot()].loaded = true
    }

    private func save(_ key: StoredAttestKey, account: String?) throws(AppAttestClientError) {
        do {
            try keyStore.save(key, account: account)
        } catch {
            throw .keyStore(error)
        }
    }

    // MARK: - Challenges

    /// A kept next challenge (the oldest with `challengeExpiryMargin` left; those without are
    /// dropped), else a fetched one; `fresh`: always a fetched one (after a `rechallenge`). A
    /// challenge is single-use: it is dropped once taken.
    private func takeChallenge(_ name: String, keyID: String, fresh: Bool) async throws(AppAttestClientError) -> String {
        while !fresh, let kept = slots[name]?.challenges.first {
            slots[name]?.challenges.removeFirst()
            if isUsable(kept) {
                if kept.isNext { statistics.nextChallengesUsed += 1 }
                return kept.value
            }
        }
        return try await fetchChallenge(purpose: "assert", keyID: keyID).value
    }

    private func isUsable(_ c: KeptChallenge) -> Bool {
        c.expiresAt.map { $0.timeIntervalSince(timing.now()) > configuration.challengeExpiryMargin } ?? true
    }

    /// Keeps the next challenge of a verified answer for the key's next request (while the answered
    /// request's key is still the account's key). At most `maxChallengesPerKey` are kept, the oldest
    /// dropped first.
    private func keep(_ c: KeptChallenge, _ name: String, keyID: String) {
        guard var s = slots[name], s.key?.keyID == keyID else { return }
        s.challenges.append(c)
        if s.challenges.count > configuration.maxChallengesPerKey { s.challenges.removeFirst() }
        slots[name] = s
    }

    /// `POST challenge_path {"purpose","keyId"}` → `201 {"challenge","expiresAt"}`.
    private func fetchChallenge(purpose: String, keyID: String) async throws(AppAttestClientError) -> KeptChallenge {
        var request = try endpointRequest(configuration.challengePath)
        request.httpBody = Self.json([("purpose", purpose), ("keyId", keyID)])
        let (data, response) = try await exchangeWaiting(request, endpoint: .challenge)
        if (200..<300).contains(response.statusCode),
            let object = (try? JSONSerialization.jsonObject(with: data)) as? [String: Any],
            let value = object["challenge"] as? String, !value.isEmpty
        {
            statistics.challengesFetched += 1
            return KeptChallenge(value: value, expiresAt: (object["expiresAt"] as? String).flatMap(Self.parseTimestamp), isNext: false)
        }
        if let refusal = GatewayRefusal(endpoint: .challenge, data: data, response: response, now: timing.now()) {
            throw Self.isRetryable(refusal) ? .rateLimited(refusal) : .refused(refusal)
        }
        throw .unexpectedResponse(endpoint: .challenge, status: response.statusCode, body: String(decoding: data, as: UTF8.self))
    }

    // MARK: - HTTP

    private func endpointRequest(_ path: String) throws(AppAttestClientError) -> URLRequest {
        var r = URLRequest(
            url: try configuration.endpoint(path), cachePolicy: .reloadIgnoringLocalCacheData,
            timeoutInterval: configuration.endpointTimeout)
        r.httpMethod = "POST"
        r.setValue("application/json", forHTTPHeaderField: "Content-Type")
        return r
    }

    /// An endpoint exchange; a `429`/`503` refusal is waited out (policy) and the request sent again as is.
    private func exchangeWaiting(_ request: URLRequest, endpoint: GatewayRefusal.Endpoint) async throws(AppAttestClientError)
        -> (Data, HTTPURLResponse)
    {
        var waits = 0
        while true {
            let (data, response) = try await exchange(request)
            guard waits < configuration.retry.maxWaits,
                let refusal = GatewayRefusal(endpoint: endpoint, data: data, response: response, now: timing.now()),
                Self.isRetryable(refusal)
            else { return (data, response) }
            try await wait(retryAfter: refusal.retryAfter, attempt: waits)
            waits += 1
        }
    }

    private func exchange(_ request: URLRequest) async throws(AppAttestClientError) -> (Data, HTTPURLResponse) {
        do {
            return try await transport.send(request)
        } catch is CancellationError {
            throw .cancelled
        } catch let e as URLError where e.code == .cancelled {
            throw .cancelled
        } catch {
            throw .transport(error)
        }
    }

    private func wait(retryAfter: TimeInterval?, attempt: Int) async throws(AppAttestClientError) {
        let delay = configuration.retry.delay(retryAfter: retryAfter, attempt: attempt, random: timing.random())
        statistics.waits += 1
        statistics.waitedSeconds += delay
        do {
            try await timing.sleep(delay)
        } catch {
            throw .cancelled
        }
    }

    // MARK: - Per-account state and order

    /// An account's key, its kept challenges, its registration back-off, the FIFO queue that orders
    /// its signatures, and its requests in flight.
    private struct Slot {
        var loaded = false
        var key: StoredAttestKey?
        /// Next challenges kept for the key's next requests, oldest first.
        var challenges: [KeptChallenge] = []
        var busy = false
        var waiters: [CheckedContinuation<Void, Never>] = []
        var registrationFailures = 0
        var registrationDeferredUntil: Date?
        var lastRegistrationFailure: String?
        /// Assertions generated with `signedKeyID` (its counter, as far as this client knows).
        var signed: UInt64 = 0
        var signedKeyID: String?
        var flights: [Flight] = []
        /// The turn's holder waiting for a request in flight to end (`waitForRoom`).
        var roomWaiters: [CheckedContinuation<Void, Never>] = []

        mutating func reset() {
            loaded = true
            key = nil
            challenges = []
            registrationFailures = 0
            registrationDeferredUntil = nil
            lastRegistrationFailure = nil
        }
    }

    /// A signed protected request, from its signature to its answer.
    private struct Flight {
        let ticket: Int
        let keyID: String
        /// Its place in the key's signing order (its assertion's counter, relative).
        let seq: UInt64
        /// Its route's counter window (1: none).
        let window: Int
        let usesChallenge: Bool
    }

    private struct KeptChallenge {
        let value: String
        let expiresAt: Date?
        /// From `X-App-Attest-Next-Challenge` (not fetched).
        let isNext: Bool
    }

    static func slotName(_ account: String?) -> String { InMemoryKeyIDStore.slotName(account) }

    /// Waits for the account's turn (FIFO; `first`: ahead of every waiter, for a request signed
    /// again). A task cancelled while it waits keeps its place; when its turn comes it gives it up at
    /// once (`perform` checks `Task.isCancelled` first).
    private func acquire(_ name: String, first: Bool = false) async {
        if !slots[name, default: Slot()].busy {
            slots[name, default: Slot()].busy = true
            return
        }
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            if first {
                slots[name, default: Slot()].waiters.insert(c, at: 0)
            } else {
                slots[name, default: Slot()].waiters.append(c)
            }
        }
    }

    /// Hands the account's turn to the next waiter, if any.
    private func release(_ name: String) {
        guard var s = slots[name] else { return }
        if s.waiters.isEmpty {
            s.busy = false
            slots[name] = s
        } else {
            let next = s.waiters.removeFirst()
            slots[name] = s
            next.resume()
        }
    }

    /// With the turn held: waits until the key's next assertion may be sent now. Every request of
    /// the key in flight must still accept it behind its counter: the next counter stays below the
    /// in-flight one's plus its route's window (a route without a window: nothing is sent while it
    /// is in flight). And where a challenge must be fetched, fewer than `maxChallengesPerKey`
    /// challenges of the key may be live (in flight or kept). Requests in flight end without the
    /// turn, so this always ends.
    private func waitForRoom(_ name: String, keyID: String, window: Int, usesChallenge: Bool, fetching: Bool) async {
        while !hasRoom(name, keyID: keyID, usesChallenge: usesChallenge, fetching: fetching) {
            await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
                slots[name, default: Slot()].roomWaiters.append(c)
            }
        }
    }

    private func hasRoom(_ name: String, keyID: String, usesChallenge: Bool, fetching: Bool) -> Bool {
        let s = slots[name, default: Slot()]
        let next = (s.signedKeyID == keyID ? s.signed : 0) &+ 1
        var withChallenge = 0
        for f in s.flights where f.keyID == keyID {
            if next >= f.seq &+ UInt64(max(f.window, 1)) { return false }
            if f.usesChallenge { withChallenge += 1 }
        }
        // Nothing of the key in flight: nothing to wait for (a fetch then replaces at most a kept one).
        guard usesChallenge, withChallenge > 0 else { return true }
        let kept = s.challenges.filter(isUsable).count
        if kept > 0 && !fetching { return true }
        return withChallenge + kept < configuration.maxChallengesPerKey
    }

    /// The request just signed is in flight.
    private func startFlight(_ name: String, ticket: Int, keyID: String, window: Int, usesChallenge: Bool) {
        var s = slots[name, default: Slot()]
        if s.signedKeyID != keyID {
            s.signedKeyID = keyID
            s.signed = 0
        }
        s.signed += 1
        s.flights.append(Flight(ticket: ticket, keyID: keyID, seq: s.signed, window: max(window, 1), usesChallenge: usesChallenge))
        statistics.mostInFlight = max(statistics.mostInFlight, s.flights.count { $0.keyID == keyID })
        slots[name] = s
    }

    /// Its answer came (or its exchange failed): a waiting signer may find room now.
    private func endFlight(_ name: String, ticket: Int) {
        guard var s = slots[name] else { return }
        s.flights.removeAll { $0.ticket == ticket }
        let waiting = s.roomWaiters
        s.roomWaiters = []
        slots[name] = s
        for w in waiting { w.resume() }
    }

    // MARK: - Encoding

    enum Header {
        static let keyID = "X-App-Attest-Key-Id"
        static let challenge = "X-App-Attest-Challenge"
        static let assertion = "X-App-Assertion"
        static let nextChallenge = "X-App-Attest-Next-Challenge"
        static let nextChallengeExpires = "X-App-Attest-Next-Challenge-Expires"
    }

    /// A flat JSON object of strings.
    static func json(_ fields: [(String, String)]) -> Data {
        var out = "{"
        for (i, (k, v)) in fields.enumerated() {
            if i > 0 { out += "," }
            out += quoted(k) + ":" + quoted(v)
        }
        return Data((out + "}").utf8)
    }

    private static func quoted(_ s: String) -> String {
        var out = "\""
        for u in s.unicodeScalars {
            switch u {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case _ where u.value < 0x20: out += String(format: "\\u%04x", u.value)
            default: out.unicodeScalars.append(u)
            }
        }
        return out + "\""
    }

    /// RFC 3339 as the gateway writes it (`2026-11-23T14:05:09.123Z`), with or without fractions.
    static func parseTimestamp(_ text: String) -> Date? {
        let f = ISO8601DateFormatter()
        f.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        if let d = f.date(from: text) { return d }
        f.formatOptions = [.withInternetDateTime]
        return f.date(from: text)
    }
}

/// A request as it will be sent and signed: URL without fragment, method as sent, target,
/// authority (client data v2), the route's binding, and the body (or how to build it).
struct Prepared: Sendable {
    let request: URLRequest
    let method: String
    let target: String
    let authority: String
    let binding: AppAttestClient.Binding
    /// The route's counter window (0 or 1: one request of the key in flight).
    let counterWindow: Int
    /// The fixed body (nil: none), when there is no `makeBody`.
    let fixedBody: Data?
    /// SHA-256 of the fixed body, computed before the request waits for its turn.
    let bodySHA256: [UInt8]?
    let makeBody: (@Sendable (String) throws -> Data)?

    init(_ original: URLRequest, configuration: AppAttestClient.Configuration, makeBody: (@Sendable (String) throws -> Data)?)
        throws(AppAttestClientError)
    {
        guard let url = original.url else { throw .invalidRequest("the request has no URL") }
        guard original.httpBodyStream == nil else {
            throw .invalidRequest("a streamed body (httpBodyStream) cannot be hashed before it is sent: set httpBody")
        }
        let sendURL = try AttestClientData.sendableURL(url)
        method = (original.httpMethod ?? "GET").uppercased()
        target = try AttestClientData.requestTarget(of: sendURL)
        let path = URLComponents(url: sendURL, resolvingAgainstBaseURL: true)?.path ?? sendURL.path
        binding = configuration.binding(forPath: path)
        counterWindow = configuration.counterWindow(forPath: path)
        authority = binding == .request(.v2) ? try AttestClientData.authority(of: sendURL) : ""
        if makeBody == nil, binding == .body(challenge: .embedded) {
            throw .invalidRequest(
                "the route binds the body with a challenge: use send(_:account:makeBody:) so that the body can contain it")
        }
        self.makeBody = makeBody
        fixedBody = makeBody == nil ? original.httpBody : nil
        if makeBody == nil, case .request = binding {
            bodySHA256 = Digest.sha256(original.httpBody ?? Data())
        } else {
            bodySHA256 = nil
        }
        var r = original
        r.url = sendURL
        r.httpMethod = method
        r.cachePolicy = .reloadIgnoringLocalCacheData
        for name in [AppAttestClient.Header.keyID, AppAttestClient.Header.challenge, AppAttestClient.Header.assertion] {
            r.setValue(nil, forHTTPHeaderField: name)
        }
        request = r
    }

    /// The body to send and sign: the fixed one, or `makeBody(challenge ?? "")`.
    func body(challenge: String?) throws(AppAttestClientError) -> Data? {
        guard let makeBody else { return fixedBody }
        do {
            return try makeBody(challenge ?? "")
        } catch {
            throw .body(error)
        }
    }
}
