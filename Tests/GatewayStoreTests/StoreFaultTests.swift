import Dispatch
import Foundation
import GatewayTestSupport
import Glibc
import Synchronization
import Testing

@testable import GatewayStore

private let t0: Int64 = 1_700_000_000_000

/// File system calls that fail on demand (the store's fault seam): a rule fails the matching calls
/// (operation, and file kind when given) after letting `skip` of them through, with `errno`, a
/// number of times or until cleared. A write rule with `partial` first writes that many bytes for
/// real and reports the short write; the call after it fails.
final class FaultyCalls: FileCalls, @unchecked Sendable {
    struct Rule {
        var operation: StoreWriteFailure.Operation
        var file: StoreWriteFailure.File?
        var errno: Int32
        var skip = 0
        var times: Int?
        var partial: Int?
    }

    private enum Decision {
        case pass
        case fail(Int32)
        case short(Int)
    }

    private let state = Mutex<(rules: [Rule], calls: [String: Int])>(([], [:]))

    func fail(
        _ operation: StoreWriteFailure.Operation, _ file: StoreWriteFailure.File? = nil, errno: Int32, skip: Int = 0,
        times: Int? = nil, partial: Int? = nil
    ) {
        state.withLock {
            $0.rules.append(Rule(operation: operation, file: file, errno: errno, skip: skip, times: times, partial: partial))
        }
    }

    func clear() { state.withLock { $0.rules = [] } }

    /// Calls made so far of `operation` on files of kind `file` (all kinds when nil).
    func calls(_ operation: StoreWriteFailure.Operation, _ file: StoreWriteFailure.File? = nil) -> Int {
        state.withLock { s in
            s.calls.filter { k, _ in
                k.hasPrefix(operation.rawValue + "|") && (file == nil || k == "\(operation.rawValue)|\(file!.rawValue)")
            }.values.reduce(0, +)
        }
    }

    private func decide(_ operation: StoreWriteFailure.Operation, _ path: String) -> Decision {
        let kind = StoreWriteFailure.File.of(path)
        return state.withLock { s -> Decision in
            s.calls["\(operation.rawValue)|\(kind.rawValue)", default: 0] += 1
            for i in s.rules.indices where s.rules[i].operation == operation && (s.rules[i].file ?? kind) == kind {
                if s.rules[i].skip > 0 {
                    s.rules[i].skip -= 1
                    continue
                }
                if let p = s.rules[i].partial {
                    s.rules[i].partial = nil
                    return .short(p)
                }
                if let t = s.rules[i].times {
                    if t == 0 { continue }
                    s.rules[i].times = t - 1
                }
                return .fail(s.rules[i].errno)
            }
            return .pass
        }
    }

    func open(_ path: String, _ flags: Int32, _ mode: mode_t) -> Int32 {
        if case .fail(let e) = decide(.open, path) {
            Glibc.errno = e
            return -1
        }
        return Glibc.open(path, flags, mode)
    }

    func write(_ fd: Int32, _ bytes: UnsafeRawPointer, _ count: Int, path: String) -> Int {
        switch decide(.write, path) {
        case .pass: return Glibc.write(fd, bytes, count)
        case .short(let n): return Glibc.write(fd, bytes, min(n, count - 1))
        case .fail(let e):
            Glibc.errno = e
            return -1
        }
    }

    func fsync(_ fd: Int32, path: String) -> Int32 {
        if case .fail(let e) = decide(.fsync, path) {
            Glibc.errno = e
            return -1
        }
        return Glibc.fsync(fd)
    }

    func rename(_ from: String, _ to: String) -> Int32 {
        if case .fail(let e) = decide(.rename, to) {
            Glibc.errno = e
            return -1
        }
        return Glibc.rename(from, to)
    }

