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

    /// The document's root, or nil for an empty document (only comments or nothing).
    static func compose(_ yaml: String) throws(SyntaxError) -> YAMLNode? {
        let root: Node?
        do {
            root = try Yams.compose(yaml: yaml)
        } catch let error as YamlError {
            throw syntaxError(error, in: yaml)
        } catch {
            throw SyntaxError(position: .start, message: "invalid YAML: \(error)")
        }
        guard let root else { return nil }
        var budget = maximumNodeCount
        return try convert(root, budget: &budget)
    }

    private static func convert(_ node: Node, budget: inout Int) throws(SyntaxError) -> YAMLNode {
        budget -= 1
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
            return .scalar(YAMLScalar(text: scalar.string, isPlain: isPlain, position: position))
        case .sequence(let sequence):
            var items: [YAMLNode] = []
            for item in sequence {
                items.append(try convert(item, budget: &budget))
            }
            return .sequence(items, position)
        case .mapping(let mapping):
            var pairs: [(key: YAMLNode, value: YAMLNode)] = []
            for (key, value) in mapping {
                pairs.append((try convert(key, budget: &budget), try convert(value, budget: &budget)))
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
