import Glibc

/// What one receipt compaction did.
public struct ReceiptCompactionReport: Sendable, Equatable {
    /// Receipts copied into the new file, and their bytes.
    public var receipts: Int
    public var liveBytes: Int
    /// The old file's size minus the live bytes: what was reclaimed.
    public var reclaimedBytes: Int
    /// From the start of the copy to the old file's removal.
    public var seconds: Double

    public init(receipts: Int, liveBytes: Int, reclaimedBytes: Int, seconds: Double) {
        self.receipts = receipts
        self.liveBytes = liveBytes
        self.reclaimedBytes = reclaimedBytes
        self.seconds = seconds
    }
}

/// Receipt compaction: a re-registration or an idle eviction leaves the old receipt in the receipts
/// file, which is append-only. When superseded bytes reach `compactionMinimumGarbage` (1 MiB) and
/// half the live bytes, the next snapshot copies the live receipts into a new file
/// (`receipts-<generation>.dat`), writes the snapshot with the new offsets and naming that file,
/// then removes the old file. See docs/store.md ("Receipt compaction") for why a crash at any
/// point leaves a consistent store.
extension MemoryAttestStore {
    /// The points of a compaction a test can stop at (`compactionHook`), as a crash there would.
    enum CompactionStep: Sendable, Equatable {
        /// Phase 1 copied the live receipts to the temporary file (not yet fsync'ed).
        case receiptsCopied
        /// The new receipts file is complete, fsync'ed and renamed into place (not yet named by a snapshot).
        case receiptsRenamed
        /// The new snapshot (naming the new receipts file) is written and fsync'ed, not yet renamed.
        case snapshotWritten
        /// The new snapshot is in place; registrations write to the new file; the old file and the
        /// covered journal segments are not yet removed.
        case switched
    }

    var receiptsNeedCompaction: Bool {
        guard let journal else { return false }
        let end = Int(journal.receiptsEnd)
        let live = liveReceiptBytes.load(ordering: .relaxed)
        let garbage = end - live
        return garbage > 0 && garbage >= compactionMinimumGarbage.load(ordering: .relaxed) && garbage * 2 >= live
            && end >= compactionDeferredUntil.load(ordering: .relaxed)
    }

    /// A compaction that stopped before its snapshot was installed: nothing changed (its files were
    /// removed), and the snapshot is written without it. Retried once the receipts file has grown
    /// by another `compactionMinimumGarbage`.
    struct CompactionAborted: Error {
        let error: StoreError
    }

    private func reach(_ step: CompactionStep) throws {
        if let hook = compactionHook.withLock({ $0 }) { try hook(step) }
    }

    /// A snapshot that also compacts the receipts file; called by `writeSnapshot` under the snapshot lock.
    ///
    /// Phase 1 (registrations continue): the live receipts' locations are collected from every shard
    /// and copied, in file order, to `receipts-<g+1>.dat.tmp`.
    /// Phase 2 (under `registrationGate`: no receipt is written meanwhile; assertions continue): the
    /// journal is rotated and the shards copied as for any snapshot; receipts registered during phase
    /// 1 are copied too; the file is fsync'ed and renamed into place; the snapshot is written with
    /// every offset relocated and names generation g+1; once it is renamed into place the journal
    /// appends to the new file and every record in memory is relocated.
    /// Then the covered segments and the old receipts file are removed.
    ///
    /// Every file operation goes through the journal's `StoreFiles` (the fault seam): a failed call
    /// is counted and reported like any other (`storeWriteFailed`). A failure before the new
    /// snapshot is installed (a full disk cannot hold the copy, a receipt cannot be read) removes
    /// the new files and throws `CompactionAborted`: the caller writes the snapshot without
    /// compacting, and writes go on (a snapshot failure does not stop them). A failed fsync of the
    /// directory after the snapshot was renamed into place leaves unknown which snapshot a crash
    /// would find: the journal enters a suspect fault (writes refused until a recovery's snapshot is
    /// durable), the old files stay until then, and the failure is thrown. (Errors a test hook
    /// throws pass through untouched, as a crash.)
    func compactReceiptsWithSnapshot(journal: Journal, directory: String, start: ContinuousClock.Instant)
        throws -> (report: SnapshotReport, generation: UInt64)
    {
        let newGeneration = receipts.withLock { $0.generation } + 1
        let newPath = "\(directory)/\(Journal.receiptsName(generation: newGeneration))"
        var installed = false
        do {
            return try compact(journal: journal, directory: directory, start: start, newPath: newPath, installed: &installed)
        } catch let error where !installed && (error is StoreError || error is FileFault) {
            unlink(newPath + ".tmp")
            unlink(newPath)
            compactionDeferredUntil.store(
                Int(journal.receiptsEnd) + max(1, compactionMinimumGarbage.load(ordering: .relaxed)), ordering: .relaxed)
            throw CompactionAborted(error: StoreError.from(error))
        }
    }

