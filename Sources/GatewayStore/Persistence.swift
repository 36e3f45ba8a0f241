import Dispatch
import Glibc
import Synchronization

extension MemoryAttestStore {
    /// Opens a store. `directory` nil: memory only. Otherwise the directory (created if missing)
    /// holds `snapshot.dat`, `journal-*.log` segments, `receipts.dat` and, after a clean stop,
    /// `clean-stop`: the last snapshot is restored and the journal after it replayed.
    ///
    /// After an unclean stop every challenge is retired (`.unknown`); keys, counters and
    /// completed registrations are restored. Errors (`StoreError`, code `.unavailable`) name the
    /// file and the problem: unreadable directory, corrupt snapshot (checksum), unknown version,
    /// a journal segment's bad header, lost segments. A torn last journal record is cut; a damaged
    /// record is skipped and reported in `restoreReport` (see docs/store.md, "Journal damage").
    ///
    /// The directory is locked (`flock` on `lock`) until `close()`: a second process, or a second
    /// store in this process, cannot open it meanwhile.
    public static func open(
        directory: String?, shards: Int = 64, challenges: ChallengeLimits = ChallengeLimits(),
        observer: (any AttestStoreObserver)? = nil, limits: KeyLimits = KeyLimits()
    ) throws -> MemoryAttestStore {
        try open(
            directory: directory, shards: shards, challenges: challenges, observer: observer,
            exclusive: true, limits: limits)
    }

    /// `exclusive: false` skips the directory lock: only for tests that simulate a crash by opening
    /// a second store while the first, never closed, still holds the lock. `calls`: the file
    /// system calls (tests inject failures); `retry`: the write-error recovery's back-off.
    static func open(
        directory: String?, shards: Int, challenges: ChallengeLimits = ChallengeLimits(), observer: (any AttestStoreObserver)?,
        exclusive: Bool, limits: KeyLimits = KeyLimits(), calls: any FileCalls = SystemFileCalls(),
        retry: Journal.Retry = Journal.Retry()
    ) throws -> MemoryAttestStore {
        do {
            return try openThrowingFaults(
                directory: directory, shards: shards, challenges: challenges, limits: limits, observer: observer,
                exclusive: exclusive, files: StoreFiles(calls: calls, observer: observer), retry: retry)
        } catch {
            throw StoreError.from(error)
        }
    }

