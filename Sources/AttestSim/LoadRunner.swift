import AppAttest
import AppAttestSimulator
import Foundation

/// The options of `attest-sim run`, validated.
public struct RunOptions: Sendable {
    public var endpoint: HTTPEndpoint
    public var paths: GatewayPaths
    public var appID: AppID
    public var environment: AttestEnvironment
    public var devices: Int
    public var requests: Int
    public var concurrency: Int
    public var method: String
    public var path: String
    public var bodySize: Int
    public var binding: Binding
    /// With `bind: request`: the client data version of the route (`assertion.client_data`).
    public var clientData: ClientDataVersion
    /// The Host sent and signed (`--host`; default the gateway's `HOST[:PORT]`).
    public var host: RequestHost
    public var useNextChallenge: Bool
    /// Baseline mode: the same requests without registration, challenge or assertion (for a route
    /// without an assertion block), to compare the protected rate with.
    public var plain: Bool
    /// Seconds per exchange.
    public var timeout: Double
    /// Numeric local address the workers connect from (`--source`); nil: the system's choice.
    public var source: String?
    /// The last `unsupported` devices have no App Attest (`--unsupported`): they register nothing
    /// and send each request with a fresh DeviceCheck token (`X-Apple-Device-Token`, accepted by
    /// `attest-sim apple` for the same CA) and `X-App-Attest-Unsupported: 1`, as apps on such
    /// devices do (docs/client-contract.md, "Devices without App Attest").
    public var unsupported: Int = 0
    /// At most this many protected requests per second in all (`--rate`): each worker sends its
    /// share evenly spaced, and one that fell behind goes on from now rather than catching up in a
    /// burst. Nil: as fast as the gateway answers.
    public var rate: Double? = nil
    /// The platforms of the devices (`--platform`): device `i` is of `platforms[i % count]`, so
    /// `both` alternates iPhones and Android phones.
    public var platforms: [Platform] = [.ios]
    /// The app the Android devices run (required when `platforms` has `.android`).
    public var androidApp: AndroidApp? = nil
    /// A protected request answered `429 key_rate_limited` (the route's `key_rate`, issue 27) is
    /// sent again unchanged after `Retry-After` plus up to a quarter more, at most
    /// `keyRateRetries` times, as the client contract says (`--retry-key-rate`). Off: the 429 is the
    /// request's verdict.
    public var retryKeyRate: Bool = false
    public static let keyRateRetries = 5
    /// `--show-verdict`: keep the signed verdict the (demo) upstream got for an accepted request.
    public var showVerdict = false
    /// Keys per account (`--account`): every device's protected requests carry `X-Demo-Account:
    /// <id>`, which the gateway's demo upstream answers as a backend naming the key's account
    /// (`X-App-Attest-Account`): N devices are N keys of one account (docs/attest-sim.md).
    public var account: String? = nil

    /// Whether device `index` is one without App Attest.
    public func isUnsupported(device index: Int) -> Bool { index >= devices - unsupported }

