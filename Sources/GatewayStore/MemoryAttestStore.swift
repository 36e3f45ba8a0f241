import Dispatch
import Glibc
import Synchronization

/// The in-process `AttestStore`: keys and challenges in `shards` shards, each behind its own
/// `Mutex`; with a data directory, a journal (group-committed registrations, written-through
/// counter advances), snapshots and crash recovery. See docs/store.md.
///
/// Callable from any thread. Completions run inline on the caller's thread, except `register`
/// with a data directory, which completes on the journal's sync queue once its record is fsync'ed.
public final class MemoryAttestStore: AttestStore {
    final class Shard: Sendable {
        let state: Mutex<ShardState>

        init(_ state: consuming ShardState) {
            self.state = Mutex(state)
        }
    }

    let shards: [Shard]
    let shardMask: UInt64
    /// The challenge budgets (docs/store.md, "Challenge budgets").
    public let challengeLimits: ChallengeLimits
    let anonymousPerShard: Int
    let keyBoundPerShard: Int
    /// Key cap, re-registration window and idle eviction.
    public let limits: KeyLimits
    /// True when the previous process closed the store (`close()`), or the directory held no state;
    /// false after a crash, a kill or a power loss (challenges were then retired).
    public let lastStopWasClean: Bool
    /// The data directory, or nil for a memory-only store.
    public let directory: String?
    /// What `open` found in the journal: records replayed, damaged records skipped, a torn tail cut.
    public let restoreReport: RestoreReport

    let journal: Journal?
    /// The receipts file records point into, and a descriptor to read it. Changed only by a receipt
    /// compaction, under `registrationGate` (with every record's offset).
    let receipts: Mutex<ReceiptsFile>
    let observer: (any AttestStoreObserver)?
    let liveCount: Atomic<Int>
    let keyCount: Atomic<Int>
    let evictedAnonymous = Atomic<Int>(0)
    let evictedKeyBound = Atomic<Int>(0)
    let replacedPerKey = Atomic<Int>(0)
    /// The shard the next anonymous challenge goes to (modulo the shard count).
    let nextAnonymousShard = Atomic<Int>(0)
    /// Bytes of the receipts that records point to (the rest of the receipts file is superseded).
    let liveReceiptBytes: Atomic<Int>
    /// Held by a registration's store step (with a data directory) and by the part of a receipt
    /// compaction that moves receipts, so that no receipt is written while offsets change.
    let registrationGate = Mutex<Int>(0)
    /// A compaction runs with a snapshot once the receipts file holds at least this many superseded
    /// bytes and at least half as many as live ones (1 MiB; tests lower it).
    let compactionMinimumGarbage = Atomic<Int>(1 << 20)
    /// After a compaction failed: the receipts file size from which one is tried again.
    let compactionDeferredUntil = Atomic<Int>(0)
    /// Tests: called at each step of a receipt compaction; throwing there leaves the files as a
    /// crash at that point would.
    let compactionHook = Mutex<(@Sendable (CompactionStep) throws -> Void)?>(nil)
    let closed = Atomic<Bool>(false)
    /// Serializes snapshots.
    let snapshotLock = Mutex<Int>(0)
    /// `startPeriodicSnapshots`' timer.
    let snapshotTimer = Mutex<Journal.TimerBox?>(nil)
    /// The data directory's `flock`, held from `open` to `close`.
    let directoryLock = Mutex<FileHandle?>(nil)
    /// Where the risk refresher's next scan starts (shard, record): `claimDueRefreshes`.
    let scanCursor = Mutex<(Int, Int)>((0, 0))
    /// DeviceCheck token claims (`claimToken`; DeviceTokens.swift).
    let deviceTokens: DeviceTokenTable
    /// The buckets of routes' `assertion.key_rate` (per process, not journaled: `KeyRateBuckets`).
    let keyRates = KeyRateBuckets()
    /// Keys per account (`associate`; MemoryAttestStore+Accounts.swift).
    let accounts: AccountTable

    static let markerName = "clean-stop"
    static let markerMagic: [UInt8] = Array("AGCLEAN1".utf8)

    /// A memory-only store (nothing survives the process, and receipts are not kept: see
    /// `receipt(for:)`). `shards`: a power of two from 1 to 4096.
    public convenience init(
        shards: Int = 64, challenges: ChallengeLimits = ChallengeLimits(), limits: KeyLimits = KeyLimits(),
        observer: (any AttestStoreObserver)? = nil
    ) {
        precondition(Self.validShardCount(shards), "shards must be a power of two from 1 to 4096")
        let seed = UInt64.random(in: .min ... .max)
        self.init(
            states: (0..<shards).map { _ in ShardState(seed: seed) }, live: 0, challenges: challenges, limits: limits,
            clean: true, directory: nil, journal: nil, receipts: ReceiptsFile(reader: nil, generation: 0),
            observer: observer)
    }

