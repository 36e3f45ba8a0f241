import Dispatch
import Glibc
import Synchronization

/// Journal segments on disk: `journal-<seq, 16 hex digits>.log`.
///
/// Segment: header `AGJOURN1` (8 bytes), version (u32), reserved (u32), sequence (u64); then records
/// `length (u32) ‖ CRC-32C of payload (u32) ‖ payload`. Payload type 1 is a registration, type 2 a
/// counter advance, type 3 a key removal, type 4 a risk refresh, type 5 a DeviceCheck token claim,
/// type 6 a key's association with an account (see `JournalRecord`; 5 and 6 added within version 3: a segment without one reads as before). All integers
/// little-endian. Version 2 added the removal and the registration's re-registration window;
/// version 3 the registration's receipt dates, the risk refresh, and the counter window an advance
/// leaves (`CounterWindow.gaps`, appended to advances that leave open counters). Version 1 and 2
/// segments (advances without it: no open counter) are still read.
enum JournalFormat {
    static let magic: [UInt8] = Array("AGJOURN1".utf8)
    static let version: UInt32 = 3
    static let readableVersions: ClosedRange<UInt32> = 1...3
    static let headerSize = 24
    static let maxPayload = 64 * 1024

    static func segmentName(_ seq: UInt64) -> String {
        let hex = String(seq, radix: 16)
        return "journal-" + String(repeating: "0", count: max(0, 16 - hex.count)) + hex + ".log"
    }

    /// The sequence number of a segment file name, or nil for other files.
    static func sequence(ofName name: String) -> UInt64? {
        guard name.hasPrefix("journal-"), name.hasSuffix(".log") else { return nil }
        let hex = name.dropFirst(8).dropLast(4)
        guard hex.count == 16 else { return nil }
        return UInt64(hex, radix: 16)
    }

    static func header(_ seq: UInt64) -> [UInt8] {
        var w = ByteWriter(capacity: headerSize)
        w.bytes.append(contentsOf: magic)
        w.u32(version)
        w.u32(0)
        w.u64(seq)
        return w.bytes
    }
}

/// One decoded journal record.
enum JournalRecord {
    struct Registration {
        var key: KeyBits
        var point: PointBits
        var counter: UInt32
        var firstSeen: UInt32
        var lastSeen: UInt32
        var flags: UInt8
        var category: UInt32
        var receiptOffset: UInt64
        var receiptLength: UInt32
        var appID: String
        var bundleVersion: String?
        /// The key's re-registration window after this registration (absent in version 1: zeros).
        var reregistrations: UInt8 = 0
        var reregistrationWindow: UInt32 = 0
        /// The receipt's dates and the first risk refresh, Unix seconds (absent before version 3: zeros).
        var receiptCreated: UInt32 = 0
        var receiptNotBefore: UInt32 = 0
        var receiptExpires: UInt32 = 0
        var nextRefresh: UInt32 = 0
    }

    /// What a risk refresh found: the key's risk fields, and where its new receipt was written
    /// (`receiptLength` 0: the receipt stays).
    struct Risk: Equatable {
        var key: KeyBits
        var metric: UInt32
        var stale: Bool
        var receiptCreated: UInt32
        var receiptNotBefore: UInt32
        var receiptExpires: UInt32
        var nextRefresh: UInt32
        var receiptOffset: UInt64 = 0
        var receiptLength: UInt32 = 0
    }

    case registration(Registration)
    /// The key's counter window after an accepted counter: `counter` its highest accepted counter
    /// (the accepted one, or unchanged when an open counter below it was accepted), `gaps` its
    /// open counters (`CounterWindow`; 0: none, and the record is written without them).
    case advance(key: KeyBits, counter: UInt32, lastSeen: UInt32, gaps: UInt64)
    /// The key was removed (idle eviction).
    case removal(key: KeyBits)
    case risk(Risk)
    /// A DeviceCheck token was claimed until `expiresMillis` (`MemoryAttestStore.claimToken`).
    case claim(DeviceTokenClaim)
    /// A key was associated with an account (`MemoryAttestStore.associate`); `cutoff`: the window's
    /// first second then (the account's older entries were dropped and the rest counted).
    case association(AccountAssociation, cutoff: UInt32)

