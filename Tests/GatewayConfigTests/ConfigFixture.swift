import Foundation
import Testing

@testable import GatewayConfig

/// Shared YAML snippets and helpers for the GatewayConfig tests.
enum ConfigFixture {
    /// The smallest valid configuration: one listener, the demo upstream, one catch-all route.
    static let minimal = """
        listeners:
          - {name: public, address: 0.0.0.0:8080}
        upstreams:
          - {name: demo, url: demo}
        routes:
          - {name: default, match: {path_prefix: /}, upstream: demo}
        """

    /// The sections of `minimal`, by top-level key, to complete documentation fragments.
    static let minimalSections: [(key: String, yaml: String)] = [
        ("listeners", "listeners:\n  - {name: public, address: 0.0.0.0:8080}"),
        ("upstreams", "upstreams:\n  - {name: demo, url: demo}"),
        ("routes", "routes:\n  - {name: default, match: {path_prefix: /}, upstream: demo}"),
    ]

    /// One listener, the demo upstream, the app `ABCDE12345.com.example.app` and one route `name` on
    /// /api with `assertion` (a flow mapping): where a protected route's keys are checked. The
    /// route is on line 8.
    static func protectedRoute(_ assertion: String, name: String = "purchase") -> String {
        """
        listeners:
          - {name: public, address: 0.0.0.0:8080}
        upstreams:
          - {name: demo, url: demo}
        apps:
          - {team_id: ABCDE12345, bundle_ids: [com.example.app]}
        routes:
          - {name: \(name), match: {path_prefix: /api}, upstream: demo, assertion: \(assertion)}
        """
    }

    static let baseDirectory = "/etc/attest-gateway"

    static let repositoryRoot = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    static func parse(_ yaml: String) throws(ConfigError) -> GatewayConfig {
        try GatewayConfig.parse(yaml: yaml, file: "gateway.yaml", baseDirectory: baseDirectory)
    }

    /// `minimal` plus `extra` top-level sections.
    static func parse(minimalPlus extra: String) throws(ConfigError) -> GatewayConfig {
        try parse(minimal + "\n" + extra)
    }

    /// The diagnostics' printed lines (`gateway.yaml:L:C: message`), or [] if the YAML is valid.
    static func errors(_ yaml: String) -> [String] {
        do {
            _ = try parse(yaml)
            return []
        } catch {
            return error.diagnostics.map(\.description)
        }
    }

    /// Top-level keys of a YAML text (lines starting with `key:` in column 1).
    static func topLevelKeys(_ yaml: String) -> Set<String> {
        var keys = Set<String>()
        for line in yaml.split(separator: "\n") {
            guard let first = line.first, first.isLetter, let colon = line.firstIndex(of: ":") else { continue }
            keys.insert(String(line[..<colon]))
        }
        return keys
    }

    /// The ```yaml fenced blocks of a Markdown text.
    static func yamlBlocks(inMarkdown markdown: String) -> [String] {
        fencedBlocks(inMarkdown: markdown, languages: ["yaml", "yml"])
    }

    /// The fenced blocks of a Markdown text whose info string is one of `languages`, with the
    /// fence's indentation removed from every line.
    static func fencedBlocks(inMarkdown markdown: String, languages: Set<String>) -> [String] {
        var blocks: [String] = []
        var current: (indent: Int, lines: [String])?
        var insideOtherBlock = false
        for line in markdown.split(separator: "\n", omittingEmptySubsequences: false) {
            let indent = line.prefix { $0 == " " }.count
            let trimmed = line.dropFirst(indent)
            let isFence = trimmed.hasPrefix("```")
            if let open = current {
                if isFence {
                    blocks.append(open.lines.joined(separator: "\n"))
                    current = nil
                } else {
                    current?.lines.append(String(line.dropFirst(min(indent, open.indent))))
                }
            } else if insideOtherBlock {
                if isFence { insideOtherBlock = false }
            } else if isFence {
                let language = trimmed.dropFirst(3).trimmingCharacters(in: .whitespaces)
                if languages.contains(language) {
                    current = (indent, [])
                } else {
                    insideOtherBlock = true
                }
            }
        }
        return blocks
    }

    static func read(_ relativePath: String) throws -> String {
        try String(contentsOf: repositoryRoot.appendingPathComponent(relativePath), encoding: .utf8)
    }
}