    public init(
        endpoint: HTTPEndpoint, paths: GatewayPaths = GatewayPaths(), appID: AppID, environment: AttestEnvironment = .production,
        devices: Int, requests: Int, concurrency: Int, method: String = "POST", path: String = "/api/purchase",
        bodySize: Int = 256, binding: Binding = .request, clientData: ClientDataVersion = .v2, host: RequestHost? = nil,
        useNextChallenge: Bool = true, plain: Bool = false, timeout: Double = 10, source: String? = nil, unsupported: Int = 0,
        rate: Double? = nil, platforms: [Platform] = [.ios], androidApp: AndroidApp? = nil, retryKeyRate: Bool = false,
        account: String? = nil
    ) throws(AttestSimError) {
        guard !platforms.isEmpty else { throw .usage("no platform given") }
        if platforms.contains(.android) {
            guard androidApp != nil else { throw .usage("Android devices need the app's package name and signer") }
            guard unsupported == 0 else { throw .usage("--unsupported plays iPhones without App Attest: use it with --platform ios") }
        }
        if let account, account.isEmpty || account.utf8.count > 128 || !account.utf8.allSatisfy({ $0 >= 0x21 && $0 <= 0x7E }) {
            throw .usage("--account must be 1 to 128 visible ASCII characters (got \"\(account)\")")
        }
        guard account == nil || !plain else { throw .usage("--account needs protected requests: remove --plain") }
        self.account = account
        guard devices >= 1 else { throw .usage("--devices must be at least 1 (got \(devices))") }
        guard unsupported >= 0, unsupported <= devices else {
            throw .usage("--unsupported must be 0…\(devices) (the number of devices; got \(unsupported))")
        }
        guard unsupported == 0 || !plain else { throw .usage("--unsupported needs protected requests: remove --plain") }
        guard requests >= 0 else { throw .usage("--requests must not be negative (got \(requests))") }
        guard concurrency >= 1 else { throw .usage("--concurrency must be at least 1 (got \(concurrency))") }
        guard bodySize >= 0, bodySize <= 16 * 1024 * 1024 else { throw .usage("--body-size must be 0…16777216 (got \(bodySize))") }
        guard !method.isEmpty, method.utf8.allSatisfy({ (0x41...0x5A).contains($0) }) else {
            throw .usage("--method must be an upper-case token such as POST (got \"\(method)\")")
        }
        guard path.hasPrefix("/"), !path.utf8.contains(where: { $0 <= 0x20 || $0 >= 0x7F }) else {
            throw .usage("--path must be an origin-form target starting with / without spaces (got \"\(path)\")")
        }
        guard timeout > 0 else { throw .usage("--timeout must be more than 0 seconds") }
        if let rate, !(rate > 0 && rate.isFinite) { throw .usage("--rate must be more than 0 requests per second (got \(rate))") }
        try HTTPEndpoint.checkSource(source)
        for (name, p) in [("challenge", paths.challenge), ("register", paths.register)] where !p.hasPrefix("/") {
            throw .usage("the \(name) path must start with / (got \"\(p)\")")
        }
        self.endpoint = endpoint
        self.paths = paths
        self.appID = appID
        self.environment = environment
        self.devices = devices
        self.requests = requests
        self.concurrency = concurrency
        self.method = method
        self.path = path
        self.bodySize = bodySize
        self.binding = binding
        self.clientData = clientData
        self.host = host ?? RequestHost(endpoint: endpoint)
        self.useNextChallenge = useNextChallenge
        self.plain = plain
        self.timeout = timeout
        self.source = source
        self.unsupported = unsupported
        self.rate = rate
        self.platforms = platforms
        self.androidApp = androidApp
        self.retryKeyRate = retryKeyRate
    }

    /// The platform of device `index`.
    public func platform(ofDevice index: Int) -> Platform { platforms[index % platforms.count] }

    /// Workers actually used: a device's assertions are sequential (its counter), so never more
    /// workers than devices.
    public var workers: Int { min(concurrency, devices) }

    /// Protected requests device `index` sends: an even share, the first `requests % devices` one more.
    public func share(ofDevice index: Int) -> Int { requests / devices + (index < requests % devices ? 1 : 0) }

    /// The devices of worker `w` (every `workers`-th, starting at `w`).
    public func devices(ofWorker w: Int) -> [Int] { Array(stride(from: w, to: devices, by: workers)) }

    /// A deterministic JSON-like body of `bodySize` bytes, different per device and request. With
    /// `bind: body` it holds the challenge (the gateway requires a presented challenge to be inside
    /// the signed body), and is longer than `bodySize` when the challenge does not fit.
    public func body(device: Int, request: Int, challenge: String? = nil) -> [UInt8] {
        let challengeField = challenge.map { "\"challenge\":\"\($0)\"," } ?? ""
        let seed = Array("{\(challengeField)\"device\":\(device),\"request\":\(request),\"pad\":\"".utf8)
        if challenge != nil && seed.count + 2 >= bodySize { return seed + Array("\"}".utf8) }
        guard bodySize > 0 else { return [] }
        var out = [UInt8]()
        out.reserveCapacity(bodySize)
        out += seed.prefix(bodySize)
        var i = 0
        while out.count < bodySize - 2 {
            out.append(UInt8(ascii: "a") + UInt8(i % 26))
            i += 1
        }
        if seed.count + 2 <= bodySize { out += Array("\"}".utf8) }
        while out.count < bodySize { out.append(UInt8(ascii: " ")) }
        return out
    }
}