    private static func openThrowingFaults(
        directory: String?, shards: Int, challenges: ChallengeLimits, limits: KeyLimits,
        observer: (any AttestStoreObserver)?, exclusive: Bool, files: StoreFiles, retry: Journal.Retry
    ) throws -> MemoryAttestStore {
        guard validShardCount(shards) else {
            throw StoreError(.unavailable, "store shards must be a power of two from 1 to 4096, not \(shards)")
        }
        guard let directory else {
            return MemoryAttestStore(shards: shards, challenges: challenges, limits: limits, observer: observer)
        }
        let start = ContinuousClock.now
        try prepareDirectory(directory)
        let lock = exclusive ? try lockDirectory(directory, files: files) : nil
        let names = try FileIO.listDirectory(directory)
        let seed = UInt64.random(in: .min ... .max)
        var states = (0..<shards).map { _ in ShardState(seed: seed) }

        let loaded = try SnapshotFormat.load(path: "\(directory)/\(SnapshotFormat.fileName)", into: &states)
        let markerPath = "\(directory)/\(markerName)"
        let marker = try FileIO.readSmallFile(markerPath)
        let firstSeq = loaded?.header.journalSeq ?? 0
        let segments = names.compactMap(JournalFormat.sequence(ofName:)).sorted()
        let replay = segments.filter { $0 >= firstSeq }
        // Segments are numbered from 1 and deleted only once a snapshot covers them: a gap, or a
        // journal that does not start at 1 with no snapshot, means files were lost.
        if loaded == nil, let first = segments.first, first > 1 {
            throw StoreError(
                .unavailable,
                "data directory \(directory) has journal segments from \(first) on but no \(SnapshotFormat.fileName); "
                    + "the keys of the segments before it would be lost")
        }
        var expected = loaded == nil ? replay.first : firstSeq
        for seq in replay {
            if let e = expected, seq != e {
                throw StoreError(
                    .unavailable, "data directory \(directory) lacks journal segment \(JournalFormat.segmentName(e))")
            }
            expected = seq + 1
        }
        var report = RestoreReport()
        var unmatched = UnmatchedAdvances()
        // DeviceCheck token claims: the snapshot's, then the journal's (after a clean stop and after
        // a crash alike: a claimed token stays refused until its claim expires).
        var claims = loaded?.claims ?? []
        // Keys per account: the snapshot's associations, then the journal's, in order.
        var associations: [(AccountAssociation, cutoff: UInt32)] = []
        for (i, seq) in replay.enumerated() {
            let r = try replaySegment(
                "\(directory)/\(JournalFormat.segmentName(seq))", seq: seq, isLast: i == replay.count - 1,
                into: &states, unmatched: &unmatched, files: files)
            report.replayedRecords += r.applied
            report.damage += r.damage
            claims += r.claims
            associations += r.associations
            if let torn = r.torn { report.tornTail = torn }
        }
        // Advances of a key no registration or later removal explains: damage (their registration was lost).
        report.damage += unmatched.damage

        // Clean: the marker names this snapshot and nothing was journaled after it (not even a
        // damaged or torn record).
        var clean = false
        if let marker, let loaded {
            if report.replayedRecords == 0, report.damage.isEmpty, report.tornTail == nil, marker.count == 16,
                Array(marker[0..<8]) == markerMagic
            {
                let generation = marker[8..<16].reversed().reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
                clean = generation == loaded.header.generation
            }
        } else if marker == nil && loaded == nil && segments.isEmpty {
            clean = true  // a new directory: nothing to recover
        }
        var live = 0
        if clean, let loaded {
            restoreChallenges(loaded.challenges, into: &states)
            live = loaded.challenges.count
        }
        // The snapshot names the receipts file its records (and every later journal record) point
        // into; any other one was superseded, or written by a compaction that did not finish.
        let receiptsGeneration = loaded?.header.receiptsGeneration ?? 0
        let receiptsName = Journal.receiptsName(generation: receiptsGeneration)
        if receiptsGeneration > 0 && !names.contains(receiptsName) {
            throw StoreError(
                .unavailable,
                "data directory \(directory) lacks \(receiptsName), the receipts file \(SnapshotFormat.fileName) names")
        }
        // The marker must be gone before anything new is written: a crash from here on is unclean.
        if marker != nil {
            try FileIO.unlink(markerPath)
            try files.fsyncDirectory(directory)
        }
        for seq in segments where seq < firstSeq {
            try FileIO.unlink("\(directory)/\(JournalFormat.segmentName(seq))")  // left by an interrupted cleanup
        }
        for name in names where Journal.isReceiptsFile(name) && name != receiptsName {
            try FileIO.unlink("\(directory)/\(name)")
        }

        let receiptsPath = "\(directory)/\(receiptsName)"
        let receiptsFD = try files.open(receiptsPath, O_WRONLY | O_CREAT | O_APPEND)
        let receipts = FileHandle(fd: receiptsFD, path: receiptsPath)
        let receiptsEnd = try FileIO.fileSize(receiptsFD, path: receiptsPath)
        let reader = FileHandle(fd: try files.open(receiptsPath, O_RDONLY), path: receiptsPath)
        let seq = max(segments.last ?? 0, firstSeq) + 1
        let segment = try Journal.createSegment(directory: directory, seq: seq, files: files)
        let journal = Journal(
            directory: directory, segment: segment, seq: seq, receipts: receipts, receiptsEnd: UInt64(receiptsEnd),
            observer: observer, files: files, retry: retry)
        journal.startPeriodicSync()
        let store = MemoryAttestStore(
            states: states, live: live, challenges: challenges, limits: limits, clean: clean, directory: directory,
            journal: journal, receipts: ReceiptsFile(reader: reader, generation: receiptsGeneration), observer: observer,
            restoreReport: report, deviceTokens: claims,
            accounts: AccountTable(
                maxAssociations: limits.maxKeys, restoring: loaded?.associations ?? [], replaying: associations))
        store.directoryLock.withLock { $0 = lock }
        journal.snapshotter.withLock { $0 = { [weak store] in try store?.writeRecoverySnapshot() } }
        observer?.restored(keys: store.statistics.keys, seconds: seconds(since: start))
        return store
    }

