import Foundation

extension AppAttestClient {
    /// The format of a `bind: request` client data; the route's `assertion.client_data` (the
    /// gateway's default is `v2`). The gateway never guesses it: sign in the route's version.
    public enum ClientDataVersion: String, Sendable, CaseIterable {
        /// `challenge \n METHOD \n request-target \n hex(SHA256(body))`: not bound to the host.
        case v1
        /// v1, then `\n` and the normalised authority of the URL.
        case v2
    }

    /// Whether a `bind: body` route takes a challenge (the route's `assertion.challenge`).
    public enum BodyChallenge: Sendable, Equatable {
        /// `challenge: off`: no challenge header; the counter alone stops replays.
        case off
        /// `challenge: required` (or `optional`): a challenge header, and the signed body contains the
        /// challenge text; the body is built by `send(_:account:makeBody:)` once the challenge is known.
        case embedded
    }

    /// What a route's assertion covers (the route's `assertion.bind`).
    public enum Binding: Sendable, Equatable {
        /// `bind: request` in a client data version.
        case request(ClientDataVersion)
        /// `bind: body`: the body is the client data.
        case body(challenge: BodyChallenge)
    }

    /// A protected route as the app sees it: a path prefix (on segment boundaries, as the gateway's
    /// `match.path_prefix`: `/api/purchase` covers `/api/purchase/7`, not `/api/purchases`).
    public struct Route: Sendable, Equatable {
        public var pathPrefix: String
        public var binding: Binding
        /// The route's `assertion.counter_window` (at most 64; 0 or 1: none). On such a route the
        /// requests of a key are still signed in the order the calls came, but each is sent without
        /// waiting for the answer of the previous ones: at most this many of the key's assertions,
        /// counted in signing order, are in flight at once (and, where the route takes a challenge,
        /// at most `Configuration.maxChallengesPerKey`, each with its own challenge).
        public var counterWindow: Int

        public init(pathPrefix: String, binding: Binding, counterWindow: Int = 0) {
            self.pathPrefix = pathPrefix
            self.binding = binding
            self.counterWindow = min(max(counterWindow, 0), 64)
        }

        func covers(_ path: String) -> Bool {
            if pathPrefix == "/" || path == pathPrefix { return true }
            guard path.hasPrefix(pathPrefix) else { return false }
            return pathPrefix.hasSuffix("/") || path.dropFirst(pathPrefix.count).first == "/"
        }
    }

    /// What `send` does on a device where App Attest is not supported (`isSupported` false: some
    /// Macs, the iOS simulator, old devices).
    public enum UnsupportedBehaviour: Sendable, Equatable {
        /// Throw `AppAttestClientError.unsupported`: the app chooses its own fallback.
        case fail
        /// Send the request without attestation headers: a `shadow` route forwards it; an `enforce`
        /// route refuses it (`assertion_missing`, thrown as a refusal after one rechallenge).
        case sendUnprotected
    }

    /// How long and how often the client waits when told to (`429`/`503`, Apple's
    /// `serverUnavailable`), and how it backs off after a failed registration.
    public struct RetryPolicy: Sendable, Equatable {
        /// Waits per exchange (a challenge fetch, a registration, a protected request) before giving up.
        public var maxWaits: Int
        /// The longest single wait, in seconds.
        public var maxDelay: TimeInterval
        /// The first wait when the answer names no `Retry-After` (and the least wait when it names 0).
        public var minimumDelay: TimeInterval
        /// After a registration the gateway or Apple refused, no new attempt for this long (doubling
        /// with each further failure, plus jitter, up to `maxRegistrationCooldown`).
        public var registrationCooldown: TimeInterval
        public var maxRegistrationCooldown: TimeInterval

        public init(
            maxWaits: Int = 4, maxDelay: TimeInterval = 300, minimumDelay: TimeInterval = 1,
            registrationCooldown: TimeInterval = 60, maxRegistrationCooldown: TimeInterval = 3600
        ) {
            self.maxWaits = maxWaits
            self.maxDelay = maxDelay
            self.minimumDelay = minimumDelay
            self.registrationCooldown = registrationCooldown
            self.maxRegistrationCooldown = maxRegistrationCooldown
        }

        /// The contract's wait: `Retry-After` (at least `minimumDelay`) doubled per earlier wait of
        /// this exchange, plus a random extra of 0–100 % of it (`random` in 0..<1), so that a wave of
        /// devices does not come back in step; at most `maxDelay`.
        public func delay(retryAfter: TimeInterval?, attempt: Int, random: Double) -> TimeInterval {
            let base = min(maxDelay, max(retryAfter ?? 0, minimumDelay) * pow(2, Double(min(attempt, 30))))
            return min(maxDelay, base + base * min(max(random, 0), 1))
        }

        /// The cool-down after the `failures`-th consecutive failed registration.
        public func cooldown(failures: Int, random: Double) -> TimeInterval {
            let base = min(maxRegistrationCooldown, registrationCooldown * pow(2, Double(min(max(failures - 1, 0), 30))))
            return min(maxRegistrationCooldown, base + base * min(max(random, 0), 1))
        }
    }

