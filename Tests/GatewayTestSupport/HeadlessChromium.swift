import Foundation
import Glibc

/// Debian's Chromium, headless, for tests that look at a page as a browser renders it: the DOM after
/// parsing (`--dump-dom`) and a screenshot. Each call runs one browser with a private profile in a
/// temporary directory, no GPU, a deadline; when it returns, every process of that browser (found
/// by its profile directory on its command line) is gone, and the profile removed.
public struct HeadlessChromium: Sendable {
    public static let candidates = ["/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/lib/chromium/chromium"]

    public let binary: String

    /// Fails with what to do when Chromium is missing (scripts/install-deps.sh installs it; CI runs that).
    public init() throws {
        guard let found = Self.candidates.first(where: { FileManager.default.isExecutableFile(atPath: $0) }) else {
            throw HTTPTestError(
                "chromium not found (looked in \(Self.candidates.joined(separator: ", "))): the operator page's browser test needs it; "
                    + "run scripts/install-deps.sh (apt-get install chromium)")
        }
        binary = found
    }

    /// The DOM of `url` after the page loaded, as HTML text.
    public func dumpDOM(_ url: String, width: Int = 1280, height: Int = 900, timeout: TimeInterval = 60) throws -> String {
        let r = try run(["--window-size=\(width),\(height)", "--dump-dom", url], timeout: timeout)
        guard r.status == 0, r.stdout.contains("</html>") else {
            throw HTTPTestError("chromium --dump-dom \(url): exit \(r.status), \(r.stdout.count) bytes; stderr: \(r.stderr.suffix(2000))")
        }
        return r.stdout
    }

    /// A PNG of `url` in a `width`×`height` window, written to `file`.
    public func screenshot(_ url: String, to file: URL, width: Int, height: Int, timeout: TimeInterval = 60) throws {
        try? FileManager.default.removeItem(at: file)
        let r = try run(["--window-size=\(width),\(height)", "--screenshot=\(file.path)", url], timeout: timeout)
        guard r.status == 0, FileManager.default.fileExists(atPath: file.path) else {
            throw HTTPTestError("chromium --screenshot \(url): exit \(r.status); stderr: \(r.stderr.suffix(2000))")
        }
    }

    /// A PNG file's width and height (its IHDR), nil when it is not a PNG.
    public static func pngSize(_ file: URL) -> (width: Int, height: Int)? {
        guard let d = FileManager.default.contents(atPath: file.path), d.count > 24,
            Array(d.prefix(8)) == [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]
        else { return nil }
        let b = Array(d[16..<24])
        func be(_ s: ArraySlice<UInt8>) -> Int { s.reduce(0) { $0 << 8 | Int($1) } }
        return (be(b[0..<4]), be(b[4..<8]))
    }

    private func run(_ arguments: [String], timeout: TimeInterval) throws -> ProcessResult {
        let profile = FileManager.default.temporaryDirectory.appendingPathComponent("gw-chromium-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: profile, withIntermediateDirectories: true)
        defer {
            Self.killProcesses(mentioning: profile.path)
            try? FileManager.default.removeItem(at: profile)
        }
        var flags = [
            "--headless", "--disable-gpu", "--user-data-dir=\(profile.path)", "--no-first-run", "--no-default-browser-check",
            "--disable-extensions", "--disable-background-networking", "--disable-sync", "--hide-scrollbars", "--mute-audio",
        ]
        // Chromium's sandbox refuses to start as root (the test machines and CI run as root).
        if getuid() == 0 { flags.append("--no-sandbox") }
        return try runProcess(URL(fileURLWithPath: binary), flags + arguments, timeout: timeout)
    }

    /// SIGKILLs every process whose command line contains `marker` (this browser's private profile
    /// directory: its own processes only).
    static func killProcesses(mentioning marker: String) {
        guard let entries = try? FileManager.default.contentsOfDirectory(atPath: "/proc") else { return }
        for entry in entries {
            guard let pid = Int32(entry), pid != getpid(),
                let cmdline = FileManager.default.contents(atPath: "/proc/\(entry)/cmdline"),
                String(decoding: cmdline, as: UTF8.self).contains(marker)
            else { continue }
            kill(pid, SIGKILL)
        }
    }
}
