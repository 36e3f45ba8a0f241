import Foundation
import GatewayCrypto
import GatewayHTTP
import Glibc

/// Which build of gatewayd runs: its version, the git commit and the date it was built from, and the
/// OpenSSL and nghttp2 libraries it runs with (`gatewayd --version`,
/// `attest_gateway_build_info{version,commit}`).
///
/// The version is in the source. The commit and date cannot be compiled in without breaking a plain
/// `swift build` (SwiftPM has no build-time values without plugins), so `scripts/stamp-build-info`
/// appends them to the built binary after linking, as a trailer the ELF loader ignores
/// (`commit=…\ndate=…\n` then `ATTEST-GATEWAY-BUILD-INFO:NNNNNN\n`, NNNNNN the trailer's length). A
/// new link writes a new file, without a trailer, so a stamp never outlives the binary it describes;
/// an unstamped or stripped binary says `unknown`. docs/operations.md, "Which build runs".
public struct BuildInfo: Sendable, Equatable {
    /// The release this source is (set at release time; `-dev` between releases).
    public static let sourceVersion = "0.1.0-dev"
    static let magic = Array("ATTEST-GATEWAY-BUILD-INFO:".utf8)
    static let footerLength = magic.count + 7  // six digits and a newline
    static let maximumTrailer = 4096

    public let version: String
    /// 7 to 40 hex digits, `-dirty` when built from a tree with uncommitted changes; or `unknown`.
    public let commit: String
    /// `2026-11-26T06:39:19Z`, or `unknown`.
    public let date: String

    /// The running executable's.
    public static let current = BuildInfo(executable: "/proc/self/exe")

    public init(version: String = BuildInfo.sourceVersion, commit: String, date: String) {
        self.version = version
        self.commit = commit
        self.date = date
    }

    /// Reads the stamp at the end of `executable`; `unknown` for whatever is missing or malformed.
    public init(executable path: String) {
        let fields = Self.readTrailer(path) ?? [:]
        let commit = fields["commit"] ?? ""
        let date = fields["date"] ?? ""
        self.init(
            commit: Self.isCommit(commit) ? commit : "unknown",
            date: date.wholeMatch(of: /[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z/) != nil ? date : "unknown")
    }

    static func isCommit(_ s: String) -> Bool {
        s.wholeMatch(of: /[0-9a-f]{7,40}(-dirty)?/) != nil
    }

    /// The trailer's `key=value` lines, nil when the file has none.
    static func readTrailer(_ path: String) -> [String: String]? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0, st.st_size >= off_t(footerLength) else { return nil }
        var footer = [UInt8](repeating: 0, count: footerLength)
        guard pread(fd, &footer, footerLength, st.st_size - off_t(footerLength)) == footerLength,
            Array(footer.prefix(magic.count)) == magic, footer.last == 0x0a,
            let n = Int(String(decoding: footer[magic.count..<(footerLength - 1)], as: UTF8.self)),
            n > 0, n <= maximumTrailer, st.st_size >= off_t(footerLength + n)
        else { return nil }
        var payload = [UInt8](repeating: 0, count: n)
        guard pread(fd, &payload, n, st.st_size - off_t(footerLength + n)) == n else { return nil }
        var fields: [String: String] = [:]
        for line in String(decoding: payload, as: UTF8.self).split(separator: "\n") {
            guard let eq = line.firstIndex(of: "=") else { continue }
            fields[String(line[..<eq])] = String(line[line.index(after: eq)...])
        }
        return fields
    }

    /// What `gatewayd --version` prints.
    public var text: String {
        """
        gatewayd \(version)
        commit:  \(commit)
        built:   \(date)
        OpenSSL: \(OpenSSLLibrary.version)
        nghttp2: \(NGHTTP2Library.version)
        """
    }
}
