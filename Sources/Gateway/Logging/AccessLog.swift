import GatewayConfig
import GatewayIO
import GatewayProxy
import Glibc
import Synchronization

/// Every write of the gateway's logs (the access log's flushes, the event log's lines) goes through
/// here, one at a time in the process: a flush of whole lines is written completely (a short write
/// is continued) before any other log write starts. So no line is ever torn or interleaved with
/// another loop's, whatever the destination: a regular file (opened `O_APPEND`), a pipe (where only
/// writes up to `PIPE_BUF` would be atomic on their own: journald, `docker logs`), a terminal.
enum LogOutput {
    private static let lock = Mutex(())

    /// Writes all of `bytes` to `fd`; false (the rest dropped) when the descriptor fails (EBADF,
    /// ENOSPC, EIO…) or stays unwritable for a second.
    @discardableResult
    static func write(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) -> Bool {
        guard var p = bytes.baseAddress, bytes.count > 0 else { return true }
        var left = bytes.count
        return lock.withLock { _ -> Bool in
            while left > 0 {
                let n = Glibc.write(fd, p, left)
                if n > 0 {
                    p += n
                    left -= n
                    continue
                }
                let e = errno
                if n < 0 && e == EINTR { continue }
                if n < 0 && e == EAGAIN {
                    // A non-blocking descriptor (someone's pipe) that is full: wait a bounded time.
                    var pfd = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
                    if poll(&pfd, 1, 1000) > 0 { continue }
                }
                return false
            }
            return true
        }
    }
}

/// An open access log destination: standard output, or a file opened for appending (closed when
/// the last loop that writes to it lets go of it: a reopen never closes a descriptor under a
/// writer).
final class LogFile: Sendable {
    let fd: Int32
    /// The file's path; nil for standard output.
    let path: String?
    /// Failed writes (their lines lost) are logged, at most one warning per 30 s per file.
    private let failureLog = RateLimitedLog()

    static let stdout = LogFile(fd: 1, path: nil)

    private init(fd: Int32, path: String?) {
        self.fd = fd
        self.path = path
    }

    /// Opens (creating it, mode 0644 less the umask) `path` for appending.
    static func open(_ path: String) throws(AccessLogError) -> LogFile {
        let fd = Glibc.open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw AccessLogError(path: path, errno: errno) }
        return LogFile(fd: fd, path: path)
    }

    static func open(_ destination: AccessLogConfig.Destination) throws(AccessLogError) -> LogFile {
        switch destination {
        case .stdout: return .stdout
        case .file(let path): return try open(path)
        }
    }

    func write(_ bytes: UnsafeRawBufferPointer) {
        guard !LogOutput.write(fd, bytes) else { return }
        let error = errno
        let name = path ?? "stdout"
        failureLog.log(name) { suppressed in
            GatewayEvents.log(
                "warning", "access log write failed: lines lost",
                [
                    ("access_log", name), ("error", ConfigPreflight.describe(error)), ("bytes", String(bytes.count)),
                    ("failures_not_logged", String(suppressed)),
                ])
        }
    }

    deinit { if path != nil { close(fd) } }
}

/// The access log file could not be opened.
struct AccessLogError: Error, CustomStringConvertible {
    let path: String
    let errno: Int32
    var description: String { "access log \(path): \(ConfigPreflight.describe(errno))" }
}

/// What the loops write access lines with: the options and the open destination. Replaced whole
/// by a reopen (SIGUSR1: the same path opened again) or a configuration change.
final class AccessLogTarget: Sendable {
    let options: AccessLogConfig
    let file: LogFile

    init(options: AccessLogConfig, file: LogFile) {
        self.options = options
        self.file = file
    }

    /// Opens `options`' destination.
    static func open(_ options: AccessLogConfig) throws(AccessLogError) -> AccessLogTarget {
        AccessLogTarget(options: options, file: try LogFile.open(options.destination))
    }

    /// The same options, the file opened again by its path (logrotate renamed it: lines go to a new
    /// file of that name). Standard output stays as it is.
    func reopened() throws(AccessLogError) -> AccessLogTarget {
        guard let path = file.path else { return self }
        return AccessLogTarget(options: options, file: try LogFile.open(path))
    }
}

/// One event loop's access log: lines are formatted straight into this loop's buffer and written
/// whole, with one write(2) per flush (`LogOutput`): when the buffer holds `buffer` bytes, when
/// its oldest line is `flush` old (the loop's timer wheel), when the target changes (reopen,
/// reload) and at drain (`finish`). With `buffer: 0`, or after `finish`, each line is written as it
/// is made. Loop-confined.
final class AccessLogWriter {
    private let loop: EventLoop
    private(set) var target: AccessLogTarget?
    private var base: UnsafeMutableRawPointer?
    private var capacity = 0
    private var count = 0
    private var clock = LogClock()
    // The target's options, read once per change rather than per line.
    private var format = AccessLogConfig.Format.json
    /// A flush when the buffer holds this much (0: each line at once).
    private var threshold = 0
    private var flushMillis: Int64 = 1000
    /// A flush is scheduled on the wheel for the lines in the buffer.
    private var flushPending = false
    /// After `finish` (drain): lines are written at once.
    private var unbuffered = false

    init(loop: EventLoop, target: AccessLogTarget?) {
        self.loop = loop
        adopt(target)
    }

    deinit {
        flush()
        base?.deallocate()
    }

    private func adopt(_ new: AccessLogTarget?) {
        target = new
        guard let options = new?.options else { return }
        format = options.format
        threshold = unbuffered ? 0 : options.bufferBytes
        flushMillis = options.flush.millis
    }

    /// Formats `r` into the buffer; flushes when the buffer is full.
    func write(_ r: ExchangeRecord) {
        guard target != nil else { return }
        var c = clock  // a plain value: read, advanced and stored back, not accessed across a call
        c.now()
        clock = c
        let bound = AccessLine.bound(r)
        if count + bound > capacity { grow(count + bound) }
        var w = LineBytes(base: base.unsafelyUnwrapped, count: count)
        AccessLine.write(r, format: format, clock: c, to: &w)
        count = w.count
        if count >= threshold {
            flush()
        } else if !flushPending {
            flushPending = true
            loop.timers.schedule(afterMillis: flushMillis) { [weak self] in
                guard let self else { return }
                self.flushPending = false
                self.flush()
            }
        }
    }

    private func grow(_ needed: Int) {
        // The buffer's size plus room for a line or two; a longer line grows it once.
        let size = max(needed, (target?.options.bufferBytes ?? 0) + 16 * 1024)
        let grown = UnsafeMutableRawPointer.allocate(byteCount: size, alignment: 16)
        if let base {
            grown.copyMemory(from: base, byteCount: count)
            base.deallocate()
        }
        base = grown
        capacity = size
    }

    /// Writes what is buffered (whole lines), with one write(2).
    func flush() {
        guard count > 0, let base, let target else { return }
        target.file.write(UnsafeRawBufferPointer(start: base, count: count))
        count = 0
        if capacity > 4 * max(target.options.bufferBytes, 16 * 1024) {
            // A rare huge line grew it: back to the usual size.
            self.base = nil
            base.deallocate()
            capacity = 0
        }
    }

    /// Switches to `new` (nil: off): the lines buffered so far go to the old target first.
    func use(_ new: AccessLogTarget?) {
        flush()
        adopt(new)
    }

    /// At drain: everything buffered is written, and every later line at once.
    func finish() {
        flush()
        unbuffered = true
        threshold = 0
    }
}
