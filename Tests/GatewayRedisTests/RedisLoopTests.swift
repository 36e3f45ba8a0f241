import Dispatch
import Foundation
import GatewayCrypto
import GatewayIO
import GatewayStore
import GatewayTestSupport
import GatewayWire
import Synchronization
import Testing

@testable import GatewayRedis

private let t0: Int64 = 1_700_000_000_000

/// The store's calls made on an event loop, as the gateway makes them (`AttestStore` forwarded onto
/// `loop`): each call is started on the loop, and its completion must run on the loop too (the
/// loop path answers inline; the threaded pool would answer on a connection thread). `offLoop`
/// counts completions that did not.
final class OnLoopStore: AttestStore, @unchecked Sendable {
    let inner: RedisAttestStore
    let loop: EventLoop
    private let marker = DispatchSpecificKey<Int>()
    let offLoop = Atomic<Int>(0)

    init(_ inner: RedisAttestStore, loop: EventLoop) {
        self.inner = inner
        self.loop = loop
        loop.queue.setSpecific(key: marker, value: loop.index)
    }

    /// A store on `endpoint` serving a loop of its own (index `loopIndex`), seen from that loop.
    convenience init(endpoint: RedisEndpoint, loopIndex: Int) {
        let loop = EventLoop(index: loopIndex)
        self.init(RedisAttestStore(options: .init(endpoint: endpoint)), loop: loop)
        inner.serve(on: [loop])
    }

    /// Closes the store, then stops the loop (waiting until it ran its last task).
    func stop() {
        inner.close()
        loop.shutdownAndWait()
    }

    private func onLoop<T>(_ completion: @escaping @Sendable (T) -> Void) -> @Sendable (T) -> Void {
        { [self] value in
            if DispatchQueue.getSpecific(key: marker) == nil { offLoop.wrappingAdd(1, ordering: .relaxed) }
            completion(value)
        }
    }

    func issueChallenge(
        _ r: ChallengeRequest, nowMillis: Int64, completion: @escaping @Sendable (Result<IssuedChallenge, StoreError>) -> Void
    ) {
        loop.execute { [self] in inner.issueChallenge(r, nowMillis: nowMillis, completion: onLoop(completion)) }
    }

    func challengeState(_ t: ChallengeToken, nowMillis: Int64, completion: @escaping @Sendable (Result<ChallengeState, StoreError>) -> Void)
    {
        loop.execute { [self] in inner.challengeState(t, nowMillis: nowMillis, completion: onLoop(completion)) }
    }

    func deviceKey(_ id: KeyID, completion: @escaping @Sendable (Result<DeviceKeyRecord?, StoreError>) -> Void) {
        loop.execute { [self] in inner.deviceKey(id, completion: onLoop(completion)) }
    }

    func register(_ r: Registration, nowMillis: Int64, completion: @escaping @Sendable (Result<RegistrationOutcome, StoreError>) -> Void) {
        loop.execute { [self] in inner.register(r, nowMillis: nowMillis, completion: onLoop(completion)) }
    }

    func commitAssertion(
        _ c: AssertionCommit, nowMillis: Int64, completion: @escaping @Sendable (Result<CommitOutcome, StoreError>) -> Void
    ) {
        loop.execute { [self] in inner.commitAssertion(c, nowMillis: nowMillis, completion: onLoop(completion)) }
    }

    func claimToken(
        _ digest: [UInt8], ttlMillis: Int64, nowMillis: Int64,
        completion: @escaping @Sendable (Result<TokenClaimOutcome, StoreError>) -> Void
    ) {
        loop.execute { [self] in inner.claimToken(digest, ttlMillis: ttlMillis, nowMillis: nowMillis, completion: onLoop(completion)) }
    }

    func releaseToken(_ digest: [UInt8], completion: @escaping @Sendable (Result<Void, StoreError>) -> Void) {
        loop.execute { [self] in inner.releaseToken(digest, completion: onLoop(completion)) }
    }

    var statistics: StoreStatistics { inner.statistics }