    static let registrationType: UInt8 = 1
    static let advanceType: UInt8 = 2
    static let removalType: UInt8 = 3
    static let riskType: UInt8 = 4
    static let claimType: UInt8 = 5
    static let associationType: UInt8 = 6
    /// type (1) + key (32) + account (32) + time (4) + cutoff (4).
    static let associationPayloadSize = 73
    /// type (1) + the token digest's first 16 bytes + expiry (Unix ms, 8).
    static let claimPayloadSize = 25
    /// type (1) + key (32) + metric (4) + stale (1) + four times (16) + receipt offset (8) and length (4).
    static let riskPayloadSize = 66

    static func encodeRisk(_ r: Risk) -> [UInt8] {
        var w = ByteWriter(capacity: riskPayloadSize)
        w.u8(riskType)
        w.raw(r.key)
        w.u32(r.metric)
        w.u8(r.stale ? 1 : 0)
        w.u32(r.receiptCreated)
        w.u32(r.receiptNotBefore)
        w.u32(r.receiptExpires)
        w.u32(r.nextRefresh)
        w.u64(r.receiptOffset)
        w.u32(r.receiptLength)
        return w.bytes
    }
    /// type (1) + key (32) + counter (4) + lastSeen (4): an advance that leaves no open counter
    /// (every advance of versions 1 and 2).
    static let advancePayloadSize = 41
    /// … + gaps (8): an advance that leaves open counters (version 3).
    static let windowAdvancePayloadSize = 49
    /// type (1) + key (32).
    static let removalPayloadSize = 33

    static func encodeRegistration(_ r: Registration) -> [UInt8] {
        var w = ByteWriter(capacity: 160)
        w.u8(registrationType)
        w.raw(r.key)
        w.raw(r.point)
        w.u32(r.counter)
        w.u32(r.firstSeen)
        w.u32(r.lastSeen)
        w.u8(r.flags)
        w.u32(r.category)
        w.u64(r.receiptOffset)
        w.u32(r.receiptLength)
        w.string(r.appID)
        if let b = r.bundleVersion {
            w.u8(1)
            w.string(b)
        } else {
            w.u8(0)
        }
        w.u8(r.reregistrations)
        w.u32(r.reregistrationWindow)
        w.u32(r.receiptCreated)
        w.u32(r.receiptNotBefore)
        w.u32(r.receiptExpires)
        w.u32(r.nextRefresh)
        return w.bytes
    }

    /// nil when the payload is not a well-formed record.
    static func decode(_ payload: UnsafeRawBufferPointer) -> JournalRecord? {
        var r = ByteReader(payload)
        switch r.u8() {
        case registrationType:
            guard let key = r.raw(KeyBits.self), let point = r.raw(PointBits.self), let counter = r.u32(),
                let first = r.u32(), let last = r.u32(), let flags = r.u8(), let category = r.u32(),
                let offset = r.u64(), let length = r.u32(), let app = r.string(), let hasBundle = r.u8()
            else { return nil }
            var bundle: String?
            if hasBundle == 1 {
                guard let b = r.string() else { return nil }
                bundle = b
            } else if hasBundle != 0 {
                return nil
            }
            var registration = Registration(
                key: key, point: point, counter: counter, firstSeen: first, lastSeen: last, flags: flags,
                category: category, receiptOffset: offset, receiptLength: length, appID: app, bundleVersion: bundle)
            if r.remaining == 5 || r.remaining == 21 {  // version 2: the re-registration window
                registration.reregistrations = r.u8()!
                registration.reregistrationWindow = r.u32()!
            }
            if r.remaining == 16 {  // version 3: the receipt's dates and the first refresh
                registration.receiptCreated = r.u32()!
                registration.receiptNotBefore = r.u32()!
                registration.receiptExpires = r.u32()!
                registration.nextRefresh = r.u32()!
            }
            guard r.remaining == 0 else { return nil }
            return .registration(registration)
        case advanceType:
            guard let key = r.raw(KeyBits.self), let counter = r.u32(), let last = r.u32() else { return nil }
            var gaps: UInt64 = 0
            if r.remaining == 8 {  // version 3: the window's open counters
                gaps = r.u64()!
                guard gaps != 0, gaps & ~CounterWindow.mask == 0 else { return nil }
            }
            guard r.remaining == 0 else { return nil }
            return .advance(key: key, counter: counter, lastSeen: last, gaps: gaps)
        case removalType:
            guard let key = r.raw(KeyBits.self), r.remaining == 0 else { return nil }
            return .removal(key: key)
        case riskType:
            guard let key = r.raw(KeyBits.self), let metric = r.u32(), let stale = r.u8(), stale <= 1, let created = r.u32(),
                let notBefore = r.u32(), let expires = r.u32(), let next = r.u32(), let offset = r.u64(), let length = r.u32(),
                r.remaining == 0
            else { return nil }
            return .risk(
                Risk(
                    key: key, metric: metric, stale: stale == 1, receiptCreated: created, receiptNotBefore: notBefore,
                    receiptExpires: expires, nextRefresh: next, receiptOffset: offset, receiptLength: length))
        case claimType:
            guard let a = r.u64(), let b = r.u64(), let expires = r.i64(), r.remaining == 0 else { return nil }
            return .claim(DeviceTokenClaim(a: a, b: b, expiresMillis: expires))
        case associationType:
            guard let key = r.raw(KeyBits.self), let account = r.raw(KeyBits.self), let at = r.u32(), let cutoff = r.u32(),
                r.remaining == 0
            else { return nil }
            return .association(AccountAssociation(key: key, account: account, at: at, count: 0), cutoff: cutoff)
        default:
            return nil
        }
    }
}