/// `attest-sim run`: N devices register, then send their share of M protected requests from C
/// worker threads, each with its own keep-alive connection; the report counts every verdict.
public final class LoadRunner: Sendable {
    public let options: RunOptions
    public let ca: TestCA
    /// Issues the Android devices' chains (required when `options.platforms` has `.android`).
    public let androidCA: TestAndroidCA?

    public init(options: RunOptions, ca: TestCA, androidCA: TestAndroidCA? = nil) {
        self.options = options
        self.ca = ca
        self.androidCA = androidCA
    }

    public func run() -> RunReport {
        let o = options
        var report = RunReport(
            gateway: o.endpoint.description, devices: o.devices, requestsPlanned: o.requests, workers: o.workers,
            method: o.method, path: o.path, bodySize: o.bodySize, binding: o.binding, nextChallenge: o.useNextChallenge, plain: o.plain)
        report.platforms = o.platforms.map(\.rawValue)
        let results = ResultBox(workers: o.workers)
        let barrier = Barrier(parties: o.workers + 1)
        let done = DispatchGroup()
        for w in 0..<o.workers {
            done.enter()
            let thread = Thread { [self] in
                results.set(w, self.work(worker: w, barrier: barrier))
                done.leave()
            }
            thread.stackSize = 1 << 20
            thread.start()
        }
        barrier.arrive()
        let start = HTTPClient.now()
        done.wait()
        report.requestPhaseSeconds = HTTPClient.now() - start
        for r in results.all {
            report.registrations.merge(r.registrations)
            report.registrationLatencies += r.registrationLatencies
            report.challenges.merge(r.challenges)
            report.requests.merge(r.requests)
            report.requestLatencies += r.requestLatencies
            report.nextChallengesUsed += r.nextChallengesUsed
            report.connectionsOpened += r.connectionsOpened
            report.retries += r.retries
            report.rateLimitedWaits += r.rateLimitedWaits
            report.keyRateLimited += r.keyRateLimited
            report.keyRateRetriedAccepted += r.keyRateRetriedAccepted
            report.refusedLegitimate += r.refused
            report.requestsNotSent += r.notSent
            for f in r.failures where report.firstFailures.count < 5 { report.firstFailures.append(f) }
            for (p, c) in r.byPlatform { report.byPlatform[p, default: PlatformCounts()].merge(c) }
            if report.upstreamVerdict == nil { report.upstreamVerdict = r.upstreamVerdict }
        }
        report.showVerdict = o.showVerdict
        return report
    }

    /// What one worker saw.
    struct WorkerResult: Sendable {
        var registrations = VerdictCounts()
        var registrationLatencies: [Double] = []
        var challenges = VerdictCounts()
        var requests = VerdictCounts()
        var requestLatencies: [Double] = []
        var nextChallengesUsed = 0
        var connectionsOpened = 0
        var retries = 0
        var rateLimitedWaits = 0
        /// Answers `429 key_rate_limited` (each one, retried or not), and requests accepted when
        /// sent again after one.
        var keyRateLimited = 0
        var keyRateRetriedAccepted = 0
        var refused = 0
        /// Requests never sent: their device could not register, or could not get a challenge.
        var notSent = 0
        var failures: [String] = []
        /// Registrations and requests by platform.
        var byPlatform: [String: PlatformCounts] = [:]
        /// `--show-verdict`: the first accepted request's signed verdict, as the demo upstream echoed it.
        var upstreamVerdict: UpstreamVerdict?

        mutating func fail(_ what: String) {
            refused += 1
            note(what)
        }

        /// A failure's details without counting an exchange (what was not sent because of one).
        mutating func note(_ what: String) {
            if failures.count < 5 { failures.append(what) }
        }
    }