    func assertionKey(_ id: KeyID, completion: @escaping @Sendable (Result<DeviceKeyRecord?, StoreError>) -> Void) {
        loop.execute { [self] in inner.assertionKey(id, completion: onLoop(completion)) }
    }

    func commitAssertion(
        _ c: AssertionCommit, checked: CheckedKey?, issuing next: ChallengeRequest?, nowMillis: Int64,
        completion: @escaping @Sendable (Result<CommitAndNext, StoreError>) -> Void
    ) {
        loop.execute { [self] in
            inner.commitAssertion(c, checked: checked, issuing: next, nowMillis: nowMillis, completion: onLoop(completion))
        }
    }

    /// Requests the loop's own connection answered so far, and whether it is up.
    var loopStatus: (served: Int, up: Bool, connects: Int) {
        loop.queue.sync {
            let c = inner.currentLoopConnection
            return (c?.served ?? 0, c?.isUp ?? false, c?.connects ?? 0)
        }
    }

    /// Waits (at most `millis`) until the loop's connection is up.
    func waitUntilLoopUp(millis: Int = 10_000) -> Bool {
        let deadline = Date().addingTimeInterval(Double(millis) / 1000)
        while Date() < deadline {
            if loopStatus.up { return true }
            usleep(10_000)
        }
        return false
    }
}

/// A redis-server, a store on it serving one event loop, and that loop's view of the store.
final class LoopFixture: Sendable {
    let redis: RedisProcess
    let store: RedisAttestStore
    let loop: EventLoop
    let onLoop: OnLoopStore

    init(
        durable: Bool = false, timeoutMillis: Int64 = 1_000, security: RedisServerSecurity = RedisServerSecurity(),
        client: RedisSecurity = RedisSecurity(), database: Int = 0
    ) throws {
        redis = try RedisProcess(durable: durable, security: security)
        onLoop = OnLoopStore(
            endpoint: RedisEndpoint(
                host: "127.0.0.1", port: redis.port, database: database, timeoutMillis: timeoutMillis, security: client),
            loopIndex: 0)
        store = onLoop.inner
        loop = onLoop.loop
        guard store.waitUntilConnected(timeoutMillis: 10_000), onLoop.waitUntilLoopUp() else {
            stop()
            throw NSError(
                domain: "LoopFixture", code: 1, userInfo: [NSLocalizedDescriptionKey: "store did not connect: \(store.lastError)"])
        }
    }

    func stop() {
        onLoop.stop()
        redis.stop()
    }
}

@Suite("Redis store: key names and numbers written as bytes")
struct RedisBytesTests {
    /// The byte-built names and decimals are exactly what the String forms were.
    @Test func sameAsTheStringForms() {
        var rng = SeededRandom(seed: 700)
        for prefix in ["", "ag:k:", "tenant-a/attest:c:"] {
            for n in 0...64 {
                let bytes = (0..<n).map { _ in UInt8.random(in: 0...255, using: &rng) }
                let text = prefix + "{" + Hex.encode(bytes.prefix(4)) + "}" + Hex.encode(bytes.dropFirst(4))
                #expect(RedisAttestStore.tagged(Array(prefix.utf8), bytes) == Array(text.utf8), "\(prefix) \(n) bytes")
            }
        }
        #expect(RedisAttestStore.tagged(Array("ag:c:".utf8), [0xde, 0xad, 0xbe, 0xef, 0x00, 0x0f]) == Array("ag:c:{deadbeef}000f".utf8))
        for v: Int64 in [0, 1, 9, 10, 99, 100, 12_345, 1_700_000_000_000, Int64.max, -1, -42, Int64.min] {
            #expect(RedisAttestStore.decimal(v) == Array(String(v).utf8))
        }
        #expect(RedisAttestStore.decimal(UInt32.max) == Array(String(UInt32.max).utf8))
        #expect(RedisAttestStore.decimal(UInt64.max) == Array(String(UInt64.max).utf8))
    }
}

