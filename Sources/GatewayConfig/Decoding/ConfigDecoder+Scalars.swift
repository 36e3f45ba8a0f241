/// Typed reads of single values. Each reports its own problem (path first, then what was expected
/// and what was found) and returns nil, so the caller just moves on to the next key.
extension ConfigDecoder {
    /// A non-null scalar (plain or quoted), or nil after reporting `PATH must be EXPECTED, got …`.
    func scalar(_ node: YAMLNode, _ path: String, expected: String) -> YAMLScalar? {
        if case .scalar(let scalar) = node, scalar.unresolved { return nil }  // its ${VAR} is reported already
        guard case .scalar(let scalar) = node, !scalar.isNull else {
            report("\(path) must be \(expected), got \(node.summary)", at: node.position)
            return nil
        }
        return scalar
    }

    /// Text of any non-empty scalar: `4.2`, `'4.2'` and `"4.2"` all read as "4.2".
    func string(_ node: YAMLNode, _ path: String) -> String? {
        guard let scalar = scalar(node, path, expected: "a string") else { return nil }
        guard !scalar.text.isEmpty else {
            report("\(path) must not be empty", at: scalar.position)
            return nil
        }
        return scalar.text
    }

    /// A plain integer in `range`. Quoted numbers are strings in YAML, and refused as such.
    func int(_ node: YAMLNode, _ path: String, in range: ClosedRange<Int>) -> Int? {
        let expected =
            range.upperBound == Int.max
            ? (range.lowerBound == 1 ? "a positive integer" : "an integer of at least \(range.lowerBound)")
            : "an integer from \(range.lowerBound) to \(range.upperBound)"
        guard let scalar = scalar(node, path, expected: expected) else { return nil }
        let digits = scalar.text.hasPrefix("-") ? scalar.text.dropFirst() : Substring(scalar.text)
        let looksNumeric = !digits.isEmpty && digits.allSatisfy { $0.isASCII && $0.isNumber }
        guard scalar.isPlain else {
            let hint = looksNumeric ? " (write it without quotes)" : ""
            report("\(path) must be \(expected), got \(scalar.summary)\(hint)", at: scalar.position)
            return nil
        }
        guard looksNumeric, let value = Int(scalar.text) else {
            report("\(path) must be \(expected), got \(quoted(scalar.text))", at: scalar.position)
            return nil
        }
        guard range.contains(value) else {
            report("\(path) must be \(expected), got \(value)", at: scalar.position)
            return nil
        }
        return value
    }

    /// `true` or `false` (any case), plain. YAML 1.1's yes/no/on/off are refused: they read as words.
    func bool(_ node: YAMLNode, _ path: String) -> Bool? {
        guard let scalar = scalar(node, path, expected: "true or false") else { return nil }
        switch (scalar.isPlain, scalar.text.lowercased()) {
        case (true, "true"): return true
        case (true, "false"): return false
        default:
            report("\(path) must be true or false, got \(scalar.summary)", at: scalar.position)
            return nil
        }
    }

    /// One of an enum's raw values, with a suggestion for near misses.
    func choice<Choice: RawRepresentable & CaseIterable>(_ node: YAMLNode, _ path: String, as type: Choice.Type)
        -> Choice?
    where Choice.RawValue == String {
        let names = Choice.allCases.map(\.rawValue)
        let expected = "one of " + Self.list(names)
        guard let scalar = scalar(node, path, expected: expected) else { return nil }
        guard let value = Choice(rawValue: scalar.text) else {
            let hint = Suggestion.clause(for: scalar.text, in: names)
            report("\(path) must be \(expected), got \(quoted(scalar.text))\(hint)", at: scalar.position)
            return nil
        }
        return value
    }

    /// A list's items, or nil after reporting what was there instead.
    func list(_ node: YAMLNode, _ path: String, nonEmpty: Bool = false) -> [YAMLNode]? {
        guard case .sequence(let items, let position) = node else {
            report("\(path) must be a list, got \(node.summary)", at: node.position)
            return nil
        }
        if nonEmpty && items.isEmpty {
            report("\(path) must list at least one entry", at: position)
            return nil
        }
        return items
    }

    /// A list of distinct enum values (non-empty unless `nonEmpty` is false).
    func choiceSet<Choice: RawRepresentable & CaseIterable & Hashable>(
        _ node: YAMLNode,
        _ path: String,
        as type: Choice.Type,
        nonEmpty: Bool = true
    ) -> Set<Choice>? where Choice.RawValue == String {
        guard let items = list(node, path, nonEmpty: nonEmpty) else { return nil }
        var result = Set<Choice>()
        var valid = true
        for (index, item) in items.enumerated() {
            guard let value = choice(item, Self.element(path, index), as: type) else {
                valid = false
                continue
            }
            if !result.insert(value).inserted {
                report("\(path) lists \(quoted(value.rawValue)) more than once", at: item.position)
                valid = false
            }
        }
        return valid ? result : nil
    }

