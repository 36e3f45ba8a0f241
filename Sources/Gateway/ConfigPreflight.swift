import Foundation
import GatewayConfig
import GatewayIO
import Glibc

/// What `gatewayd check` tries beyond decoding and compiling a configuration, so that a file that
/// passes `check` does not fail at `run` for a reason that could be known before: listener and
/// admin host names that do not resolve, and a memory store's `data_dir` that cannot be created or
/// written. Each problem is reported at the value it is about (`file:line:column`). Nothing is left
/// behind: a probe file is removed, and a `data_dir` created only to try it is removed again.
public enum ConfigPreflight {
    public static func problems(_ config: GatewayConfig) -> [ConfigDiagnostic] {
        var out: [ConfigDiagnostic] = []
        for (i, l) in config.listeners.enumerated() {
            if let message = resolveProblem(l.address) {
                let path = "listeners[\(i)].address"
                out.append(config.sourceMap.diagnostic(at: path, "\(path) (listener \(l.name)): \(message)"))
            }
        }
        if let message = resolveProblem(config.admin.address) {
            out.append(config.sourceMap.diagnostic(at: "admin.address", "admin.address: \(message)"))
        }
        if case .memory(let m) = config.store.backend, let directory = m.dataDirectory, let message = dataDirectoryProblem(directory) {
            out.append(config.sourceMap.diagnostic(at: "store.data_dir", "store.data_dir \(directory): \(message)"))
        }
        return out
    }

    /// nil when the host is empty, numeric, or resolves (as the listener will resolve it at start).
    static func resolveProblem(_ address: SocketAddressSpec) -> String? {
        guard !address.host.isEmpty else { return nil }
        do {
            _ = try SocketAddress.resolve(host: address.host, port: address.port)
            return nil
        } catch {
            return error.description
        }
    }

    /// What the memory store does with `data_dir` at start (create it, mode 0700, if its parent
    /// exists; then create, write and fsync files in it), tried and undone; nil when it works.
    public static func dataDirectoryProblem(_ directory: String) -> String? {
        var st = stat()
        var created = false
        if stat(directory, &st) == 0 {
            guard st.st_mode & S_IFMT == S_IFDIR else { return "is not a directory" }
        } else if errno == ENOENT {
            guard mkdir(directory, 0o700) == 0 else {
                let e = errno
                let parent = (directory as NSString).deletingLastPathComponent
                if e == ENOENT {
                    return "cannot be created: its parent directory \(parent) does not exist (the store creates data_dir, not its parents)"
                }
                return "cannot be created in \(parent): \(describe(e))"
            }
            created = true
        } else {
            return "cannot be used: \(describe(errno))"
        }
        defer { if created { rmdir(directory) } }
        let probe = "\(directory)/.gatewayd-check-\(getpid())"
        let fd = open(probe, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else { return "cannot create files in it: \(describe(errno))" }
        defer { unlink(probe) }
        var byte: UInt8 = 0
        let wrote = write(fd, &byte, 1)
        let writeError = errno
        let synced = wrote == 1 ? fsync(fd) : 0
        let syncError = errno
        close(fd)
        guard wrote == 1 else { return "cannot write files in it: \(describe(writeError))" }
        guard synced == 0 else { return "cannot fsync files in it: \(describe(syncError))" }
        return nil
    }

    /// `permission denied (EACCES)`.
    static func describe(_ e: Int32) -> String {
        let names: [Int32: String] = [
            EACCES: "EACCES", EPERM: "EPERM", EROFS: "EROFS", ENOSPC: "ENOSPC", EDQUOT: "EDQUOT", ENOTDIR: "ENOTDIR",
            ENOENT: "ENOENT", EIO: "EIO", ELOOP: "ELOOP", ENAMETOOLONG: "ENAMETOOLONG", EEXIST: "EEXIST",
        ]
        let text = String(cString: strerror(e)).lowercased()
        return names[e].map { "\(text) (\($0))" } ?? text
    }
}
