/// A 1-based line and column in the YAML text (libyaml's marks plus one, as Yams reports them).
struct SourcePosition: Sendable, Hashable, Comparable, CustomStringConvertible {
    let line: Int
    let column: Int

    static let start = SourcePosition(line: 1, column: 1)

    static func < (a: Self, b: Self) -> Bool {
        (a.line, a.column) < (b.line, b.column)
    }

    var description: String { "\(line):\(column)" }
}
