/// One problem found in a configuration file, at the line and column where a person can fix it.
///
/// Lines and columns count from 1, columns in Unicode scalars (as libyaml counts them). A diagnostic
/// about the file as a whole (it cannot be read, it is not UTF-8) has line and column 0 and prints
/// as `FILE: message`.
public struct ConfigDiagnostic: Sendable, Equatable, Hashable, CustomStringConvertible {
    public let file: String
    public let line: Int
    public let column: Int
    public let message: String

    public init(file: String, line: Int, column: Int, message: String) {
        self.file = file
        self.line = line
        self.column = column
        self.message = message
    }

    /// `gateway.yaml:12:5: unknown key "upstrem" in routes[1] (did you mean "upstream"?)`
    public var description: String {
        line > 0 ? "\(file):\(line):\(column): \(message)" : "\(file): \(message)"
    }
}

/// Every problem found in one pass over a configuration file, sorted by position.
///
/// Loading never stops at the first problem: an operator fixing a file sees all of them at once, as a
/// compiler reports every error. `description` prints one diagnostic per line.
public struct ConfigError: Error, Sendable, Equatable, CustomStringConvertible {
    public let diagnostics: [ConfigDiagnostic]

    public init(diagnostics: [ConfigDiagnostic]) {
        self.diagnostics = diagnostics
    }

    public var description: String {
        diagnostics.map(\.description).joined(separator: "\n")
    }
}