    private static func lockDirectory(_ directory: String, files: StoreFiles) throws -> FileHandle {
        let path = "\(directory)/lock"
        let handle = FileHandle(fd: try files.open(path, O_RDWR | O_CREAT), path: path)
        while flock(handle.fd, LOCK_EX | LOCK_NB) != 0 {
            if errno == EINTR { continue }
            if errno == EWOULDBLOCK {
                throw StoreError(.unavailable, "data directory \(directory) is in use by another store (\(path) is locked)")
            }
            throw FileIO.failure("cannot lock", path)
        }
        return handle
    }

    private static func prepareDirectory(_ directory: String) throws {
        if !FileIO.exists(directory) {
            guard mkdir(directory, 0o700) == 0 || errno == EEXIST else {
                throw FileIO.failure("cannot create data directory", directory)
            }
        }
        guard FileIO.isDirectory(directory) else {
            throw StoreError(.unavailable, "data directory \(directory) is not a directory")
        }
        guard access(directory, R_OK | W_OK | X_OK) == 0 else {
            throw FileIO.failure("cannot use data directory", directory)
        }
    }

    /// What replaying one segment found.
    struct SegmentReplay {
        var applied = 0
        /// DeviceCheck token claims (type 5), restored whatever the stop was.
        var claims: [DeviceTokenClaim] = []
        /// Associations of keys with accounts (type 6), restored whatever the stop was.
        var associations: [(AccountAssociation, cutoff: UInt32)] = []
        var damage: [JournalDamage] = []
        var torn: RestoreReport.TornTail?
    }

    /// Counter advances of keys that were not registered when replayed. A later removal of the key
    /// explains them (a snapshot copied the key's shard after the key was removed, so it lacks the
    /// key the segment's advances name) and drops them; what is left once every segment is
    /// replayed is damage (`.unknownKey`: the key's registration record was lost).
    struct UnmatchedAdvances {
        private var byKey: [KeyBits: [JournalDamage]] = [:]
        /// Keys in the order their first unmatched advance was read, for a stable report.
        private var order: [KeyBits] = []

        mutating func add(_ key: KeyBits, _ damage: JournalDamage) {
            if byKey[key] == nil { order.append(key) }
            byKey[key, default: []].append(damage)
        }

        mutating func removed(_ key: KeyBits) { byKey[key] = nil }

        var damage: [JournalDamage] { order.flatMap { byKey[$0] ?? [] } }
    }