@Suite(
    "Redis store: calls made on an event loop are served on that loop", .serialized, .timeLimit(.minutes(3)),
    .enabled(if: RedisProcess.testsEnabled, Comment(rawValue: RedisProcess.skipMessage)))
struct RedisLoopTests {
    /// The memory store's outcome lists, every call made on the loop: each answered on the loop, by
    /// the loop's connection (none through the threaded pool).
    @Test func outcomesOnTheLoop() throws {
        let f = try LoopFixture()
        defer { f.stop() }
        var rng = SeededRandom(seed: 701)
        try checkCommitOutcomes(f.onLoop, rng: &rng, t0: t0)
        try checkCounterWindow(f.onLoop, rng: &rng, t0: t0)
        try checkTokenClaims(f.onLoop, rng: &rng)
        let record = makeRecord(&rng)
        try f.onLoop.registerFresh(record, now: t0)
        let next = wait {
            f.onLoop.commitAssertion(
                AssertionCommit(keyID: record.keyID, counter: 1, challenge: nil), checked: CheckedKey(record),
                issuing: ChallengeRequest(purpose: .assert, keyID: record.keyID, ttlMillis: 5_000, chained: true), nowMillis: t0,
                completion: $0)
        }
        let done = try next.get()
        #expect(done.outcome == .committed(previousCounter: 0))
        let token = try #require(done.next?.token)
        #expect(try f.onLoop.state(token, now: t0) == .valid(purpose: .assert, keyID: record.keyID, expiresAtMillis: t0 + 5_000))
        #expect(f.onLoop.offLoop.load(ordering: .relaxed) == 0, "completions that ran off the loop")
        #expect(f.onLoop.loopStatus.served >= 40, "requests the loop's connection answered: \(f.onLoop.loopStatus.served)")
    }

    /// Thousands of requests made in one turn of the loop leave in one pipeline: each gets its own
    /// answer, in the order made.
    @Test func pipelinedRequestsEachGetTheirOwnAnswerInOrder() throws {
        let f = try LoopFixture()
        defer { f.stop() }
        var rng = SeededRandom(seed: 702)
        let keys = (0..<2_000).map { _ in makeRecord(&rng).keyID }
        let answers = Mutex<[(Int, IssuedChallenge?)]>([])
        let done = DispatchSemaphore(value: 0)
        let before = f.onLoop.loopStatus.served
        f.loop.execute {
            for (i, key) in keys.enumerated() {
                f.store.issueChallenge(ChallengeRequest(purpose: .assert, keyID: key, ttlMillis: 1_000 + Int64(i)), nowMillis: t0) {
                    result in
                    let n = answers.withLock { a in
                        a.append((i, try? result.get()))
                        return a.count
                    }
                    if n == keys.count { done.signal() }
                }
            }
        }
        #expect(done.wait(timeout: .now() + 30) == .success)
        let issued = answers.withLock { $0 }
        let outOfOrder = zip(issued.map(\.0), 0...).filter { $0.0 != $0.1 }.count
        #expect(issued.count == keys.count && outOfOrder == 0, "answered in the order asked (\(outOfOrder) out of order)")
        for (i, c) in issued {
            #expect(c?.expiresAtMillis == t0 + 1_000 + Int64(i))
            #expect(c.map { Array($0.token.bytes.prefix(4)) == Array(keys[i].bytes.prefix(4)) } == true)
        }
        // Each challenge is the one its request asked for (its key, its expiry), read back the same way.
        let states = Mutex<[Int: ChallengeState]>([:])
        let read = DispatchSemaphore(value: 0)
        f.loop.execute {
            for (i, c) in issued {
                guard let c else { continue }
                f.store.challengeState(c.token, nowMillis: t0) { result in
                    let n = states.withLock { s in
                        s[i] = try? result.get()
                        return s.count
                    }
                    if n == keys.count { read.signal() }
                }
            }
        }
        #expect(read.wait(timeout: .now() + 30) == .success)
        let all = states.withLock { $0 }
        for i in 0..<keys.count {
            #expect(all[i] == .valid(purpose: .assert, keyID: keys[i], expiresAtMillis: t0 + 1_000 + Int64(i)))
        }
        #expect(f.onLoop.loopStatus.served - before == 2 * keys.count, "every request on the loop's connection")
        #expect(f.loop.queue.sync { f.loop.awaitedReplies } == 0, "nothing awaited once everything is answered")
    }

