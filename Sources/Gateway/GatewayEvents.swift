import Foundation
import GatewayConfig
import GatewayProxy
import GatewayWire
import Synchronization

/// The access log (one JSON line per finished exchange, stdout) and the gateway's event log
/// (stderr). Shared by all loops; each line is one write(2), so lines never interleave.
public final class GatewayEvents: Sendable {
    /// `logging.access_log`; switched by a reload (`adopt`).
    public var accessLog: Bool { accessLogOn.load(ordering: .relaxed) }
    private let accessLogOn: Atomic<Bool>

    public init(accessLog: Bool) {
        accessLogOn = Atomic(accessLog)
    }

    /// A reloaded `logging` section, in force for every line logged from now on: the event log's
    /// level, then the access log's settings (`adoptAccessLog`).
    public func adopt(_ logging: LoggingConfig) {
        Self.setLevel(logging.level)
        adoptAccessLog(logging)
    }

    /// The reload hook of the access log's settings: `access_log: true|false` today. Whatever the
    /// access log gains (a file, a format, buffering) is switched here, so that SIGHUP applies it.
    func adoptAccessLog(_ logging: LoggingConfig) {
        accessLogOn.store(logging.accessLog, ordering: .relaxed)
    }

    func exchangeDidFinish(_ r: ExchangeRecord) {
        guard accessLog else { return }
        var line = JSONObject()
        line.set("ts", Date().formatted(.iso8601))
        line.set("route", r.route)
        line.set("method", r.method)
        line.set("target", r.target)
        line.set("status", r.status)
        line.set("request_bytes", r.requestBytes)
        line.set("response_bytes", r.responseBytes)
        line.set("duration_s", .string(String(format: "%.6f", r.durationSeconds)))
        line.set("upstream", r.upstream)
        if let u = r.upstreamSeconds { line.set("upstream_duration_s", .string(String(format: "%.6f", u))) }
        line.set("client", r.peer)
        line.set("protocol", r.protocolName)
        if let e = r.error { line.set("error", e) }
        Self.writeLine(line.description)
    }

    /// One write(2) per line, so lines from several loops never interleave.
    static func writeLine(_ text: String) {
        var bytes = Array(text.utf8)
        bytes.append(0x0a)
        bytes.withUnsafeBytes { _ = write(1, $0.baseAddress, $0.count) }
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
        var line = JSONObject()
        line.set("ts", Date().formatted(.iso8601))
        line.set("level", level)
        line.set("msg", message)
        for (k, v) in fields { line.set(k, v) }
        var bytes = Array(line.description.utf8)
        bytes.append(0x0a)
        bytes.withUnsafeBytes { _ = write(2, $0.baseAddress, $0.count) }
    }
}
