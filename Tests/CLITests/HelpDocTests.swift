import Foundation
import GatewayTestSupport
import Testing

/// The docs' tables and synopses of the two executables against what `--help` says, as
/// `ErrorsDocTests` holds docs/errors.md to the error table: a subcommand, an attack mode or an
/// option added to one and not the other fails here.
@Suite("docs vs --help: attest-sim and gatewayd subcommands, attack modes, options")
struct HelpDocTests {
    static func doc(_ name: String) throws -> String {
        try String(contentsOf: repositoryRoot.appendingPathComponent("docs/\(name)"), encoding: .utf8)
    }

    static func help(_ binary: URL, _ args: [String]) throws -> String {
        let r = try runProcess(binary, args + ["--help"])
        #expect(r.status == 0, "\(args) --help: \(r.stderr)")
        return r.stdout
    }

    /// The subcommand names a `--help` lists under SUBCOMMANDS.
    static func subcommands(_ help: String) -> [String] {
        guard let start = help.range(of: "SUBCOMMANDS:") else { return [] }
        return help[start.upperBound...].split(separator: "\n").compactMap { line in
            // "  name   description" rows; not the closing "  See 'x help <subcommand>'…" line.
            guard line.hasPrefix("  "), !line.hasPrefix("   "), let name = line.split(separator: " ").first,
                name.first?.isLowercase == true
            else { return nil }
            return String(name)
        }
    }

    /// The `--options` a `--help` lists (without `--help` and `--version`).
    static func options(_ help: String) -> Set<String> {
        guard let start = help.range(of: "OPTIONS:") else { return [] }
        var out: Set<String> = []
        for line in help[start.upperBound...].split(separator: "\n") {
            let t = line.drop { $0 == " " }
            guard line.hasPrefix("  "), !line.hasPrefix("                "), t.hasPrefix("-") else { continue }
            for word in t.split(separator: " ") where word.hasPrefix("--") {
                out.insert(String(word.prefix { $0 != "," && $0 != "<" && $0 != "=" }))
            }
        }
        return out.subtracting(["--help", "--version"])
    }

    /// The first cell's backticked name of every row of the table whose header line starts with `header`.
    static func tableNames(_ text: String, header: String) -> [String] {
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        guard let h = lines.firstIndex(where: { $0.hasPrefix(header) }) else { return [] }
        var names: [String] = []
        for line in lines[(h + 2)...] {
            guard line.hasPrefix("| `") else { break }
            let cell = line.dropFirst(3)
            names.append(String(cell.prefix { $0 != "`" }))
        }
        return names
    }

    /// The `--options` written on the doc's command lines of `attest-sim SUB` (code blocks, with
    /// their `\` continuation lines).
    static func synopsisOptions(_ text: String, command: String) -> Set<String> {
        var out: Set<String> = []
        var inCommand = false
        for line in text.split(separator: "\n").map(String.init) {
            if line.hasPrefix(command + " ") || line.contains("$ " + command + " ") { inCommand = true }
            if inCommand {
                for word in line.split(whereSeparator: { " [|]`".contains($0) }) where word.hasPrefix("--") && word.count > 2 {
                    out.insert(String(word.prefix { $0.isLetter || $0.isNumber || $0 == "-" }))
                }
                inCommand = line.hasSuffix("\\")
            }
        }
        return out
    }

    @Test("attest-sim: the subcommand table lists exactly --help's subcommands, in its order")
    func attestSimSubcommands() throws {
        let listed = Self.subcommands(try Self.help(attestSimBinary, []))
        #expect(listed.count >= 7, "\(listed)")
        let documented = Self.tableNames(try Self.doc("attest-sim.md"), header: "| command | what it does | exit |")
        #expect(documented == listed)
    }

    @Test("attest-sim attack: the mode table lists exactly the modes --help names (with all)")
    func attackModes() throws {
        let help = try Self.help(attestSimBinary, ["attack"])
        let line = try #require(help.range(of: "Modes: ").map { help[$0.upperBound...] }?.prefix { $0 != "." })
        let modes = line.replacingOccurrences(of: "\n", with: " ").replacingOccurrences(of: ", or all", with: "")
            .split(separator: ",").map { String($0).trimmingCharacters(in: .whitespaces) }
        let documented = Self.tableNames(try Self.doc("attest-sim.md"), header: "| mode | what the simulator sends |")
        #expect(documented == modes, "docs \(documented) vs help \(modes)")
    }

    @Test("attest-sim attack: the Android mode table lists exactly the Android modes --help names")
    func androidAttackModes() throws {
        // Wrapped as the terminal width says: one line of words first.
        let help = try Self.help(attestSimBinary, ["attack"]).split(whereSeparator: \.isWhitespace).joined(separator: " ")
        let marker = "Android modes (--platform android or both): "
        let line = try #require(help.range(of: marker).map { help[$0.upperBound...] }?.prefix { $0 != "." })
        let modes = line.split(separator: ",").map { String($0).trimmingCharacters(in: .whitespaces) }
        let documented = Self.tableNames(try Self.doc("attest-sim.md"), header: "| Android mode | what the simulator sends |")
        #expect(!modes.isEmpty && documented == modes, "docs \(documented) vs help \(modes)")
    }

    @Test("attest-sim: every option of every subcommand is documented, and every option a synopsis writes exists")
    func attestSimOptions() throws {
        let text = try Self.doc("attest-sim.md")
        for sub in Self.subcommands(try Self.help(attestSimBinary, [])) {
            let options = Self.options(try Self.help(attestSimBinary, [sub]))
            #expect(!options.isEmpty || sub == "help", "\(sub)")
            for o in options { #expect(text.contains(o), "attest-sim \(sub) \(o) is not in docs/attest-sim.md") }
            let written = Self.synopsisOptions(text, command: "attest-sim \(sub)")
            #expect(
                written.isSubset(of: options),
                "attest-sim \(sub): docs write \(written.subtracting(options).sorted()), which --help does not know")
        }
    }

    @Test("gatewayd: docs/architecture.md names its subcommands; every option of each is documented")
    func gatewaydSubcommands() throws {
        let listed = Self.subcommands(try Self.help(gatewaydBinary, []))
        #expect(
            listed == ["run", "check", "verify-attestation", "verify-assertion", "verify-receipt", "verify-android-attestation"],
            "\(listed)")
        let architecture = try Self.doc("architecture.md")
        let row = try #require(architecture.split(separator: "\n").first { $0.hasPrefix("| `gatewayd` |") })
        for sub in listed { #expect(row.contains("`\(sub)`"), "docs/architecture.md's gatewayd row lacks \(sub)") }
        let where_: [String: String] = [
            "run": "operations.md", "check": "operations.md", "verify-attestation": "verification.md",
            "verify-assertion": "verification.md", "verify-receipt": "verification.md", "verify-android-attestation": "verification.md",
        ]
        for sub in listed {
            let text = try Self.doc(try #require(where_[sub]))
            for o in Self.options(try Self.help(gatewaydBinary, [sub])) {
                #expect(text.contains(o), "gatewayd \(sub) \(o) is not in docs/\(where_[sub]!)")
            }
            let written = Self.synopsisOptions(text, command: "gatewayd \(sub)")
            let known = Self.options(try Self.help(gatewaydBinary, [sub])).union(["--help", "--version"])
            #expect(written.isSubset(of: known), "gatewayd \(sub): docs write \(written.subtracting(known).sorted())")
        }
    }
}