    func ftruncate(_ fd: Int32, _ length: Int, path: String) -> Int32 {
        if case .fail(let e) = decide(.ftruncate, path) {
            Glibc.errno = e
            return -1
        }
        return Glibc.ftruncate(fd, off_t(length))
    }
}

/// What the store told its observer about write failures, recoveries and snapshots.
final class FaultLog: AttestStoreObserver, @unchecked Sendable {
    private let state = Mutex<(failures: [StoreWriteFailure], recoveries: [StoreWriteFailure], snapshots: Int)>(([], [], 0))

    var failures: [StoreWriteFailure] { state.withLock { $0.failures } }
    var recoveries: [StoreWriteFailure] { state.withLock { $0.recoveries } }
    var snapshots: Int { state.withLock { $0.snapshots } }

    func storeWriteFailed(_ failure: StoreWriteFailure) { state.withLock { $0.failures.append(failure) } }
    func storeWritesRecovered(after failure: StoreWriteFailure, seconds: Double) {
        state.withLock { $0.recoveries.append(failure) }
    }
    func snapshotWritten(_ report: SnapshotReport) { state.withLock { $0.snapshots += 1 } }
}

/// A store on `dir` whose file calls go through `calls`, with a fast recovery back-off.
func openFaulty(_ dir: TempDirectory, _ calls: FaultyCalls, _ log: FaultLog, exclusive: Bool = true) throws -> MemoryAttestStore {
    try MemoryAttestStore.open(
        directory: dir.path, shards: 4, challenges: ChallengeLimits(anonymous: 1_000, keyBound: 1_000), observer: log, exclusive: exclusive,
        calls: calls,
        retry: Journal.Retry(initialMillis: 10, maxMillis: 40))
}

/// Polls `condition` every 10 ms for up to `seconds`.
func eventually(_ seconds: Double = 10, _ condition: () -> Bool) -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while Date() < deadline {
        if condition() { return true }
        usleep(10_000)
    }
    return condition()
}

func fileSize(_ path: String) -> Int { readBytes(path).count }

/// Lets the journal's 100 ms background fsync run, so that an fsync failure armed next hits the
/// operation under test rather than that timer.
func settle() { usleep(250_000) }

/// The StoreError a store call answered, or nil when it succeeded.
func failure<T>(_ body: () throws -> T) -> StoreError? {
    do {
        _ = try body()
        return nil
    } catch {
        return error as? StoreError
    }
}

let faultErrnos: [Int32] = [ENOSPC, EIO, EDQUOT]

