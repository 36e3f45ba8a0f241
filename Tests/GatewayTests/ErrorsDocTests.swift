import Foundation
import GatewayPolicy
import GatewayProxy
import Testing

@testable import Gateway

/// docs/errors.md against the code's tables: every code of every layer has its row (code, status,
/// action, a meaning), and the page has no row the code does not have.
@Suite("docs/errors.md lists every error code")
struct ErrorsDocTests {
    struct Row: Hashable, CustomStringConvertible {
        var code: String
        var status: String
        var action: String
        var description: String { "\(code) | \(status) | \(action)" }
    }

    static let page: String = {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        return (try? String(contentsOf: root.appendingPathComponent("docs/errors.md"), encoding: .utf8)) ?? ""
    }()

    /// The table rows of the section whose heading contains `marker`, and their meanings.
    static func rows(under marker: String) -> [(Row, meaning: String)] {
        var inSection = false
        var out: [(Row, String)] = []
        for line in page.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.hasPrefix("## ") {
                inSection = line.contains(marker)
                continue
            }
            guard inSection, line.hasPrefix("| `") else { continue }
            let cells = line.split(separator: "|", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
            guard cells.count >= 6 else { continue }
            let code = cells[1].trimmingCharacters(in: CharacterSet(charactersIn: "`"))
            out.append((Row(code: code, status: cells[2], action: cells[3]), cells[4]))
        }
        return out
    }

    static func check(_ marker: String, _ expected: [Row]) {
        let documented = rows(under: marker)
        #expect(!documented.isEmpty, "no table under \(marker)")
        let got = documented.map(\.0)
        #expect(Set(got).count == got.count, "\(marker): a code documented twice")
        #expect(Set(expected).count == expected.count, "\(marker): a code defined twice")
        for row in expected where !got.contains(row) {
            Issue.record("\(marker): docs/errors.md lacks the row \(row) (or documents it otherwise)")
        }
        for row in got where !expected.contains(row) {
            Issue.record("\(marker): docs/errors.md documents \(row), which the code does not have")
        }
        for (row, meaning) in documented where meaning.isEmpty { Issue.record("\(marker): \(row.code) has no meaning") }
    }

    @Test("protocol and proxy errors (ProxyError.allCases)")
    func proxy() {
        Self.check("ProxyError", ProxyError.allCases.map { Row(code: $0.code, status: $0.status.map(String.init) ?? "—", action: "—") })
    }

    @Test("App Attest refusals (GateError.allCases): status on the endpoints and on routes, action")
    func gate() {
        Self.check(
            "GateError",
            GateError.allCases.map { e in
                let status = e.status == e.routeStatus ? "\(e.status)" : "\(e.status), \(e.routeStatus) on routes"
                return Row(code: e.code, status: status, action: e.action.rawValue)
            })
    }

    @Test("admin errors (AdminError.allCases)")
    func admin() {
        Self.check("AdminError", AdminError.allCases.map { Row(code: $0.code, status: String($0.status), action: "—") })
    }

    @Test("a code used by two layers means the same status in both")
    func sharedCodes() {
        var status: [String: Int] = [:]
        let all =
            ProxyError.allCases.compactMap { e in e.status.map { (e.code, $0) } } + GateError.allCases.map { ($0.code, $0.status) }
            + AdminError.allCases.map { ($0.code, $0.status) }
        for (code, s) in all {
            if let known = status[code] { #expect(known == s, "\(code): \(known) and \(s)") }
            status[code] = s
        }
    }
}