    /// Applies one segment's records to `states`.
    ///
    /// - A torn tail of the **last** segment (bytes at its end from which no whole record can be
    ///   read: a record header or payload cut short, zeros) is cut off: the file is truncated to
    ///   its last whole record. Only a crash in the middle of a write leaves one.
    /// - Anything else that cannot be used is damage, skipped and reported (never silently):
    ///   a whole record whose checksum fails (its length is intact: the next record starts where
    ///   it ends, or it ends the file), a record that does not decode, bytes that do not frame
    ///   records (skipped to the next offset where a whole record with a valid checksum starts),
    ///   an advance of a key that is not registered. Replay goes on after it: the records that
    ///   follow are whole and were acknowledged.
    /// - A damaged record whose key id (at its fixed offset) names a registered key raises that
    ///   key's counter to the counter it carries when that is higher: a damaged record can only
    ///   raise a counter, never lower it or create a key. (A damaged removal removes nothing: the
    ///   key stays, with its counter.)
    /// - An advance of a key that is not registered waits in `unmatched`: a later removal of the
    ///   key explains it (see `UnmatchedAdvances`).
    ///
    /// Version 1 segments (written before key removals and the re-registration window) are read
    /// as they are: their registrations carry no window. A segment whose header does not parse is
    /// an error naming the file (nothing in it can be trusted, and skipping it would drop every
    /// record it holds).
    static func replaySegment(
        _ path: String, seq: UInt64, isLast: Bool, into states: inout [ShardState],
        unmatched: inout UnmatchedAdvances, files: StoreFiles = .system
    ) throws -> SegmentReplay {
        let fd = try files.open(path, O_RDWR)
        defer { Glibc.close(fd) }
        let size = try FileIO.fileSize(fd, path: path)
        func corrupt(_ why: String) -> StoreError {
            StoreError(.unavailable, "journal \(path) is corrupt: \(why)")
        }
        var out = SegmentReplay()
        if size < JournalFormat.headerSize {
            // Created but its header never fully written: only possible for the newest segment.
            guard isLast else { throw corrupt("\(size)-byte file is shorter than a segment header") }
            try FileIO.unlink(path)
            return out
        }
        var bytes = [UInt8](repeating: 0, count: size)
        let n = try bytes.withUnsafeMutableBytes { (buf) throws -> Int in
            try FileIO.pread(fd, into: buf, offset: 0, path: path)
        }
        guard n == size else { throw corrupt("short read") }
        let mask = UInt64(states.count - 1)
        try bytes.withUnsafeBytes { (all) throws in
            var r = ByteReader(all)
            guard let magic = r.take(8), Array(magic) == JournalFormat.magic else { throw corrupt("bad magic") }
            let version = r.u32()!
            guard JournalFormat.readableVersions.contains(version) else {
                throw StoreError(
                    .unavailable,
                    "journal \(path) has unknown version \(version); this build reads versions "
                        + "\(JournalFormat.readableVersions.lowerBound) to \(JournalFormat.readableVersions.upperBound)")
            }
            _ = r.u32()
            guard r.u64()! == seq else { throw corrupt("its header names another sequence number") }

            func u32(_ at: Int) -> UInt32 { UInt32(littleEndian: all.loadUnaligned(fromByteOffset: at, as: UInt32.self)) }
            /// A whole record whose checksum holds starts at `p`.
            func wholeRecord(at p: Int) -> Bool {
                guard p + 8 <= size else { return false }
                let length = Int(u32(p))
                guard length > 0, length <= JournalFormat.maxPayload, p + 8 + length <= size else { return false }
                return CRC32C.checksum(UnsafeRawBufferPointer(rebasing: all[(p + 8)..<(p + 8 + length)])) == u32(p + 4)
            }
            /// The record starts from `p` to exactly `q` if the length fields chain there (each
            /// record's length in range and inside `[p, q)`), else nil.
            func chain(from p: Int, to q: Int) -> [Int]? {
                var starts: [Int] = []
                var p = p
                while p < q {
                    guard p + 8 <= q else { return nil }
                    let length = Int(u32(p))
                    guard length > 0, length <= JournalFormat.maxPayload, p + 8 + length <= q else { return nil }
                    starts.append(p)
                    p += 8 + length
                }
                return starts
            }
            /// The next offset after `p` where a whole record starts, or the end of the file.
            func resync(after p: Int) -> Int {
                var q = p + 1
                while q < size && !wholeRecord(at: q) { q += 1 }
                return q
            }
            /// Damage at `at`, attributed to a key when the bytes at the key offset of the record
            /// type they claim name a registered key; the key's counter is raised to the
            /// record's when higher, and its counter window closed (the record may have accepted
            /// one of its open counters, and its own window bytes cannot be trusted).
            func damage(_ kind: JournalDamage.Kind, at: Int, length: Int) -> JournalDamage {
                var d = JournalDamage(kind: kind, segment: path, offset: at, length: length)
                let keyAt = at + 9
                guard keyAt + 32 <= size else { return d }
                let counterAt: Int?
                switch all[at + 8] {
                case JournalRecord.advanceType: counterAt = keyAt + 32
                case JournalRecord.registrationType: counterAt = keyAt + 32 + 64  // the same in versions 1 and 2
                case JournalRecord.removalType, JournalRecord.riskType: counterAt = nil  // attributed, carries no counter
                default: return d
                }
                let key = all.loadUnaligned(fromByteOffset: keyAt, as: KeyBits.self)
                let s = Int(key.w0 & mask)
                if let counterAt, counterAt + 4 > size { return d }
                guard let i = states[s].find(key) else { return d }
                d.keyID = key.keyID
                let open = states[s].record(at: i).gaps.nonzeroBitCount
                if open > 0 {
                    states[s].update(at: i) { $0.gaps = 0 }
                    d.windowClosed = open
                }
                guard let counterAt else { return d }
                let counter = u32(counterAt)
                let current = states[s].record(at: i).counter
                d.recordedCounter = counter
                if counter > current {
                    states[s].update(at: i) { $0.counter = counter }
                    d.counterRaised = .init(from: current, to: counter)
                }
                return d
            }

            var at = r.offset
            while at < size {
                let remaining = size - at
                let length = remaining >= 8 ? Int(u32(at)) : 0
                let framed = remaining >= 8 && length > 0 && length <= JournalFormat.maxPayload && length + 8 <= remaining
                if !framed {
                    // No record can be read here: a torn tail if no whole record follows in the
                    // newest segment, else bytes skipped up to the next whole record.
                    let next = resync(after: at)
                    if next == size && isLast {
                        out.torn = .init(segment: path, offset: at, bytes: remaining)
                        break
                    }
                    out.damage.append(damage(.unreadable, at: at, length: next - at))
                    at = next
                    continue
                }
                let next = at + 8 + length
                let payload = UnsafeRawBufferPointer(rebasing: all[(at + 8)..<next])
                guard CRC32C.checksum(payload) == u32(at + 4) else {
                    // Replay resumes at the next whole record. When the length fields chain up to
                    // it, each record on the way is reported (and attributed) on its own; else the
                    // lengths are damaged too and the range is one unreadable stretch. The next
                    // whole record is searched from here, not trusted to be where this length says:
                    // a damaged length that points at the file's end, or at a later record, would
                    // skip the whole records it spans (found by fuzz/FuzzStoreFiles).
                    let resumed = resync(after: at)
                    if let starts = chain(from: at, to: resumed) {
                        for p in starts { out.damage.append(damage(.checksum, at: p, length: 8 + Int(u32(p)))) }
                    } else {
                        out.damage.append(damage(.unreadable, at: at, length: resumed - at))
                    }
                    at = resumed
                    continue
                }
                guard let record = JournalRecord.decode(payload) else {
                    out.damage.append(damage(.malformed, at: at, length: 8 + length))
                    at = next
                    continue
                }
                switch record {
                case .registration(let reg):
                    apply(&states[Int(reg.key.w0 & mask)], reg)
                    out.applied += 1
                case .advance(let key, let counter, let lastSeen, let gaps):
                    let s = Int(key.w0 & mask)
                    if let i = states[s].find(key) {
                        // The window the record left, merged: replaying it again, or over a snapshot
                        // that holds later records of the key, closes nothing that is open there.
                        states[s].update(at: i) { x in
                            x.window = x.window.merged(with: CounterWindow(highest: counter, gaps: gaps))
                            x.lastSeen = max(x.lastSeen, lastSeen)
                        }
                        out.applied += 1
                    } else {
                        var d = JournalDamage(kind: .unknownKey, segment: path, offset: at, length: 8 + length)
                        d.keyID = key.keyID
                        d.recordedCounter = counter
                        unmatched.add(key, d)
                    }
                case .removal(let key):
                    let s = Int(key.w0 & mask)
                    unmatched.removed(key)
                    if let i = states[s].find(key) { states[s].remove(at: i) }  // absent: already removed
                    out.applied += 1
                case .risk(let risk):
                    if apply(&states[Int(risk.key.w0 & mask)], risk: risk) {
                        out.applied += 1
                    } else {
                        // Like an advance: a later removal explains it, else its registration was lost.
                        var d = JournalDamage(kind: .unknownKey, segment: path, offset: at, length: 8 + length)
                        d.keyID = risk.key.keyID
                        unmatched.add(risk.key, d)
                    }
                case .claim(let claim):
                    out.claims.append(claim)
                    out.applied += 1
                case .association(let a, let cutoff):
                    out.associations.append((a, cutoff))
                    out.applied += 1
                }
                at = next
            }
        }
        if let torn = out.torn {
            try files.truncate(fd, path: path, to: torn.offset)
            try files.fsync(fd, path: path)
        }
        return out
    }

