/// Log level and access log.
public struct LoggingConfig: Sendable, Equatable {
    /// The levels of the gateway's event log (stderr), lowest first. `level` keeps a line when its
    /// level is at least this one.
    public enum Level: String, Sendable, CaseIterable, Comparable {
        case debug, info, warning, error

        public var rank: Int {
            switch self {
            case .debug: 0
            case .info: 1
            case .warning: 2
            case .error: 3
            }
        }

        public static func < (a: Self, b: Self) -> Bool { a.rank < b.rank }
    }

    /// Default `.info`.
    public var level: Level
    /// One line per request. Default true.
    public var accessLog: Bool
    /// Where and how the access log is written (when `accessLog`).
    public var accessLogOptions: AccessLogConfig

    public init(level: Level = .info, accessLog: Bool = true, accessLogOptions: AccessLogConfig = AccessLogConfig()) {
        self.level = level
        self.accessLog = accessLog
        self.accessLogOptions = accessLogOptions
    }
}

/// `logging.access_log: {path, format, buffer, flush}`: one line per finished exchange, buffered per
/// event loop and written whole lines at a time.
public struct AccessLogConfig: Sendable, Equatable {
    public enum Destination: Sendable, Equatable {
        /// The process's standard output (journald, `docker logs`, `kubectl logs`).
        case stdout
        /// A file opened for appending (created with mode 0644 less the umask), reopened on SIGUSR1.
        case file(String)
    }

    public enum Format: String, Sendable, CaseIterable {
        /// One JSON object per line.
        case json
        /// nginx's and Apache's `combined`.
        case combined
    }

    /// Default `.stdout`.
    public var destination: Destination
    /// Default `.json`.
    public var format: Format
    /// Bytes of lines kept per event loop before they are written (one write(2) of whole lines); 0
    /// writes each line as it is made. Default 64 KiB.
    public var bufferBytes: Int
    /// The longest a line waits in a buffer. Default 1 s.
    public var flush: Duration

    public static let defaultBufferBytes = 64 * 1024
    public static let maximumBufferBytes = 16 * 1024 * 1024
    /// The event loop's timer tick: a shorter flush interval could not be kept.
    public static let minimumFlush = Duration.milliseconds(100)
    public static let maximumFlush = Duration.seconds(3600)

    public init(
        destination: Destination = .stdout, format: Format = .json, bufferBytes: Int = AccessLogConfig.defaultBufferBytes,
        flush: Duration = .seconds(1)
    ) {
        self.destination = destination
        self.format = format
        self.bufferBytes = bufferBytes
        self.flush = flush
    }
}
