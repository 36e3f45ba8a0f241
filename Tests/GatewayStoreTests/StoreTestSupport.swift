import Foundation
import GatewayTestSupport
import Synchronization
import Testing

@testable import GatewayStore

/// Runs a completion-style call and waits for its answer (bounded: 30 s, then the test fails).
func wait<T: Sendable>(_ call: (@escaping @Sendable (T) -> Void) -> Void) -> T {
    let box = Mutex<T?>(nil)
    let done = DispatchSemaphore(value: 0)
    call { value in
        box.withLock { $0 = value }
        done.signal()
    }
    let answered = done.wait(timeout: .now() + 30) == .success
    precondition(answered, "store call did not complete within 30 s")
    return box.withLock { $0! }
}

extension MemoryAttestStore {
    func issue(_ purpose: ChallengePurpose?, key: KeyID? = nil, ttl: Int64 = 60_000, now: Int64) throws -> IssuedChallenge {
        try wait { issueChallenge(ChallengeRequest(purpose: purpose, keyID: key, ttlMillis: ttl), nowMillis: now, completion: $0) }
            .get()
    }

    func state(_ token: ChallengeToken, now: Int64) throws -> ChallengeState {
        try wait { challengeState(token, nowMillis: now, completion: $0) }.get()
    }

    func key(_ id: KeyID) throws -> DeviceKeyRecord? {
        try wait { deviceKey(id, completion: $0) }.get()
    }

    func registerNow(_ record: DeviceKeyRecord, receipt: [UInt8] = [1, 2, 3], challenge: ChallengeToken, now: Int64)
        throws -> RegistrationOutcome
    {
        try wait {
            register(Registration(record: record, receipt: receipt, challenge: challenge), nowMillis: now, completion: $0)
        }.get()
    }

    func commit(_ id: KeyID, counter: UInt32, challenge: ChallengeToken?, now: Int64) throws -> CommitOutcome {
        try wait {
            commitAssertion(AssertionCommit(keyID: id, counter: counter, challenge: challenge), nowMillis: now, completion: $0)
        }.get()
    }

    /// Registers `record` with a fresh registration challenge; fails the test unless it is stored.
    @discardableResult
    func registerFresh(_ record: DeviceKeyRecord, receipt: [UInt8] = [9, 9], now: Int64) throws -> RegistrationOutcome {
        let c = try issue(.register, now: now)
        let outcome = try registerNow(record, receipt: receipt, challenge: c.token, now: now)
        #expect(outcome == .registered(existing: false) || outcome == .registered(existing: true))
        return outcome
    }
}

/// A device key record with random key id and point (the store checks the point's shape only).
func makeRecord(_ rng: inout SeededRandom, counter: UInt32 = 0, app: String = "TEAM123456.com.example.app",
                environment: KeyEnvironment = .production, category: UInt32? = nil, bundle: String? = nil,
                seen: Int64 = 1_700_000_000_000) -> DeviceKeyRecord
{
    let id = KeyID((0..<32).map { _ in UInt8.random(in: 0...255, using: &rng) })!
    let point = [0x04] + (0..<64).map { _ in UInt8.random(in: 0...255, using: &rng) }
    return DeviceKeyRecord(
        keyID: id, publicKey: point, counter: counter, appID: app, environment: environment,
        validationCategory: category, bundleVersion: bundle, firstSeenMillis: seen, lastSeenMillis: seen)
}

/// A fresh directory under /tmp, removed by `remove()`.
struct TempDirectory {
    let path: String

    init() {
        var template = Array("/tmp/attest-store-test-XXXXXX".utf8CString)
        let made = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }
        precondition(made != nil, "mkdtemp failed")
        path = String(decoding: template.prefix(while: { $0 != 0 }).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    func remove() { try? FileManager.default.removeItem(atPath: path) }

    func file(_ name: String) -> String { "\(path)/\(name)" }

    func files() -> [String] { ((try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []).sorted() }

    /// The newest journal segment.
    var lastSegment: String { file(files().filter { $0.hasPrefix("journal-") }.last!) }
}

func readBytes(_ path: String) -> [UInt8] { [UInt8](FileManager.default.contents(atPath: path) ?? Data()) }

func writeBytes(_ path: String, _ bytes: [UInt8]) {
    let written = FileManager.default.createFile(atPath: path, contents: Data(bytes))
    precondition(written, "cannot write \(path)")
}

func appendBytes(_ path: String, _ bytes: [UInt8]) { writeBytes(path, readBytes(path) + bytes) }

/// The StoreError `body` throws, or nil.
func storeError(_ body: () throws -> Void) -> StoreError? {
    do {
        try body()
        return nil
    } catch {
        return error as? StoreError
    }
}
