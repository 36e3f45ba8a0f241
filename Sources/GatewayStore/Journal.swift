import Dispatch
import Glibc
import Synchronization

/// Journal segments on disk: `journal-<seq, 16 hex digits>.log`.
///
/// Segment: header `AGJOURN1` (8 bytes), version (u32), reserved (u32), sequence (u64); then records
/// `length (u32) ‖ CRC-32C of payload (u32) ‖ payload`. Payload type 1 is a registration, type 2 a
/// counter advance, type 3 a key removal (see `JournalRecord`). All integers little-endian.
/// Version 2 added the removal and the registration's re-registration window; version 1 segments
/// (registrations without it) are still read.
enum JournalFormat {
    static let magic: [UInt8] = Array("AGJOURN1".utf8)
    static let version: UInt32 = 2
    static let readableVersions: ClosedRange<UInt32> = 1...2
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
    }

    case registration(Registration)
    case advance(key: KeyBits, counter: UInt32, lastSeen: UInt32)
    /// The key was removed (idle eviction).
    case removal(key: KeyBits)

    static let registrationType: UInt8 = 1
    static let advanceType: UInt8 = 2
    static let removalType: UInt8 = 3
    /// type (1) + key (32) + counter (4) + lastSeen (4).
    static let advancePayloadSize = 41
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
            if r.remaining == 5 {  // version 2: the re-registration window
                registration.reregistrations = r.u8()!
                registration.reregistrationWindow = r.u32()!
            }
            guard r.remaining == 0 else { return nil }
            return .registration(registration)
        case advanceType:
            guard let key = r.raw(KeyBits.self), let counter = r.u32(), let last = r.u32(), r.remaining == 0 else {
                return nil
            }
            return .advance(key: key, counter: counter, lastSeen: last)
        case removalType:
            guard let key = r.raw(KeyBits.self), r.remaining == 0 else { return nil }
            return .removal(key: key)
        default:
            return nil
        }
    }
}

/// The open journal: the current segment, the receipts file, group commit and the periodic fsync.
///
/// Appends happen with write(2) under `state`'s lock (callers hold their shard lock(s) while
/// appending, which the snapshot protocol relies on). fsync happens on `syncQueue`, outside the lock.
final class Journal: Sendable {
    struct State {
        var segment: FileHandle
        var seq: UInt64
        var receipts: FileHandle
        var receiptsEnd: UInt64
        var dirty = false
        /// Records appended to the current segment.
        var records = 0
        /// After a failed write or fsync nothing more is accepted: what reached the disk is unknown.
        var failed: StoreError?
        var closed = false
    }

    struct Waiters {
        var list: [@Sendable (StoreError?) -> Void] = []
        var scheduled = false
    }

    let directory: String
    let state: Mutex<State>
    let waiters = Mutex(Waiters())
    let syncQueue = DispatchQueue(label: "attest-store.journal-sync")
    let observer: (any AttestStoreObserver)?
    private let timer: Mutex<TimerBox?> = Mutex(nil)

    /// The periodic-sync timer; Dispatch sources are thread-safe but not marked Sendable.
    final class TimerBox: @unchecked Sendable {
        let source: any DispatchSourceTimer
        init(_ source: any DispatchSourceTimer) { self.source = source }
    }

    deinit {
        timer.withLock { $0?.source.cancel() }
    }

    static let receiptsName = "receipts.dat"

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

    init(directory: String, segment: FileHandle, seq: UInt64, receipts: FileHandle, receiptsEnd: UInt64,
         observer: (any AttestStoreObserver)?) {
        self.directory = directory
        self.state = Mutex(State(segment: segment, seq: seq, receipts: receipts, receiptsEnd: receiptsEnd))
        self.observer = observer
    }