    /// Writes a snapshot: rotates the journal (under its lock), copies each shard under its lock
    /// (copy-on-write, so the lock is held for O(1)), writes and checksums the file, renames it into
    /// place, fsyncs the directory, then deletes the journal segments it covers.
    ///
    /// Why nothing is lost: a mutation writes its journal record and changes memory under the same
    /// shard lock, so a record in a segment before the rotation was applied before that shard was
    /// copied; records after it are replayed on restore (replay is idempotent).
    public func snapshot() throws -> SnapshotReport {
        guard journal != nil else { throw StoreError(.unavailable, "a memory-only store has no snapshots") }
        if closed.load(ordering: .relaxed) { throw Self.closedError }
        do {
            return try snapshotLock.withLock { (_) throws -> SnapshotReport in try writeSnapshot().report }
        } catch {
            throw StoreError.from(error)
        }
    }

    /// The snapshot a journal recovery writes after a suspect fault (errors as thrown: the
    /// journal reads the failed call from them).
    func writeRecoverySnapshot() throws {
        if closed.load(ordering: .relaxed) { throw Self.closedError }
        try snapshotLock.withLock { (_) throws in
            // A snapshot taken while this one waited for the lock may have cleared the fault already.
            guard journal?.fault != nil else { return }
            _ = try writeSnapshot()
        }
    }

