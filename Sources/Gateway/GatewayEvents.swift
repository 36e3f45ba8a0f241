import Foundation
import GatewayProxy
import GatewayWire

/// The access log (one JSON line per finished exchange, stdout) and the gateway's event log
/// (stderr). Shared by all loops; each line is one write(2), so lines never interleave.
public final class GatewayEvents: Sendable {
    public let accessLog: Bool

    public init(accessLog: Bool) {
        self.accessLog = accessLog
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

    /// A structured log line for the gateway's own events (start, reload, drain), on stderr.
    public static func log(_ level: String, _ message: String, _ fields: [(String, String)] = []) {
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
