import Foundation
import Glibc

/// The text of the admin `/metrics`: the registry's families with a `# HELP` line each (from
/// `MetricsCatalog`), then `attest_gateway_build_info` and the `process_*` families that Prometheus
/// clients export, read from /proc at scrape time (nothing is sampled between scrapes).
public enum MetricsExposition {
    /// Reads what does not change (the build stamp, the start time's fallback) now, at start.
    public static func prepare() {
        _ = BuildInfo.current
        _ = ProcessStats.fallbackStart
    }

    /// `registry`: the Prometheus text the metrics registry emitted (`# TYPE` lines, samples).
    public static func render(_ registry: [UInt8], build: BuildInfo = .current) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(registry.count + registry.count / 4 + 1024)
        let typePrefix = Array("# TYPE ".utf8)
        var start = 0
        while start < registry.count {
            let end = registry[start...].firstIndex(of: 0x0a) ?? registry.count
            let line = registry[start..<end]
            if line.starts(with: typePrefix) {
                let rest = line.dropFirst(typePrefix.count)
                let name = String(decoding: rest.prefix { $0 != 0x20 }, as: UTF8.self)
                if let family = MetricsCatalog.family(name) { out += Array("# HELP \(name) \(family.help)\n".utf8) }
            }
            out += line
            out.append(0x0a)
            start = end + 1
        }
        out += Array(extra(build: build).utf8)
        return out
    }

    static func family(_ name: String, _ samples: [(labels: String, value: String)]) -> String {
        guard let f = MetricsCatalog.family(name) else { return "" }
        var text = "# HELP \(name) \(f.help)\n# TYPE \(name) \(f.type)\n"
        for s in samples { text += "\(name)\(s.labels) \(s.value)\n" }
        return text
    }

    /// `build_info` and `process_*`.
    static func extra(build: BuildInfo) -> String {
        var text = family(
            "attest_gateway_build_info", [("{version=\"\(escape(build.version))\",commit=\"\(escape(build.commit))\"}", "1")])
        let p = ProcessStats.read()
        if let cpu = p.cpuSeconds { text += family("process_cpu_seconds_total", [("", format(cpu))]) }
        if let rss = p.residentBytes { text += family("process_resident_memory_bytes", [("", String(rss))]) }
        if let vsize = p.virtualBytes { text += family("process_virtual_memory_bytes", [("", String(vsize))]) }
        if let fds = p.openFDs { text += family("process_open_fds", [("", String(fds))]) }
        if let max = p.maxFDs { text += family("process_max_fds", [("", String(max))]) }
        text += family("process_start_time_seconds", [("", format(p.startTime))])
        return text
    }

    static func format(_ v: Double) -> String { String(format: "%.3f", v) }

    /// A label value: backslash, double quote and newline escaped.
    static func escape(_ s: String) -> String {
        s.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"")
            .replacingOccurrences(of: "\n", with: "\\n")
    }
}

/// The process's own figures, as the Prometheus clients read them on Linux.
struct ProcessStats {
    var cpuSeconds: Double?
    var residentBytes: Int?
    var virtualBytes: Int?
    var openFDs: Int?
    var maxFDs: Int?
    var startTime: Double

    /// When this process started, from /proc (boot time + start ticks); else when the gateway
    /// started (`MetricsExposition.prepare()`).
    static let fallbackStart = Date().timeIntervalSince1970

    static func read() -> ProcessStats {
        var p = ProcessStats(startTime: fallbackStart)
        let ticks = Double(sysconf(Int32(_SC_CLK_TCK)))
        let page = sysconf(Int32(_SC_PAGESIZE))
        // /proc/self/stat: fields after "(comm)": state is field 3; utime 14, stime 15, starttime 22, vsize 23, rss 24.
        if let stat = try? String(contentsOfFile: "/proc/self/stat", encoding: .utf8), let close = stat.lastIndex(of: ")") {
            let f = stat[stat.index(after: close)...].split(separator: " ").map(String.init)
            func field(_ n: Int) -> Double? { n - 3 < f.count ? Double(f[n - 3]) : nil }
            if let u = field(14), let s = field(15), ticks > 0 { p.cpuSeconds = (u + s) / ticks }
            if let v = field(23) { p.virtualBytes = Int(v) }
            if let r = field(24) { p.residentBytes = Int(r) * page }
            if let started = field(22), ticks > 0, let boot = bootTime() { p.startTime = boot + started / ticks }
        }
        if let dir = opendir("/proc/self/fd") {
            var n = 0
            while let entry = readdir(dir) {
                let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
                if name != "." && name != ".." { n += 1 }
            }
            closedir(dir)
            p.openFDs = n - 1  // the directory's own descriptor, open while it was read
        }
        var limit = rlimit()
        if getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 { p.maxFDs = Int(limit.rlim_cur) }
        return p
    }

    /// `btime` of /proc/stat: when the system booted, in seconds since the epoch.
    static func bootTime() -> Double? {
        guard let text = try? String(contentsOfFile: "/proc/stat", encoding: .utf8) else { return nil }
        for line in text.split(separator: "\n") where line.hasPrefix("btime ") {
            return Double(line.dropFirst(6).trimmingCharacters(in: .whitespaces))
        }
        return nil
    }
}