    init(
        states: [ShardState], live: Int, challenges: ChallengeLimits, limits: KeyLimits, clean: Bool,
        directory: String?, journal: Journal?, receipts: ReceiptsFile, observer: (any AttestStoreObserver)?,
        restoreReport: RestoreReport = RestoreReport(), deviceTokens claims: [DeviceTokenClaim] = [],
        accounts: AccountTable? = nil
    ) {
        var keys = 0
        var receiptBytes = 0
        var shards: [Shard] = []
        shards.reserveCapacity(states.count)
        for s in states {
            keys += s.count
            for chunk in s.chunks { for r in chunk { receiptBytes += Int(r.receiptLength) } }
            shards.append(Shard(s))
        }
        self.shards = shards
        self.shardMask = UInt64(states.count - 1)
        challengeLimits = challenges
        anonymousPerShard = challenges.anonymousPerShard(states.count)
        keyBoundPerShard = challenges.keyBoundPerShard(states.count)
        self.limits = limits
        self.lastStopWasClean = clean
        self.directory = directory
        self.restoreReport = restoreReport
        self.journal = journal
        self.receipts = Mutex(receipts)
        self.observer = observer
        self.liveCount = Atomic(live)
        self.keyCount = Atomic(keys)
        self.liveReceiptBytes = Atomic(receiptBytes)
        deviceTokens = DeviceTokenTable(shards: states.count, restoring: claims)
        self.accounts = accounts ?? AccountTable(maxAssociations: limits.maxKeys)
    }

    /// The current receipts file (`Journal.receiptsName(generation:)`) and a reader of it.
    struct ReceiptsFile: Sendable {
        var reader: FileHandle?
        var generation: UInt64
    }

    deinit {
        snapshotTimer.withLock { $0?.source.cancel() }
    }

    static func validShardCount(_ n: Int) -> Bool { n >= 1 && n <= 4096 && n & (n - 1) == 0 }

    static let closedError = StoreError(.unavailable, "the store is closed")

    @inline(__always) func shard(_ word: UInt64) -> Shard { shards[Int(word & shardMask)] }
    @inline(__always) func shardIndex(_ word: UInt64) -> Int { Int(word & shardMask) }

    public var statistics: StoreStatistics {
        StoreStatistics(keys: keyCount.load(ordering: .relaxed), liveChallenges: liveCount.load(ordering: .relaxed))
    }

    /// The failed file system call the store is refusing writes for (registrations and counter
    /// advances answer `.unavailable` meanwhile), or nil while it accepts them. A recovery retried
    /// with back-off clears it once writes succeed again (see "Write errors" in docs/store.md).
    public var writeFailure: StoreWriteFailure? { journal?.fault }

    // MARK: - Challenges

    public func issueChallenge(
        _ request: ChallengeRequest, nowMillis: Int64,
        completion: @escaping @Sendable (Result<IssuedChallenge, StoreError>) -> Void
    ) {
        completion(issueChallengeNow(request, nowMillis: nowMillis))
    }

    /// `issueChallenge`, answered here (the memory store never waits to issue one).
    func issueChallengeNow(_ request: ChallengeRequest, nowMillis: Int64) -> Result<IssuedChallenge, StoreError> {
        if closed.load(ordering: .relaxed) { return .failure(Self.closedError) }
        let (expires, overflow) = nowMillis.addingReportingOverflow(max(0, request.ttlMillis))
        let bound = request.keyID.map(KeyBits.init)
        var entry = ChallengeEntry(
            token: ChallengeBits(a: 0, b: 0), boundKey: bound ?? KeyBits(w0: 0, w1: 0, w2: 0, w3: 0),
            expiresAt: overflow ? .max : expires, purpose: ChallengeEntry.purposeCode(request.purpose),
            hasBoundKey: bound != nil, consumed: false)
        var evicted = (anonymous: 0, keyBound: 0, replaced: 0, replacedUnused: 0)
        if let key = bound {
            // A challenge bound to a key lives in the key's shard (its token's low bits name it; 128
            // minus log2(shards) random bits remain), so its ring and the key are under one lock.
            let index = shardIndex(key.w0)
            let (anonymousLimit, keyBoundLimit, perKey) = (anonymousPerShard, keyBoundPerShard, challengeLimits.perKey)
            let chained = request.chained
            evicted = shards[index].state.withLock { s in
                entry.token = s.newToken(shard: index, mask: shardMask)
                // Bound to a registered key: the key-bound budget. A key not (yet) registered, as in
                // the registration flow, is anyone's to name: the anonymous budget.
                guard s.find(key) != nil else { return (s.insertAnonymous(entry, limit: anonymousLimit), 0, 0, 0) }
                let (replaced, unused, evicted) = s.insertBound(entry, chained: chained, perKey: perKey, limit: keyBoundLimit)
                return (0, evicted, replaced, unused)
            }
        } else {
            // An anonymous challenge goes to the shards in turn (its token's low bits name the shard).
            let index = nextAnonymousShard.wrappingAdd(1, ordering: .relaxed).oldValue & Int(shardMask)
            let (limit, mask) = (anonymousPerShard, shardMask)
            evicted.anonymous = shards[index].state.withLock { s in
                entry.token = s.newToken(shard: index, mask: mask)
                return s.insertAnonymous(entry, limit: limit)
            }
        }
        let removed = evicted.anonymous + evicted.keyBound + evicted.replaced
        if removed != 1 { liveCount.wrappingAdd(1 - removed, ordering: .relaxed) }
        if evicted.anonymous > 0 { evictedAnonymous.wrappingAdd(evicted.anonymous, ordering: .relaxed) }
        if evicted.keyBound > 0 { evictedKeyBound.wrappingAdd(evicted.keyBound, ordering: .relaxed) }
        if evicted.replacedUnused > 0 { replacedPerKey.wrappingAdd(evicted.replacedUnused, ordering: .relaxed) }
        return .success(IssuedChallenge(token: entry.token.token, expiresAtMillis: entry.expiresAt))
    }