    /// One worker: registers its devices, waits for every worker, then sends the requests of its
    /// devices round-robin (one at a time per device; each device keeps its next challenge).
    func work(worker w: Int, barrier: Barrier) -> WorkerResult {
        let o = options
        var r = WorkerResult()
        let client = HTTPClient(endpoint: o.endpoint, timeout: o.timeout, source: o.source)
        defer { client.close() }
        let session = GatewaySession(client: client, paths: o.paths)
        struct Slot {
            let index: Int
            let device: SimDevice
            var remaining: Int
            var next: String?
            var sent = 0
            /// A device without App Attest: DeviceCheck tokens instead of assertions.
            var deviceCheck: SimulatedDeviceCheck? = nil
        }
        var slots: [Slot] = []
        for i in o.devices(ofWorker: w) {
            var remaining = o.share(ofDevice: i)
            let device: SimDevice
            switch o.platform(ofDevice: i) {
            case .ios:
                device = .ios(SimulatedDevice(appID: o.appID, environment: o.environment, ca: ca))
            case .android:
                do throws(AttestSimError) {
                    guard let androidCA, let app = o.androidApp else { throw .usage("Android devices need the CA's Android CA") }
                    device = .android(try AndroidSimDevice(ca: androidCA, app: app))
                } catch {
                    r.registrations.add(Self.key(error))
                    r.fail("device \(i): \(error)")
                    r.notSent += remaining
                    continue
                }
            }
            let platform = device.platform.rawValue
            if o.isUnsupported(device: i) {
                if remaining > 0 {
                    slots.append(Slot(index: i, device: device, remaining: remaining, deviceCheck: SimulatedDeviceCheck(ca: ca)))
                }
                continue
            }
            if o.plain {
                if remaining > 0 { slots.append(Slot(index: i, device: device, remaining: remaining)) }
                continue
            }
            guard let challenge = fetch(session, .register, device, &r, who: "device \(i)") else {
                r.notSent += remaining
                continue
            }
            let t0 = HTTPClient.now()
            do throws(AttestSimError) {
                let registration = try device.registration(paths: session.paths, challenge: challenge)
                let resp: HTTPResponse
                do {
                    resp = try session.sendHonouringRetryAfter(registration, waited: &r.rateLimitedWaits)
                } catch {
                    throw AttestSimError.transport(error)
                }
                r.registrationLatencies.append(HTTPClient.now() - t0)
                let v = Verdict(resp)
                r.registrations.add(VerdictCounts.key(v))
                r.byPlatform[platform, default: PlatformCounts()].registrations.add(VerdictCounts.key(v))
                if !v.accepted {
                    r.fail("device \(i) registration: \(v) \(resp.bodyText.prefix(200))")
                    r.notSent += remaining
                    remaining = 0
                }
            } catch {
                r.registrations.add(Self.key(error))
                r.byPlatform[platform, default: PlatformCounts()].registrations.add(Self.key(error))
                r.fail("device \(i) registration: \(error)")
                r.notSent += remaining
                remaining = 0
            }
            if remaining > 0 { slots.append(Slot(index: i, device: device, remaining: remaining)) }
        }
        barrier.arrive()
        var active = slots.indices.filter { slots[$0].remaining > 0 }
        let interval = o.rate.map { Double(o.workers) / $0 }
        var due = HTTPClient.now()
        while !active.isEmpty {
            for s in active {
                if let interval {
                    let now = HTTPClient.now()
                    if due > now { Thread.sleep(forTimeInterval: due - now) }
                    due = max(due, now) + interval
                }
                let i = slots[s].index
                var challenge: String?
                if o.plain || slots[s].deviceCheck != nil {
                    challenge = nil
                } else if let next = slots[s].next {
                    challenge = next
                    slots[s].next = nil
                    r.nextChallengesUsed += 1
                } else {
                    challenge = fetch(session, .assert, slots[s].device, &r, who: "device \(i)")
                    if challenge == nil {
                        r.note("device \(i): no challenge; \(slots[s].remaining) requests not sent")
                        r.notSent += slots[s].remaining
                        slots[s].remaining = 0
                        continue
                    }
                }
                let body = o.body(device: i, request: slots[s].sent, challenge: o.binding == .body ? challenge : nil)
                let request =
                    if let deviceCheck = slots[s].deviceCheck {
                        // What an app on a device without App Attest sends: a new token per request.
                        HTTPRequest(
                            method: o.method, target: o.path,
                            headers: [
                                ("X-Apple-Device-Token", deviceCheck.tokenHeader()), ("X-App-Attest-Unsupported", "1"),
                                ("Content-Type", "application/octet-stream"),
                            ], body: body)
                    } else if o.plain {
                        HTTPRequest(
                            method: o.method, target: o.path,
                            headers: body.isEmpty ? [] : [("Content-Type", "application/octet-stream")], body: body)
                    } else {
                        slots[s].device.protected(
                            challenge: challenge, method: o.method, target: o.path, body: body, binding: o.binding,
                            version: o.clientData, host: o.host, account: o.account)
                    }
                var t0 = HTTPClient.now()
                do {
                    var resp = try client.send(request)
                    var v = Verdict(resp)
                    // Over the route's key_rate: nothing was consumed; the very same request passes
                    // once a token is back (docs/client-contract.md, "Limits").
                    var waits = 0
                    while v.status == 429, v.error == "key_rate_limited" {
                        r.keyRateLimited += 1
                        guard o.retryKeyRate, waits < RunOptions.keyRateRetries else { break }
                        let retryAfter = Double(resp.header("Retry-After").flatMap { Int($0) } ?? 1)
                        let wait = min(30, max(1, retryAfter) * (1 + Double.random(in: 0..<0.25)))
                        Thread.sleep(forTimeInterval: wait)
                        waits += 1
                        t0 = HTTPClient.now()
                        resp = try client.send(request)
                        v = Verdict(resp)
                    }
                    if waits > 0, v.accepted { r.keyRateRetriedAccepted += 1 }
                    r.requestLatencies.append(HTTPClient.now() - t0)
                    r.requests.add(VerdictCounts.key(v))
                    r.byPlatform[slots[s].device.platform.rawValue, default: PlatformCounts()].requests.add(VerdictCounts.key(v))
                    if !v.accepted { r.fail("device \(i) request \(slots[s].sent): \(v) \(resp.bodyText.prefix(200))") }
                    if o.useNextChallenge, v.accepted { slots[s].next = GatewayRequests.nextChallenge(resp)?.value }
                    if o.showVerdict, v.accepted, r.upstreamVerdict == nil { r.upstreamVerdict = UpstreamVerdict(demoAnswer: resp.body) }
                } catch {
                    r.requests.add(VerdictCounts.key(error))
                    r.byPlatform[slots[s].device.platform.rawValue, default: PlatformCounts()].requests.add(VerdictCounts.key(error))
                    r.fail("device \(i) request \(slots[s].sent): \(error)")
                }
                slots[s].sent += 1
                slots[s].remaining -= 1
            }
            active = active.filter { slots[$0].remaining > 0 }
        }
        r.connectionsOpened = client.connectionsOpened
        r.retries = client.retries
        return r
    }

