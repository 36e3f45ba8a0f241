import Foundation
import Glibc

/// A stand-in for systemd's notification socket: a Unix datagram socket (a path, or an abstract
/// name) that collects what the service sends.
public final class FakeNotifySocket {
    let fd: Int32
    /// The value for `NOTIFY_SOCKET`.
    public let name: String
    private let path: String?

    /// `abstract`: an abstract name (`@…`), else a socket file in a fresh temporary directory.
    public init(abstract: Bool) throws {
        fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw POSIXError(.EIO) }
        var addr = sockaddr_un()
        addr.sun_family = sa_family_t(AF_UNIX)
        let bytes: [UInt8]
        if abstract {
            name = "@attest-gateway-test-\(UUID().uuidString)"
            path = nil
            bytes = [0] + Array(name.utf8.dropFirst())
        } else {
            let dir = FileManager.default.temporaryDirectory.appendingPathComponent("notify-\(UUID().uuidString.prefix(8))")
            try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
            path = dir.appendingPathComponent("notify.sock").path
            name = path!
            bytes = Array(name.utf8) + [0]
        }
        withUnsafeMutableBytes(of: &addr.sun_path) { $0.copyBytes(from: bytes) }
        let length = socklen_t(MemoryLayout<sockaddr_un>.offset(of: \.sun_path)! + bytes.count)
        let bound = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) } }
        guard bound == 0 else {
            close(fd)
            throw POSIXError(.EADDRINUSE)
        }
    }

    deinit {
        close(fd)
        if let path {
            unlink(path)
            try? FileManager.default.removeItem(atPath: (path as NSString).deletingLastPathComponent)
        }
    }

    /// The next datagram's `KEY=VALUE` lines, or nil after `timeout` seconds.
    public func receive(timeout: TimeInterval) -> [String]? {
        var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        guard poll(&p, 1, Int32(timeout * 1000)) == 1 else { return nil }
        var buffer = [UInt8](repeating: 0, count: 4096)
        let n = recv(fd, &buffer, buffer.count, 0)
        guard n > 0 else { return nil }
        return String(decoding: buffer.prefix(n), as: UTF8.self).split(separator: "\n").map(String.init)
    }

    /// Datagrams until one has `line` (or `timeout` passes): the one with it, or nil.
    public func await(_ line: String, timeout: TimeInterval) -> [String]? {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            guard let message = receive(timeout: deadline.timeIntervalSinceNow) else { return nil }
            if message.contains(line) { return message }
        }
        return nil
    }
}