    /// Challenges removed to make room since the store opened, per budget (metrics read deltas).
    public var challengeEvictions: ChallengeEvictions {
        ChallengeEvictions(
            anonymous: evictedAnonymous.load(ordering: .relaxed), keyBound: evictedKeyBound.load(ordering: .relaxed),
            perKey: replacedPerKey.load(ordering: .relaxed))
    }

    /// Bytes the challenge side holds now (its tables and heaps at their current capacities; the
    /// store's own accounting, bounded by `ChallengeMemory.bound(challengeLimits, shards:)`).
    public var challengeMemoryBytes: Int {
        shards.reduce(0) { sum, shard in sum + shard.state.withLock { $0.challengeBytes } }
    }

    /// Live challenges per budget (a walk over the shards, for tests and `explain`-style checks).
    public var challengeCounts: (anonymous: Int, keyBound: Int) {
        shards.reduce((0, 0)) { sum, shard in
            shard.state.withLock { s in (sum.0 + s.expiries.count, sum.1 + s.boundCount) }
        }
    }

    public func challengeState(
        _ token: ChallengeToken, nowMillis: Int64,
        completion: @escaping @Sendable (Result<ChallengeState, StoreError>) -> Void
    ) {
        guard let bits = ChallengeBits(token) else { return completion(.success(.unknown)) }
        let entry = shard(bits.a).state.withLock { s in s.challenges[bits] }
        guard let entry else { return completion(.success(.unknown)) }
        if entry.consumed { return completion(.success(.consumed)) }
        if nowMillis >= entry.expiresAt { return completion(.success(.expired(expiresAtMillis: entry.expiresAt))) }
        completion(
            .success(
                .valid(
                    purpose: entry.purposeValue, keyID: entry.hasBoundKey ? entry.boundKey.keyID : nil,
                    expiresAtMillis: entry.expiresAt)))
    }

    /// Removes challenges whose expiry is at or before `nowMillis` (consumed ones included).
    /// Returns how many of them had expired without being consumed. Call it about once a second.
    @discardableResult
    public func sweepExpired(nowMillis: Int64) -> Int {
        var removed = 0
        var unused = 0
        for shard in shards {
            let (r, u) = shard.state.withLock { s -> (Int, Int) in
                let (r, u) = s.sweepChallenges(nowMillis: nowMillis)
                if r > 0 { s.shrinkChallengesIfSparse() }
                return (r, u)
            }
            removed += r
            unused += u
        }
        if removed > 0 { liveCount.wrappingSubtract(removed, ordering: .relaxed) }
        deviceTokens.sweep(nowMillis: nowMillis)
        observer?.challengesExpired(unused)
        return unused
    }

    /// Places the challenges of a clean final snapshot: one bound to a registered key joins the
    /// key-bound budget and its key's ring in the challenge's shard (while that ring has room;
    /// otherwise, as for snapshots written before the budgets existed, the anonymous budget), every
    /// other one the anonymous budget. A budget restored above its limit shrinks back as new
    /// challenges replace its oldest.
    static func restoreChallenges(_ challenges: [ChallengeEntry], into states: inout [ShardState]) {
        let mask = UInt64(states.count - 1)
        for c in challenges {
            let index = Int(c.token.a & mask)
            let registered = c.hasBoundKey && states[Int(c.boundKey.w0 & mask)].find(c.boundKey) != nil
            if registered, Int(states[index].rings[c.boundKey]?.count ?? 0) < KeyRing.maxSlots {
                states[index].addBoundChallenge(c, chained: false)
            } else {
                states[index].addChallenge(c)
            }
        }
    }

    /// nil when acceptable, else why the challenge cannot be used.
    @inline(__always)
    static func check(
        _ entry: ChallengeEntry?, nowMillis: Int64, purpose: ChallengePurpose, key: KeyBits
    ) -> ChallengeRejection? {
        guard let entry else { return .unknown }
        if entry.consumed { return .consumed }
        if nowMillis >= entry.expiresAt { return .expired }
        if entry.purpose != 0 && entry.purpose != ChallengeEntry.purposeCode(purpose) { return .wrongPurpose }
        if entry.hasBoundKey && entry.boundKey != key { return .wrongKey }
        return nil
    }

    // MARK: - Keys

    public func deviceKey(_ id: KeyID, completion: @escaping @Sendable (Result<DeviceKeyRecord?, StoreError>) -> Void) {
        completion(deviceKeyNow(id))
    }

    /// The memory store reads a key inline: the gate takes it without a completion.
    public func assertionKeyNow(_ id: KeyID) -> Result<DeviceKeyRecord?, StoreError>? { deviceKeyNow(id) }