/// The open journal: the current segment, the receipts file, group commit, the periodic fsync,
/// and the handling of write errors (see "Write errors" in docs/store.md).
///
/// Appends happen with write(2) under `state`'s lock (callers hold their shard lock(s) while
/// appending, which the snapshot protocol relies on). fsync happens on `syncQueue`, outside the lock.
///
/// A failed write, fsync, open or ftruncate puts the journal in a fault: appends are refused
/// (`StoreError(.unavailable)`, nothing changes in memory) until a recovery on `syncQueue`, retried
/// with back-off, proves that writes succeed again. After a lack of space (ENOSPC, EDQUOT, EFBIG)
/// with the partial record cut, the segment is intact: a probe write and an fsync of the journal
/// recover. After a failed fsync or any other errno, what the segment holds on disk is unknown
/// (Linux may drop the dirty pages of a failed fsync and report success to the next one): only a
/// snapshot of memory written after the fault (which starts a new segment and deletes the suspect
/// one) recovers.
final class Journal: Sendable {
    /// Why the journal refuses appends.
    struct Fault {
        /// The failure that started the episode: what refused operations and readiness show.
        let first: StoreWriteFailure
        /// The latest failure of the episode (the retries update it).
        var latest: StoreWriteFailure
        var since: ContinuousClock.Instant
        /// What reached the disk is unknown: only a snapshot written after the fault clears it.
        var suspect: Bool
        /// The segment in use when it happened: a snapshot clears the fault only if it covers it.
        var seq: UInt64
        var attempts = 0

        /// What a refused operation answers (and readiness shows).
        var error: StoreError { StoreError(.unavailable, "store: \(first)") }
    }

    struct State {
        var segment: FileHandle
        var seq: UInt64
        /// Bytes of the segment's header and whole records: where the next record starts, and
        /// where a record cut short by a failed write is truncated back to.
        var segmentEnd: Int
        var receipts: FileHandle
        var receiptsEnd: UInt64
        var dirty = false
        /// Records appended to the current segment.
        var records = 0
        /// Set from a failed write or fsync until a recovery (or a snapshot) clears it.
        var fault: Fault?
        var recoveryScheduled = false
        var closed = false
    }

    struct Waiters {
        var list: [@Sendable (StoreError?) -> Void] = []
        var scheduled = false
    }

    /// The recovery's back-off: the first retry after `initialMillis`, doubling up to `maxMillis`.
    struct Retry: Sendable {
        var initialMillis = 100
        var maxMillis = 5_000
    }

    let directory: String
    let files: StoreFiles
    let retry: Retry
    let state: Mutex<State>
    let waiters = Mutex(Waiters())
    let syncQueue = DispatchQueue(label: "attest-store.journal-sync")
    let observer: (any AttestStoreObserver)?
    private let timer: Mutex<TimerBox?> = Mutex(nil)
    /// Writes the snapshot that clears a suspect fault (set by the store that owns the journal).
    let snapshotter = Mutex<(@Sendable () throws -> Void)?>(nil)

    /// The periodic-sync timer; Dispatch sources are thread-safe but not marked Sendable.
    final class TimerBox: @unchecked Sendable {
        let source: any DispatchSourceTimer
        init(_ source: any DispatchSourceTimer) { self.source = source }
    }

    deinit {
        timer.withLock { $0?.source.cancel() }
    }

