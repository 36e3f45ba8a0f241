/// Rates: a whole number, `/` and one unit, `s`, `m` or `h` (`10/s`, `600/m`, `100/h`).
///
/// Fractions are refused (`0.5/s`: write `30/m`), and so are bare numbers (per what?).
enum RateSyntax {
    static func parse(_ text: String) throws(ValueProblem) -> Rate {
        let example = "(e.g. 10/s, 600/m, 100/h)"
        let parts = text.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.count == 2 else {
            if !text.isEmpty && text.allSatisfy({ $0.isASCII && $0.isNumber }) {
                throw ValueProblem("needs a unit: per s, m or h (e.g. \(text)/s), got \(quoted(text))")
            }
            throw ValueProblem("must be a rate: a whole number, / and a unit, s, m or h \(example), got \(quoted(text))")
        }
        let digits = parts[0]
        guard !digits.isEmpty, digits.allSatisfy({ $0.isASCII && $0.isNumber }), let unit = Rate.Unit(rawValue: String(parts[1]))
        else {
            throw ValueProblem("must be a rate: a whole number, / and a unit, s, m or h \(example), got \(quoted(text))")
        }
        guard digits.count <= 7, let count = Int(digits), (1...Rate.maximumCount).contains(count) else {
            throw ValueProblem("must count from 1 to \(Rate.maximumCount) per unit, got \(quoted(text))")
        }
        return Rate(count, per: unit)
    }
}
