import Foundation
import Testing

@testable import GatewayConfig

@Suite("Shipped configuration and documentation")
struct ShippedConfigTests {
    @Test("the shipped gateway.yaml loads: one listener, the demo upstream, an app")
    func shippedGatewayYAMLLoads() throws {
        let path = ConfigFixture.repositoryRoot.appendingPathComponent("gateway.yaml").path
        let config = try GatewayConfig.load(path: path)
        #expect(config.listeners.count == 1)
        #expect(config.upstreams.contains { $0.name == "demo" && $0.target == .demo })
        #expect(!config.apps.isEmpty)
        for route in config.routes {
            #expect(config.upstream(named: route.upstream) != nil)
        }
    }

    @Test("every YAML block in README.md that starts with workers: or listeners: parses")
    func readmeBlocksParse() throws {
        let blocks = ConfigFixture.yamlBlocks(inMarkdown: try ConfigFixture.read("README.md"))
        let configs = blocks.filter { block in
            let firstKey = block.split(separator: "\n").first { !$0.hasPrefix("#") && !$0.allSatisfy(\.isWhitespace) }
            return firstKey.map { $0.hasPrefix("workers:") || $0.hasPrefix("listeners:") } ?? false
        }
        for block in configs {
            #expect(throws: Never.self, "README block:\n\(block)") { try ConfigFixture.parse(block) }
        }
    }

    @Test("every YAML block in docs/configuration.md parses, completed with the minimal required sections")
    func configurationDocBlocksParse() throws {
        let blocks = ConfigFixture.yamlBlocks(inMarkdown: try ConfigFixture.read("docs/configuration.md"))
        #expect(blocks.count >= 10)
        for block in blocks {
            let present = ConfigFixture.topLevelKeys(block)
            let completion = ConfigFixture.minimalSections.filter { !present.contains($0.key) }.map(\.yaml)
            let yaml = ([block] + completion).joined(separator: "\n")
            #expect(throws: Never.self, "docs/configuration.md block:\n\(block)") { try ConfigFixture.parse(yaml) }
        }
    }

    @Test("docs/configuration.md has a table row for every key the parser accepts")
    func configurationDocListsEveryKey() throws {
        let doc = try ConfigFixture.read("docs/configuration.md")
        for (section, keys) in ConfigKeys.all {
            for key in keys {
                #expect(doc.contains("| `\(key)` |"), "key \(key) of \(section) has no row in docs/configuration.md")
            }
        }
    }

    @Test("the refused example in docs/configuration.md prints exactly the diagnostics shown after it")
    func configurationDocErrorExample() throws {
        let blocks = ConfigFixture.fencedBlocks(inMarkdown: try ConfigFixture.read("docs/configuration.md"), languages: ["text"])
        let index = try #require(blocks.firstIndex { $0.hasPrefix("workers: lots") })
        try #require(index + 1 < blocks.count)
        #expect(ConfigFixture.errors(blocks[index]) == blocks[index + 1].split(separator: "\n").map(String.init))
    }

    @Test("load reports a missing file by name, without a position")
    func loadMissingFile() {
        let path = "/nonexistent-\(UInt64.random(in: 0...UInt64.max))/gateway.yaml"
        let error = #expect(throws: ConfigError.self) { try GatewayConfig.load(path: path) }
        #expect(error?.description == "\(path): the configuration file does not exist")
    }

    @Test("load resolves relative paths against the file's directory and names the file in diagnostics")
    func loadResolvesAgainstFileDirectory() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "gateway-config-\(UUID().uuidString)"
        )
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("gateway.yaml")
        try (ConfigFixture.minimal + "\nstore: {data_dir: ./data}\ntrust: {extra_roots: [../roots/test.pem]}\n")
            .write(to: file, atomically: true, encoding: .utf8)
        let config = try GatewayConfig.load(path: file.path)
        guard case .memory(let memory) = config.store.backend else {
            Issue.record("expected a memory store")
            return
        }
        let base = directory.standardizedFileURL.path
        #expect(memory.dataDirectory == base + "/data")
        #expect(
            config.trust.extraRoots == [
                directory.deletingLastPathComponent().standardizedFileURL.path + "/roots/test.pem"
            ]
        )

        try "workers: lots\n".write(to: file, atomically: true, encoding: .utf8)
        let error = #expect(throws: ConfigError.self) { try GatewayConfig.load(path: file.path) }
        #expect(
            error?.diagnostics.map(\.description).contains(
                "\(file.path):1:10: workers must be \"auto\" or a positive integer, got \"lots\""
            ) == true
        )
    }
}