    /// Creates segment `seq` (header written and fsync'ed, directory fsync'ed).
    static func createSegment(directory: String, seq: UInt64) throws -> FileHandle {
        let path = "\(directory)/\(JournalFormat.segmentName(seq))"
        let fd = try FileIO.open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND)
        let handle = FileHandle(fd: fd, path: path)
        try JournalFormat.header(seq).withUnsafeBytes { (raw) throws in
            try FileIO.writeAll(fd, raw, path: path)
        }
        try FileIO.fsync(fd, path: path)
        try FileIO.fsyncDirectory(directory)
        return handle
    }

    /// Starts the 100 ms fsync of dirty data (counter advances are written but not fsync'ed inline).
    func startPeriodicSync(intervalMillis: Int = 100) {
        let t = DispatchSource.makeTimerSource(queue: syncQueue)
        t.schedule(deadline: .now() + .milliseconds(intervalMillis), repeating: .milliseconds(intervalMillis))
        t.setEventHandler { [weak self] in
            guard let self else { return }
            if self.state.withLock({ $0.dirty && $0.failed == nil && !$0.closed }) { _ = self.syncNow() }
        }
        t.resume()
        let box = TimerBox(t)
        timer.withLock { $0 = box }
    }

    private static func frame(_ payload: UnsafeRawBufferPointer, into out: UnsafeMutableRawBufferPointer) {
        out.storeBytes(of: UInt32(payload.count).littleEndian, toByteOffset: 0, as: UInt32.self)
        out.storeBytes(of: CRC32C.checksum(payload).littleEndian, toByteOffset: 4, as: UInt32.self)
        UnsafeMutableRawBufferPointer(rebasing: out[8..<8 + payload.count]).copyMemory(from: payload)
    }

    private func write(_ s: inout State, _ bytes: UnsafeRawBufferPointer) throws {
        if let failed = s.failed { throw failed }
        if s.closed { throw StoreError(.unavailable, "the store is closed") }
        do {
            try FileIO.writeAll(s.segment.fd, bytes, path: s.segment.path)
        } catch {
            s.failed = StoreError.from(error)
            throw error
        }
        s.dirty = true
        s.records += 1
    }

    /// Appends a counter advance (allocation-free: the frame is built on the stack).
    func appendAdvance(key: KeyBits, counter: UInt32, lastSeen: UInt32) throws {
        try withUnsafeTemporaryAllocation(byteCount: 8 + JournalRecord.advancePayloadSize, alignment: 8) {
            (frame) throws in
            let payload = UnsafeMutableRawBufferPointer(rebasing: frame[8...])
            payload[0] = JournalRecord.advanceType
            var k = key
            withUnsafeBytes(of: &k) { UnsafeMutableRawBufferPointer(rebasing: payload[1..<33]).copyMemory(from: $0) }
            payload.storeBytes(of: counter.littleEndian, toByteOffset: 33, as: UInt32.self)
            payload.storeBytes(of: lastSeen.littleEndian, toByteOffset: 37, as: UInt32.self)
            frame.storeBytes(of: UInt32(JournalRecord.advancePayloadSize).littleEndian, toByteOffset: 0, as: UInt32.self)
            frame.storeBytes(
                of: CRC32C.checksum(UnsafeRawBufferPointer(payload)).littleEndian, toByteOffset: 4, as: UInt32.self)
            try state.withLock { (s) throws in try write(&s, UnsafeRawBufferPointer(frame)) }
        }
    }

    /// Appends the receipt to the receipts file, then the registration record pointing at it.
    /// Returns where the receipt was written.
    func appendRegistration(_ registration: JournalRecord.Registration, receipt: [UInt8])
        throws -> (offset: UInt64, length: UInt32)
    {
        try state.withLock { (s) throws -> (offset: UInt64, length: UInt32) in
            if let failed = s.failed { throw failed }
            if s.closed { throw StoreError(.unavailable, "the store is closed") }
            let offset = s.receiptsEnd
            do {
                try receipt.withUnsafeBytes { (raw) throws in
                    try FileIO.writeAll(s.receipts.fd, raw, path: s.receipts.path)
                }
            } catch {
                s.failed = StoreError.from(error)
                throw error
            }
            s.receiptsEnd += UInt64(receipt.count)
            var r = registration
            r.receiptOffset = offset
            r.receiptLength = UInt32(receipt.count)
            let payload = JournalRecord.encodeRegistration(r)
            var frame = [UInt8](repeating: 0, count: 8 + payload.count)
            payload.withUnsafeBytes { p in frame.withUnsafeMutableBytes { Self.frame(p, into: $0) } }
            try frame.withUnsafeBytes { (raw) throws in try write(&s, raw) }
            return (offset, UInt32(receipt.count))
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
        try state.withLock { (s) throws in try frames.withUnsafeBytes { (raw) throws in try write(&s, raw) } }
    }

    /// The receipts file's size as written (live receipts and superseded ones).
    var receiptsEnd: UInt64 { state.withLock { $0.receiptsEnd } }

    /// Receipt compaction: registrations append to `receipts` (already holding `end` bytes) from now
    /// on. The caller holds the store's registration gate, so nothing is being appended to the old file.
    func switchReceipts(to receipts: FileHandle, end: UInt64) throws {
        try state.withLock { (s) throws in
            if let failed = s.failed { throw failed }
            if s.closed { throw StoreError(.unavailable, "the store is closed") }
            s.receipts = receipts
            s.receiptsEnd = end
        }
    }

    /// Records appended since the last rotation (0: a snapshot now would add nothing about keys).
    var recordsInSegment: Int { state.withLock { $0.records } }

    /// Calls `completion` once everything appended before this call is on disk (group commit: one
    /// fsync serves every waiter that arrived while the previous one ran).
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
    /// fsync'ed when it was rotated out). Runs on `syncQueue` or during close.
    @discardableResult
    func syncNow() -> StoreError? {
        let (segment, receipts, failed) = state.withLock { s in
            s.dirty = false
            return (s.segment, s.receipts, s.failed)
        }
        if let failed { return failed }
        let start = ContinuousClock.now
        do {
            try FileIO.fsync(receipts.fd, path: receipts.path)
            try FileIO.fsync(segment.fd, path: segment.path)
        } catch {
            state.withLock { $0.failed = StoreError.from(error) }
            return StoreError.from(error)
        }
        observer?.journalSynced(seconds: seconds(since: start))
        return nil
    }

    /// Switches to a new segment: the old one is fsync'ed first, all under the journal lock, so
    /// every record is in exactly one segment and every appended record before the switch is durable.
    /// Returns the new segment's sequence number.
    func rotate() throws -> UInt64 {
        try state.withLock { (s) throws -> UInt64 in
            if let failed = s.failed { throw failed }
            if s.closed { throw StoreError(.unavailable, "the store is closed") }
            do {
                try FileIO.fsync(s.receipts.fd, path: s.receipts.path)
                try FileIO.fsync(s.segment.fd, path: s.segment.path)
                let next = try Journal.createSegment(directory: directory, seq: s.seq + 1)
                s.segment = next
                s.seq += 1
                s.records = 0
                return s.seq
            } catch {
                s.failed = StoreError.from(error)
                throw error
            }
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
