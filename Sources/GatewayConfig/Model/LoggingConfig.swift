/// Log level and access log.
public struct LoggingConfig: Sendable, Equatable {
    /// swift-log's levels, by their names.
    public enum Level: String, Sendable, CaseIterable {
        case trace, debug, info, notice, warning, error, critical
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