    func deviceKeyNow(_ id: KeyID) -> Result<DeviceKeyRecord?, StoreError> {
        let key = KeyBits(id)
        let found = shard(key.w0).state.withLock { s -> (KeyRecord, String?, String?)? in
            guard let i = s.find(key) else { return nil }
            let r = s.record(at: i)
            return (r, s.string(r.appIndex), s.string(r.bundleIndex))
        }
        guard let (r, app, bundle) = found else { return .success(nil) }
        // Built once, with its account (no copy of the record to set it afterwards).
        return .success(Self.deviceKeyRecord(id, r, app: app, bundle: bundle, account: keyAccount(key)))
    }

    @inline(__always)
    static func deviceKeyRecord(
        _ id: KeyID, _ r: KeyRecord, app: String?, bundle: String?, account: KeyAccount? = nil
    ) -> DeviceKeyRecord {
        DeviceKeyRecord(
            keyID: id, publicKey: r.point.publicKey, counter: r.counter, appID: app ?? "",
            environment: r.flags & KeyRecord.flagProduction != 0 ? .production : .development,
            validationCategory: r.flags & KeyRecord.flagCategory != 0 ? r.category : nil, bundleVersion: bundle,
            firstSeenMillis: Int64(r.firstSeen) * 1000, lastSeenMillis: Int64(r.lastSeen) * 1000, risk: r.risk,
            account: account)
    }

    /// The receipt stored with the key's latest registration, or nil (unknown key, or the receipts
    /// file cannot be read). A memory-only store keeps no receipts (nil): nothing in the gateway
    /// reads them, and kept in memory they would cost far more than the key (≈ 4 KB against
    /// ≈ 160 B); with a data directory they stay on disk.
    public func receipt(for id: KeyID) -> [UInt8]? {
        guard journal != nil else { return nil }
        let key = KeyBits(id)
        // Under the gate: a compaction moves offsets and the file together.
        let found = registrationGate.withLock { _ -> (UInt64, UInt32, FileHandle?)? in
            let location = shard(key.w0).state.withLock { s -> (UInt64, UInt32)? in
                guard let i = s.find(key) else { return nil }
                let r = s.record(at: i)
                return (r.receiptOffset, r.receiptLength)
            }
            return location.map { ($0.0, $0.1, receipts.withLock { $0.reader }) }
        }
        guard let (offset, length, reader) = found, let reader else { return nil }
        return Journal.readReceipt(reader, offset: offset, length: length)
    }

    /// Bytes of receipts that keys point to, and the receipts file's size (0 and 0 without a data
    /// directory). The difference is what the next compaction reclaims.
    public var receiptBytes: (live: Int, file: Int) {
        guard let journal else { return (0, 0) }
        return (liveReceiptBytes.load(ordering: .relaxed), Int(journal.receiptsEnd))
    }

    private enum RegisterStep {
        case rejected(ChallengeRejection)
        case failed(StoreError)
        case stored(StoredRegistration)
        /// Refused by the key's limits (app conflict, re-registration window, key cap).
        case refused(RegistrationOutcome)
    }

    /// A registration applied in memory: what it replaced, to take it back if its record does not
    /// become durable.
    struct StoredRegistration {
        var key: KeyBits
        var existing: Bool
        var previous: KeyRecord?
        var applied: KeyRecord
        /// The receipts file the record points into (a compaction since made the record durable
        /// and moved its receipt: nothing to take back then).
        var receiptsGeneration: UInt64
    }