    /// A challenge bound to `purpose` and the device's key; nil (counted as a failure) when the
    /// gateway does not issue one.
    private func fetch(
        _ session: GatewaySession, _ purpose: ChallengePurpose, _ device: SimDevice, _ r: inout WorkerResult, who: String
    ) -> String? {
        do {
            let resp = try session.sendHonouringRetryAfter(
                GatewayRequests.challenge(paths: session.paths, purpose: purpose, keyID: device.keyID), waited: &r.rateLimitedWaits)
            let challenge = GatewayRequests.parseChallenge(resp)
            let v = Verdict(resp)
            r.challenges.add(VerdictCounts.key(v))
            guard let challenge else {
                r.fail("\(who) challenge (\(purpose.rawValue)): \(v) \(resp.bodyText.prefix(200))")
                return nil
            }
            return challenge.value
        } catch {
            r.challenges.add(VerdictCounts.key(error))
            r.fail("\(who) challenge (\(purpose.rawValue)): \(error)")
            return nil
        }
    }

    static func key(_ error: AttestSimError) -> String {
        if case .transport(let e) = error { return VerdictCounts.key(e) }
        return "error"
    }
}

/// Per-worker results, written once by each worker thread and read after all have finished.
final class ResultBox: @unchecked Sendable {
    private let lock = NSLock()
    private var results: [LoadRunner.WorkerResult?]

    init(workers: Int) { results = Array(repeating: nil, count: workers) }

    func set(_ w: Int, _ r: LoadRunner.WorkerResult) { lock.withLock { results[w] = r } }

    var all: [LoadRunner.WorkerResult] { lock.withLock { results.compactMap { $0 } } }
}

/// Releases every party once all have arrived (the request phase starts together).
final class Barrier: @unchecked Sendable {
    private let condition = NSCondition()
    private var waiting: Int

    init(parties: Int) { waiting = parties }

    func arrive() {
        condition.lock()
        defer { condition.unlock() }
        waiting -= 1
        if waiting <= 0 {
            condition.broadcast()
            return
        }
        while waiting > 0 { condition.wait() }
    }
}
