/// Where each value of a configuration file was written, by its path in messages
/// (`upstreams[0].url`, `store.data_dir`, `trust.extra_roots[1]`), so that problems found after
/// decoding (a host that does not resolve, a PEM file that cannot be read, a `data_dir` that cannot
/// be created) are reported at `file:line:column` like the decoder's own.
///
/// Not part of a configuration's value: two configurations that differ only in layout are equal.
public struct SourceMap: Sendable, Equatable {
    /// The file name diagnostics use.
    public let file: String
    private let positions: [String: SourcePosition]

    init(file: String, root: YAMLNode?) {
        self.file = file
        var positions: [String: SourcePosition] = [:]
        if let root { Self.record(root, path: "", into: &positions) }
        self.positions = positions
    }

    public static func == (_: SourceMap, _: SourceMap) -> Bool { true }

    /// The line and column of the value at `path`, or of its nearest enclosing value that was
    /// written (`upstreams[0].tls` falls back to `upstreams[0]`); nil when not even the section is.
    public func location(_ path: String) -> (line: Int, column: Int)? {
        var path = path
        while true {
            if let p = positions[path] { return (p.line, p.column) }
            guard let cut = path.lastIndex(where: { $0 == "." || $0 == "[" }) else { return nil }
            path = String(path[..<cut])
        }
    }

    /// Whether a value was written at exactly `path`.
    public func has(_ path: String) -> Bool { positions[path] != nil }

    /// A diagnostic about the value at `path`, printed `FILE:LINE:COLUMN: MESSAGE` (`FILE: MESSAGE`
    /// when not even its section was written, i.e. a default).
    public func diagnostic(at path: String, _ message: String) -> ConfigDiagnostic {
        let at = location(path)
        return ConfigDiagnostic(file: file, line: at?.line ?? 0, column: at?.column ?? 0, message: message)
    }

    /// Every value's position by path. Merge keys (`<<`) add the merged keys not written explicitly.
    private static func record(_ node: YAMLNode, path: String, into positions: inout [String: SourcePosition]) {
        if !path.isEmpty, positions[path] == nil { positions[path] = node.position }
        switch node {
        case .scalar:
            break
        case .sequence(let items, _):
            for (i, item) in items.enumerated() { record(item, path: ConfigDecoder.element(path, i), into: &positions) }
        case .mapping(let pairs, _):
            var merged: [YAMLNode] = []
            for (key, value) in pairs {
                guard case .scalar(let name) = key else { continue }
                if name.isPlain && name.text == "<<" {
                    merged.append(value)
                } else {
                    record(value, path: ConfigDecoder.child(path, name.text), into: &positions)
                }
            }
            for source in merged {
                let sources: [YAMLNode]
                if case .sequence(let items, _) = source { sources = items } else { sources = [source] }
                for case .mapping(let pairs, _) in sources {
                    for (key, value) in pairs {
                        guard case .scalar(let name) = key else { continue }
                        record(value, path: ConfigDecoder.child(path, name.text), into: &positions)
                    }
                }
            }
        }
    }
}
