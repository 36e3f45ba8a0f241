import Foundation
import Glibc

/// A file holding a secret (the admin token, the Redis password, the team's key for Apple's
/// services), read with the checks every secret gets: it exists, is a regular file that no other
/// user may read or change (no permission for "other", no write for the group: `0400` or `0600`
/// owner only, `0440` or `0640` when a group may read it, as Kubernetes' `fsGroup` needs) and is
/// not larger than `maximumSize`. What the content must be is the caller's
/// check. A failure says what is wrong with the file, never what it holds.
enum SecretFile {
    struct Problem: Error {
        /// `does not exist`, `its mode 0644 lets other users read or change the token; …`.
        let why: String
    }

    /// `secret`: what the file holds, as the messages name it (`the token`); `oneWhat`: what a file
    /// of the right size holds (`one token`).
    static func read(_ path: String, holding secret: String, maximumSize: Int, oneWhat: String) throws(Problem) -> [UInt8] {
        var st = stat()
        guard stat(path, &st) == 0 else {
            let e = errno
            throw Problem(
                why: e == ENOENT
                    ? "does not exist"
                    : e == EACCES ? "cannot be read (permission denied)" : "cannot be read (\(String(cString: strerror(e))))")
        }
        guard st.st_mode & S_IFMT == S_IFREG else { throw Problem(why: "is not a regular file") }
        let mode = st.st_mode & 0o777
        if mode & 0o007 != 0 || mode & 0o020 != 0 {
            let octal = String(mode, radix: 8)
            throw Problem(
                why: "its mode \(String(repeating: "0", count: max(0, 4 - octal.count)) + octal) lets other users read or change "
                    + "\(secret); make it readable by the gateway only (chmod 0600 or 0400; 0640 or 0440 with a group)")
        }
        guard st.st_size <= off_t(maximumSize) else { throw Problem(why: "is larger than \(maximumSize) bytes; it must hold \(oneWhat)") }
        guard let data = FileManager.default.contents(atPath: path) else {
            throw Problem(why: errno == EACCES ? "cannot be read (permission denied)" : "cannot be read")
        }
        return [UInt8](data)
    }
}