    /// Two loops, each with its own connection, commit the same key's counters at once (one accept
    /// per counter across them), as two instances would.
    @Test func twoLoopsRaceOneCounter() throws {
        let redis = try RedisProcess()
        defer { redis.stop() }
        let store = RedisAttestStore(options: .init(endpoint: RedisEndpoint(host: "127.0.0.1", port: redis.port)))
        let loops = [EventLoop(index: 0), EventLoop(index: 1)]
        let views = loops.map { OnLoopStore(store, loop: $0) }
        store.serve(on: loops)
        defer {
            store.close()
            for l in loops { l.shutdownAndWait() }
        }
        try #require(store.waitUntilConnected(timeoutMillis: 10_000) && views.allSatisfy { $0.waitUntilLoopUp() })
        var rng = SeededRandom(seed: 703)
        let record = makeRecord(&rng)
        try store.registerFresh(record, now: t0)
        let wins = Mutex<[Int: Int]>([:])
        let answered = DispatchGroup()
        for counter in 1...50 {
            for i in 0..<8 {
                answered.enter()
                views[i % 2].commitAssertion(AssertionCommit(keyID: record.keyID, counter: UInt32(counter), challenge: nil), nowMillis: t0)
                {
                    if case .success(.committed) = $0 { wins.withLock { $0[counter, default: 0] += 1 } }
                    answered.leave()
                }
            }
        }
        #expect(answered.wait(timeout: .now() + 30) == .success)
        // Counters arrive out of order across the loops; each is accepted at most once, the last exactly once.
        let perCounter = wins.withLock { $0 }
        #expect(perCounter.values.allSatisfy { $0 == 1 }, "\(perCounter)")
        #expect(perCounter[50] == 1)
        #expect(try store.key(record.keyID)?.counter == 50)
        #expect(views.allSatisfy { $0.offLoop.load(ordering: .relaxed) == 0 })
        #expect(views.map { $0.loopStatus.served }.allSatisfy { $0 > 0 })
    }

