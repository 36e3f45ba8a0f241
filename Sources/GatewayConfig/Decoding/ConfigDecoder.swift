/// Walks the YAML tree of one file, collecting every problem as a diagnostic instead of stopping at
/// the first. Each `decode…` returns what it could read (nil where a value is unusable); the caller
/// builds a `GatewayConfig` only when no diagnostic was reported.
final class ConfigDecoder {
    let file: String
    let baseDirectory: String
    private(set) var diagnostics: [ConfigDiagnostic] = []

    init(file: String, baseDirectory: String) {
        self.file = file
        self.baseDirectory = baseDirectory
    }

    func report(_ message: String, at position: SourcePosition) {
        let diagnostic = ConfigDiagnostic(file: file, line: position.line, column: position.column, message: message)
        if !diagnostics.contains(diagnostic) { diagnostics.append(diagnostic) }
    }

    /// The diagnostics by position (stable for the same position, in the order found).
    var sortedDiagnostics: [ConfigDiagnostic] {
        diagnostics.enumerated().sorted { a, b in
            let left = (a.element.line, a.element.column, a.offset)
            let right = (b.element.line, b.element.column, b.offset)
            return left < right
        }.map(\.element)
    }

    /// `routes[1]`, `routes[1].match`: where a value lives, for messages. The top level is "".
    static func child(_ path: String, _ key: String) -> String {
        path.isEmpty ? key : "\(path).\(key)"
    }

    static func element(_ path: String, _ index: Int) -> String {
        "\(path)[\(index)]"
    }

    /// `in routes[1]` or `at the top level`.
    static func location(_ path: String) -> String {
        path.isEmpty ? "at the top level" : "in \(path)"
    }
}

/// The keys of one YAML mapping after duplicate, unknown-key and merge-key (`<<`) handling.
struct MappingFields {
    let path: String
    /// Where the mapping starts: missing-key errors point here.
    let position: SourcePosition
    fileprivate var values: [String: YAMLNode] = [:]
    fileprivate var keyPositions: [String: SourcePosition] = [:]

    subscript(key: String) -> YAMLNode? { values[key] }

    func keyPosition(_ key: String) -> SourcePosition? { keyPositions[key] }

    func path(_ key: String) -> String { ConfigDecoder.child(path, key) }

    /// An optional key: its decoded value, or nil when absent or invalid. An invalid value (which
    /// `decode` has already reported) clears `valid`.
    func optional<Value>(_ key: String, valid: inout Bool, _ decode: (YAMLNode, String) -> Value?) -> Value? {
        guard let node = values[key] else { return nil }
        let value = decode(node, path(key))
        if value == nil { valid = false }
        return value
    }

    /// An optional key decoded into `root[keyPath]`; absent or invalid leaves the default in place.
    func read<Root, Value>(
        _ key: String, into root: inout Root, _ keyPath: WritableKeyPath<Root, Value>, valid: inout Bool,
        _ decode: (YAMLNode, String) -> Value?
    ) {
        if let value = optional(key, valid: &valid, decode) { root[keyPath: keyPath] = value }
    }
}

extension ConfigDecoder {
    /// Reads `node` as a mapping whose keys must be among `keys`. Duplicate keys, unknown keys (with a
    /// suggestion) and non-scalar keys are reported; the valid rest is returned. nil if not a mapping.
    func fields(of node: YAMLNode, path: String, keys: [String]) -> MappingFields? {
        guard case .mapping(let pairs, let position) = node else {
            report(
                "\(path.isEmpty ? "the configuration" : path) must be a mapping, got \(node.summary)",
                at: node.position
            )
            return nil
        }
        var fields = MappingFields(path: path, position: position)
        var merged: [YAMLNode] = []
        for (key, value) in pairs {
            guard case .scalar(let name) = key else {
                report("keys \(Self.location(path)) must be names, got \(key.summary)", at: key.position)
                continue
            }
            if name.isPlain && name.text == "<<" {
                merged.append(value)
                continue
            }
            if let first = fields.keyPositions[name.text] {
                report(
                    "duplicate key \(quoted(name.text)) \(Self.location(path)) (first at \(first))",
                    at: name.position
                )
                continue
            }
            fields.keyPositions[name.text] = name.position
            guard keys.contains(name.text) else {
                report(unknownKeyMessage(name.text, path: path, keys: keys), at: name.position)
                continue
            }
            fields.values[name.text] = value
        }
        for source in merged {
            merge(source, into: &fields, keys: keys, depth: 0)
        }
        return fields
    }

    /// YAML merge keys: `<<: *defaults` or `<<: [*a, *b]`. Explicit keys win, then earlier sources.
    private func merge(_ source: YAMLNode, into fields: inout MappingFields, keys: [String], depth: Int) {
        if case .sequence(let items, _) = source, depth == 0 {
            for item in items { merge(item, into: &fields, keys: keys, depth: depth + 1) }
            return
        }
        guard case .mapping(let pairs, _) = source else {
            report(
                "the merge key << \(Self.location(fields.path)) needs a mapping or a list of mappings, got \(source.summary)",
                at: source.position
            )
            return
        }
        for (key, value) in pairs {
            guard case .scalar(let name) = key, !(name.isPlain && name.text == "<<") else { continue }
            guard fields.keyPositions[name.text] == nil else { continue }
            fields.keyPositions[name.text] = name.position
            guard keys.contains(name.text) else {
                report(unknownKeyMessage(name.text, path: fields.path, keys: keys), at: name.position)
                continue
            }
            fields.values[name.text] = value
        }
    }

    private func unknownKeyMessage(_ key: String, path: String, keys: [String]) -> String {
        "unknown key \(quoted(key)) \(Self.location(path))\(Suggestion.clause(for: key, in: keys))"
    }

    /// The value of a key that must be present; reports it missing at the mapping's start.
    func required(_ key: String, in fields: MappingFields) -> YAMLNode? {
        if let value = fields[key] { return value }
        if fields.keyPosition(key) == nil {
            report("missing required key \(quoted(key)) \(Self.location(fields.path))", at: fields.position)
        }
        return nil
    }

    /// Reports every name used more than once, at each repeat.
    func checkUnique(_ names: [(name: String, position: SourcePosition)], what: String) {
        var first: [String: SourcePosition] = [:]
        for (name, position) in names {
            if let earlier = first[name] {
                report("duplicate \(what) \(quoted(name)) (first defined at \(earlier))", at: position)
            } else {
                first[name] = position
            }
        }
    }
}