    private func compact(
        journal: Journal, directory: String, start: ContinuousClock.Instant, newPath: String, installed: inout Bool
    ) throws -> (report: SnapshotReport, generation: UInt64) {
        let (oldGeneration, oldReader) = receipts.withLock { ($0.generation, $0.reader) }
        guard let oldReader else { throw StoreError(.unavailable, "the receipts file is not open") }
        let oldEnd = Int(journal.receiptsEnd)
        let newGeneration = oldGeneration + 1
        let tmpPath = newPath + ".tmp"
        let files = journal.files
        let copier = try ReceiptCopier(from: oldReader, to: tmpPath, files: files)
        var relocations = Relocations()

        // Phase 1.
        var live: [(offset: UInt64, length: UInt32)] = []
        for shard in shards {
            shard.state.withLock { s in
                for chunk in s.chunks { for r in chunk where r.receiptLength > 0 { live.append((r.receiptOffset, r.receiptLength)) } }
            }
        }
        live.sort { $0.offset < $1.offset }
        for (offset, length) in live { relocations.add(offset, try copier.copy(offset: offset, length: length)) }
        live = []
        try reach(.receiptsCopied)

        // Phase 2.
        let (seq, snapshot, generation, directoryFault) = try registrationGate.withLock {
            (_) throws -> (UInt64, SnapshotReport, UInt64, FileFault?) in
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
            relocations.sort()
            var late: [(offset: UInt64, length: UInt32)] = []
            for copy in copies {
                for chunk in copy.chunks {
                    for r in chunk where r.receiptLength > 0 && relocations[r.receiptOffset] == nil {
                        late.append((r.receiptOffset, r.receiptLength))
                    }
                }
            }
            late.sort { $0.offset < $1.offset }
            for (offset, length) in late { relocations.add(offset, try copier.copy(offset: offset, length: length)) }
            relocations.sort()
            let newEnd = try copier.finish()
            try files.rename(tmpPath, newPath)
            try files.fsyncDirectory(directory)
            try reach(.receiptsRenamed)
            // Opened before the snapshot is installed: once it is, nothing may fail before the switch.
            let writer = FileHandle(fd: try files.open(newPath, O_WRONLY | O_APPEND), path: newPath)
            let reader = FileHandle(fd: try files.open(newPath, O_RDONLY), path: newPath)

            var ts = timespec()
            clock_gettime(CLOCK_REALTIME, &ts)
            let generation = UInt64.random(in: 1 ... .max)
            let header = SnapshotFormat.Header(
                shardCount: shards.count, generation: generation, journalSeq: seq, keyCount: keys,
                challengeCount: challenges, createdMillis: Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec) / 1_000_000,
                receiptsGeneration: newGeneration)
            let moved = relocations
            let bytes = try SnapshotFormat.writeTemporary(
                directory: directory, header: header, shards: copies, claims: deviceTokens.copy(), files: files,
                associations: accounts.copy()
            ) { r in
                r.receiptOffset = r.receiptLength > 0 ? moved[r.receiptOffset]! : 0
            }
            copies = []
            try reach(.snapshotWritten)
            try SnapshotFormat.install(directory: directory, files: files)
            installed = true

            // The new snapshot is in place (in a crash from here on it is the one restored, once
            // the directory is fsync'ed): the journal and memory follow it before any registration
            // runs again.
            journal.switchReceipts(to: writer, end: UInt64(newEnd))
            receipts.withLock { $0 = ReceiptsFile(reader: reader, generation: newGeneration) }
            var liveBytes = 0
            for shard in shards {
                shard.state.withLock { s in
                    for i in 0..<s.count {
                        s.update(at: i) { r in
                            guard r.receiptLength > 0 else { return }
                            r.receiptOffset = moved[r.receiptOffset]!
                            liveBytes += Int(r.receiptLength)
                        }
                    }
                }
            }
            liveReceiptBytes.store(liveBytes, ordering: .relaxed)
            var directoryFault: FileFault?
            do {
                try files.fsyncDirectory(directory)
            } catch let f as FileFault {
                // Which snapshot (and so which receipts file) a crash would find is unknown: no write
                // until a recovery's snapshot is durable (it names the new file again).
                journal.enterSuspectFault(f.failure)
                directoryFault = f
            }
            let report = SnapshotReport(keys: keys, challenges: challenges, bytes: bytes, seconds: seconds(since: start))
            return (seq, report, generation, directoryFault)
        }
        if let directoryFault { throw directoryFault }  // the old files stay: a crash may still need them
        journal.snapshotCovers(seq)  // memory is on disk again: a write fault from before the rotation is over
        try reach(.switched)