@Suite("Memory store: write errors (fault seam)")
struct StoreFaultTests {
    /// A counter advance whose write fails (after part of its record reached the file) is refused
    /// and not applied; the partial record is cut; the store refuses writes (without trying them)
    /// until writes succeed again, then recovers by itself; nothing acknowledged is lost.
    @Test(arguments: faultErrnos)
    func commitWriteFailureIsRefusedCutAndRecovered(_ code: Int32) throws {
        let dir = TempDirectory()
        defer { dir.remove() }
        var rng = SeededRandom(seed: 101)
        let calls = FaultyCalls()
        let log = FaultLog()
        let store = try openFaulty(dir, calls, log)
        let record = makeRecord(&rng)
        try store.registerFresh(record, now: t0)
        #expect(try store.commit(record.keyID, counter: 1, challenge: nil, now: t0) == .committed(previousCounter: 0))
        let segment = dir.lastSegment
        let sizeBefore = fileSize(segment)
        let challenge = try store.issue(.assert, now: t0)

        calls.fail(.write, .journal, errno: code, partial: 10)
        let refused = failure { try store.commit(record.keyID, counter: 2, challenge: challenge.token, now: t0) }
        let name = StoreWriteFailure.name(ofErrno: code)
        #expect(refused?.code == .unavailable)
        #expect(refused?.detail == "store: journal write failed: \(name) (\(segment))")
        #expect(try store.key(record.keyID)?.counter == 1)  // not applied
        #expect(fileSize(segment) == sizeBefore)  // the partial record is cut
        #expect(try store.state(challenge.token, now: t0) != .consumed)  // not consumed
        #expect(store.writeFailure == StoreWriteFailure(file: .journal, operation: .write, errno: code, path: segment))
        #expect(log.failures.contains(StoreWriteFailure(file: .journal, operation: .write, errno: code, path: segment)))

        // Meanwhile every write is refused without a system call; registrations too.
        let writes = calls.calls(.write, .journal)
        #expect(failure { try store.commit(record.keyID, counter: 3, challenge: nil, now: t0) }?.code == .unavailable)
        let other = makeRecord(&rng)
        let c = try store.issue(.register, now: t0)
        #expect(failure { try store.registerNow(other, challenge: c.token, now: t0) }?.code == .unavailable)
        #expect(try store.key(other.keyID) == nil)
        #expect(calls.calls(.write, .journal) == writes)

        calls.clear()
        #expect(eventually { store.writeFailure == nil })
        #expect(log.recoveries.count == 1)
        // A space error leaves the segment intact (no snapshot needed); anything else is suspect.
        #expect(eventually(2) { log.snapshots == (code == EIO ? 1 : 0) })
        #expect(try store.commit(record.keyID, counter: 2, challenge: challenge.token, now: t0) == .committed(previousCounter: 1))
        #expect(try store.registerNow(other, challenge: c.token, now: t0) == .registered(existing: false))

        let after = try openAfterCrash(dir.path)
        #expect(try after.key(record.keyID)?.counter == 2)
        #expect(try after.key(other.keyID) != nil)
        #expect(after.restoreReport.damage.isEmpty)
        #expect(after.restoreReport.tornTail == nil)
        try after.close()
        _ = store
    }

    /// A partial record that cannot be cut (ftruncate fails too) makes the segment suspect: the
    /// recovery writes a snapshot and drops the segment. A crash before that cuts the torn tail.
    @Test func partialRecordThatCannotBeCutIsReplacedBySnapshotOrCutOnRestore() throws {
        let dir = TempDirectory()
        defer { dir.remove() }
        var rng = SeededRandom(seed: 102)
        let calls = FaultyCalls()
        let log = FaultLog()
        let store = try openFaulty(dir, calls, log)
        let record = makeRecord(&rng)
        try store.registerFresh(record, now: t0)
        #expect(try store.commit(record.keyID, counter: 5, challenge: nil, now: t0) == .committed(previousCounter: 0))
        let segment = dir.lastSegment
        let sizeBefore = fileSize(segment)
        calls.fail(.write, .journal, errno: ENOSPC, partial: 20)
        calls.fail(.ftruncate, .journal, errno: EIO)
        calls.fail(.open, .probe, errno: ENOSPC)  // no recovery yet
        #expect(failure { try store.commit(record.keyID, counter: 6, challenge: nil, now: t0) }?.code == .unavailable)
        #expect(fileSize(segment) == sizeBefore + 20)
        #expect(log.failures.contains { $0.operation == .ftruncate && $0.errno == EIO })
        #expect(eventually { log.failures.filter { $0.file == .probe }.count >= 2 })  // retried
        #expect(store.writeFailure?.file == .journal && store.writeFailure?.operation == .write)

        // A crash now: the torn record is cut at restore, the acknowledged counter kept.
        let crashed = TempDirectory()
        defer { crashed.remove() }
        for f in dir.files() where f != "lock" { writeBytes(crashed.file(f), readBytes(dir.file(f))) }
        let restored = try openAfterCrash(crashed.path)
        #expect(try restored.key(record.keyID)?.counter == 5)
        #expect(restored.restoreReport.tornTail?.bytes == 20)
        #expect(restored.restoreReport.damage.isEmpty)
        try restored.close()

        calls.clear()
        #expect(eventually { store.writeFailure == nil })
        #expect(eventually { log.snapshots >= 1 && !FileManager.default.fileExists(atPath: segment) })  // the suspect segment is gone
        #expect(try store.commit(record.keyID, counter: 6, challenge: nil, now: t0) == .committed(previousCounter: 5))
        let after = try openAfterCrash(dir.path)
        #expect(try after.key(record.keyID)?.counter == 6)
        #expect(after.restoreReport.damage.isEmpty && after.restoreReport.tornTail == nil)
        try after.close()
        _ = store
    }

