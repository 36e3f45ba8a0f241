import Foundation
import Glibc

/// systemd's service notification protocol (sd_notify(3)), spoken directly: one datagram of
/// `KEY=VALUE` lines to the Unix socket named by `$NOTIFY_SOCKET` (a path, or an abstract name
/// written with a leading `@`). No libsystemd. Without `$NOTIFY_SOCKET` (not under systemd, or
/// a unit that is not `Type=notify`) there is no notifier and nothing is sent.
///
/// The gateway sends `READY=1` once the store is restored and every listener is serving (so that
/// `systemctl start` returns when it serves), `RELOADING=1` with `MONOTONIC_USEC` when a SIGHUP
/// reload starts and `READY=1` when it is done (applied or refused), and `STOPPING=1` when the
/// drain starts; each with a `STATUS=` line that `systemctl status` shows.
public final class SystemdNotifier: Sendable {
    /// The socket name as given (`/run/systemd/notify`, `@abstract`).
    public let socketName: String
    private let address: sockaddr_un
    private let length: socklen_t
    private let fd: Int32

    public struct SetupError: Error, CustomStringConvertible {
        public let description: String
    }

    /// The notifier for `$NOTIFY_SOCKET`, nil when it is not set. A value that cannot be used (a
    /// `vsock:` address, a name too long for a Unix socket) is an error, logged by the caller.
    public static func fromEnvironment() throws(SetupError) -> SystemdNotifier? {
        guard let name = ProcessInfo.processInfo.environment["NOTIFY_SOCKET"], !name.isEmpty else { return nil }
        return try SystemdNotifier(socketName: name)
    }

    public init(socketName: String) throws(SetupError) {
        guard socketName.hasPrefix("/") || socketName.hasPrefix("@") else {
            throw SetupError(description: "NOTIFY_SOCKET=\(socketName): only Unix socket paths and @abstract names are supported")
        }
        var bytes = Array(socketName.utf8)
        if bytes[0] == UInt8(ascii: "@") { bytes[0] = 0 }  // an abstract name starts with a NUL byte
        var addr = sockaddr_un()
        let capacity = MemoryLayout.size(ofValue: addr.sun_path)
        guard bytes.count < capacity else {
            throw SetupError(description: "NOTIFY_SOCKET=\(socketName): longer than a Unix socket name (\(capacity - 1) bytes)")
        }
        addr.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &addr.sun_path) { raw in
            raw.copyBytes(from: bytes)
        }
        // A path is NUL-terminated (counted in the length); an abstract name is exactly its bytes.
        let pathOffset = MemoryLayout<sockaddr_un>.offset(of: \.sun_path)!
        length = socklen_t(pathOffset + bytes.count + (bytes[0] == 0 ? 0 : 1))
        address = addr
        fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else {
            throw SetupError(description: "NOTIFY_SOCKET=\(socketName): socket: \(String(cString: strerror(errno)))")
        }
        self.socketName = socketName
    }

    deinit { close(fd) }

    /// Sends `lines` (`KEY=VALUE`) in one datagram. False (and errno's text) when it was not delivered.
    @discardableResult
    public func send(_ lines: [String]) -> (sent: Bool, error: String?) {
        let message = Array(lines.joined(separator: "\n").utf8)
        var addr = address
        let n = message.withUnsafeBytes { body in
            withUnsafePointer(to: &addr) { p in
                p.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    sendto(fd, body.baseAddress, body.count, Int32(MSG_NOSIGNAL), $0, length)
                }
            }
        }
        if n == message.count { return (true, nil) }
        return (false, n < 0 ? String(cString: strerror(errno)) : "short send")
    }

    /// Ready: serving. `status` goes to `systemctl status`.
    public func ready(status: String) { report(send(["READY=1", "STATUS=" + Self.oneLine(status)])) }

    /// A reload starts (`READY=1` follows when it is done).
    public func reloading() {
        report(send(["RELOADING=1", "MONOTONIC_USEC=\(Self.monotonicMicroseconds())", "STATUS=reloading the configuration"]))
    }

    /// The drain starts; the process exits when it is done.
    public func stopping() { report(send(["STOPPING=1", "STATUS=draining"])) }

    /// CLOCK_MONOTONIC in microseconds, the clock `MONOTONIC_USEC` is read against.
    static func monotonicMicroseconds() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) * 1_000_000 + UInt64(ts.tv_nsec) / 1_000
    }

    private static func oneLine(_ text: String) -> String {
        String(text.map { $0 == "\n" || $0 == "\r" ? " " : $0 })
    }

    /// A failed notification is logged (systemd then times the start or reload out, and says so too).
    private func report(_ result: (sent: Bool, error: String?)) {
        guard !result.sent else { return }
        GatewayEvents.log(
            "warning", "systemd notification not delivered",
            [
                ("notify_socket", socketName), ("error", result.error ?? "unknown"),
            ])
    }
}
