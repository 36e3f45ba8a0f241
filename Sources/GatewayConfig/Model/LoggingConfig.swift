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

    public init(level: Level = .info, accessLog: Bool = true) {
        self.level = level
        self.accessLog = accessLog
    }
}
