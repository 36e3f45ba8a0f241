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
    /// journal corruption before its last record. A torn last journal record is dropped.
    ///
    /// The directory is locked (`flock` on `lock`) until `close()`: a second process, or a second
    /// store in this process, cannot open it meanwhile.
    public static func open(
        directory: String?, shards: Int = 64, maxLiveChallenges: Int = 1_000_000,
        observer: (any AttestStoreObserver)? = nil, limits: KeyLimits = KeyLimits()
    ) throws -> MemoryAttestStore {
        try open(directory: directory, shards: shards, maxLiveChallenges: maxLiveChallenges, observer: observer,
                 exclusive: true, limits: limits)
    }

    /// `exclusive: false` skips the directory lock: only for tests that simulate a crash by opening
    /// a second store while the first, never closed, still holds the lock.
    static func open(
        directory: String?, shards: Int, maxLiveChallenges: Int, observer: (any AttestStoreObserver)?,
        exclusive: Bool, limits: KeyLimits = KeyLimits()
    ) throws -> MemoryAttestStore {
        guard validShardCount(shards) else {
            throw StoreError(.unavailable, "store shards must be a power of two from 1 to 4096, not \(shards)")
        }
        guard let directory else {
            return MemoryAttestStore(shards: shards, maxLiveChallenges: maxLiveChallenges, limits: limits, observer: observer)
        }
        let start = ContinuousClock.now
        try prepareDirectory(directory)
        let lock = exclusive ? try lockDirectory(directory) : nil
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
        var replayed = 0
        var unmatched: [KeyBits: String] = [:]
        for (i, seq) in replay.enumerated() {
            replayed += try replaySegment(
                "\(directory)/\(JournalFormat.segmentName(seq))", seq: seq, isLast: i == replay.count - 1,
                into: &states, unmatched: &unmatched)
        }
        if let why = unmatched.values.min() { throw StoreError(.unavailable, why) }

        // Clean: the marker names this snapshot and nothing was journaled after it.
        var clean = false
        if let marker, let loaded {
            if replayed == 0, marker.count == 16, Array(marker[0..<8]) == markerMagic {
                let generation = marker[8..<16].reversed().reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
                clean = generation == loaded.header.generation
            }
        } else if marker == nil && loaded == nil && segments.isEmpty {
            clean = true  // a new directory: nothing to recover
        }
        var live = 0
        if clean, let loaded {
            let mask = UInt64(shards - 1)
            for c in loaded.challenges {
                states[Int(c.token.a & mask)].addChallenge(c)
            }
            live = loaded.challenges.count
        }
        // The marker must be gone before anything new is written: a crash from here on is unclean.
        if marker != nil {
            try FileIO.unlink(markerPath)
            try FileIO.fsyncDirectory(directory)
        }
        for seq in segments where seq < firstSeq {
            try FileIO.unlink("\(directory)/\(JournalFormat.segmentName(seq))")  // left by an interrupted cleanup
        }
        // The snapshot names the receipts file its records (and every later journal record) point
        // into; any other one was superseded, or written by a compaction that did not finish.
        let receiptsGeneration = loaded?.header.receiptsGeneration ?? 0
        let receiptsName = Journal.receiptsName(generation: receiptsGeneration)
        if receiptsGeneration > 0 && !names.contains(receiptsName) {
            throw StoreError(
                .unavailable, "data directory \(directory) lacks \(receiptsName), the receipts file \(SnapshotFormat.fileName) names")
        }
        for name in names where Journal.isReceiptsFile(name) && name != receiptsName {
            try FileIO.unlink("\(directory)/\(name)")
        }

        let receiptsPath = "\(directory)/\(receiptsName)"
        let receiptsFD = try FileIO.open(receiptsPath, O_WRONLY | O_CREAT | O_APPEND)
        let receipts = FileHandle(fd: receiptsFD, path: receiptsPath)
        let receiptsEnd = try FileIO.fileSize(receiptsFD, path: receiptsPath)
        let reader = FileHandle(fd: try FileIO.open(receiptsPath, O_RDONLY), path: receiptsPath)
        let seq = max(segments.last ?? 0, firstSeq) + 1
        let segment = try Journal.createSegment(directory: directory, seq: seq)
        let journal = Journal(
            directory: directory, segment: segment, seq: seq, receipts: receipts, receiptsEnd: UInt64(receiptsEnd),
            observer: observer)
        journal.startPeriodicSync()
        let store = MemoryAttestStore(
            states: states, live: live, maxLiveChallenges: maxLiveChallenges, limits: limits, clean: clean,
            directory: directory, journal: journal, receipts: ReceiptsFile(reader: reader, generation: receiptsGeneration),
            observer: observer)
        store.directoryLock.withLock { $0 = lock }
        observer?.restored(keys: store.statistics.keys, seconds: seconds(since: start))
        return store
    }

    private static func lockDirectory(_ directory: String) throws -> FileHandle {
        let path = "\(directory)/lock"
        let handle = FileHandle(fd: try FileIO.open(path, O_RDWR | O_CREAT), path: path)
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

    /// Applies one segment's records to `states`; returns how many. A torn last record of the last
    /// segment is cut off (the file is truncated to its last whole record); anything else that
    /// does not parse is an error.
    ///
    /// An advance of a key that is not there is an error unless a later removal of that key follows
    /// (a snapshot copied after the removal lacks the key): such advances wait in `unmatched`, which
    /// the caller checks once every segment is replayed.
    static func replaySegment(
        _ path: String, seq: UInt64, isLast: Bool, into states: inout [ShardState], unmatched: inout [KeyBits: String]
    ) throws -> Int {
        let fd = try FileIO.open(path, O_RDWR)
        defer { Glibc.close(fd) }
        let size = try FileIO.fileSize(fd, path: path)
        func corrupt(_ why: String) -> StoreError {
            StoreError(.unavailable, "journal \(path) is corrupt: \(why)")
        }
        if size < JournalFormat.headerSize {
            // Created but its header never fully written: only possible for the newest segment.
            guard isLast else { throw corrupt("\(size)-byte file is shorter than a segment header") }
            try truncate(fd, path: path, to: 0)
            try FileIO.unlink(path)
            return 0
        }
        var bytes = [UInt8](repeating: 0, count: size)
        let n = try bytes.withUnsafeMutableBytes { (buf) throws -> Int in
            try FileIO.pread(fd, into: buf, offset: 0, path: path)
        }
        guard n == size else { throw corrupt("short read") }
        let mask = UInt64(states.count - 1)
        var count = 0
        var tornAt: Int?
        try bytes.withUnsafeBytes { (all) throws in
            var r = ByteReader(all)
            guard let magic = r.take(8), Array(magic) == JournalFormat.magic else { throw corrupt("bad magic") }
            let version = r.u32()!
            guard JournalFormat.readableVersions.contains(version) else {
                throw StoreError(
                    .unavailable,
                    "journal \(path) has unknown version \(version); this build reads version \(JournalFormat.version)")
            }
            _ = r.u32()
            guard r.u64()! == seq else { throw corrupt("its header names another sequence number") }
            while r.remaining > 0 {
                let at = r.offset
                var allZero: Bool { !all[at...].contains(where: { $0 != 0 }) }
                guard r.remaining >= 8 else {
                    if isLast { tornAt = at; return }
                    throw corrupt("truncated record header at offset \(at)")
                }
                let length = Int(r.u32()!)
                let crc = r.u32()!
                if length == 0 || length > JournalFormat.maxPayload {
                    if isLast && allZero { tornAt = at; return }
                    throw corrupt("record at offset \(at) has length \(length)")
                }
                guard let payload = r.take(length) else {
                    if isLast { tornAt = at; return }
                    throw corrupt("record at offset \(at) runs past the end of the file")
                }
                guard CRC32C.checksum(payload) == crc else {
                    if isLast && r.remaining == 0 { tornAt = at; return }
                    throw corrupt("record at offset \(at) fails its checksum")
                }
                guard let record = JournalRecord.decode(payload) else {
                    throw corrupt("record at offset \(at) is malformed")
                }
                switch record {
                case .registration(let reg):
                    apply(&states[Int(reg.key.w0 & mask)], reg)
                case .advance(let key, let counter, let lastSeen):
                    let s = Int(key.w0 & mask)
                    guard let i = states[s].find(key) else {
                        if unmatched[key] == nil {
                            unmatched[key] = corrupt("record at offset \(at) advances the counter of an unregistered key").detail
                        }
                        break
                    }
                    states[s].update(at: i) { x in
                        x.counter = max(x.counter, counter)
                        x.lastSeen = max(x.lastSeen, lastSeen)
                    }
                case .removal(let key):
                    let s = Int(key.w0 & mask)
                    unmatched[key] = nil
                    if let i = states[s].find(key) { states[s].remove(at: i) }  // absent: already removed
                }
                count += 1
            }
        }
        if let tornAt { try truncate(fd, path: path, to: tornAt) }
        return count
    }

    private static func truncate(_ fd: Int32, path: String, to length: Int) throws {
        guard ftruncate(fd, off_t(length)) == 0 else { throw FileIO.failure("cannot truncate torn journal", path) }
        try FileIO.fsync(fd, path: path)
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
        return try snapshotLock.withLock { (_) throws -> SnapshotReport in try writeSnapshot().report }
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
        let bytes = try SnapshotFormat.write(directory: directory, header: header, shards: copies)
        copies.removeAll()
        for name in try FileIO.listDirectory(directory) {
            if let s = JournalFormat.sequence(ofName: name), s < seq {
                try FileIO.unlink("\(directory)/\(name)")
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
            guard let self, !self.closed.load(ordering: .relaxed), let journal = self.journal,
                  journal.recordsInSegment > 0
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
        let generation = try snapshotLock.withLock { (_) throws -> UInt64 in
            try writeSnapshot().generation
        }
        try journal.close()
        var w = ByteWriter(capacity: 16)
        w.bytes.append(contentsOf: Self.markerMagic)
        w.u64(generation)
        try FileIO.writeFileAtomically(w.bytes, directory: directory, name: Self.markerName)
        directoryLock.withLock { $0 = nil }  // closing the descriptor releases the flock
    }
}
