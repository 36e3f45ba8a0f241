/// "did you mean …?" for misspelled keys, enum values and names.
enum Suggestion {
    /// The candidate closest to `text` by edit distance (adjacent swaps count once), if it is close
    /// enough to be a plausible typo: at most 2 edits and fewer than half of the candidate's length.
    static func closest(to text: String, in candidates: some Sequence<String>) -> String? {
        var best: (candidate: String, distance: Int)?
        for candidate in candidates where candidate != text {
            let distance = editDistance(text.lowercased(), candidate.lowercased())
            let limit = min(2, max(1, candidate.count / 2 - 1))
            guard distance <= limit else { continue }
            if distance < best?.distance ?? Int.max { best = (candidate, distance) }
        }
        return best?.candidate
    }

    /// ` (did you mean "upstream"?)`, or "" when nothing is close.
    static func clause(for text: String, in candidates: some Sequence<String>) -> String {
        closest(to: text, in: candidates).map { " (did you mean \(quoted($0))?)" } ?? ""
    }

    /// Optimal string alignment distance: insertions, deletions, substitutions and adjacent swaps.
    static func editDistance(_ a: String, _ b: String) -> Int {
        let a = Array(a.unicodeScalars)
        let b = Array(b.unicodeScalars)
        if a.isEmpty { return b.count }
        if b.isEmpty { return a.count }
        var previous2 = [Int](repeating: 0, count: b.count + 1)
        var previous = Array(0...b.count)
        var current = [Int](repeating: 0, count: b.count + 1)
        for i in 1...a.count {
            current[0] = i
            for j in 1...b.count {
                let cost = a[i - 1] == b[j - 1] ? 0 : 1
                current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost)
                if i > 1, j > 1, a[i - 1] == b[j - 2], a[i - 2] == b[j - 1] {
                    current[j] = min(current[j], previous2[j - 2] + 1)
                }
            }
            (previous2, previous, current) = (previous, current, previous2)
        }
        return previous[b.count]
    }
}
