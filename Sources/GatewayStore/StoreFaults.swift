import Glibc

/// A failed system call of the store's file layer (open, write, fsync, rename, ftruncate), as
/// reported to the observer and shown by readiness: which file, which call, which errno.
public struct StoreWriteFailure: Sendable, Equatable, CustomStringConvertible {
    /// The file, as a bounded metric label.
    public enum File: String, Sendable, CaseIterable {
        case journal, receipts, snapshot, marker, directory, probe, lock

        /// The kind of a path in the data directory (by its file name).
        static func of(_ path: String) -> File {
            let name = path.split(separator: "/", omittingEmptySubsequences: false).last.map(String.init) ?? path
            if name.hasPrefix("journal-") { return .journal }
            if name.hasPrefix("receipts") { return .receipts }  // receipts.dat, receipts-<gen>.dat(.tmp)
            if name.hasPrefix(SnapshotFormat.fileName) { return .snapshot }
            if name.hasPrefix(MemoryAttestStore.markerName) { return .marker }
            if name == Journal.probeName { return .probe }
            if name == "lock" { return .lock }
            return .directory
        }
    }

    public enum Operation: String, Sendable, CaseIterable {
        case open, write, fsync, rename, ftruncate
    }

    public let file: File
    public let operation: Operation
    public let errno: Int32
    public let path: String

    public init(file: File, operation: Operation, errno: Int32, path: String) {
        self.file = file
        self.operation = operation
        self.errno = errno
        self.path = path
    }

    /// The symbolic errno name (`ENOSPC`), a bounded metric label.
    public var errnoName: String { Self.name(ofErrno: errno) }

    /// "journal write failed: ENOSPC (/var/lib/attest-gateway/journal-0000000000000003.log)"
    public var description: String { "\(file.rawValue) \(operation.rawValue) failed: \(errnoName) (\(path))" }

    /// A lack of space (ENOSPC, EDQUOT, EFBIG): nothing reached the disk that should not have, once
    /// the partial write is cut. Any other errno (EIO, …) leaves what the disk holds unknown.
    var isSpace: Bool { errno == ENOSPC || errno == EDQUOT || errno == EFBIG }

    public static func name(ofErrno code: Int32) -> String {
        switch code {
        case ENOSPC: "ENOSPC"
        case EDQUOT: "EDQUOT"
        case EIO: "EIO"
        case EFBIG: "EFBIG"
        case EROFS: "EROFS"
        case EACCES: "EACCES"
        case EPERM: "EPERM"
        case ENOENT: "ENOENT"
        case EEXIST: "EEXIST"
        case EISDIR: "EISDIR"
        case ENOTDIR: "ENOTDIR"
        case EBADF: "EBADF"
        case EINVAL: "EINVAL"
        case EMFILE: "EMFILE"
        case ENFILE: "ENFILE"
        case ENOMEM: "ENOMEM"
        case EAGAIN: "EAGAIN"
        case EINTR: "EINTR"
        case ENAMETOOLONG: "ENAMETOOLONG"
        case ELOOP: "ELOOP"
        case EXDEV: "EXDEV"
        case ENODEV: "ENODEV"
        case ENXIO: "ENXIO"
        case ESTALE: "ESTALE"
        case EOVERFLOW: "EOVERFLOW"
        case ETXTBSY: "ETXTBSY"
        case EBUSY: "EBUSY"
        case ENOTSUP: "ENOTSUP"
        default: "errno_\(code)"
        }
    }
}

/// A restore's account of the journal: what was replayed, what was damaged, what was cut.
public struct RestoreReport: Sendable, Equatable {
    /// Whole journal records applied.
    public var replayedRecords = 0
    /// Records (or byte ranges) that could not be used: checksum failures, malformed records,
    /// unreadable ranges, advances of keys not registered. Each is logged at error level.
    public var damage: [JournalDamage] = []
    /// A record torn by a crash in the middle of its write at the end of the newest segment:
    /// cut off (the file truncated to the last whole record). nil when there was none.
    public var tornTail: TornTail?

    public struct TornTail: Sendable, Equatable {
        public var segment: String
        public var offset: Int
        public var bytes: Int
    }

    public init() {}
}

/// A journal record (or byte range) restore could not use.
public struct JournalDamage: Sendable, Equatable, CustomStringConvertible {
    public enum Kind: String, Sendable {
        /// A whole record (its length fits, the next record starts where it ends) whose CRC-32C fails.
        case checksum
        /// A record with a valid checksum that does not decode (an unknown type, bad lengths).
        case malformed
        /// Bytes that do not frame records (a damaged length field): skipped up to the next offset
        /// where a whole record with a valid checksum starts, or to the end of the segment.
        case unreadable
        /// A counter advance of a key that is not registered (its registration record was lost).
        case unknownKey = "unknown_key"
    }

    public var kind: Kind
    /// The segment file.
    public var segment: String
    public var offset: Int
    public var length: Int
    /// The key the damaged bytes name, when its id is intact at the record's key offset and is
    /// a registered key (or, for `unknownKey`, the key that is not registered).
    public var keyID: KeyID?
    /// The counter the damaged record carries, when attributed.
    public var recordedCounter: UInt32?
    /// The key's counter before and after the damaged record was taken into account (raised to the
    /// record's value when higher: a damaged record can only raise a counter, never lower it or
    /// create a key). nil when nothing was raised.
    public var counterRaised: CounterRaise?
    /// Open counters of the key's counter window the damaged record closed (a damaged record may
    /// have been the acceptance of one of them): 0 when it had none.
    public var windowClosed = 0