    /// A registration whose receipt or record cannot be written answers 503, changes nothing
    /// (no key, no consumed challenge, no receipt bytes kept) and can be retried after recovery.
    @Test(arguments: faultErrnos)
    func registrationWriteFailureChangesNothing(_ code: Int32) throws {
        for file in [StoreWriteFailure.File.receipts, .journal] {
            let dir = TempDirectory()
            defer { dir.remove() }
            var rng = SeededRandom(seed: 103)
            let calls = FaultyCalls()
            let log = FaultLog()
            let store = try openFaulty(dir, calls, log)
            try store.registerFresh(makeRecord(&rng), receipt: [1, 2, 3], now: t0)
            let receipts = dir.file(Journal.receiptsName)
            let receiptsBefore = fileSize(receipts)
            let record = makeRecord(&rng)
            let c = try store.issue(.register, now: t0)
            calls.fail(.write, file, errno: code, partial: 1)
            let refused = failure { try store.registerNow(record, receipt: [7, 7, 7, 7], challenge: c.token, now: t0) }
            #expect(refused?.code == .unavailable, "\(file)")
            #expect(refused?.detail.hasPrefix("store: \(file.rawValue) write failed: \(StoreWriteFailure.name(ofErrno: code))") == true)
            #expect(try store.key(record.keyID) == nil)
            #expect(store.statistics.keys == 1)
            #expect(fileSize(receipts) == receiptsBefore, "\(file)")
            #expect(try store.state(c.token, now: t0) != .consumed)
            calls.clear()
            #expect(eventually { store.writeFailure == nil })
            #expect(try store.registerNow(record, receipt: [7, 7, 7, 7], challenge: c.token, now: t0) == .registered(existing: false))
            #expect(store.receipt(for: record.keyID) == [7, 7, 7, 7])
            try store.close()
            let again = try MemoryAttestStore.open(directory: dir.path, shards: 4)
            #expect(again.receipt(for: record.keyID) == [7, 7, 7, 7])
            try again.close()
        }
    }