    public func register(
        _ registration: Registration, nowMillis: Int64,
        completion: @escaping @Sendable (Result<RegistrationOutcome, StoreError>) -> Void
    ) {
        if closed.load(ordering: .relaxed) { return completion(.failure(Self.closedError)) }
        let rec = registration.record
        guard let point = PointBits(rec.publicKey) else {
            return completion(
                .failure(
                    StoreError(
                        .unavailable, "registration refused: the public key must be a 65-byte uncompressed point (04 ‖ x ‖ y)")))
        }
        guard rec.appID.utf8.count <= 4096, (rec.bundleVersion?.utf8.count ?? 0) <= 4096,
            registration.receipt.count <= Int(UInt32.max)
        else {
            return completion(
                .failure(
                    StoreError(
                        .unavailable, "registration refused: app id or bundle version over 4096 bytes, or receipt over 4 GiB")))
        }
        guard let bits = ChallengeBits(registration.challenge) else {
            return completion(.success(.challengeRejected(.unknown)))
        }
        let key = KeyBits(rec.keyID)
        var flags: UInt8 = rec.environment == .production ? KeyRecord.flagProduction : 0
        if rec.validationCategory != nil { flags |= KeyRecord.flagCategory }
        var entry = JournalRecord.Registration(
            key: key, point: point, counter: rec.counter, firstSeen: storedSeconds(rec.firstSeenMillis),
            lastSeen: storedSeconds(rec.lastSeenMillis), flags: flags, category: rec.validationCategory ?? 0,
            receiptOffset: 0, receiptLength: 0, appID: rec.appID, bundleVersion: rec.bundleVersion)
        if let risk = rec.risk, risk.receiptCreatedMillis > 0 {
            entry.receiptCreated = max(1, storedSeconds(risk.receiptCreatedMillis))
            entry.receiptNotBefore = riskSeconds(risk.notBeforeMillis)
            entry.receiptExpires = riskSeconds(risk.expiresMillis)
            entry.nextRefresh = riskSeconds(risk.nextRefreshMillis)
        }
        let receipt = registration.receipt

        func store(_ s: inout ShardState) -> RegisterStep {
            do {
                return try storeRegistration(&s, entry, receipt: receipt, nowMillis: nowMillis)
            } catch {
                return .failed(StoreError.from(error))
            }
        }
        let ki = shardIndex(key.w0)
        let ci = shardIndex(bits.a)
        func locked() -> RegisterStep {
            if ki == ci {
                return shards[ki].state.withLock { s -> RegisterStep in
                    if let why = Self.check(s.challenges[bits], nowMillis: nowMillis, purpose: .register, key: key) {
                        return .rejected(why)
                    }
                    let result = store(&s)
                    if case .stored = result { s.markConsumed(bits) }
                    return result
                }
            }
            return shards[min(ki, ci)].state.withLock { first -> RegisterStep in
                shards[max(ki, ci)].state.withLock { second -> RegisterStep in
                    func run(_ k: inout ShardState, _ c: inout ShardState) -> RegisterStep {
                        if let why = Self.check(c.challenges[bits], nowMillis: nowMillis, purpose: .register, key: key) {
                            return .rejected(why)
                        }
                        let result = store(&k)
                        if case .stored = result { c.markConsumed(bits) }
                        return result
                    }
                    return ki < ci ? run(&first, &second) : run(&second, &first)
                }
            }
        }
        let step = journal == nil ? locked() : registrationGate.withLock { _ in locked() }
        switch step {
        case .rejected(let why):
            completion(.success(.challengeRejected(why)))
        case .refused(let outcome):
            completion(.success(outcome))
        case .failed(let error):
            completion(.failure(error))
        case .stored(let stored):
            let existing = stored.existing
            guard let journal else { return completion(.success(.registered(existing: existing))) }
            journal.whenDurable { [self] error in
                guard let error else { return completion(.success(.registered(existing: existing))) }
                // Answered 503: the registration must not stay applied.
                withdraw(stored)
                completion(.failure(error))
            }
        }
    }

    /// Takes back a registration whose record could not be made durable (its fsync failed): a new
    /// key is removed, a re-registered key gets its previous record back. A counter never goes
    /// down: a new key on which a request was accepted meanwhile stays (removing it would forget
    /// that counter), and a re-registered key keeps the higher counter. Nothing is done when a
    /// later registration of the key replaced this one, or a receipt compaction ran since (its
    /// rotation fsync'ed the record: it is durable, and its receipt moved). The previous record
    /// comes back with its re-registration window, so a refused registration does not count.
    func withdraw(_ stored: StoredRegistration) {
        // Under the gate, as registrations and the part of a compaction that moves receipts.
        registrationGate.withLock { _ in
            guard receipts.withLock({ $0.generation }) == stored.receiptsGeneration else { return }
            let removed = shard(stored.key.w0).state.withLock { s -> Bool in
                guard let i = s.find(stored.key) else { return false }
                let current = s.record(at: i)
                guard current.sameRegistration(as: stored.applied) else { return false }
                if let previous = stored.previous {
                    s.update(at: i) { x in
                        // Counters accepted meanwhile stay accepted: the window keeps what either closed.
                        let window = x.window.merged(with: previous.window)
                        let last = max(x.lastSeen, previous.lastSeen)
                        x = previous
                        x.window = window
                        x.lastSeen = last
                    }
                    liveReceiptBytes.wrappingAdd(
                        Int(previous.receiptLength) - Int(stored.applied.receiptLength), ordering: .relaxed)
                    return false
                }
                guard current.counter == stored.applied.counter else { return false }
                s.remove(at: i)
                liveReceiptBytes.wrappingSubtract(Int(stored.applied.receiptLength), ordering: .relaxed)
                return true
            }
            if removed { keyCount.wrappingSubtract(1, ordering: .relaxed) }
        }
    }