    /// SCRIPT FLUSH: requests in flight on the loop get NOSCRIPT, the scripts are loaded again (once)
    /// and each request runs again, answered as if nothing happened.
    @Test func reloadsScriptsOnTheLoop() throws {
        let f = try LoopFixture()
        defer { f.stop() }
        var rng = SeededRandom(seed: 704)
        let records = (0..<20).map { _ in makeRecord(&rng) }
        for r in records { try f.store.registerFresh(r, now: t0) }
        try f.redis.cli(["SCRIPT", "FLUSH"])
        let loadsBefore = try f.redis.commandCalls()["script|load"] ?? f.redis.commandCalls()["script"] ?? 0
        let committed = Atomic<Int>(0)
        let done = DispatchGroup()
        for _ in records { done.enter() }
        f.loop.execute {
            for r in records {
                f.store.commitAssertion(AssertionCommit(keyID: r.keyID, counter: 1, challenge: nil), nowMillis: t0) {
                    if case .success(.committed(previousCounter: 0)) = $0 { committed.wrappingAdd(1, ordering: .relaxed) }
                    done.leave()
                }
            }
        }
        #expect(done.wait(timeout: .now() + 30) == .success)
        #expect(committed.load(ordering: .relaxed) == records.count)
        #expect(try f.redis.cli(["SCRIPT", "EXISTS", sha1Hex(RedisScripts.commit)]) == "1")
        let loadsAfter = try f.redis.commandCalls()["script|load"] ?? f.redis.commandCalls()["script"] ?? 0
        #expect(loadsAfter - loadsBefore == RedisScripts.all.count, "the scripts loaded once for the whole pipeline")
        for r in records { #expect(try f.store.key(r.keyID)?.counter == 1) }
    }

    /// Redis killed in the middle of a load made on the loop: every request is answered (committed,
    /// or `unavailable` while Redis is down), none twice; restarted with its AOF, the loop's own
    /// connection comes back and serves again, and what was committed before stays refused.
    @Test func redisKilledAndRestartedMidLoad() throws {
        let f = try LoopFixture(durable: true, timeoutMillis: 500)
        defer { f.stop() }
        var rng = SeededRandom(seed: 705)
        let record = makeRecord(&rng)
        try f.store.registerFresh(record, now: t0)
        let connectsBefore = f.onLoop.loopStatus.connects
        // A load on the loop: counters 1, 2, 3, … each sent when the previous one is answered, 4 chains.
        let next = Atomic<Int>(1)
        let committed = Mutex<[UInt32]>([])
        let failures = Atomic<Int>(0)
        let others = Atomic<Int>(0)
        let stop = Atomic<Bool>(false)
        let chains = DispatchGroup()
        @Sendable func send() {
            guard !stop.load(ordering: .relaxed) else { return chains.leave() }
            let counter = UInt32(next.wrappingAdd(1, ordering: .relaxed).oldValue)
            f.store.commitAssertion(
                AssertionCommit(keyID: record.keyID, counter: counter, challenge: nil, counterWindow: 64), nowMillis: t0
            ) {
                switch $0 {
                case .success(.committed): committed.withLock { $0.append(counter) }
                case .failure(let e) where e.code == .unavailable: failures.wrappingAdd(1, ordering: .relaxed)
                default: others.wrappingAdd(1, ordering: .relaxed)
                }
                if case .failure = $0 { usleep(2_000) }  // while down: not a busy loop
                f.loop.execute { send() }  // not nested: a call failed at once answers inline
            }
        }
        for _ in 0..<4 {
            chains.enter()
            f.loop.execute { send() }
        }
        usleep(300_000)
        f.redis.kill()
        usleep(300_000)
        try f.redis.start()
        #expect(f.onLoop.waitUntilLoopUp())
        let servedAfterRestart = f.onLoop.loopStatus.served
        usleep(300_000)
        stop.store(true, ordering: .relaxed)
        #expect(chains.wait(timeout: .now() + 30) == .success, "every chain answered")
        let accepted = committed.withLock { $0 }
        #expect(failures.load(ordering: .relaxed) > 0, "requests failed while Redis was down")
        #expect(Set(accepted).count == accepted.count, "no counter accepted twice")
        #expect(accepted.count > 10)
        #expect(f.onLoop.loopStatus.connects > connectsBefore, "the loop's connection reconnected")
        #expect(f.onLoop.loopStatus.served > servedAfterRestart, "and served again after the restart")
        #expect(f.onLoop.offLoop.load(ordering: .relaxed) == 0)
        #expect(f.loop.queue.sync { f.loop.awaitedReplies } == 0, "nothing awaited once everything is answered or failed")
        // What was accepted before the kill (AOF, fsync always) stays accepted: a replay is refused.
        let highest = try #require(accepted.max())
        #expect(try f.onLoop.commit(record.keyID, counter: highest, challenge: nil, now: t0) == .counterReplay(stored: highest))
    }

    /// A Redis that stops answering (SIGSTOP): a request on the loop fails with `unavailable` after
    /// the timeout instead of waiting; once Redis answers again (SIGCONT), the loop serves again.
    @Test func silentRedisTimesOutOnTheLoop() throws {
        let f = try LoopFixture(timeoutMillis: 300)
        defer {
            f.redis.resume()
            f.stop()
        }
        var rng = SeededRandom(seed: 706)
        let record = makeRecord(&rng)
        try f.store.registerFresh(record, now: t0)
        f.redis.pause()
        let started = Date()
        let result = wait {
            f.onLoop.commitAssertion(AssertionCommit(keyID: record.keyID, counter: 1, challenge: nil), nowMillis: t0, completion: $0)
        }
        let waited = Date().timeIntervalSince(started)
        #expect(unavailable(result))
        if case .failure(let e) = result { #expect(e.detail.contains("within 300 ms"), "\(e.detail)") }
        #expect(waited >= 0.25 && waited < 3, "answered after \(waited) s")
        f.redis.resume()
        #expect(f.onLoop.waitUntilLoopUp())
        let served = f.onLoop.loopStatus.served
        #expect(
            try f.onLoop.commit(record.keyID, counter: 2, challenge: nil, now: t0) == .committed(previousCounter: 0)
                || (try f.onLoop.commit(record.keyID, counter: 3, challenge: nil, now: t0)) == .committed(previousCounter: 2))
        #expect(f.onLoop.loopStatus.served > served)
    }

    /// A password (an ACL user) and a database other than 0: the loop's connection authenticates and
    /// selects it, like the threaded ones; a wrong password keeps it down, and the calls then go
    /// through the threaded pool (which refuses them with the pool's outcome).
    @Test func authenticationAndDatabaseOnTheLoop() throws {
        let security = RedisServerSecurity(users: [(name: "gateway", password: "s3cret")], defaultUserOff: true)
        let f = try LoopFixture(security: security, client: RedisSecurity(username: "gateway", password: Array("s3cret".utf8)), database: 3)
        defer { f.stop() }
        var rng = SeededRandom(seed: 707)
        let record = makeRecord(&rng)
        let c = try f.onLoop.issue(.register, key: record.keyID, now: t0)
        #expect(try f.onLoop.registerNow(record, challenge: c.token, now: t0) == .registered(existing: false))
        #expect(f.onLoop.loopStatus.served >= 2)
        let name = String(decoding: f.store.keyName(record.keyID), as: UTF8.self)
        #expect(try f.redis.cli(["-n", "3", "EXISTS", name]) == "1")
        #expect(try f.redis.cli(["-n", "0", "EXISTS", name]) == "0")

        let lastError = neverUpOnLoop(port: f.redis.port, security: RedisSecurity(username: "gateway", password: Array("nope".utf8)))
        #expect(lastError.contains("WRONGPASS") && !lastError.contains("nope"), "\(lastError)")
    }

    /// `rediss://`: the loop's connection runs the same TLS session (CA, name) and serves; with a CA
    /// that did not sign the server's certificate it never comes up (the handshake's failure named),
    /// and calls get the threaded pool's answer.
    @Test func tlsOnTheLoop() throws {
        let certs = try TestCertificates()
        defer { certs.remove() }
        func context(_ ca: String) throws -> TLSClientContext {
            try TLSClientContext(
                configuration: TLSClientConfiguration(caFile: ca, clientCertificatePath: nil, clientKeyPath: nil, alpnProtocols: []))
        }
        var client = RedisSecurity(username: "gateway", password: Array("tls-pass".utf8))
        client.tls = try context(certs.caCertificate)
        let f = try LoopFixture(security: RedisServerSecurity(users: [("gateway", "tls-pass")], tls: certs), client: client)
        defer { f.stop() }
        var rng = SeededRandom(seed: 708)
        try checkCommitOutcomes(f.onLoop, rng: &rng, t0: t0)
        #expect(f.onLoop.offLoop.load(ordering: .relaxed) == 0)
        #expect(f.onLoop.loopStatus.served >= 10, "requests the loop's connection answered: \(f.onLoop.loopStatus.served)")

        var wrongCA = client
        wrongCA.tls = try context(certs.otherCACertificate)
        let lastError = neverUpOnLoop(port: f.redis.port, security: wrongCA)
        #expect(lastError.contains("TLS handshake") && lastError.contains("certificate_verification"), "\(lastError)")
    }

    /// A store on `port` whose loop connection `security` keeps down: it never comes up, a call made
    /// on its loop gets the threaded pool's answer (unavailable); returns the connection's last error.
    func neverUpOnLoop(port: UInt16, security: RedisSecurity) -> String {
        let view = OnLoopStore(endpoint: RedisEndpoint(host: "127.0.0.1", port: port, timeoutMillis: 500, security: security), loopIndex: 1)
        defer { view.stop() }
        #expect(!view.waitUntilLoopUp(millis: 1_000))
        #expect(
            unavailable(
                wait { view.issueChallenge(ChallengeRequest(purpose: nil, keyID: nil, ttlMillis: 1_000), nowMillis: t0, completion: $0) }))
        return view.loop.queue.sync { view.inner.currentLoopConnection?.lastError ?? "" }
    }