    /// A registration whose fsync fails answers 503 and is taken back: the new key is gone (also
    /// after a restart), a re-registered key has its previous record back; its counter never drops.
    @Test(arguments: faultErrnos)
    func registrationFsyncFailureIsNotApplied(_ code: Int32) throws {
        for file in [StoreWriteFailure.File.receipts, .journal] {
            let dir = TempDirectory()
            defer { dir.remove() }
            var rng = SeededRandom(seed: 104)
            let calls = FaultyCalls()
            let log = FaultLog()
            let store = try openFaulty(dir, calls, log)
            let known = makeRecord(&rng)
            try store.registerFresh(known, receipt: [1], now: t0)
            #expect(try store.commit(known.keyID, counter: 9, challenge: nil, now: t0) == .committed(previousCounter: 0))
            let fresh = makeRecord(&rng)
            settle()

            calls.fail(.fsync, file, errno: code, times: 1)
            calls.fail(.open, .probe, errno: code)  // hold the fault until the checks below are done
            let c1 = try store.issue(.register, now: t0)
            #expect(failure { try store.registerNow(fresh, receipt: [2], challenge: c1.token, now: t0) }?.code == .unavailable)
            #expect(try store.key(fresh.keyID) == nil)
            #expect(store.statistics.keys == 1)
            #expect(store.writeFailure?.operation == .fsync && store.writeFailure?.file == file)
            #expect(log.failures.contains { $0.operation == .fsync && $0.file == file && $0.errno == code })
            calls.clear()
            #expect(eventually { store.writeFailure == nil })
            #expect(eventually { log.snapshots >= 1 })  // a failed fsync is only recovered by a snapshot

            // The re-registration of a known key whose fsync fails: its previous record comes back.
            settle()
            calls.fail(.fsync, file, errno: code, times: 1)
            let c2 = try store.issue(.register, now: t0)
            var changed = known
            changed.bundleVersion = "2.0 (7)"
            #expect(failure { try store.registerNow(changed, receipt: [3, 3], challenge: c2.token, now: t0) }?.code == .unavailable)
            #expect(try store.key(known.keyID)?.bundleVersion == nil)
            #expect(try store.key(known.keyID)?.counter == 9)
            #expect(store.receipt(for: known.keyID) == [1])
            calls.clear()
            #expect(eventually { store.writeFailure == nil })

            let after = try openAfterCrash(dir.path)
            #expect(try after.key(fresh.keyID) == nil)
            #expect(try after.key(known.keyID)?.bundleVersion == nil)
            #expect(try after.key(known.keyID)?.counter == 9)
            try after.close()
            let c3 = try store.issue(.register, now: t0)
            #expect(try store.registerNow(fresh, receipt: [2], challenge: c3.token, now: t0) == .registered(existing: false))
            _ = store
        }
    }

    /// A registration written just before another write ran out of space completes: its record is
    /// intact and its fsync succeeds (only a failed fsync, or an I/O error, makes records suspect).
    @Test func registrationWrittenBeforeASpaceFaultCompletes() throws {
        let dir = TempDirectory()
        defer { dir.remove() }
        var rng = SeededRandom(seed: 111)
        let calls = FaultyCalls()
        let log = FaultLog()
        let store = try openFaulty(dir, calls, log)
        let known = makeRecord(&rng)
        try store.registerFresh(known, now: t0)
        let journal = try #require(store.journal)
        let hold = DispatchSemaphore(value: 0)
        journal.syncQueue.async { hold.wait() }  // the registration's group commit waits behind this
        let fresh = makeRecord(&rng)
        let c = try store.issue(.register, now: t0)
        let answer = Mutex<Result<RegistrationOutcome, StoreError>?>(nil)
        store.register(Registration(record: fresh, receipt: [5], challenge: c.token), nowMillis: t0) { r in
            answer.withLock { $0 = r }
        }
        calls.fail(.write, .journal, errno: ENOSPC)
        calls.fail(.write, .probe, errno: ENOSPC)
        #expect(failure { try store.commit(known.keyID, counter: 1, challenge: nil, now: t0) }?.code == .unavailable)
        #expect(store.writeFailure?.errno == ENOSPC)
        hold.signal()
        #expect(eventually { answer.withLock { $0 } != nil })
        #expect(answer.withLock { $0 } == .success(.registered(existing: false)))
        #expect(try store.key(fresh.keyID) != nil)
        calls.clear()
        #expect(eventually { store.writeFailure == nil })
        let after = try openAfterCrash(dir.path)
        #expect(try after.key(fresh.keyID) != nil)
        try after.close()
        _ = store
    }