    /// A scalar run through one of the `Syntax` parsers; its problem is reported after the path.
    func parsed<Value>(
        _ node: YAMLNode,
        _ path: String,
        expected: String,
        _ parse: (String) throws(ValueProblem) -> Value
    ) -> Value? {
        guard let scalar = scalar(node, path, expected: expected) else { return nil }
        do {
            return try parse(scalar.text)
        } catch {
            report("\(path) \(error.message)", at: scalar.position)
            return nil
        }
    }

    /// A duration, more than zero unless `allowZero`, at least `minimum` and at most `maximum` if given.
    func duration(
        _ node: YAMLNode, _ path: String, allowZero: Bool = false, minimum: Duration? = nil, maximum: Duration? = nil
    ) -> Duration? {
        guard let value = parsed(node, path, expected: "a duration such as 250ms, 30s, 5m or 1h", DurationSyntax.parse)
        else { return nil }
        if !allowZero && value == .zero {
            report("\(path) must be more than 0, got \(DurationSyntax.format(value))", at: node.position)
            return nil
        }
        if let minimum, value < minimum {
            report(
                "\(path) must be at least \(DurationSyntax.format(minimum)), got \(DurationSyntax.format(value))",
                at: node.position
            )
            return nil
        }
        if let maximum, value > maximum {
            report(
                "\(path) must be at most \(DurationSyntax.format(maximum)), got \(DurationSyntax.format(value))",
                at: node.position
            )
            return nil
        }
        return value
    }

    /// A size in bytes of at least `minimum`.
    func size(_ node: YAMLNode, _ path: String, minimum: Int = 1) -> Int? {
        guard let value = parsed(node, path, expected: "a size such as 64KiB, 10MiB or 512", SizeSyntax.parse) else {
            return nil
        }
        guard value >= minimum else {
            report(
                "\(path) must be at least \(minimum) byte\(minimum == 1 ? "" : "s"), got \(value)",
                at: node.position
            )
            return nil
        }
        return value
    }

    /// A size in bytes within `range` (bounds shown exactly and, when they have one, in units).
    func size(_ node: YAMLNode, _ path: String, in range: ClosedRange<Int>) -> Int? {
        guard let value = parsed(node, path, expected: "a size such as 64KiB, 10MiB or 512", SizeSyntax.parse) else {
            return nil
        }
        guard range.contains(value) else {
            func show(_ bytes: Int) -> String {
                let formatted = SizeSyntax.format(bytes)
                return formatted == String(bytes) ? formatted : "\(bytes) (\(formatted))"
            }
            report(
                "\(path) must be from \(show(range.lowerBound)) to \(show(range.upperBound)) bytes, got \(show(value))",
                at: node.position
            )
            return nil
        }
        return value
    }

    /// A name for a listener, upstream or route.
    func name(_ node: YAMLNode, _ path: String) -> String? {
        guard let text = string(node, path) else { return nil }
        guard TokenSyntax.isName(text) else {
            report(
                "\(path) must be 1 to 64 letters, digits, '_', '-' or '.', starting with a letter or digit, got \(quoted(text))",
                at: node.position
            )
            return nil
        }
        return text
    }

    /// A file path, resolved against the config file's directory.
    func filePath(_ node: YAMLNode, _ path: String) -> String? {
        guard let text = string(node, path) else { return nil }
        guard !text.unicodeScalars.contains(where: { $0.value < 0x20 }) else {
            report("\(path) must be a file path without control characters, got \(quoted(text))", at: node.position)
            return nil
        }
        return FilePathSyntax.resolve(text, against: baseDirectory)
    }

    /// An absolute URL path: `/api/purchase`.
    func urlPath(_ node: YAMLNode, _ path: String) -> String? {
        guard let text = string(node, path) else { return nil }
        guard URLPathSyntax.isPath(text) else {
            let reason = text.hasPrefix("/") ? "without spaces, '?' or '#'" : "starting with \"/\""
            report("\(path) must be a path \(reason), got \(quoted(text))", at: node.position)
            return nil
        }
        return text
    }

    /// A host name (lowercased); `*.example.com` too when `allowWildcard`.
    func hostname(_ node: YAMLNode, _ path: String, allowWildcard: Bool = false) -> String? {
        guard let text = string(node, path) else { return nil }
        guard HostSyntax.isHostname(text, allowWildcard: allowWildcard) || HostSyntax.isIPv4(text) else {
            report("\(path) must be a host name such as api.example.com, got \(quoted(text))", at: node.position)
            return nil
        }
        return text.lowercased()
    }

    /// `"a", "b" or "c"` (or `and`).
    static func list(_ names: [String], conjunction: String = "or") -> String {
        let quotedNames = names.map(quoted)
        guard quotedNames.count > 1, let last = quotedNames.last else { return quotedNames.first ?? "" }
        return quotedNames.dropLast().joined(separator: ", ") + " \(conjunction) " + last
    }
}