    /// A send that fails inside the write: Redis killed by a task of the loop, which then writes two
    /// requests (outside a batch of events a write is sent at once), the second after the peer's reset
    /// came back, so its send fails and tears the connection down inside the write. Both requests
    /// fail `unavailable` right away (the one being written included: it is in flight before it is
    /// sent), nothing stays awaited (before, the second was left behind the teardown, failed only by
    /// the next one, and the loop's count of awaited replies went to -1), and after a restart the
    /// connection serves again.
    @Test func sendFailingInsideTheWrite() throws {
        let f = try LoopFixture(durable: true)
        defer { f.stop() }
        var rng = SeededRandom(seed: 707)
        let record = makeRecord(&rng)
        try f.store.registerFresh(record, now: t0)
        #expect(try f.onLoop.commit(record.keyID, counter: 1, challenge: nil, now: t0) == .committed(previousCounter: 0))
        let results = Mutex<[Int: Result<CommitOutcome, StoreError>]>([:])
        let answered = DispatchSemaphore(value: 0)
        let awaitedAfterTask = Atomic<Int>(-99)
        let taskDone = DispatchSemaphore(value: 0)
        f.loop.execute {
            // Killed while the loop runs this task: it cannot see the connection close before the writes.
            f.redis.kill()
            for (i, counter) in [UInt32(2), 3].enumerated() {
                usleep(100_000)  // the close reached the socket; after the first send, its reset too
                f.store.commitAssertion(AssertionCommit(keyID: record.keyID, counter: counter, challenge: nil), nowMillis: t0) { r in
                    results.withLock { $0[i] = r }
                    answered.signal()
                }
            }
            awaitedAfterTask.store(f.loop.awaitedReplies, ordering: .relaxed)
            taskDone.signal()
        }
        #expect(taskDone.wait(timeout: .now() + 5) == .success)
        #expect(answered.wait(timeout: .now() + 5) == .success)
        #expect(answered.wait(timeout: .now() + 5) == .success)
        let got = results.withLock { $0 }
        #expect(got.count == 2)
        for (i, r) in got { #expect(unavailable(r), "request \(i): \(r)") }
        #expect(awaitedAfterTask.load(ordering: .relaxed) == 0, "both failed inside the task: nothing awaited")
        #expect(f.loop.queue.sync { f.loop.awaitedReplies } == 0)
        try f.redis.start()
        #expect(f.onLoop.waitUntilLoopUp())
        #expect(f.loop.queue.sync { f.loop.awaitedReplies } == 0)
        // Restarted with its AOF: counter 1 is kept, 2 and 3 were never applied.
        #expect(try f.onLoop.commit(record.keyID, counter: 4, challenge: nil, now: t0) == .committed(previousCounter: 1))
        #expect(f.loop.queue.sync { f.loop.awaitedReplies } == 0)
    }

    /// After `close()`, calls made on the loop fail with `unavailable` (nothing goes out any more).
    @Test func closedStoreRefusesOnTheLoop() throws {
        let f = try LoopFixture()
        defer { f.stop() }
        f.store.close()
        #expect(f.onLoop.loopStatus.up == false)
        let refused = wait {
            f.onLoop.issueChallenge(ChallengeRequest(purpose: nil, keyID: nil, ttlMillis: 1_000), nowMillis: t0, completion: $0)
        }
        #expect(unavailable(refused))
    }
}
