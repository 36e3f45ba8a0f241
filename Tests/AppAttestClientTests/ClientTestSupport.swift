import AppAttestClient
import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// A gateway played in memory: each request is answered by `reply` (called under a lock, in arrival
/// order) and recorded. The challenge and register endpoints answer 201 unless `reply` says otherwise.
final class ScriptedGateway: AppAttestTransport, @unchecked Sendable {
    struct Reply {
        var status: Int
        var headers: [String: String] = [:]
        var body: String = ""

        static func json(_ status: Int, _ body: String, headers: [String: String] = [:]) -> Reply {
            Reply(status: status, headers: headers.merging(["Content-Type": "application/json"]) { a, _ in a }, body: body)
        }

        /// A refusal of the contract: `{"error","action","requestId"}` and `X-Request-Id`.
        static func refusal(_ status: Int, _ code: String, _ action: String, requestID: String, headers: [String: String] = [:]) -> Reply {
            json(
                status, "{\"error\":\"\(code)\",\"action\":\"\(action)\",\"requestId\":\"\(requestID)\"}",
                headers: headers.merging(["X-Request-Id": requestID]) { a, _ in a })
        }

        /// A verified request forwarded: the upstream's answer with the next challenge.
        static func verified(_ status: Int = 200, next: String, expires: String = "2999-01-01T00:00:00.000Z", body: String = "ok") -> Reply
        {
            Reply(
                status: status, headers: ["X-App-Attest-Next-Challenge": next, "X-App-Attest-Next-Challenge-Expires": expires], body: body)
        }
    }

    /// What `reply` sees: the request, and how many protected requests (neither endpoint) came before it.
    struct Call {
        let request: URLRequest
        let path: String
        let protectedIndex: Int
        var isChallenge: Bool { path.hasSuffix("/attest/challenge") }
        var isRegister: Bool { path.hasSuffix("/attest/register") }
        func header(_ name: String) -> String? { request.value(forHTTPHeaderField: name) }
        var bodyText: String { String(decoding: request.httpBody ?? Data(), as: UTF8.self) }
        /// The counter of a `FakeService` assertion (`assertion <keyID> <counter>`).
        var counter: Int? {
            let text = header("X-App-Assertion").flatMap { Data(base64Encoded: $0) }.map { String(decoding: $0, as: UTF8.self) }
            return text.flatMap { Int($0.split(separator: " ").last ?? "") }
        }
    }

    private let lock = NSLock()
    private var calls: [Call] = []
    private var protectedCount = 0
    private var challengeCount = 0
    private let reply: (Call) -> Reply?
    /// Delay of protected answers (to let concurrent senders overlap if the client allowed it).
    let protectedDelay: TimeInterval
    /// The delay of a protected request, when it is not `protectedDelay`.
    let delays: @Sendable (Call) -> TimeInterval?
    private var inFlight = 0
    private(set) var maxInFlight = 0
    /// Protected requests in the order they were sent (`.sent(index)`) and answered (`.answered(index)`).
    enum Event: Equatable {
        case sent(Int)
        case answered(Int)
    }
    private var eventList: [Event] = []
    var events: [Event] { lock.withLock { eventList } }

    init(
        protectedDelay: TimeInterval = 0, reply: @escaping (Call) -> Reply? = { _ in nil },
        delays: @escaping @Sendable (Call) -> TimeInterval? = { _ in nil }
    ) {
        self.protectedDelay = protectedDelay
        self.delays = delays
        self.reply = reply
    }

    var recorded: [Call] { lock.withLock { calls } }
    var protectedCalls: [Call] { recorded.filter { !$0.isChallenge && !$0.isRegister } }
    var challengeCalls: [Call] { recorded.filter(\.isChallenge) }
    var registerCalls: [Call] { recorded.filter(\.isRegister) }