    private func writeSnapshot() throws -> (report: SnapshotReport, generation: UInt64) {
        guard let journal, let directory else { throw StoreError(.unavailable, "a memory-only store has no snapshots") }
        let start = ContinuousClock.now
        if receiptsNeedCompaction {
            do {
                return try compactReceiptsWithSnapshot(journal: journal, directory: directory, start: start)
            } catch let aborted as CompactionAborted {
                observer?.receiptCompactionFailed(aborted.error)  // the snapshot goes on without it
            }
        }
        let seq = try journal.rotate()
        var copies: [SnapshotFormat.ShardCopy] = []
        copies.reserveCapacity(shards.count)
        var keys = 0
        var challenges = 0
        for shard in shards {
            let copy = shard.state.withLock { s in
                SnapshotFormat.ShardCopy(strings: s.strings, chunks: s.chunks, count: s.count, challenges: s.challenges)
            }
            keys += copy.count
            challenges += copy.challenges.count
            copies.append(copy)
        }
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        let generation = UInt64.random(in: 1 ... .max)
        let header = SnapshotFormat.Header(
            shardCount: shards.count, generation: generation, journalSeq: seq, keyCount: keys,
            challengeCount: challenges, createdMillis: Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec) / 1_000_000,
            receiptsGeneration: receipts.withLock { $0.generation })
        let bytes = try SnapshotFormat.write(
            directory: directory, header: header, shards: copies, claims: deviceTokens.copy(), files: journal.files,
            associations: accounts.copy())
        copies.removeAll()
        journal.snapshotCovers(seq)  // memory is on disk again: a write fault from before the rotation is over
        let receiptsName = Journal.receiptsName(generation: header.receiptsGeneration)
        for name in try FileIO.listDirectory(directory) {
            if let s = JournalFormat.sequence(ofName: name), s < seq {
                try FileIO.unlink("\(directory)/\(name)")
            } else if Journal.isReceiptsFile(name) && name != receiptsName {
                // Superseded by a compaction whose cleanup did not run (its directory fsync failed);
                // best effort: `open` removes it too.
                unlink("\(directory)/\(name)")
            }
        }
        let report = SnapshotReport(keys: keys, challenges: challenges, bytes: bytes, seconds: seconds(since: start))
        observer?.snapshotWritten(report)
        return (report, generation)
    }

    /// Writes a snapshot every `interval` on a background queue while the store is open, skipping
    /// rounds in which no key changed (the current journal segment is empty). Errors go to
    /// `onError`; the observer sees each snapshot. A memory-only store has nothing to do.
    /// Journal records not yet covered by a snapshot (0 without a data directory): what a crash
    /// now would have to replay. The gateway reports the snapshot age as 0 while this is 0.
    public var unsnapshottedRecords: Int { journal?.recordsInSegment ?? 0 }

    public func startPeriodicSnapshots(
        every interval: Duration, onError: @escaping @Sendable (StoreError) -> Void = { _ in }
    ) {
        guard journal != nil else { return }
        let millis = max(1, Int(interval.components.seconds * 1000 + interval.components.attoseconds / 1_000_000_000_000_000))
        let timer = DispatchSource.makeTimerSource(queue: DispatchQueue(label: "attest-store.snapshots", qos: .utility))
        timer.schedule(deadline: .now() + .milliseconds(millis), repeating: .milliseconds(millis))
        timer.setEventHandler { [weak self] in
            // While the journal refuses writes its recovery decides when to write a snapshot.
            guard let self, !self.closed.load(ordering: .relaxed), let journal = self.journal,
                journal.recordsInSegment > 0, journal.fault == nil
            else { return }
            do {
                _ = try self.snapshot()
            } catch {
                if !self.closed.load(ordering: .relaxed) { onError(StoreError.from(error)) }
            }
        }
        let box = Journal.TimerBox(timer)
        snapshotTimer.withLock { old in
            old?.source.cancel()
            old = box
        }
        timer.resume()
    }

    /// Stops the store: no operation is accepted afterwards. With a data directory: a final
    /// snapshot (with live challenges and consumed flags), the journal fsync'ed, then the
    /// clean-stop marker naming that snapshot. Calling it twice does nothing the second time.
    /// Call it from the gateway's shutdown path, not from inside a store completion (`register`
    /// completions run on the journal's queue, which `close` waits for).
    public func close() throws {
        guard closed.compareExchange(expected: false, desired: true, ordering: .sequentiallyConsistent).exchanged
        else { return }
        snapshotTimer.withLock { t in
            t?.source.cancel()
            t = nil
        }
        guard let journal, let directory else { return }
        do {
            // In a write fault this snapshot is also its recovery (it rewrites what memory holds).
            let generation: UInt64
            do {
                generation = try snapshotLock.withLock { (_) throws -> UInt64 in try writeSnapshot().generation }
            } catch {
                try? journal.close()  // stops the timers and the recovery; the stop stays unclean
                throw error
            }
            try journal.close()
            var w = ByteWriter(capacity: 16)
            w.bytes.append(contentsOf: Self.markerMagic)
            w.u64(generation)
            try journal.files.writeFileAtomically(w.bytes, directory: directory, name: Self.markerName)
        } catch {
            throw StoreError.from(error)
        }
        directoryLock.withLock { $0 = nil }  // closing the descriptor releases the flock
    }
}