        for name in try FileIO.listDirectory(directory) {
            if let s = JournalFormat.sequence(ofName: name), s < seq { try FileIO.unlink("\(directory)/\(name)") }
        }
        try FileIO.unlink("\(directory)/\(Journal.receiptsName(generation: oldGeneration))")
        let liveBytes = liveReceiptBytes.load(ordering: .relaxed)
        observer?.snapshotWritten(snapshot)
        observer?.receiptsCompacted(
            ReceiptCompactionReport(
                receipts: relocations.count, liveBytes: liveBytes, reclaimedBytes: max(0, oldEnd - liveBytes),
                seconds: seconds(since: start)))
        return (snapshot, generation)
    }
}

/// Old offset → new offset of every receipt copied, looked up by binary search once sorted.
struct Relocations {
    private var old: [UInt64] = []
    private var new: [UInt64] = []
    private var sorted = true

    var count: Int { old.count }

    mutating func add(_ from: UInt64, _ to: UInt64) {
        if let last = old.last, from < last { sorted = false }
        old.append(from)
        new.append(to)
    }

    mutating func sort() {
        guard !sorted else { return }
        let order = old.indices.sorted { old[$0] < old[$1] }
        old = order.map { old[$0] }
        new = order.map { new[$0] }
        sorted = true
    }

    subscript(from: UInt64) -> UInt64? {
        precondition(sorted, "Relocations looked up before sort()")
        var lo = 0
        var hi = old.count
        while lo < hi {
            let mid = (lo + hi) / 2
            if old[mid] < from { lo = mid + 1 } else { hi = mid }
        }
        return lo < old.count && old[lo] == from ? new[lo] : nil
    }
}

/// Copies receipts from the old file into the new one through a 1 MiB buffer.
final class ReceiptCopier {
    let source: FileHandle
    let fd: Int32
    let path: String
    private var buffer: [UInt8] = []
    private var written = 0
    private var open = true

    let files: StoreFiles

    init(from source: FileHandle, to path: String, files: StoreFiles) throws {
        self.source = source
        self.path = path
        self.files = files
        fd = try files.open(path, O_WRONLY | O_CREAT | O_TRUNC)
        buffer.reserveCapacity(1 << 20)
    }

    deinit { if open { Glibc.close(fd) } }

    /// Appends the receipt at `offset` and returns its offset in the new file.
    func copy(offset: UInt64, length: UInt32) throws -> UInt64 {
        guard let bytes = Journal.readReceipt(source, offset: offset, length: length) else {
            throw StoreError(
                .unavailable, "receipt compaction: \(source.path) has no \(length)-byte receipt at offset \(offset)")
        }
        let at = UInt64(written + buffer.count)
        if buffer.count + bytes.count > 1 << 20 { try flush() }
        buffer.append(contentsOf: bytes)
        return at
    }

    private func flush() throws {
        try buffer.withUnsafeBytes { (raw) throws in try files.writeAll(fd, raw, path: path) }
        written += buffer.count
        buffer.removeAll(keepingCapacity: true)
    }

    /// Writes what is buffered, fsyncs and closes; returns the file's size.
    func finish() throws -> Int {
        try flush()
        try files.fsync(fd, path: path)
        open = false
        Glibc.close(fd)
        return written
    }
}