    func send(_ request: URLRequest) async throws -> (Data, HTTPURLResponse) {
        guard let url = request.url else { throw TestFailure("a request without URL") }
        let (r, isProtected, call): (Reply, Bool, Call) = lock.withLock {
            let path = url.path
            let isEndpoint = path.hasSuffix("/attest/challenge") || path.hasSuffix("/attest/register")
            let call = Call(request: request, path: path, protectedIndex: protectedCount)
            calls.append(call)
            if !isEndpoint {
                eventList.append(.sent(protectedCount))
                protectedCount += 1
                inFlight += 1
                maxInFlight = max(maxInFlight, inFlight)
            }
            if let r = reply(call) { return (r, !isEndpoint, call) }
            if call.isChallenge {
                challengeCount += 1
                return (.json(201, "{\"challenge\":\"ch-\(challengeCount)\",\"expiresAt\":\"2999-01-01T00:00:00.000Z\"}"), false, call)
            }
            if call.isRegister { return (.json(201, "{\"keyId\":\"k\"}"), false, call) }
            return (.verified(next: "next-\(protectedCount)"), true, call)
        }
        if isProtected {
            let delay = delays(call) ?? protectedDelay
            if delay > 0 { try await Task.sleep(nanoseconds: UInt64(delay * 1e9)) }
            lock.withLock {
                inFlight -= 1
                eventList.append(.answered(call.protectedIndex))
            }
        }
        guard let response = HTTPURLResponse(url: url, statusCode: r.status, httpVersion: "HTTP/1.1", headerFields: r.headers) else {
            throw TestFailure("no HTTPURLResponse")
        }
        return (Data(r.body.utf8), response)
    }
}

/// An App Attest service whose keys are `key-1`, `key-2`… and whose assertions are the text
/// `assertion <keyID> <counter>`: every clientDataHash it was given is recorded.
final class FakeService: AppAttestService, @unchecked Sendable {
    private let lock = NSLock()
    private var keys = 0
    private var counters: [String: Int] = [:]
    private var supported: Bool
    private(set) var attestedHashes: [Data] = []
    private(set) var assertedHashes: [Data] = []
    /// Errors thrown by the next calls, in order.
    var attestErrors: [any Error] = []
    var assertErrors: [any Error] = []

    init(isSupported: Bool = true) { supported = isSupported }

    var isSupported: Bool { lock.withLock { supported } }
    var generatedKeys: Int { lock.withLock { keys } }

    func generateKey() async throws -> String {
        lock.withLock {
            keys += 1
            return "key-\(keys)"
        }
    }

    func attestKey(_ keyID: String, clientDataHash: Data) async throws -> Data {
        try lock.withLock {
            attestedHashes.append(clientDataHash)
            if !attestErrors.isEmpty { throw attestErrors.removeFirst() }
            return Data("attestation \(keyID)".utf8)
        }
    }

    func generateAssertion(_ keyID: String, clientDataHash: Data) async throws -> Data {
        try lock.withLock {
            if !assertErrors.isEmpty { throw assertErrors.removeFirst() }
            assertedHashes.append(clientDataHash)
            counters[keyID, default: 0] += 1
            return Data("assertion \(keyID) \(counters[keyID]!)".utf8)
        }
    }

    func set(_ body: (FakeService) -> Void) { lock.withLock { body(self) } }
}

/// A clock the test moves (or the real one), and a sleep that only records (or also really sleeps).
final class TestTiming: @unchecked Sendable {
    private let lock = NSLock()
    private var current: Date
    private var delays: [TimeInterval] = []
    let reallySleep: Bool
    let realClock: Bool
    let randomValue: Double

    init(
        start: Date = Date(timeIntervalSince1970: 1_900_000_000), reallySleep: Bool = false, realClock: Bool = false,
        random: Double = 0.5
    ) {
        current = start
        self.reallySleep = reallySleep
        self.realClock = realClock
        randomValue = random
    }

    var now: Date { realClock ? Date() : lock.withLock { current } }
    var sleeps: [TimeInterval] { lock.withLock { delays } }
    func advance(_ seconds: TimeInterval) { lock.withLock { current += seconds } }

    var timing: AppAttestClient.Timing {
        AppAttestClient.Timing(
            now: { self.now },
            sleep: { d in
                self.lock.withLock { self.delays.append(d) }
                if self.reallySleep { try await Task.sleep(nanoseconds: UInt64(d * 1e9)) }
            },
            random: { self.randomValue })
    }
}

func hex(_ data: Data) -> String { data.map { String(format: "%02x", $0) }.joined() }

func temporaryDirectory(_ prefix: String) -> URL {
    FileManager.default.temporaryDirectory.appendingPathComponent("\(prefix)-\(UUID().uuidString)")
}

struct TestFailure: Error, CustomStringConvertible {
    let description: String
    init(_ d: String) { description = d }
}
