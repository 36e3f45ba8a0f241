/// Sizes in bytes: a whole number, optionally followed by a unit: `B`, decimal `KB` `MB` `GB`
/// (powers of 1000) or binary `KiB` `MiB` `GiB` (powers of 1024). `512` is 512 bytes.
enum SizeSyntax {
    static let units: [(name: String, multiplier: Int)] = [
        ("B", 1), ("KB", 1000), ("MB", 1_000_000), ("GB", 1_000_000_000),
        ("KiB", 1 << 10), ("MiB", 1 << 20), ("GiB", 1 << 30),
    ]

    static func parse(_ text: String) throws(ValueProblem) -> Int {
        let digits = text.prefix { $0.isASCII && $0.isNumber }
        let unit = String(text.dropFirst(digits.count))
        let expected =
            "must be a size: a whole number of bytes, optionally with a unit B, KB, MB, GB "
            + "(powers of 1000) or KiB, MiB, GiB (powers of 1024), e.g. 64KiB"
        guard !digits.isEmpty else { throw ValueProblem("\(expected), got \(quoted(text))") }
        guard let multiplier = units.first(where: { $0.name == unit })?.multiplier ?? (unit.isEmpty ? 1 : nil) else {
            if let near = units.first(where: { $0.name.lowercased() == unit.lowercased() }) {
                throw ValueProblem("has an unknown unit \(quoted(unit)) (did you mean \(quoted(digits + near.name))?)")
            }
            throw ValueProblem("\(expected), got \(quoted(text))")
        }
        guard digits.count <= 18, let amount = Int(digits) else {
            throw ValueProblem("is too large, got \(quoted(text))")
        }
        let (bytes, overflow) = amount.multipliedReportingOverflow(by: multiplier)
        guard !overflow else { throw ValueProblem("is too large, got \(quoted(text))") }
        return bytes
    }

    /// `64KiB`, `10MiB`, `10MB`, `512`: the largest unit that divides exactly, binary first.
    static func format(_ bytes: Int) -> String {
        for (name, multiplier) in units.reversed() where multiplier > 1 && bytes != 0 && bytes % multiplier == 0 {
            return "\(bytes / multiplier)\(name)"
        }
        return "\(bytes)"
    }
}