    /// Under the key's shard lock: the key's limits are checked (same app, re-registration window,
    /// key cap), then the journal record is written; memory changes only if it was.
    private func storeRegistration(
        _ s: inout ShardState, _ entry: JournalRecord.Registration, receipt: [UInt8], nowMillis: Int64
    ) throws -> RegisterStep {
        var r = entry
        var supersededReceipt = 0
        var previous: KeyRecord?
        if let i = s.find(r.key) {
            let old = s.record(at: i)
            previous = old
            let registered = s.string(old.appIndex) ?? ""
            guard registered == r.appID else { return .refused(.appConflict(registeredAppID: registered)) }
            switch Self.reregistrationWindow(old, limits: limits, nowMillis: nowMillis) {
            case .limited(let retryAfterMillis):
                return .refused(.reregistrationLimited(retryAfterMillis: retryAfterMillis))
            case .counted(let count, let start):
                r.reregistrations = count
                r.reregistrationWindow = start
            }
            r.counter = max(old.counter, r.counter)
            r.firstSeen = old.firstSeen
            r.lastSeen = max(old.lastSeen, r.lastSeen)
            supersededReceipt = Int(old.receiptLength)
        } else {
            // The cap is one shared count: reserved here, under this key's shard lock, given back on failure.
            if keyCount.wrappingAdd(1, ordering: .relaxed).newValue > limits.maxKeys {
                keyCount.wrappingSubtract(1, ordering: .relaxed)
                return .refused(.keyCapacity(maxKeys: limits.maxKeys))
            }
        }
        let existing = previous != nil
        if let journal {
            do {
                let location = try journal.appendRegistration(r, receipt: receipt)
                r.receiptOffset = location.offset
                r.receiptLength = location.length
            } catch {
                if !existing { keyCount.wrappingSubtract(1, ordering: .relaxed) }
                throw error
            }
            liveReceiptBytes.wrappingAdd(Int(r.receiptLength) - supersededReceipt, ordering: .relaxed)
        }
        Self.apply(&s, r)
        return .stored(
            StoredRegistration(
                key: r.key, existing: existing, previous: previous, applied: s.record(at: s.find(r.key)!),
                receiptsGeneration: journal == nil ? 0 : receipts.withLock { $0.generation }))
    }

    enum ReregistrationWindow: Equatable {
        case counted(UInt8, start: UInt32)
        case limited(retryAfterMillis: Int64)
    }

    /// A re-registration of `old` at `nowMillis`: counted in the key's window (a new window starts
    /// when none is running), or refused until the window ends.
    static func reregistrationWindow(_ old: KeyRecord, limits: KeyLimits, nowMillis: Int64) -> ReregistrationWindow {
        let now = storedSeconds(nowMillis)
        let window = (limits.reregistrationWindowMillis + 999) / 1000
        var count = old.reregistrations
        var start = old.reregistrationWindow
        if count == 0 || Int64(now) >= Int64(start) + window {
            count = 0
            start = now
        }
        guard Int(count) < limits.maxReregistrations else {
            return .limited(retryAfterMillis: max(1, (Int64(start) + window) * 1000 - nowMillis))
        }
        return .counted(count + 1, start: start)
    }

    /// Sets a registration (also journal replay): the higher counter and the earlier first-seen
    /// stay, so applying a record twice changes nothing. A key registered again keeps its risk
    /// metric (no longer stale) and takes the new receipt's dates and first refresh. The key's
    /// counter window closes every counter up to the registration's (a re-registration closes the
    /// open counters below the highest; replayed over a later window, it closes nothing that window
    /// still has open above it). Returns whether the key existed.
    @discardableResult
    static func apply(_ s: inout ShardState, _ r: JournalRecord.Registration) -> Bool {
        let app = s.intern(r.appID)
        let bundle = s.internOptional(r.bundleVersion)
        // A new key (the common case: registration, replay of a fresh journal) costs one probe.
        let added = s.appendIfAbsent(
            KeyRecord(
                key: r.key, point: r.point, receiptOffset: r.receiptOffset, counter: r.counter,
                receiptLength: r.receiptLength, appIndex: app, bundleIndex: bundle, category: r.category,
                firstSeen: r.firstSeen, lastSeen: r.lastSeen, flags: r.flags, reregistrations: r.reregistrations,
                reregistrationWindow: r.reregistrationWindow, receiptCreated: r.receiptCreated,
                receiptNotBefore: r.receiptNotBefore, receiptExpires: r.receiptExpires, nextRefresh: r.nextRefresh))
        if !added, let i = s.find(r.key) {
            s.update(at: i) { x in
                x.point = r.point
                x.window = x.window.merged(with: CounterWindow(highest: r.counter))
                x.firstSeen = min(x.firstSeen, r.firstSeen)
                x.lastSeen = max(x.lastSeen, r.lastSeen)
                x.flags = r.flags
                x.category = r.category
                x.appIndex = app
                x.bundleIndex = bundle
                x.receiptOffset = r.receiptOffset
                x.receiptLength = r.receiptLength
                x.reregistrations = r.reregistrations
                x.reregistrationWindow = r.reregistrationWindow
                x.receiptCreated = r.receiptCreated
                x.receiptNotBefore = r.receiptNotBefore
                x.receiptExpires = r.receiptExpires
                x.nextRefresh = r.nextRefresh
                // `flags` came from the registration: the metric stays, no longer stale.
            }
        }
        return !added
    }