    public struct CounterRaise: Sendable, Equatable {
        public var from: UInt32
        public var to: UInt32
    }

    public var description: String {
        var s = "\(kind.rawValue): \(segment) offset \(offset) length \(length)"
        if let keyID { s += " key \(keyID)" }
        if let recordedCounter { s += " counter \(recordedCounter)" }
        if let r = counterRaised { s += " (counter raised from \(r.from) to \(r.to))" }
        if windowClosed > 0 { s += " (\(windowClosed) open counters of its window closed)" }
        return s
    }
}

/// The system calls of the store's file layer that can fail for lack of space or an I/O error.
/// Each returns what the system call returns (-1 with `errno` set on failure). Production uses
/// `SystemFileCalls`; tests substitute one that fails chosen calls with chosen errnos.
protocol FileCalls: Sendable {
    func open(_ path: String, _ flags: Int32, _ mode: mode_t) -> Int32
    func write(_ fd: Int32, _ bytes: UnsafeRawPointer, _ count: Int, path: String) -> Int
    func fsync(_ fd: Int32, path: String) -> Int32
    func rename(_ from: String, _ to: String) -> Int32
    func ftruncate(_ fd: Int32, _ length: Int, path: String) -> Int32
}

struct SystemFileCalls: FileCalls {
    func open(_ path: String, _ flags: Int32, _ mode: mode_t) -> Int32 { Glibc.open(path, flags, mode) }
    func write(_ fd: Int32, _ bytes: UnsafeRawPointer, _ count: Int, path: String) -> Int { Glibc.write(fd, bytes, count) }
    func fsync(_ fd: Int32, path: String) -> Int32 { Glibc.fsync(fd) }
    func rename(_ from: String, _ to: String) -> Int32 { Glibc.rename(from, to) }
    func ftruncate(_ fd: Int32, _ length: Int, path: String) -> Int32 { Glibc.ftruncate(fd, off_t(length)) }
}

/// A failed file system call: thrown inside the module, turned into a `StoreError` at its edge.
struct FileFault: Error, CustomStringConvertible {
    let failure: StoreWriteFailure

    var storeError: StoreError {
        StoreError(
            .unavailable,
            "cannot \(failure.operation.rawValue) \(failure.path): \(FileIO.errnoText(failure.errno)) (\(failure.errnoName))")
    }

    var description: String { storeError.description }
}

/// The store's file operations that can fail, through `calls`; every failure is reported to the
/// observer (counted) before it is thrown as a `FileFault`.
struct StoreFiles: Sendable {
    let calls: any FileCalls
    let observer: (any AttestStoreObserver)?

    static let system = StoreFiles(calls: SystemFileCalls(), observer: nil)

    func fault(_ operation: StoreWriteFailure.Operation, _ path: String, _ code: Int32) -> FileFault {
        let failure = StoreWriteFailure(file: .of(path), operation: operation, errno: code, path: path)
        observer?.storeWriteFailed(failure)
        return FileFault(failure: failure)
    }

    func open(_ path: String, _ flags: Int32, mode: mode_t = 0o600) throws -> Int32 {
        while true {
            let fd = calls.open(path, flags | O_CLOEXEC, mode)
            if fd >= 0 { return fd }
            let code = errno
            if code == EINTR { continue }
            throw fault(.open, path, code)
        }
    }

    /// Writes all of `bytes` at the current offset (retrying short writes and EINTR). On failure
    /// part of `bytes` may have been written: the caller cuts it.
    func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, path: String) throws {
        var done = 0
        while done < bytes.count {
            let n = calls.write(fd, bytes.baseAddress! + done, bytes.count - done, path: path)
            if n < 0 {
                let code = errno
                if code == EINTR { continue }
                throw fault(.write, path, code)
            }
            done += n
        }
    }

    func fsync(_ fd: Int32, path: String) throws {
        while calls.fsync(fd, path: path) != 0 {
            let code = errno
            if code == EINTR { continue }
            throw fault(.fsync, path, code)
        }
    }

    func fsyncDirectory(_ path: String) throws {
        let fd = try open(path, O_RDONLY | O_DIRECTORY)
        defer { Glibc.close(fd) }
        try fsync(fd, path: path)
    }

    func rename(_ from: String, _ to: String) throws {
        while calls.rename(from, to) != 0 {
            let code = errno
            if code == EINTR { continue }
            throw fault(.rename, to, code)
        }
    }

    /// Cuts (or extends) the file to `length` bytes; not fsync'ed.
    func truncate(_ fd: Int32, path: String, to length: Int) throws {
        while calls.ftruncate(fd, length, path: path) != 0 {
            let code = errno
            if code == EINTR { continue }
            throw fault(.ftruncate, path, code)
        }
    }

    /// Writes a small file durably: temp file, fsync, rename, fsync of the directory. A failed
    /// attempt removes its temp file.
    func writeFileAtomically(_ bytes: [UInt8], directory: String, name: String) throws {
        let tmp = "\(directory)/\(name).tmp"
        let fd = try open(tmp, O_WRONLY | O_CREAT | O_TRUNC)
        do {
            try bytes.withUnsafeBytes { (raw) throws in try writeAll(fd, raw, path: tmp) }
            try fsync(fd, path: tmp)
        } catch {
            Glibc.close(fd)
            Glibc.unlink(tmp)
            throw error
        }
        Glibc.close(fd)
        do {
            try rename(tmp, "\(directory)/\(name)")
        } catch {
            Glibc.unlink(tmp)
            throw error
        }
        try fsyncDirectory(directory)
    }
}
