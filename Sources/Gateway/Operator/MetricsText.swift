/// The samples of a Prometheus text exposition (version 0.0.4), as `/metrics` serves them: what the
/// operator's page reads, so that its numbers are the ones `/metrics` shows. Comment lines (`# HELP`,
/// `# TYPE`) and lines that are not samples are skipped; nothing here allocates per series beyond
/// the sample itself.
struct MetricsText: Sendable {
    struct Sample: Sendable, Equatable {
        let name: String
        /// In the order written; values unescaped.
        let labels: [Label]
        let value: Double
        /// `name{labels}` exactly as written: the series' identity.
        let key: String

        func label(_ name: String) -> String? { labels.first { $0.name == name }?.value }
    }

    struct Label: Sendable, Equatable {
        let name: String
        let value: String
    }

    let samples: [Sample]

    init(samples: [Sample]) { self.samples = samples }

    /// Parses the text; a line that cannot be read is skipped.
    init(_ bytes: [UInt8]) {
        var out: [Sample] = []
        var start = 0
        while start < bytes.count {
            let end = bytes[start...].firstIndex(of: 0x0a) ?? bytes.count
            if end > start, bytes[start] != 0x23, let s = Self.sample(bytes[start..<end]) { out.append(s) }
            start = end + 1
        }
        samples = out
    }

    /// One `name{a="x",b="y"} value [timestamp]` line.
    static func sample(_ line: ArraySlice<UInt8>) -> Sample? {
        var i = line.startIndex
        while i < line.endIndex, line[i] != 0x7b, line[i] != 0x20 { i += 1 }
        guard i > line.startIndex else { return nil }
        let name = String(decoding: line[line.startIndex..<i], as: UTF8.self)
        var labels: [Label] = []
        if i < line.endIndex, line[i] == 0x7b {
            i += 1
            while i < line.endIndex, line[i] != 0x7d {
                let nameStart = i
                while i < line.endIndex, line[i] != 0x3d { i += 1 }
                guard i + 1 < line.endIndex, line[i + 1] == 0x22 else { return nil }
                let labelName = String(decoding: line[nameStart..<i], as: UTF8.self)
                i += 2
                var value: [UInt8] = []
                while i < line.endIndex, line[i] != 0x22 {
                    if line[i] == 0x5c, i + 1 < line.endIndex {
                        i += 1
                        value.append(line[i] == 0x6e ? 0x0a : line[i])
                    } else {
                        value.append(line[i])
                    }
                    i += 1
                }
                guard i < line.endIndex else { return nil }
                i += 1
                labels.append(Label(name: labelName, value: String(decoding: value, as: UTF8.self)))
                if i < line.endIndex, line[i] == 0x2c { i += 1 }
            }
            guard i < line.endIndex else { return nil }
            i += 1
        }
        let key = String(decoding: line[line.startIndex..<i], as: UTF8.self)
        while i < line.endIndex, line[i] == 0x20 { i += 1 }
        var valueEnd = i
        while valueEnd < line.endIndex, line[valueEnd] != 0x20 { valueEnd += 1 }
        guard let value = number(String(decoding: line[i..<valueEnd], as: UTF8.self)) else { return nil }
        return Sample(name: name, labels: labels, value: value, key: key)
    }

    static func number(_ text: String) -> Double? {
        switch text {
        case "+Inf": return .infinity
        case "-Inf": return -.infinity
        case "NaN": return .nan
        default: return Double(text)
        }
    }

    /// The sum of the family's samples whose labels include every pair of `matching`.
    func sum(_ name: String, _ matching: [String: String] = [:]) -> Double {
        var total = 0.0
        for s in samples where s.name == name && matching.allSatisfy({ s.label($0.key) == $0.value }) { total += s.value }
        return total
    }

    /// The family's samples whose labels include every pair of `matching`.
    func select(_ name: String, _ matching: [String: String] = [:]) -> [Sample] {
        samples.filter { s in s.name == name && matching.allSatisfy { s.label($0.key) == $0.value } }
    }
}