    /// Removes the keys idle for `limits.keyIdleTTLMillis` (no registration or accepted assertion
    /// since; last use is kept with one-second resolution) and returns how many. Each shard's
    /// removals are journaled in one write before memory changes, so a removed key stays removed
    /// after a restart; its receipt is reclaimed by the next compaction. A removed key answers
    /// `.unknownKey` (the app attests a new key). Does nothing without a TTL. The gateway calls it
    /// every `key_idle_ttl / 8` (between 1 s and 60 s).
    @discardableResult
    public func sweepIdleKeys(nowMillis: Int64) throws -> Int {
        guard let ttl = limits.keyIdleTTLMillis else { return 0 }
        if closed.load(ordering: .relaxed) { throw Self.closedError }
        let (cutoff, overflow) = nowMillis.subtractingReportingOverflow(ttl)
        guard !overflow, cutoff >= 0 else { return 0 }
        var removed = 0
        var firstError: (any Error)?
        for shard in shards where firstError == nil {
            shard.state.withLock { s in
                var idle: [KeyBits] = []
                for i in 0..<s.count {
                    let r = s.record(at: i)
                    if Int64(r.lastSeen) * 1000 <= cutoff { idle.append(r.key) }
                }
                guard !idle.isEmpty else { return }
                do {
                    try journal?.appendRemovals(idle)
                } catch {
                    firstError = error
                    return
                }
                var receiptBytes = 0
                for key in idle {
                    guard let i = s.find(key) else { continue }
                    receiptBytes += Int(s.record(at: i).receiptLength)
                    s.remove(at: i)
                }
                removed += idle.count
                liveReceiptBytes.wrappingSubtract(receiptBytes, ordering: .relaxed)
            }
        }
        if removed > 0 {
            keyCount.wrappingSubtract(removed, ordering: .relaxed)
            observer?.keysEvicted(removed)
        }
        if let firstError { throw StoreError.from(firstError) }
        return removed
    }

    // MARK: - Assertions

    private enum KeyCheck {
        case fail(CommitOutcome)
        /// `window`: the key's counter window once the counter is accepted.
        case ok(index: Int, previous: UInt32, window: CounterWindow)
    }

    /// The key, and whether its counter window accepts `counter` under a route window of `width`.
    @inline(__always)
    private static func checkKey(_ s: inout ShardState, _ key: KeyBits, counter: UInt32, width: Int) -> KeyCheck {
        guard let i = s.find(key) else { return .fail(.unknownKey) }
        let current = s.record(at: i).window
        guard let next = current.accepting(counter, width: width) else {
            return .fail(.counterReplay(stored: current.highest, open: current.open(width: width)))
        }
        return .ok(index: i, previous: current.highest, window: next)
    }

    /// Under the key's shard lock: the counter record (the window after it) is written (write(2))
    /// before memory changes.
    @inline(__always)
    private func advance(_ s: inout ShardState, index: Int, key: KeyBits, window: CounterWindow, nowMillis: Int64)
        throws
    {
        let last = max(s.record(at: index).lastSeen, storedSeconds(nowMillis))
        try journal?.appendAdvance(key: key, window: window, lastSeen: last)
        s.update(at: index) { r in
            r.window = window
            r.lastSeen = last
        }
    }

    /// The commit's `keyRate` (issue 27), under the key's shard lock once every other check passed:
    /// `.keyRateLimited` when the key's bucket holds no token (then the commit changes nothing).
    @inline(__always)
    private func keyRateRefusal(_ commit: AssertionCommit, _ key: KeyBits, nowMillis: Int64) -> CommitOutcome? {
        guard let limit = commit.keyRate, let seconds = keyRates.refusal(key, limit, nowMillis: nowMillis) else { return nil }
        return .keyRateLimited(retryAfterSeconds: seconds)
    }

    /// The accepted commit's token, under the same lock, once its counter advance is written.
    @inline(__always)
    private func takeKeyRate(_ commit: AssertionCommit, _ key: KeyBits, nowMillis: Int64) {
        if let limit = commit.keyRate { keyRates.take(key, limit, nowMillis: nowMillis) }
    }

    public func commitAssertion(
        _ commit: AssertionCommit, nowMillis: Int64,
        completion: @escaping @Sendable (Result<CommitOutcome, StoreError>) -> Void
    ) {
        completion(commitAssertionNow(commit, nowMillis: nowMillis))
    }

    /// The gate's commit and next challenge, answered inline: the same two steps as the protocol's
    /// default (`commitAssertion`, then, when committed, `issueChallenge`; a next challenge that
    /// cannot be issued is nil and the commit stands), without a completion for either.
    public func commitAssertionNow(
        _ commit: AssertionCommit, checked: CheckedKey?, issuing next: ChallengeRequest?, nowMillis: Int64
    ) -> Result<CommitAndNext, StoreError>? {
        switch commitAssertionNow(commit, nowMillis: nowMillis) {
        case .failure(let e):
            return .failure(e)
        case .success(let outcome):
            guard case .committed = outcome, let next else { return .success(CommitAndNext(outcome: outcome)) }
            let issued: IssuedChallenge? =
                switch issueChallengeNow(next, nowMillis: nowMillis) {
                case .success(let challenge): challenge
                case .failure: nil
                }
            return .success(CommitAndNext(outcome: outcome, next: issued))
        }
    }