    public struct Configuration: Sendable {
        /// The gateway's base URL; the challenge and register paths are appended to its path.
        public var gateway: URL
        /// Protected routes by path prefix (the longest matching prefix wins).
        public var routes: [Route]
        /// The binding of a path no route covers: `bind: request`, client data `v2` (the gateway's default).
        public var defaultBinding: Binding
        /// `attest.challenge_path`.
        public var challengePath: String
        /// `attest.register_path`.
        public var registerPath: String
        public var retry: RetryPolicy
        /// A kept challenge (`X-App-Attest-Next-Challenge`) is used only while it has at least this
        /// many seconds left by the device's clock; otherwise a fresh one is fetched.
        public var challengeExpiryMargin: TimeInterval
        public var whenUnsupported: UnsupportedBehaviour
        /// `timeoutInterval` of the challenge and register requests.
        public var endpointTimeout: TimeInterval
        /// The gateway's `store.max_challenges_per_key` (default 4, at most 8): the live challenges a
        /// key may hold. On a `counterWindow` route each request in flight holds one, so no more
        /// than this many are in flight there: a challenge fetched beyond it would replace one of
        /// the key's own at the gateway.
        public var maxChallengesPerKey: Int

        public init(
            gateway: URL, routes: [Route] = [], defaultBinding: Binding = .request(.v2),
            challengePath: String = "/v1/attest/challenge", registerPath: String = "/v1/attest/register",
            retry: RetryPolicy = RetryPolicy(), challengeExpiryMargin: TimeInterval = 5, whenUnsupported: UnsupportedBehaviour = .fail,
            endpointTimeout: TimeInterval = 30, maxChallengesPerKey: Int = 4
        ) {
            self.gateway = gateway
            self.routes = routes
            self.defaultBinding = defaultBinding
            self.challengePath = challengePath
            self.registerPath = registerPath
            self.retry = retry
            self.challengeExpiryMargin = challengeExpiryMargin
            self.whenUnsupported = whenUnsupported
            self.endpointTimeout = endpointTimeout
            self.maxChallengesPerKey = max(1, maxChallengesPerKey)
        }

        /// The binding of `path`: the route with the longest prefix covering it, else `defaultBinding`.
        public func binding(forPath path: String) -> Binding {
            route(forPath: path)?.binding ?? defaultBinding
        }

        /// The counter window of `path`'s route (0: none, also for paths no route covers).
        public func counterWindow(forPath path: String) -> Int {
            route(forPath: path)?.counterWindow ?? 0
        }

        /// The route with the longest prefix covering `path`.
        func route(forPath path: String) -> Route? {
            let p = path.isEmpty ? "/" : path
            return routes.filter { $0.covers(p) }.max { $0.pathPrefix.count < $1.pathPrefix.count }
        }

        /// `gateway` with `path` appended to its path.
        func endpoint(_ path: String) throws(AppAttestClientError) -> URL {
            guard var c = URLComponents(url: gateway, resolvingAgainstBaseURL: true) else {
                throw .invalidRequest("the gateway URL cannot be parsed: \(gateway)")
            }
            var base = c.percentEncodedPath
            while base.hasSuffix("/") { base.removeLast() }
            c.percentEncodedPath = base + (path.hasPrefix("/") ? path : "/" + path)
            c.query = nil
            c.fragment = nil
            guard let url = c.url else { throw .invalidRequest("cannot append \(path) to the gateway URL \(gateway)") }
            return url
        }
    }

    /// The clock, the sleep and the random source of the client: parameters, for tests.
    public struct Timing: Sendable {
        public var now: @Sendable () -> Date
        public var sleep: @Sendable (TimeInterval) async throws -> Void
        /// A number in 0..<1 (jitter).
        public var random: @Sendable () -> Double

        public init(
            now: @escaping @Sendable () -> Date, sleep: @escaping @Sendable (TimeInterval) async throws -> Void,
            random: @escaping @Sendable () -> Double
        ) {
            self.now = now
            self.sleep = sleep
            self.random = random
        }

        public static let system = Timing(
            now: { Date() }, sleep: { try await Task.sleep(nanoseconds: UInt64(min(max(0, $0), 1e9) * 1_000_000_000)) },
            random: { Double.random(in: 0..<1) })
    }

    /// What the client did, since it was created.
    public struct Statistics: Sendable, Equatable {
        /// Protected requests sent (retries included).
        public var protectedRequestsSent = 0
        /// Challenges fetched from the challenge endpoint (registrations included).
        public var challengesFetched = 0
        /// Protected requests signed over a kept `X-App-Attest-Next-Challenge`.
        public var nextChallengesUsed = 0
        public var keysGenerated = 0
        /// Keys the gateway registered (201).
        public var registrations = 0
        /// Protected requests sent again after a `rechallenge` refusal.
        public var rechallenges = 0
        /// Keys replaced after a `reattest` refusal or an invalid key.
        public var reattestations = 0
        /// Waits (429/503, Apple's `serverUnavailable`), and their total in seconds.
        public var waits = 0
        public var waitedSeconds: TimeInterval = 0
        /// The most protected requests of one key that were in flight at once (1 unless a
        /// `counterWindow` route let several go).
        public var mostInFlight = 0

        public init() {}
    }
}
