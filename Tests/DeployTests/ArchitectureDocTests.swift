import Foundation
import GatewayTestSupport
import Testing

/// docs/architecture.md's target table is `Package.swift`'s targets, each with exactly its declared
/// dependencies (issue 17: the layering written down is the layering built).
@Suite("docs/architecture.md: the target table matches Package.swift")
struct ArchitectureDocTests {
    /// Every non-test target of `Package.swift` and the names in its `dependencies:` list (package
    /// targets and products, conditions ignored).
    static func packageTargets(_ manifest: String) -> [String: Set<String>] {
        var result: [String: Set<String>] = [:]
        let text = manifest
        for opener in [".target(", ".executableTarget(", ".systemLibrary("] {
            var search = text.startIndex
            while let r = text.range(of: opener, range: search..<text.endIndex) {
                search = r.upperBound
                // The call's arguments, up to its balanced closing parenthesis.
                var depth = 1
                var end = r.upperBound
                while end < text.endIndex && depth > 0 {
                    if text[end] == "(" { depth += 1 } else if text[end] == ")" { depth -= 1 }
                    end = text.index(after: end)
                }
                let call = String(text[r.upperBound..<end])
                // A declaration starts its line; a `.target(name:…)` after `dependencies: [` is a reference.
                let lineStart = text[text.startIndex..<r.lowerBound].lastIndex(of: "\n").map { text.index(after: $0) } ?? text.startIndex
                guard text[lineStart..<r.lowerBound].allSatisfy({ $0 == " " }) else { continue }
                guard let name = firstCapture(#"name:\s*"([^"]+)""#, call) else { continue }
                var deps: Set<String> = []
                if let d = call.range(of: "dependencies:") {
                    let rest = call[d.upperBound...]
                    if let open = rest.firstIndex(of: "[") {
                        var level = 0
                        var close = open
                        for i in rest[open...].indices {
                            if rest[i] == "[" { level += 1 } else if rest[i] == "]" { level -= 1 }
                            if level == 0 {
                                close = i
                                break
                            }
                        }
                        let list = String(rest[open...close]).replacingOccurrences(
                            of: #"package:\s*"[^"]*""#, with: "", options: .regularExpression)
                        deps = Set(allCaptures(#""([^"]+)""#, list))
                    }
                }
                result[name] = deps
            }
        }
        return result
    }

    /// The table's rows: target name → the backticked names of its last column.
    static func documentedTargets(_ doc: String) -> [String: Set<String>] {
        var result: [String: Set<String>] = [:]
        guard let start = doc.range(of: "| target | kind | job | declared dependencies") else { return [:] }
        for line in doc[start.upperBound...].split(separator: "\n").dropFirst(2) {  // the header's rest, the rule
            guard line.hasPrefix("| `") else { break }
            let cells = line.split(separator: "|", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
            guard cells.count >= 5, let name = firstCapture("`([^`]+)`", cells[1]) else { continue }
            result[name] = Set(allCaptures("`([^`]+)`", cells[cells.count - 2]))
        }
        return result
    }

    static func firstCapture(_ pattern: String, _ s: String) -> String? { allCaptures(pattern, s).first }

    static func allCaptures(_ pattern: String, _ s: String) -> [String] {
        let re = try! NSRegularExpression(pattern: pattern)
        return re.matches(in: s, range: NSRange(s.startIndex..., in: s)).compactMap { m in
            Range(m.range(at: 1), in: s).map { String(s[$0]) }
        }
    }

    @Test("every target of Package.swift has its row, with exactly its declared dependencies")
    func tableMatchesManifest() throws {
        let manifest = try String(contentsOf: repositoryRoot.appendingPathComponent("Package.swift"), encoding: .utf8)
        let doc = try String(contentsOf: repositoryRoot.appendingPathComponent("docs/architecture.md"), encoding: .utf8)
        let targets = Self.packageTargets(manifest)
        let rows = Self.documentedTargets(doc)
        // The parser itself: targets every package of this shape has.
        #expect(targets["gatewayd"]?.contains("Gateway") == true && targets["GatewayWire"] == [])
        #expect(targets.count >= 20, "\(targets.keys.sorted())")
        #expect(Set(rows.keys) == Set(targets.keys), "documented \(rows.keys.sorted()) vs Package.swift \(targets.keys.sorted())")
        for (name, deps) in targets {
            #expect(rows[name] == deps, "\(name): documented \(rows[name]?.sorted() ?? []) vs declared \(deps.sorted())")
        }
    }
}
