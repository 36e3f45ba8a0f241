import Foundation
import Testing

@testable import Gateway

@Suite("/metrics text: HELP for every family, build info, process figures; the catalog is the documentation's")
struct MetricsExpositionTests {
    static let repositoryRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    /// docs/metrics.md's table rows: name → (type, labels, present).
    static func documented() throws -> [String: (type: String, labels: [String], present: String)] {
        let text = try String(contentsOf: repositoryRoot.appendingPathComponent("docs/metrics.md"), encoding: .utf8)
        var rows: [String: (String, [String], String)] = [:]
        for line in text.split(separator: "\n") where line.hasPrefix("| `") {
            let cells = line.split(separator: "|", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
            guard cells.count >= 6 else { continue }
            let name = cells[1].trimmingCharacters(in: CharacterSet(charactersIn: "`"))
            let labels =
                cells[3] == "—" ? [] : cells[3].split(separator: ",").map { $0.trimmingCharacters(in: CharacterSet(charactersIn: " `")) }
            rows[name] = (cells[2], labels, cells[4])
        }
        return rows
    }

    @Test("every family of the catalog is in docs/metrics.md with its type, labels and presence, and nothing else is")
    func catalogIsDocumented() throws {
        let doc = try Self.documented()
        #expect(Set(doc.keys) == Set(MetricsCatalog.families.map(\.name)))
        for f in MetricsCatalog.families {
            guard let row = doc[f.name] else { continue }
            #expect(row.type == f.type, "\(f.name)")
            #expect(row.labels == f.labels, "\(f.name)")
            #expect(row.present == f.presence.rawValue, "\(f.name)")
            #expect(!f.help.isEmpty && !f.help.contains("\n") && !f.help.contains("\\"), "\(f.name)")
        }
        #expect(MetricsCatalog.families.count == Set(MetricsCatalog.families.map(\.name)).count, "a family listed twice")
    }

    @Test("HELP is added before each TYPE the catalog knows; build_info and process_* follow with both")
    func render() throws {
        let registry = """
            # TYPE attest_gateway_active_connections gauge
            attest_gateway_active_connections 3.0
            # TYPE something_else counter
            something_else 1

            """
        let text = String(
            decoding: MetricsExposition.render(Array(registry.utf8), build: BuildInfo(commit: "0123abc", date: "unknown")), as: UTF8.self)
        let lines = text.split(separator: "\n").map(String.init)
        #expect(
            Array(lines.prefix(5)) == [
                "# HELP attest_gateway_active_connections Downstream connections open now.",
                "# TYPE attest_gateway_active_connections gauge",
                "attest_gateway_active_connections 3.0",
                "# TYPE something_else counter",
                "something_else 1",
            ])
        #expect(lines.contains("attest_gateway_build_info{version=\"\(BuildInfo.sourceVersion)\",commit=\"0123abc\"} 1"))
        for name in [
            "attest_gateway_build_info", "process_cpu_seconds_total", "process_resident_memory_bytes", "process_virtual_memory_bytes",
            "process_open_fds", "process_max_fds", "process_start_time_seconds",
        ] {
            let type = try #require(MetricsCatalog.family(name)).type
            #expect(lines.contains("# TYPE \(name) \(type)"), "\(name)")
            #expect(lines.contains { $0.hasPrefix("# HELP \(name) ") }, "\(name)")
        }
        func value(_ name: String) -> Double? {
            lines.first { $0.hasPrefix(name + " ") }.flatMap { Double($0.split(separator: " ")[1]) }
        }
        let rss = try #require(value("process_resident_memory_bytes"))
        #expect(rss > 1_000_000 && rss < 100_000_000_000)
        #expect(try #require(value("process_virtual_memory_bytes")) >= rss)
        let fds = try #require(value("process_open_fds"))
        let maxFDs = try #require(value("process_max_fds"))
        #expect(fds >= 3 && fds <= maxFDs)
        let started = try #require(value("process_start_time_seconds"))
        #expect(started <= Date().timeIntervalSince1970 + 1 && started > Date().timeIntervalSince1970 - 86_400 * 7)
        #expect(try #require(value("process_cpu_seconds_total")) > 0)
    }

    @Test("build info: the stamp at the end of the binary, or unknown; never a malformed value")
    func buildInfoTrailer() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("build-info-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        func file(_ body: [UInt8], trailer: String?) throws -> BuildInfo {
            var bytes = body
            if let trailer {
                bytes += Array(trailer.utf8)
                bytes += Array(String(format: "ATTEST-GATEWAY-BUILD-INFO:%06d\n", trailer.utf8.count).utf8)
            }
            let path = dir.appendingPathComponent(UUID().uuidString).path
            #expect(FileManager.default.createFile(atPath: path, contents: Data(bytes)))
            return BuildInfo(executable: path)
        }
        let elf: [UInt8] = [0x7f, 0x45, 0x4c, 0x46] + [UInt8](repeating: 0, count: 200)
        let stamped = try file(elf, trailer: "commit=4d7d954fb2bc74a153fb3b49da4dcd7dc20cb3d7-dirty\ndate=2026-11-26T06:52:24Z\n")
        #expect(stamped == BuildInfo(commit: "4d7d954fb2bc74a153fb3b49da4dcd7dc20cb3d7-dirty", date: "2026-11-26T06:52:24Z"))
        #expect(try file(elf, trailer: nil) == BuildInfo(commit: "unknown", date: "unknown"))
        #expect(try file(elf, trailer: "commit=main\ndate=yesterday\n") == BuildInfo(commit: "unknown", date: "unknown"))
        #expect(try file(elf, trailer: "commit=abc1234\n") == BuildInfo(commit: "abc1234", date: "unknown"))
        #expect(BuildInfo(executable: "/nonexistent") == BuildInfo(commit: "unknown", date: "unknown"))
        #expect(stamped.text.hasPrefix("gatewayd \(BuildInfo.sourceVersion)\ncommit:  4d7d954"))
        #expect(stamped.text.contains("OpenSSL: OpenSSL 3."))
        #expect(stamped.text.contains("nghttp2: 1."))
    }
}
