/// Header fields in wire order, names as received (matching is case-insensitive, RFC 9110 §5.1).
public struct HTTPFields: Sendable, Equatable, Sequence {
    public struct Field: Sendable, Equatable {
        public var name: String
        public var value: String
        public init(_ name: String, _ value: String) {
            self.name = name
            self.value = value
        }
    }

    public private(set) var fields: [Field] = []

    public init(_ fields: [Field] = []) { self.fields = fields }
    public init(_ pairs: [(String, String)]) { self.fields = pairs.map { Field($0.0, $0.1) } }

    public var count: Int { fields.count }
    public func makeIterator() -> IndexingIterator<[Field]> { fields.makeIterator() }

    /// The first value of `name`.
    public subscript(name: String) -> String? {
        for f in fields where f.name.equalsIgnoringASCIICase(name) { return f.value }
        return nil
    }

    public func values(_ name: String) -> [String] {
        fields.filter { $0.name.equalsIgnoringASCIICase(name) }.map(\.value)
    }

    public func contains(_ name: String) -> Bool { fields.contains { $0.name.equalsIgnoringASCIICase(name) } }

    public mutating func append(_ name: String, _ value: String) { fields.append(Field(name, value)) }

    public mutating func remove(_ name: String) { fields.removeAll { $0.name.equalsIgnoringASCIICase(name) } }

    public mutating func set(_ name: String, _ value: String) {
        remove(name)
        append(name, value)
    }

    /// Comma-separated list elements of every `name` field, trimmed, lowercased (for Connection, TE, …).
    public func tokens(_ name: String) -> [String] {
        values(name).flatMap { $0.split(separator: ",") }.map {
            $0.trimmingOWS().lowercased()
        }.filter { !$0.isEmpty }
    }
}

extension String {
    public func equalsIgnoringASCIICase(_ other: String) -> Bool {
        let a = utf8
        let b = other.utf8
        guard a.count == b.count else { return false }
        for (x, y) in zip(a, b) where x != y {
            guard x | 0x20 == y | 0x20, (x | 0x20) >= 0x61, (x | 0x20) <= 0x7a else { return false }
        }
        return true
    }
}

extension Substring {
    func trimmingOWS() -> String {
        var s = self[...]
        while let f = s.first, f == " " || f == "\t" { s = s.dropFirst() }
        while let l = s.last, l == " " || l == "\t" { s = s.dropLast() }
        return String(s)
    }
}
