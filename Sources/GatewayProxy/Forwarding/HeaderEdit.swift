import GatewayHTTP

/// A route's edit of the fields sent upstream: every field named in `remove` goes (any case, `_`
/// or `.` as `-`: `FieldNames`), then `add` is appended (e.g. the verified key id). The client's
/// fields are also held to the gateway-owned list (`GatewayOwnedFields`), which no edit can let
/// through. Applied by `UpstreamRequestHead` (rule 2 and 3).
public struct HeaderEdit: Sendable {
    /// The removals and their byte forms, made once per edit and shared by every copy (a verified
    /// request's edit is its route's plus one or two fields: copying it retains one reference, not
    /// five arrays).
    private final class Removal: Sendable {
        let names: [String]
        let bytes: FieldNames
        let client: FieldNames
        init(_ names: [String]) {
            self.names = names
            bytes = FieldNames(names)
            client = GatewayOwnedFields.names(with: names)
        }
    }
    private let removal: Removal
    public var remove: [String] { removal.names }
    public var add: [(String, String)]
    /// `remove` as bytes, for the writer.
    public var removeNames: FieldNames { removal.bytes }
    /// What a client's field is held to: the gateway-owned names and `remove`.
    public var clientRemoveNames: FieldNames { removal.client }

    public init(remove: [String] = [], add: [(String, String)] = []) {
        removal = Removal(remove)
        self.add = add
    }

    /// The same removals, then `extra` appended.
    /// (Per protected request: the byte names of the removals are carried over, not rebuilt.)
    public func adding(_ name: String, _ value: String) -> HeaderEdit {
        var edit = self
        edit.add.append((name, value))
        return edit
    }

    /// The same with two fields appended, in this order (one copy of the edit, not two).
    public func adding(_ first: (String, String), _ second: (String, String)) -> HeaderEdit {
        var edit = self
        edit.add.reserveCapacity(add.count + 2)
        edit.add.append(first)
        edit.add.append(second)
        return edit
    }
}

/// A set of field names, and name prefixes, matched the way CGI, WSGI and PHP read them: without
/// ASCII case, and with `_` (or any character besides letters, digits and `-`: `FoldedNames.fold`)
/// equal to `-` (`X_App_Attest_Key_Id` is `X-App-Attest-Key-Id`). Kept as folded bytes; a name is
/// tested by length, then bytes, with no string per test.
public struct FieldNames: Sendable {
    private let names: [[UInt8]]
    private let prefixes: [[UInt8]]
    private let lengths: UInt64  // bit n: some name has n bytes (n < 64)
    /// The shortest prefix's length (Int.max without prefixes): shorter names skip the prefix test.
    private let shortestPrefix: Int

    public init(_ names: [String], prefixes: [String] = []) {
        self.names = names.map { Array($0.utf8).map(FieldNames.fold) }
        self.prefixes = prefixes.map { Array($0.utf8).map(FieldNames.fold) }.filter { !$0.isEmpty }
        var lengths: UInt64 = 0
        for n in self.names { lengths |= n.count < 64 ? 1 << UInt64(n.count) : 0 }
        self.lengths = lengths
        shortestPrefix = self.prefixes.map(\.count).min() ?? .max
    }

    /// A name byte as compared here (`FoldedNames.fold`).
    @inline(__always) static func fold(_ c: UInt8) -> UInt8 { FoldedNames.fold(c) }

    public var isEmpty: Bool { names.isEmpty && prefixes.isEmpty }

    @inline(__always)
    public func contains(_ name: UnsafeRawBufferPointer) -> Bool {
        let n = name.count
        // Most names have a length no listed name has, and are too short for the prefixes.
        if n < 64 && (lengths >> UInt64(n)) & 1 == 0 && n <= shortestPrefix { return false }
        return containsListed(name)
    }

    private func containsListed(_ name: UnsafeRawBufferPointer) -> Bool {
        let n = name.count
        let bytes = UnsafeBufferPointer(start: name.baseAddress?.assumingMemoryBound(to: UInt8.self), count: n)
        if n >= 64 || (lengths >> UInt64(n)) & 1 != 0 {
            for candidate in names where candidate.count == n {
                if candidate.withUnsafeBufferPointer({ Self.foldedPrefix($0, of: bytes) }) { return true }
            }
        }
        if n > shortestPrefix {
            for p in prefixes where p.count < n {
                if p.withUnsafeBufferPointer({ Self.foldedPrefix($0, of: bytes) }) { return true }
            }
        }
        return false
    }

    public func contains(_ name: String) -> Bool {
        var name = name
        return name.withUTF8 { contains(UnsafeRawBufferPointer($0)) }
    }

    /// Whether `bytes` starts with the folded `p` (equals it when as long).
    @inline(__always) private static func foldedPrefix(_ p: UnsafeBufferPointer<UInt8>, of bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        var k = 0
        while k < p.count {
            if p[k] != fold(bytes[k]) { return false }
            k += 1
        }
        return true
    }
}
