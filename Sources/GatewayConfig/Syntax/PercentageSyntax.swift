/// Percentages from `0%` to `100%`, with at most two decimals (`12.5%`, `0.01%`).
enum PercentageSyntax {
    static func parse(_ text: String) throws(ValueProblem) -> Percentage {
        let expected = "must be a percentage from 0% to 100% such as 25% or 12.5%, got \(quoted(text))"
        guard text.hasSuffix("%") else {
            if Double(text) != nil { throw ValueProblem("needs a % sign (write \(text)%), got \(quoted(text))") }
            throw ValueProblem(expected)
        }
        let number = text.dropLast()
        let parts = number.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count <= 2, let whole = parts.first, !whole.isEmpty, whole.count <= 3,
            whole.allSatisfy({ $0.isASCII && $0.isNumber }), let wholeValue = Int(whole)
        else { throw ValueProblem(expected) }
        var hundredths = 0
        if parts.count == 2 {
            let fraction = parts[1]
            guard !fraction.isEmpty, fraction.count <= 2, fraction.allSatisfy({ $0.isASCII && $0.isNumber }),
                let value = Int(fraction)
            else { throw ValueProblem("must be a percentage with at most two decimals, got \(quoted(text))") }
            hundredths = fraction.count == 1 ? value * 10 : value
        }
        let basisPoints = wholeValue * 100 + hundredths
        guard basisPoints <= 10_000 else { throw ValueProblem("must be between 0% and 100%, got \(quoted(text))") }
        return Percentage(basisPoints: basisPoints)
    }
}