    static let receiptsName = "receipts.dat"
    /// The file a recovery writes, fsyncs and removes to learn that writes succeed again.
    static let probeName = "write-probe"
    static let probeSize = 4096

    /// The receipts file of a generation: 0 `receipts.dat` (the first), n `receipts-<n, 16 hex>.dat`
    /// (written by the n-th compaction; the snapshot names the one its records point into).
    static func receiptsName(generation: UInt64) -> String {
        guard generation > 0 else { return receiptsName }
        let hex = String(generation, radix: 16)
        return "receipts-" + String(repeating: "0", count: max(0, 16 - hex.count)) + hex + ".dat"
    }

    /// Whether `name` is a receipts file or a compaction's temporary file.
    static func isReceiptsFile(_ name: String) -> Bool {
        name.hasPrefix("receipts") && (name.hasSuffix(".dat") || name.hasSuffix(".dat.tmp"))
    }

    init(
        directory: String, segment: FileHandle, seq: UInt64, receipts: FileHandle, receiptsEnd: UInt64,
        observer: (any AttestStoreObserver)?, files: StoreFiles = .system, retry: Retry = Retry()
    ) {
        self.directory = directory
        self.files = files
        self.retry = retry
        self.state = Mutex(
            State(
                segment: segment, seq: seq, segmentEnd: JournalFormat.headerSize, receipts: receipts, receiptsEnd: receiptsEnd))
        self.observer = observer
    }

