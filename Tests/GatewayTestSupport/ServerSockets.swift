import Foundation

/// The TCP sockets a process holds on one local port (its listener's), read from /proc: the kernel's
/// own view, so a connection the process forgot to close is seen even when no client holds it.
public enum ServerSockets {
    /// `/proc/net/tcp` state numbers (include/net/tcp_states.h).
    public static let stateNames: [Int: String] = [
        1: "ESTABLISHED", 2: "SYN_SENT", 3: "SYN_RECV", 4: "FIN_WAIT1", 5: "FIN_WAIT2", 6: "TIME_WAIT", 7: "CLOSE",
        8: "CLOSE_WAIT", 9: "LAST_ACK", 10: "LISTEN", 11: "CLOSING",
    ]

    /// The states of the sockets that `pid` has open (a descriptor in /proc/PID/fd) whose local port
    /// is `port`, listening sockets left out: after every client left, this should be empty.
    public static func open(pid: Int32, port: Int) -> [String] {
        let inodes = socketInodes(pid: pid)
        var states: [String] = []
        for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
            guard let text = try? String(contentsOfFile: table, encoding: .utf8) else { continue }
            for line in text.split(separator: "\n").dropFirst() {
                let cols = line.split(separator: " ", omittingEmptySubsequences: true)
                guard cols.count > 9, let localPort = cols[1].split(separator: ":").last.flatMap({ Int($0, radix: 16) }),
                    localPort == port, let state = Int(cols[3], radix: 16), state != 10, let inode = Int(cols[9]),
                    inodes.contains(inode)
                else { continue }
                states.append(stateNames[state] ?? "state \(state)")
            }
        }
        return states
    }

    /// Polls `open` until it is empty or `timeout` passed; returns the last reading.
    public static func waitUntilNone(pid: Int32, port: Int, timeout: TimeInterval) -> [String] {
        let deadline = Date().addingTimeInterval(timeout)
        var states = open(pid: pid, port: port)
        while !states.isEmpty && Date() < deadline {
            usleep(50_000)
            states = open(pid: pid, port: port)
        }
        return states
    }

    private static func socketInodes(pid: Int32) -> Set<Int> {
        let dir = "/proc/\(pid)/fd"
        guard let fds = try? FileManager.default.contentsOfDirectory(atPath: dir) else { return [] }
        var inodes: Set<Int> = []
        for fd in fds {
            guard let target = try? FileManager.default.destinationOfSymbolicLink(atPath: dir + "/" + fd),
                target.hasPrefix("socket:["), let inode = Int(target.dropFirst(8).dropLast())
            else { continue }
            inodes.insert(inode)
        }
        return inodes
    }
}