    /// Counter advances acknowledged before a failed background fsync are kept: memory holds them
    /// and the recovery's snapshot writes them (Linux may have dropped the segment's pages).
    @Test(arguments: faultErrnos)
    func failedPeriodicFsyncKeepsAcknowledgedCounters(_ code: Int32) throws {
        let dir = TempDirectory()
        defer { dir.remove() }
        var rng = SeededRandom(seed: 105)
        let calls = FaultyCalls()
        let log = FaultLog()
        let store = try openFaulty(dir, calls, log)
        let record = makeRecord(&rng)
        try store.registerFresh(record, now: t0)
        calls.fail(.fsync, .journal, errno: code)
        calls.fail(.open, .probe, errno: code)
        for c in 1...5 {
            #expect(
                try store.commit(record.keyID, counter: UInt32(c), challenge: nil, now: t0) == .committed(previousCounter: UInt32(c - 1)))
        }
        #expect(eventually { store.writeFailure != nil })  // the 100 ms sync failed
        #expect(log.failures.contains { $0.file == .journal && $0.operation == .fsync && $0.errno == code })
        #expect(failure { try store.commit(record.keyID, counter: 6, challenge: nil, now: t0) }?.code == .unavailable)
        calls.clear()
        #expect(eventually { store.writeFailure == nil })
        #expect(eventually { log.snapshots >= 1 })
        let after = try openAfterCrash(dir.path)
        #expect(try after.key(record.keyID)?.counter == 5)
        try after.close()
        _ = store
    }

    /// A snapshot that cannot be written (open, write, fsync, rename of snapshot.dat.tmp, or the new
    /// segment) fails with the errno, leaves no temporary file, and is counted; the journal keeps
    /// accepting writes (a snapshot is retried at the next interval).
    @Test(arguments: faultErrnos)
    func failedSnapshotLeavesNoTemporaryFileAndWritesGoOn(_ code: Int32) throws {
        let cases: [(StoreWriteFailure.Operation, StoreWriteFailure.File)] = [
            (.open, .snapshot), (.write, .snapshot), (.fsync, .snapshot), (.rename, .snapshot), (.open, .journal),
            (.write, .journal), (.fsync, .directory),
        ]
        for (operation, file) in cases {
            let dir = TempDirectory()
            defer { dir.remove() }
            var rng = SeededRandom(seed: 106)
            let calls = FaultyCalls()
            let log = FaultLog()
            let store = try openFaulty(dir, calls, log)
            let record = makeRecord(&rng)
            try store.registerFresh(record, now: t0)
            let segmentsBefore = dir.files().filter { $0.hasPrefix("journal-") }
            calls.fail(operation, file, errno: code, times: 1)
            let error = failure { try store.snapshot() }
            #expect(
                error?.detail.contains("(\(StoreWriteFailure.name(ofErrno: code)))") == true,
                "\(operation) \(file): \(String(describing: error))")
            #expect(!dir.files().contains("\(SnapshotFormat.fileName).tmp"), "\(operation) \(file)")
            // Nothing is deleted; a new segment exists only when the rotation came before the failure.
            let segmentsAfter = dir.files().filter { $0.hasPrefix("journal-") }
            #expect(Set(segmentsBefore).isSubset(of: segmentsAfter), "\(operation) \(file)")
            #expect(segmentsAfter.count == segmentsBefore.count + (file == .snapshot ? 1 : 0), "\(operation) \(file)")
            #expect(log.failures.contains { $0.operation == operation && $0.file == file && $0.errno == code })
            #expect(store.writeFailure == nil, "\(operation) \(file)")
            #expect(try store.commit(record.keyID, counter: 1, challenge: nil, now: t0) == .committed(previousCounter: 0))
            _ = try store.snapshot()
            try store.close()
            let again = try MemoryAttestStore.open(directory: dir.path, shards: 4)
            #expect(again.lastStopWasClean)
            #expect(try again.key(record.keyID)?.counter == 1)
            try again.close()
        }
    }

    /// A failed fsync of the old segment during a snapshot's rotation makes the journal refuse
    /// writes; the snapshot that follows rewrites everything and clears it.
    @Test(arguments: faultErrnos)
    func failedRotationFsyncIsClearedByItsSnapshot(_ code: Int32) throws {
        let dir = TempDirectory()
        defer { dir.remove() }
        var rng = SeededRandom(seed: 107)
        let calls = FaultyCalls()
        let log = FaultLog()
        let store = try openFaulty(dir, calls, log)
        let record = makeRecord(&rng)
        try store.registerFresh(record, now: t0)
        #expect(try store.commit(record.keyID, counter: 4, challenge: nil, now: t0) == .committed(previousCounter: 0))
        settle()
        calls.fail(.fsync, .journal, errno: code, times: 1)
        _ = try store.snapshot()
        #expect(store.writeFailure == nil)
        #expect(log.recoveries.count == 1)
        #expect(try store.commit(record.keyID, counter: 5, challenge: nil, now: t0) == .committed(previousCounter: 4))
        let after = try openAfterCrash(dir.path)
        #expect(try after.key(record.keyID)?.counter == 5)
        try after.close()
        _ = store
    }

    /// The clean-stop marker cannot be written: close fails, no temporary file stays, and the next
    /// start treats the stop as unclean (challenges retired) with every key and counter.
    @Test(arguments: faultErrnos)
    func failedMarkerMakesTheStopUnclean(_ code: Int32) throws {
        for operation in StoreWriteFailure.Operation.allCases where operation != .ftruncate {
            let dir = TempDirectory()
            defer { dir.remove() }
            var rng = SeededRandom(seed: 108)
            let calls = FaultyCalls()
            let log = FaultLog()
            let store = try openFaulty(dir, calls, log)
            let record = makeRecord(&rng)
            try store.registerFresh(record, now: t0)
            #expect(try store.commit(record.keyID, counter: 3, challenge: nil, now: t0) == .committed(previousCounter: 0))
            let challenge = try store.issue(.assert, now: t0)
            calls.fail(operation, .marker, errno: code)
            let error = failure { try store.close() }
            #expect(error?.detail.contains(StoreWriteFailure.name(ofErrno: code)) == true, "\(operation)")
            #expect(!dir.files().contains { $0.hasPrefix(MemoryAttestStore.markerName) }, "\(operation)")
            let again = try openAfterCrash(dir.path)
            #expect(!again.lastStopWasClean)
            #expect(try again.key(record.keyID)?.counter == 3)
            #expect(try again.state(challenge.token, now: t0) == .unknown)
            try again.close()
        }
    }

    /// A store that cannot create its segment (or receipts file) at open fails with the errno.
    @Test(arguments: faultErrnos)
    func openFailsWithTheErrno(_ code: Int32) throws {
        for (operation, file) in [
            (StoreWriteFailure.Operation.open, StoreWriteFailure.File.journal), (.write, .journal),
            (.fsync, .journal), (.open, .receipts), (.fsync, .directory),
        ] {
            let dir = TempDirectory()
            defer { dir.remove() }
            let calls = FaultyCalls()
            let log = FaultLog()
            calls.fail(operation, file, errno: code)
            let error = failure { try openFaulty(dir, calls, log) }
            #expect(error?.code == .unavailable)
            #expect(error?.detail.contains("(\(StoreWriteFailure.name(ofErrno: code)))") == true, "\(operation) \(file)")
            #expect(log.failures.first?.file == file)
            #expect(!dir.files().contains { $0.hasPrefix("journal-") }, "\(operation) \(file): no partial segment")
        }
    }

    /// Recovery retries with back-off while writes keep failing (each attempt counted), then
    /// recovers by itself.
    @Test func recoveryRetriesWithBackOff() throws {
        let dir = TempDirectory()
        defer { dir.remove() }
        var rng = SeededRandom(seed: 109)
        let calls = FaultyCalls()
        let log = FaultLog()
        let store = try openFaulty(dir, calls, log)
        let record = makeRecord(&rng)
        try store.registerFresh(record, now: t0)
        calls.fail(.write, .journal, errno: ENOSPC)
        calls.fail(.write, .probe, errno: ENOSPC)
        #expect(failure { try store.commit(record.keyID, counter: 1, challenge: nil, now: t0) }?.code == .unavailable)
        usleep(400_000)
        let probes = log.failures.filter { $0.file == .probe }.count
        // 10 ms doubling to 40 ms: about 12 attempts in 400 ms, never one per millisecond.
        #expect(probes >= 3 && probes <= 30, "\(probes) probe attempts")
        // What is refused, and why, stays the failure that started it; the retries are reported.
        #expect(store.writeFailure?.file == .journal && store.writeFailure?.operation == .write)
        #expect(log.failures.last == StoreWriteFailure(file: .probe, operation: .write, errno: ENOSPC, path: dir.file(Journal.probeName)))
        calls.clear()
        #expect(eventually { store.writeFailure == nil })
        #expect(!dir.files().contains(Journal.probeName))
        #expect(try store.commit(record.keyID, counter: 1, challenge: nil, now: t0) == .committed(previousCounter: 0))
        try store.close()
    }

    /// errno names are the symbolic ones (bounded metric labels); file kinds come from the name.
    @Test func labels() {
        #expect(StoreWriteFailure.name(ofErrno: ENOSPC) == "ENOSPC")
        #expect(StoreWriteFailure.name(ofErrno: EDQUOT) == "EDQUOT")
        #expect(StoreWriteFailure.name(ofErrno: EIO) == "EIO")
        #expect(StoreWriteFailure.name(ofErrno: 9999) == "errno_9999")
        #expect(StoreWriteFailure.File.of("/d/journal-0000000000000001.log") == .journal)
        #expect(StoreWriteFailure.File.of("/d/receipts.dat") == .receipts)
        #expect(StoreWriteFailure.File.of("/d/snapshot.dat.tmp") == .snapshot)
        #expect(StoreWriteFailure.File.of("/d/clean-stop.tmp") == .marker)
        #expect(StoreWriteFailure.File.of("/d/write-probe") == .probe)
        #expect(StoreWriteFailure.File.of("/d") == .directory)
        #expect(
            StoreWriteFailure(file: .journal, operation: .write, errno: ENOSPC, path: "/d/j").description
                == "journal write failed: ENOSPC (/d/j)")
    }

    /// Removing keys (a registration taken back) keeps every other key findable.
    @Test func removeKeepsTheTableConsistent() {
        var rng = SeededRandom(seed: 110)
        var s = ShardState(seed: 7)
        var keys: [KeyBits] = []
        for _ in 0..<3_000 {
            let k = KeyBits(makeRecord(&rng).keyID)
            keys.append(k)
            var rec = KeyRecord(
                key: k, point: PointBits([4] + [UInt8](repeating: 1, count: 64))!, receiptOffset: 0, counter: 0,
                receiptLength: 0, appIndex: 0, bundleIndex: KeyRecord.noString, category: 0, firstSeen: 0, lastSeen: 0, flags: 0)
            rec.counter = UInt32(keys.count)
            let added = s.appendIfAbsent(rec)
            #expect(added)
        }
        var removed = Set<Int>()
        for _ in 0..<1_500 {
            let victim = Int.random(in: 0..<keys.count, using: &rng)
            guard !removed.contains(victim), let i = s.find(keys[victim]) else { continue }
            s.remove(at: i)
            removed.insert(victim)
        }
        #expect(s.count == keys.count - removed.count)
        for (n, k) in keys.enumerated() {
            if removed.contains(n) {
                #expect(s.find(k) == nil)
            } else {
                #expect(s.find(k).map { s.record(at: $0).counter } == UInt32(n + 1))
            }
        }
        for n in removed {
            let added = s.appendIfAbsent(
                KeyRecord(
                    key: keys[n], point: PointBits([4] + [UInt8](repeating: 1, count: 64))!, receiptOffset: 0, counter: 0,
                    receiptLength: 0, appIndex: 0, bundleIndex: KeyRecord.noString, category: 0, firstSeen: 0, lastSeen: 0, flags: 0))
            #expect(added)
        }
        #expect(s.count == keys.count)
    }
}
