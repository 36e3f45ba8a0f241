import Yams

/// Composes YAML text into a `YAMLNode` tree with `Yams.compose`, turning libyaml's errors into a
/// position and a message.
enum YAMLLoader {
    struct SyntaxError: Error {
        let position: SourcePosition
        let message: String
    }

    /// Upper bound on nodes after alias expansion: a config has hundreds, an alias bomb has billions.
    static let maximumNodeCount = 100_000

    /// The document's root, or nil for an empty document (only comments or nothing), with `${VAR}`
    /// references in scalar values replaced from `environment` (EnvironmentSubstitution); the
    /// references that could not be replaced are returned as problems (the document is still read).
    static func compose(_ yaml: String, environment: [String: String]) throws(SyntaxError)
        -> (root: YAMLNode?, problems: [SyntaxError])
    {
        let root: Node?
        do {
            root = try Yams.compose(yaml: yaml)
        } catch let error as YamlError {
            throw syntaxError(error, in: yaml)
        } catch {
            throw SyntaxError(position: .start, message: "invalid YAML: \(error)")
        }
        guard let root else { return (nil, []) }
        var context = Context(environment: environment, lines: yaml.contains("$") ? Self.lines(yaml) : [])
        let converted = try convert(root, path: "", isKey: false, context: &context)
        return (converted, context.problems)
    }

    private struct Context {
        let environment: [String: String]
        /// The document's lines as Unicode scalars (only when it has a `$`): where a reference is.
        let lines: [[Unicode.Scalar]]
        var budget = YAMLLoader.maximumNodeCount
        var problems: [SyntaxError] = []
    }

    private static func lines(_ yaml: String) -> [[Unicode.Scalar]] {
        yaml.split(separator: "\n", omittingEmptySubsequences: false).map { Array($0.unicodeScalars) }
    }

    /// Where the `offset`-th scalar of a value's text was written: exact when the value is written
    /// on its line as it reads (plain, or quoted without escapes), else the value's start.
    private static func position(
        of offset: Int, in text: String, at start: SourcePosition, quotedBy quote: Int, _ lines: [[Unicode.Scalar]]
    )
        -> SourcePosition
    {
        guard start.line >= 1, start.line <= lines.count else { return start }
        let line = lines[start.line - 1]
        let from = start.column - 1 + quote
        let wanted = Array(text.unicodeScalars)
        guard from >= 0, from + wanted.count <= line.count, Array(line[from..<(from + wanted.count)]) == wanted else { return start }
        return SourcePosition(line: start.line, column: start.column + quote + offset)
    }

    private static func convert(_ node: Node, path: String, isKey: Bool, context: inout Context) throws(SyntaxError) -> YAMLNode {
        context.budget -= 1
        let budget = context.budget
        let position = node.mark.map { SourcePosition(line: $0.line, column: $0.column) } ?? .start
        if budget < 0 {
            throw SyntaxError(
                position: position,
                message: "the document expands to more than \(maximumNodeCount) values (aliases repeated too often)"
            )
        }
        switch node {
        case .scalar(let scalar):
            // Quoted scalars carry the str tag; a plain scalar carries it only when written `!!str`.
            let isPlain = scalar.style == .plain && scalar.tag.description != Tag.Name.str.rawValue
            guard !isKey else { return .scalar(YAMLScalar(text: scalar.string, isPlain: isPlain, position: position)) }
            let (text, problems) = EnvironmentSubstitution.expand(scalar.string, environment: context.environment)
            let quote = scalar.style == .singleQuoted || scalar.style == .doubleQuoted ? 1 : 0
            for p in problems {
                let at = Self.position(of: p.offset, in: scalar.string, at: position, quotedBy: quote, context.lines)
                context.problems.append(SyntaxError(position: at, message: "\(path.isEmpty ? "the value" : path) \(p.message)"))
            }
            var converted = YAMLScalar(text: text, isPlain: isPlain, position: position)
            converted.unresolved = !problems.isEmpty
            return .scalar(converted)
        case .sequence(let sequence):
            var items: [YAMLNode] = []
            for (i, item) in sequence.enumerated() {
                items.append(try convert(item, path: "\(path)[\(i)]", isKey: false, context: &context))
            }
            return .sequence(items, position)
        case .mapping(let mapping):
            var pairs: [(key: YAMLNode, value: YAMLNode)] = []
            for (key, value) in mapping {
                let k = try convert(key, path: path, isKey: true, context: &context)
                let name: String
                if case .scalar(let s) = k, !(s.isPlain && s.text == "<<") {
                    name = path.isEmpty ? s.text : "\(path).\(s.text)"
                } else {
                    name = path
                }
                pairs.append((k, try convert(value, path: name, isKey: false, context: &context)))
            }
            return .mapping(pairs, position)
        }
    }

    private static func syntaxError(_ error: YamlError, in yaml: String) -> SyntaxError {
        switch error {
        case .scanner(let context, let problem, let mark, _),
            .parser(let context, let problem, let mark, _),
            .composer(let context, let problem, let mark, _):
            var message = "invalid YAML: \(problem)"
            if let context {
                message += " (\(context.text) at \(context.mark.line):\(context.mark.column))"
            }
            return SyntaxError(position: SourcePosition(line: mark.line, column: mark.column), message: message)
        case .reader(let problem, let offset, _, _):
            return SyntaxError(
                position: position(ofCharacter: offset ?? 0, in: yaml),
                message: "invalid YAML: \(problem)"
            )
        default:
            return SyntaxError(position: .start, message: "invalid YAML: \(error)")
        }
    }

    /// The 1-based line and column (in Unicode scalars) of the `offset`-th Character of `text`.
    private static func position(ofCharacter offset: Int, in text: String) -> SourcePosition {
        var line = 1
        var column = 1
        for character in text.prefix(offset) {
            if character == "\n" || character == "\r\n" {
                line += 1
                column = 1
            } else {
                column += character.unicodeScalars.count
            }
        }
        return SourcePosition(line: line, column: column)
    }
}