    /// Creates segment `seq` (header written and fsync'ed, directory fsync'ed). A failed attempt
    /// removes what it created.
    static func createSegment(directory: String, seq: UInt64, files: StoreFiles = .system) throws -> FileHandle {
        let path = "\(directory)/\(JournalFormat.segmentName(seq))"
        let fd = try files.open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND)
        let handle = FileHandle(fd: fd, path: path)
        do {
            try JournalFormat.header(seq).withUnsafeBytes { (raw) throws in
                try files.writeAll(fd, raw, path: path)
            }
            try files.fsync(fd, path: path)
            try files.fsyncDirectory(directory)
        } catch {
            unlink(path)
            throw error
        }
        return handle
    }

    /// Starts the 100 ms fsync of dirty data (counter advances are written but not fsync'ed inline).
    func startPeriodicSync(intervalMillis: Int = 100) {
        let t = DispatchSource.makeTimerSource(queue: syncQueue)
        t.schedule(deadline: .now() + .milliseconds(intervalMillis), repeating: .milliseconds(intervalMillis))
        t.setEventHandler { [weak self] in
            guard let self else { return }
            if self.state.withLock({ $0.dirty && !($0.fault?.suspect ?? false) && !$0.closed }) { _ = self.syncNow() }
        }
        t.resume()
        let box = TimerBox(t)
        timer.withLock { $0 = box }
    }

    // MARK: - Faults and recovery

    /// The failure the journal is refusing appends for (the one that started the episode), or nil
    /// when it accepts them.
    var fault: StoreWriteFailure? { state.withLock { $0.fault?.first } }

    /// Enters (or extends) a fault and makes sure a recovery is scheduled.
    private func enterFault(_ s: inout State, _ failure: StoreWriteFailure, suspect: Bool) {
        if s.fault == nil {
            s.fault = Fault(first: failure, latest: failure, since: .now, suspect: suspect, seq: s.seq)
            observer?.storeWritesRefused(failure)
        } else {
            s.fault!.latest = failure
            if suspect { s.fault!.suspect = true }
        }
        if !s.recoveryScheduled && !s.closed {
            s.recoveryScheduled = true
            scheduleRecovery(afterMillis: retry.initialMillis)
        }
    }

    /// After a failed fsync the pages may be gone whatever the errno; after a failed write, only a
    /// lack of space leaves the file as it was (once the partial record is cut).
    private static func makesSuspect(_ f: StoreWriteFailure) -> Bool { f.operation == .fsync || !f.isSpace }

    private func scheduleRecovery(afterMillis millis: Int) {
        syncQueue.asyncAfter(deadline: .now() + .milliseconds(millis)) { [weak self] in self?.recover() }
    }

    private func clear(_ s: inout State) {
        guard let f = s.fault else { return }
        s.fault = nil
        observer?.storeWritesRecovered(after: f.latest, seconds: seconds(since: f.since))
    }

    /// One recovery attempt (on `syncQueue`): a probe write; then, after a lack of space, an fsync
    /// of what the journal holds; after a suspect fault, a snapshot. Until one succeeds it is
    /// retried with back-off (each failed call is reported to the observer).
    func recover() {
        guard
            let fault = state.withLock({ s -> Fault? in
                if s.closed || s.fault == nil {
                    s.recoveryScheduled = false
                    return nil
                }
                return s.fault
            })
        else { return }
        do {
            try probe()
            if fault.suspect {
                guard let snapshot = snapshotter.withLock({ $0 }) else {
                    throw StoreError(.unavailable, "no snapshot writer")
                }
                try snapshot()  // rotates, writes snapshot.dat; `snapshotCovers` clears the fault
            } else {
                try state.withLock { (s) throws in
                    guard s.fault != nil, !s.fault!.suspect else { return }
                    // A receipt cut short whose truncation failed stays as unreferenced bytes.
                    s.receiptsEnd = UInt64(try FileIO.fileSize(s.receipts.fd, path: s.receipts.path))
                    do {
                        try files.fsync(s.receipts.fd, path: s.receipts.path)
                        try files.fsync(s.segment.fd, path: s.segment.path)
                    } catch let f as FileFault {
                        enterFault(&s, f.failure, suspect: true)
                        throw f
                    }
                    clear(&s)
                }
            }
        } catch let f as FileFault {
            // The recovery's log line names the latest failure (the probe's, the snapshot's, …); the fault stays.
            state.withLock { s in if s.fault != nil { s.fault!.latest = f.failure } }
        } catch {
            // Not a file system call (the store closed meanwhile): the fault stays.
        }
        state.withLock { s in
            guard s.fault != nil, !s.closed else {
                s.recoveryScheduled = false
                return
            }
            s.fault!.attempts += 1
            let shift = min(s.fault!.attempts, 16)
            scheduleRecovery(afterMillis: min(retry.maxMillis, retry.initialMillis << shift))
        }
    }

    /// Writes, fsyncs and removes a small file of random bytes: the file system takes writes again.
    private func probe() throws {
        let path = "\(directory)/\(Self.probeName)"
        let fd = try files.open(path, O_WRONLY | O_CREAT | O_TRUNC)
        defer {
            Glibc.close(fd)
            unlink(path)
        }
        var rng = SystemRandomNumberGenerator()
        let bytes = (0..<Self.probeSize / 8).flatMap { _ in withUnsafeBytes(of: rng.next() as UInt64) { Array($0) } }
        try bytes.withUnsafeBytes { (raw) throws in try files.writeAll(fd, raw, path: path) }
        try files.fsync(fd, path: path)
    }

    /// A snapshot covering every segment before `seq` is durable: a fault from before it is
    /// cleared (everything memory holds is on disk again, in the snapshot).
    func snapshotCovers(_ seq: UInt64) {
        state.withLock { s in
            guard let f = s.fault, f.seq < seq else { return }
            guard let size = try? FileIO.fileSize(s.receipts.fd, path: s.receipts.path) else { return }
            s.receiptsEnd = UInt64(size)
            clear(&s)
        }
    }

    // MARK: - Appends

    private static func frame(_ payload: UnsafeRawBufferPointer, into out: UnsafeMutableRawBufferPointer) {
        UnsafeMutableRawBufferPointer(rebasing: out[8..<8 + payload.count]).copyMemory(from: payload)
        seal(UnsafeMutableRawBufferPointer(rebasing: out[0..<8 + payload.count]))
    }

    /// Writes the frame's header for the payload in `frame[8...]`: its length and CRC32C.
    private static func seal(_ frame: UnsafeMutableRawBufferPointer) {
        let payload = UnsafeRawBufferPointer(rebasing: frame[8...])
        frame.storeBytes(of: UInt32(payload.count).littleEndian, toByteOffset: 0, as: UInt32.self)
        frame.storeBytes(of: CRC32C.checksum(payload).littleEndian, toByteOffset: 4, as: UInt32.self)
    }

    /// Appends one record of `size` payload bytes that `fill` writes, framed on the stack
    /// (allocation-free: the records written per request).
    private func appendOnStack(payloadSize size: Int, _ fill: (UnsafeMutableRawBufferPointer) -> Void) throws {
        try withUnsafeTemporaryAllocation(byteCount: 8 + size, alignment: 8) { (frame) throws in
            fill(UnsafeMutableRawBufferPointer(rebasing: frame[8...]))
            Self.seal(frame)
            try state.withLock { (s) throws in try write(&s, UnsafeRawBufferPointer(frame)) }
        }
    }

    private static let closedError = StoreError(.unavailable, "the store is closed")

    /// Appends one framed record. On failure the part of it that reached the file is cut off (the
    /// segment ends with its last whole record again) and the journal enters a fault.
    private func write(_ s: inout State, _ bytes: UnsafeRawBufferPointer, records: Int = 1) throws {
        // Tested without binding (copying) the fault, its strings and dates, on every record.
        if s.fault != nil { throw s.fault!.error }
        if s.closed { throw Self.closedError }
        do {
            try files.writeAll(s.segment.fd, bytes, path: s.segment.path)
        } catch let f as FileFault {
            var suspect = Self.makesSuspect(f.failure)
            do {
                try files.truncate(s.segment.fd, path: s.segment.path, to: s.segmentEnd)
            } catch {
                suspect = true  // a torn record stays at the end of the segment until a snapshot replaces it
            }
            enterFault(&s, f.failure, suspect: suspect)
            throw s.fault!.error
        }
        s.segmentEnd += bytes.count
        s.dirty = true
        s.records += records
    }

    /// Appends a counter advance: the key's counter window after it. The window's open counters
    /// are appended only when there are some.
    func appendAdvance(key: KeyBits, window: CounterWindow, lastSeen: UInt32) throws {
        let size = window.gaps == 0 ? JournalRecord.advancePayloadSize : JournalRecord.windowAdvancePayloadSize
        try appendOnStack(payloadSize: size) { payload in
            payload[0] = JournalRecord.advanceType
            var k = key
            withUnsafeBytes(of: &k) { UnsafeMutableRawBufferPointer(rebasing: payload[1..<33]).copyMemory(from: $0) }
            payload.storeBytes(of: window.highest.littleEndian, toByteOffset: 33, as: UInt32.self)
            payload.storeBytes(of: lastSeen.littleEndian, toByteOffset: 37, as: UInt32.self)
            if window.gaps != 0 { payload.storeBytes(of: window.gaps.littleEndian, toByteOffset: 41, as: UInt64.self) }
        }
    }

    /// Appends a DeviceCheck token claim.
    func appendClaim(_ claim: DeviceTokenClaim) throws {
        try appendOnStack(payloadSize: JournalRecord.claimPayloadSize) { payload in
            payload[0] = JournalRecord.claimType
            payload.storeBytes(of: claim.a.littleEndian, toByteOffset: 1, as: UInt64.self)
            payload.storeBytes(of: claim.b.littleEndian, toByteOffset: 9, as: UInt64.self)
            payload.storeBytes(of: UInt64(bitPattern: claim.expiresMillis).littleEndian, toByteOffset: 17, as: UInt64.self)
        }
    }

    /// Appends a key's association with an account.
    func appendAssociation(_ a: AccountAssociation, cutoff: UInt32) throws {
        try appendOnStack(payloadSize: JournalRecord.associationPayloadSize) { payload in
            payload[0] = JournalRecord.associationType
            var k = a.key
            withUnsafeBytes(of: &k) { UnsafeMutableRawBufferPointer(rebasing: payload[1..<33]).copyMemory(from: $0) }
            var acct = a.account
            withUnsafeBytes(of: &acct) { UnsafeMutableRawBufferPointer(rebasing: payload[33..<65]).copyMemory(from: $0) }
            payload.storeBytes(of: a.at.littleEndian, toByteOffset: 65, as: UInt32.self)
            payload.storeBytes(of: cutoff.littleEndian, toByteOffset: 69, as: UInt32.self)
        }
    }

    /// Appends the receipt to the receipts file, then the registration record pointing at it.
    /// Returns where the receipt was written. When either write fails, nothing is referenced: the
    /// receipt's bytes are cut again where possible (unreferenced bytes are harmless otherwise).
    func appendRegistration(_ registration: JournalRecord.Registration, receipt: [UInt8])
        throws -> (offset: UInt64, length: UInt32)
    {
        try state.withLock { (s) throws -> (offset: UInt64, length: UInt32) in
            if let fault = s.fault { throw fault.error }
            if s.closed { throw Self.closedError }
            let offset = s.receiptsEnd
            do {
                try receipt.withUnsafeBytes { (raw) throws in
                    try files.writeAll(s.receipts.fd, raw, path: s.receipts.path)
                }
            } catch let f as FileFault {
                _ = try? files.truncate(s.receipts.fd, path: s.receipts.path, to: Int(offset))
                enterFault(&s, f.failure, suspect: Self.makesSuspect(f.failure))
                throw s.fault!.error
            }
            s.receiptsEnd += UInt64(receipt.count)
            var r = registration
            r.receiptOffset = offset
            r.receiptLength = UInt32(receipt.count)
            let payload = JournalRecord.encodeRegistration(r)
            var frame = [UInt8](repeating: 0, count: 8 + payload.count)
            payload.withUnsafeBytes { p in frame.withUnsafeMutableBytes { Self.frame(p, into: $0) } }
            do {
                try frame.withUnsafeBytes { (raw) throws in try write(&s, raw) }
            } catch {
                if (try? files.truncate(s.receipts.fd, path: s.receipts.path, to: Int(offset))) != nil {
                    s.receiptsEnd = offset
                }
                throw error
            }
            return (offset, UInt32(receipt.count))
        }
    }

    /// Appends a risk refresh: with `receipt`, the receipt first (to the receipts file), then the
    /// record pointing at it. Returns where the receipt was written (nil without one). On failure
    /// nothing is referenced, as for a registration.
    func appendRisk(_ risk: JournalRecord.Risk, receipt: [UInt8]?) throws -> (offset: UInt64, length: UInt32)? {
        try state.withLock { (s) throws -> (offset: UInt64, length: UInt32)? in
            if let fault = s.fault { throw fault.error }
            if s.closed { throw Self.closedError }
            var r = risk
            var written: UInt64?
            if let receipt {
                let offset = s.receiptsEnd
                do {
                    try receipt.withUnsafeBytes { (raw) throws in try files.writeAll(s.receipts.fd, raw, path: s.receipts.path) }
                } catch let f as FileFault {
                    _ = try? files.truncate(s.receipts.fd, path: s.receipts.path, to: Int(offset))
                    enterFault(&s, f.failure, suspect: Self.makesSuspect(f.failure))
                    throw s.fault!.error
                }
                s.receiptsEnd += UInt64(receipt.count)
                r.receiptOffset = offset
                r.receiptLength = UInt32(receipt.count)
                written = offset
            }
            let payload = JournalRecord.encodeRisk(r)
            var frame = [UInt8](repeating: 0, count: 8 + payload.count)
            payload.withUnsafeBytes { p in frame.withUnsafeMutableBytes { Self.frame(p, into: $0) } }
            do {
                try frame.withUnsafeBytes { (raw) throws in try write(&s, raw) }
            } catch {
                if let offset = written, (try? files.truncate(s.receipts.fd, path: s.receipts.path, to: Int(offset))) != nil {
                    s.receiptsEnd = offset
                }
                throw error
            }
            return written.map { ($0, r.receiptLength) }
        }
    }

    /// Appends one removal record per key, in one write(2).
    func appendRemovals(_ keys: [KeyBits]) throws {
        guard !keys.isEmpty else { return }
        let size = 8 + JournalRecord.removalPayloadSize
        var frames = [UInt8](repeating: 0, count: size * keys.count)
        frames.withUnsafeMutableBytes { out in
            var payload = [UInt8](repeating: 0, count: JournalRecord.removalPayloadSize)
            for (n, key) in keys.enumerated() {
                payload[0] = JournalRecord.removalType
                var k = key
                withUnsafeBytes(of: &k) { payload.replaceSubrange(1..<33, with: $0) }
                payload.withUnsafeBytes { p in
                    Self.frame(p, into: UnsafeMutableRawBufferPointer(rebasing: out[n * size..<(n + 1) * size]))
                }
            }
        }
        try state.withLock { (s) throws in
            try frames.withUnsafeBytes { (raw) throws in try write(&s, raw, records: keys.count) }
        }
    }

    /// The receipts file's size as written (live receipts and superseded ones).
    var receiptsEnd: UInt64 { state.withLock { $0.receiptsEnd } }

    /// Receipt compaction: registrations append to `receipts` (already holding `end` bytes) from now
    /// on. The caller holds the store's registration gate, so nothing is being appended to the old
    /// file. Done whatever the journal's state (in a fault too): the installed snapshot names the
    /// new file, so every later record must point into it.
    func switchReceipts(to receipts: FileHandle, end: UInt64) {
        state.withLock { s in
            s.receipts = receipts
            s.receiptsEnd = end
        }
    }

    /// A failed call outside the journal's own writes left what the disk holds unknown (the
    /// directory fsync after a compaction's snapshot was renamed into place): appends are refused
    /// until a recovery's snapshot is durable.
    func enterSuspectFault(_ failure: StoreWriteFailure) {
        state.withLock { s in enterFault(&s, failure, suspect: true) }
    }

    /// Records appended since the last rotation (0: a snapshot now would add nothing about keys).
    var recordsInSegment: Int { state.withLock { $0.records } }

    /// Calls `completion` once everything appended before this call is on disk (group commit: one
    /// fsync serves every waiter that arrived while the previous one ran). While the journal is in
    /// a fault, completions get its error.
    func whenDurable(_ completion: @escaping @Sendable (StoreError?) -> Void) {
        let schedule = waiters.withLock { w -> Bool in
            w.list.append(completion)
            if w.scheduled { return false }
            w.scheduled = true
            return true
        }
        if schedule { syncQueue.async { self.drain() } }
    }

    private func drain() {
        let list = waiters.withLock { w -> [@Sendable (StoreError?) -> Void] in
            let l = w.list
            w.list = []
            w.scheduled = false
            return l
        }
        let error = syncNow()
        for c in list { c(error) }
    }

    /// fsyncs the receipts file, then the current segment (records of an older segment were
    /// fsync'ed when it was rotated out). Runs on `syncQueue` or during close. A failure puts the
    /// journal in a suspect fault. In a fault after a lack of space, the records written before it
    /// are intact and are still fsync'ed (a registration written before it completes); in a suspect
    /// fault nothing is trusted until the recovery's snapshot.
    @discardableResult
    func syncNow() -> StoreError? {
        let (segment, receipts, fault) = state.withLock { s in
            s.dirty = false
            return (s.segment, s.receipts, s.fault)
        }
        if let fault, fault.suspect { return fault.error }
        let start = ContinuousClock.now
        do {
            try files.fsync(receipts.fd, path: receipts.path)
            try files.fsync(segment.fd, path: segment.path)
        } catch {
            guard let f = error as? FileFault else { return StoreError.from(error) }
            return state.withLock { s -> StoreError in
                enterFault(&s, f.failure, suspect: true)
                return s.fault!.error
            }
        }
        observer?.journalSynced(seconds: seconds(since: start))
        return nil
    }

    /// Switches to a new segment: the old one is fsync'ed first, all under the journal lock, so
    /// every record is in exactly one segment and every appended record before the switch is durable.
    /// Returns the new segment's sequence number.
    ///
    /// Also the first step of a recovery: in a fault, a failed fsync of the old segment does not
    /// stop it (the snapshot that follows replaces that segment), but the receipts file must sync
    /// (the snapshot refers to it) and the new segment must be created.
    func rotate() throws -> UInt64 {
        try state.withLock { (s) throws -> UInt64 in
            if s.closed { throw Self.closedError }
            do {
                try files.fsync(s.receipts.fd, path: s.receipts.path)
            } catch let f as FileFault {
                enterFault(&s, f.failure, suspect: true)
                throw s.fault!.error
            }
            do {
                try files.fsync(s.segment.fd, path: s.segment.path)
            } catch let f as FileFault {
                enterFault(&s, f.failure, suspect: true)  // appends stop; the snapshot goes on and clears it
            }
            let next = try Journal.createSegment(directory: directory, seq: s.seq + 1, files: files)
            s.segment = next
            s.seq += 1
            s.segmentEnd = JournalFormat.headerSize
            s.records = 0
            s.dirty = false
            return s.seq
        }
    }

    /// Stops the timer and refuses further appends; what was written is fsync'ed.
    func close() throws {
        timer.withLock { t in
            t?.source.cancel()
            t = nil
        }
        state.withLock { $0.closed = true }
        // Waiters queued before close are answered by the drain already scheduled on syncQueue.
        syncQueue.sync {}
        if let error = syncNow() { throw error }
    }

    /// Reads a receipt back (pread on a separate descriptor; safe from any thread).
    static func readReceipt(_ file: FileHandle, offset: UInt64, length: UInt32) -> [UInt8]? {
        var out = [UInt8](repeating: 0, count: Int(length))
        let n = try? out.withUnsafeMutableBytes { (buf) throws -> Int in
            try FileIO.pread(file.fd, into: buf, offset: Int(offset), path: file.path)
        }
        return n == Int(length) ? out : nil
    }
}

func seconds(since start: ContinuousClock.Instant) -> Double {
    let d = ContinuousClock.now - start
    return Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18
}