    func commitAssertionNow(_ commit: AssertionCommit, nowMillis: Int64) -> Result<CommitOutcome, StoreError> {
        if closed.load(ordering: .relaxed) { return .failure(Self.closedError) }
        let key = KeyBits(commit.keyID)
        let counter = commit.counter
        let width = commit.counterWindow
        let ki = shardIndex(key.w0)
        let result: Result<CommitOutcome, StoreError>

        guard let token = commit.challenge, let bits = ChallengeBits(token) else {
            let unusable = commit.challenge != nil  // a token this store never issues
            result = shards[ki].state.withLock { s -> Result<CommitOutcome, StoreError> in
                switch Self.checkKey(&s, key, counter: counter, width: width) {
                case .fail(let outcome): return .success(outcome)
                case .ok(let index, let previous, let window):
                    if unusable { return .success(.challengeRejected(.unknown)) }
                    if let limited = keyRateRefusal(commit, key, nowMillis: nowMillis) { return .success(limited) }
                    do {
                        try advance(&s, index: index, key: key, window: window, nowMillis: nowMillis)
                    } catch {
                        return .failure(StoreError.from(error))
                    }
                    takeKeyRate(commit, key, nowMillis: nowMillis)
                    return .success(.committed(previousCounter: previous))
                }
            }
            return result
        }

        let ci = shardIndex(bits.a)
        if ki == ci {
            result = shards[ki].state.withLock { s -> Result<CommitOutcome, StoreError> in
                switch Self.checkKey(&s, key, counter: counter, width: width) {
                case .fail(let outcome): return .success(outcome)
                case .ok(let index, let previous, let window):
                    // The challenge found once: checked, then marked consumed where it lies (nothing
                    // in between adds or removes challenges).
                    let found = s.challenges.index(forKey: bits)
                    if let why = Self.check(found.map { s.challenges.values[$0] }, nowMillis: nowMillis, purpose: .assert, key: key) {
                        return .success(.challengeRejected(why))
                    }
                    if let limited = keyRateRefusal(commit, key, nowMillis: nowMillis) { return .success(limited) }
                    do {
                        try advance(&s, index: index, key: key, window: window, nowMillis: nowMillis)
                    } catch {
                        return .failure(StoreError.from(error))
                    }
                    takeKeyRate(commit, key, nowMillis: nowMillis)
                    s.markConsumed(at: found!)
                    return .success(.committed(previousCounter: previous))
                }
            }
        } else {
            result = shards[min(ki, ci)].state.withLock { first -> Result<CommitOutcome, StoreError> in
                shards[max(ki, ci)].state.withLock { second -> Result<CommitOutcome, StoreError> in
                    func run(_ k: inout ShardState, _ c: inout ShardState) -> Result<CommitOutcome, StoreError> {
                        switch Self.checkKey(&k, key, counter: counter, width: width) {
                        case .fail(let outcome): return .success(outcome)
                        case .ok(let index, let previous, let window):
                            let found = c.challenges.index(forKey: bits)
                            if let why = Self.check(
                                found.map { c.challenges.values[$0] }, nowMillis: nowMillis, purpose: .assert, key: key)
                            {
                                return .success(.challengeRejected(why))
                            }
                            if let limited = keyRateRefusal(commit, key, nowMillis: nowMillis) { return .success(limited) }
                            do {
                                try advance(&k, index: index, key: key, window: window, nowMillis: nowMillis)
                            } catch {
                                return .failure(StoreError.from(error))
                            }
                            takeKeyRate(commit, key, nowMillis: nowMillis)
                            c.markConsumed(at: found!)
                            return .success(.committed(previousCounter: previous))
                        }
                    }
                    return ki < ci ? run(&first, &second) : run(&second, &first)
                }
            }
        }
        return result
    }
}

/// The memory store's challenge budgets (config `store.max_anonymous_challenges`,
/// `store.max_key_bound_challenges`, `store.max_challenges_per_key`; docs/store.md). Each budget is
/// split evenly over the shards (rounded up); a full budget replaces its oldest challenge.
public struct ChallengeLimits: Sendable, Equatable {
    /// Challenges not bound to a registered key: no key, or a key not registered when issued.
    public var anonymous: Int
    /// Challenges bound to a registered key: next challenges of verified responses, and challenges
    /// asked for at the endpoint naming a registered key.
    public var keyBound: Int
    /// Live key-bound challenges per key, 1…8 (`KeyRing.maxSlots`); the next one replaces one.
    public var perKey: Int

    public static let maxPerKey = KeyRing.maxSlots

    public init(anonymous: Int = 500_000, keyBound: Int = 250_000, perKey: Int = 4) {
        precondition(anonymous >= 1 && keyBound >= 1, "challenge budgets must be at least 1")
        precondition((1...Self.maxPerKey).contains(perKey), "perKey must be 1…\(Self.maxPerKey)")
        self.anonymous = anonymous
        self.keyBound = keyBound
        self.perKey = perKey
    }

    func anonymousPerShard(_ shards: Int) -> Int { (anonymous + shards - 1) / shards }
    func keyBoundPerShard(_ shards: Int) -> Int { (keyBound + shards - 1) / shards }
}

/// Challenges removed to make room, cumulative per budget.
public struct ChallengeEvictions: Sendable, Equatable {
    /// The oldest anonymous challenge, when the anonymous budget was full.
    public var anonymous: Int
    /// The oldest key-bound challenge, when the key-bound budget was full.
    public var keyBound: Int
    /// An unconsumed challenge of a key that had `perKey` already (a consumed one replaced first is
    /// not counted: nothing is lost, a device chaining requests does that all the time).
    public var perKey: Int

    public init(anonymous: Int = 0, keyBound: Int = 0, perKey: Int = 0) {
        self.anonymous = anonymous
        self.keyBound = keyBound
        self.perKey = perKey
    }
}
