import Foundation
import GatewayConfig
import GatewayProxy
import GatewayWire
import Synchronization

/// The access log's current target (`AccessLogTarget`: options and open file, nil when off; each
/// loop writes through its own `AccessLogWriter`) and the gateway's event log (stderr). Shared by all
/// loops; every log write goes through `LogOutput`, so lines never interleave or tear.
public final class GatewayEvents: Sendable {
    private let current: Mutex<AccessLogTarget?>

    init(target: AccessLogTarget?) {
        current = Mutex(target)
    }

    /// Opens the access log `logging` names (a file that cannot be opened is an error).
    convenience init(logging: LoggingConfig) throws(AccessLogError) {
        self.init(target: logging.accessLog ? try AccessLogTarget.open(logging.accessLogOptions) : nil)
    }

    /// Where access lines go now (nil: off).
    var accessLog: AccessLogTarget? { current.withLock { $0 } }

    /// Makes `target` the current one; returns it.
    @discardableResult
    func replace(with target: AccessLogTarget?) -> AccessLogTarget? {
        current.withLock { $0 = target }
        return target
    }

    /// The lowest level written (`logging.level`): lines below it are dropped before being built.
    private static let threshold = Atomic<Int>(LoggingConfig.Level.info.rank)

    /// Sets `logging.level` for every event logged from now on.
    public static func setLevel(_ level: LoggingConfig.Level) { threshold.store(level.rank, ordering: .relaxed) }

    /// Whether a line of `level` (debug, info, warning, error) is written at the current level.
    public static func logs(_ level: String) -> Bool {
        (LoggingConfig.Level(rawValue: level)?.rank ?? LoggingConfig.Level.info.rank) >= threshold.load(ordering: .relaxed)
    }

    /// A structured log line for the gateway's own events (start, reload, drain), on stderr, when
    /// `level` is at least `logging.level`.
    public static func log(_ level: String, _ message: String, _ fields: [(String, String)] = []) {
        guard logs(level) else { return }
        var clock = LogClock()
        clock.now()
        var line = JSONObject()
        line.set("ts", clock.rfc3339)
        line.set("level", level)
        line.set("msg", message)
        for (k, v) in fields { line.set(k, v) }
        var bytes = Array(line.description.utf8)
        bytes.append(0x0a)
        _ = bytes.withUnsafeBytes { LogOutput.write(2, $0) }
    }
}
