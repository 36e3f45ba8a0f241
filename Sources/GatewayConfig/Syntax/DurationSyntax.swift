/// Durations: a whole number and exactly one unit, `ms`, `s`, `m` or `h` (`250ms`, `2s`, `5m`, `1h`).
///
/// A bare number is refused rather than guessed (seconds? milliseconds?), and so are combinations
/// (`1h30m`: write `90m`) and fractions (`1.5s`: write `1500ms`).
enum DurationSyntax {
    static func parse(_ text: String) throws(ValueProblem) -> Duration {
        let digits = text.prefix { $0.isASCII && $0.isNumber }
        let unit = text.dropFirst(digits.count)
        let example = "(e.g. 250ms, 30s, 5m, 1h)"
        guard !digits.isEmpty, digits.count <= 9, let amount = Int64(digits) else {
            if digits.count > 9 { throw ValueProblem("is too large, got \(quoted(text))") }
            throw ValueProblem(
                "must be a duration: a whole number and a unit, ms, s, m or h \(example), got \(quoted(text))"
            )
        }
        switch unit {
        case "ms": return .milliseconds(amount)
        case "s": return .seconds(amount)
        case "m": return .seconds(amount * 60)
        case "h": return .seconds(amount * 3600)
        case "":
            throw ValueProblem("needs a unit, one of ms, s, m or h (e.g. \(digits)s), got \(quoted(text))")
        default:
            throw ValueProblem(
                "must be a duration: a whole number and one unit, ms, s, m or h \(example), got \(quoted(text))"
            )
        }
    }

    /// `250ms`, `2s`, `5m`, `1h`: the shortest exact spelling, for messages and docs.
    static func format(_ duration: Duration) -> String {
        let (seconds, attoseconds) = duration.components
        if attoseconds == 0 {
            if seconds != 0 && seconds % 3600 == 0 { return "\(seconds / 3600)h" }
            if seconds != 0 && seconds % 60 == 0 { return "\(seconds / 60)m" }
            return "\(seconds)s"
        }
        let milliseconds = seconds * 1000 + attoseconds / 1_000_000_000_000_000
        return "\(milliseconds)ms"
    }
}
