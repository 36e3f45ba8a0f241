/// Header fields in wire order, names as received (matching is case-insensitive, RFC 9110 §5.1).
///
/// The lookups compare names on their UTF-8 bytes (length first), and the list helpers that the
/// proxy calls per request (`count(of:)`, `hasToken`, `removeAll(where:)`) allocate nothing.
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

    /// The first value of each of five distinct names, in one pass over the fields (what a protected route
    /// reads of every request: one pass instead of one per name). A field's name is compared only with
    /// the names of its length (most fields are none of the five), on its bytes.
    public func firstValues(_ a: String, _ b: String, _ c: String, _ d: String, _ e: String)
        -> (String?, String?, String?, String?, String?)
    {
        // Five variables, not a tuple (a tuple written in the loop was copied and destroyed whole).
        var va: String? = nil
        var vb: String? = nil
        var vc: String? = nil
        var vd: String? = nil
        var ve: String? = nil
        let (na, nb, nc, nd, ne) = (a.utf8.count, b.utf8.count, c.utf8.count, d.utf8.count, e.utf8.count)
        fields.withUnsafeBufferPointer { fs in
            for i in fs.indices {
                let n = fs[i].name.utf8.count
                if n == na, va == nil, fs[i].name.equalsIgnoringASCIICase(a) {
                    va = fs[i].value
                } else if n == nb, vb == nil, fs[i].name.equalsIgnoringASCIICase(b) {
                    vb = fs[i].value
                } else if n == nc, vc == nil, fs[i].name.equalsIgnoringASCIICase(c) {
                    vc = fs[i].value
                } else if n == nd, vd == nil, fs[i].name.equalsIgnoringASCIICase(d) {
                    vd = fs[i].value
                } else if n == ne, ve == nil, fs[i].name.equalsIgnoringASCIICase(e) {
                    ve = fs[i].value
                }
            }
        }
        return (va, vb, vc, vd, ve)
    }

    /// Whether some field is named `name` (the bytes of a received name), in any ASCII case: without
    /// a copy of a field, and only the names of its length compared.
    public func contains(name: UnsafeRawBufferPointer) -> Bool {
        fields.withUnsafeBufferPointer { fs in
            for i in fs.indices where fs[i].name.utf8.count == name.count {
                if fs[i].name.equalsIgnoringASCIICase(name) { return true }
            }
            return false
        }
    }

    public func values(_ name: String) -> [String] {
        var out: [String] = []
        for f in fields where f.name.equalsIgnoringASCIICase(name) { out.append(f.value) }
        return out
    }

    /// How many fields are named `name`.
    public func count(of name: String) -> Int {
        var n = 0
        for f in fields where f.name.equalsIgnoringASCIICase(name) { n += 1 }
        return n
    }

    public func contains(_ name: String) -> Bool {
        for f in fields where f.name.equalsIgnoringASCIICase(name) { return true }
        return false
    }

    public mutating func append(_ name: String, _ value: String) { fields.append(Field(name, value)) }

    /// Room for `n` fields in all, so that a rewrite that appends several allocates once.
    public mutating func reserveCapacity(_ n: Int) { fields.reserveCapacity(n) }

    public mutating func remove(_ name: String) {
        guard contains(name) else { return }  // no copy-on-write for a field that is not there
        fields.removeAll { $0.name.equalsIgnoringASCIICase(name) }
    }

    /// One Content-Length where a message has several, or a list in one (`5, 5`): the first field,
    /// with its first member, stays in place; the others go. (The values were checked to agree where
    /// they frame a body; the proxy passes a response's length on once: its `ForwardingFilter`.)
    public mutating func collapseContentLength() {
        guard let first = fields.firstIndex(where: { $0.name.equalsIgnoringASCIICase("Content-Length") }) else { return }
        guard count(of: "Content-Length") > 1 || fields[first].value.utf8.contains(UInt8(ascii: ",")) else { return }
        var value = fields[first].value
        let member = value.withUTF8 { u in
            let r = Self.firstListMember(UnsafeRawBufferPointer(u), 0..<u.count)
            return String(decoding: UnsafeBufferPointer(rebasing: u[r]), as: UTF8.self)
        }
        var kept: [Field] = []
        kept.reserveCapacity(fields.count)
        for (k, f) in fields.enumerated() {
            if k == first {
                kept.append(Field(f.name, member))
            } else if !f.name.equalsIgnoringASCIICase("Content-Length") {
                kept.append(f)
            }
        }
        fields = kept
    }

    /// The first member of the list in `r` (up to the first comma, OWS trimmed); the whole value
    /// when that member is empty.
    public static func firstListMember(_ buf: UnsafeRawBufferPointer, _ r: Range<Int>) -> Range<Int> {
        var e = r.lowerBound
        while e < r.upperBound, buf[e] != UInt8(ascii: ",") { e += 1 }
        var s = r.lowerBound
        while s < e, buf[s] == 0x20 || buf[s] == 0x09 { s += 1 }
        while e > s, buf[e - 1] == 0x20 || buf[e - 1] == 0x09 { e -= 1 }
        return e > s ? s..<e : r
    }

    /// Removes every field for which `shouldRemove` holds, in one pass, keeping the order of the rest.
    public mutating func removeAll(where shouldRemove: (Field) throws -> Bool) rethrows {
        try fields.removeAll(where: shouldRemove)
    }

    public mutating func set(_ name: String, _ value: String) {
        remove(name)
        append(name, value)
    }

    /// Comma-separated list elements of every `name` field, trimmed, lowercased (for Connection, TE, …).
    public func tokens(_ name: String) -> [String] {
        var out: [String] = []
        for f in fields where f.name.equalsIgnoringASCIICase(name) {
            for part in f.value.split(separator: ",") {
                let t = part.trimmingOWS().lowercased()
                if !t.isEmpty { out.append(t) }
            }
        }
        return out
    }

    /// Whether a `name` field lists `token` (case-insensitive, OWS trimmed), without allocating:
    /// the same answer as `tokens(name).contains(token.lowercased())` for an ASCII token.
    public func hasToken(_ name: String, _ token: String) -> Bool {
        for f in fields where f.name.equalsIgnoringASCIICase(name) {
            if listContains(f.value, token) { return true }
        }
        return false
    }
}

/// Whether the comma-separated list `list` has an element equal to `token`, ignoring ASCII case.
public func listContains(_ list: String, _ token: String) -> Bool {
    var list = list
    var token = token
    return list.withUTF8 { l in token.withUTF8 { t in listContains(l, t) } }
}

/// The same over bytes: elements are split at commas and trimmed of spaces and tabs.
func listContains(_ l: UnsafeBufferPointer<UInt8>, _ t: UnsafeBufferPointer<UInt8>) -> Bool {
    var found = false
    forEachListElement(UnsafeRawBufferPointer(l)) { e in
        if !found && e.count == t.count
            && asciiCaseInsensitiveEqual(UnsafeBufferPointer(start: e.baseAddress?.assumingMemoryBound(to: UInt8.self), count: e.count), t)
        {
            found = true
        }
    }
    return found
}

@usableFromInline @inline(__always)
func asciiCaseInsensitiveEqual(_ a: UnsafeBufferPointer<UInt8>, _ b: UnsafeBufferPointer<UInt8>) -> Bool {
    guard a.count == b.count else { return false }
    let n = a.count
    var i = 0
    // Eight bytes at a time while they are the same (names usually come in the spelling compared
    // with), then byte by byte from the first word that differs.
    if n >= 8, let pa = a.baseAddress, let pb = b.baseAddress {
        let ra = UnsafeRawPointer(pa)
        let rb = UnsafeRawPointer(pb)
        while i + 8 <= n && ra.loadUnaligned(fromByteOffset: i, as: UInt64.self) == rb.loadUnaligned(fromByteOffset: i, as: UInt64.self) {
            i += 8
        }
    }
    while i < n {
        let x = a[i]
        let y = b[i]
        if x != y {
            let lx = x | 0x20
            guard lx == y | 0x20, lx >= 0x61, lx <= 0x7a else { return false }
        }
        i += 1
    }
    return true
}

extension String {
    /// Whether `bytes` (e.g. a received field name) spell this string, ignoring ASCII case.
    public func equalsIgnoringASCIICase(_ bytes: UnsafeRawBufferPointer) -> Bool {
        guard utf8.count == bytes.count else { return false }
        let b = bytes.assumingMemoryBound(to: UInt8.self)
        if let r = utf8.withContiguousStorageIfAvailable({ a in asciiCaseInsensitiveEqual(a, b) }) { return r }
        var me = self
        return me.withUTF8 { a in asciiCaseInsensitiveEqual(a, b) }
    }

    public func equalsIgnoringASCIICase(_ other: String) -> Bool {
        // Native strings know their UTF-8 length: most names differ there already.
        guard utf8.count == other.utf8.count else { return false }
        if let r = utf8.withContiguousStorageIfAvailable({ a in
            other.utf8.withContiguousStorageIfAvailable { b in asciiCaseInsensitiveEqual(a, b) }
        }), let r {
            return r
        }
        for (x, y) in zip(utf8, other.utf8) where x != y {
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

/// Header bytes as a Latin-1 string: one scalar per byte, so obs-text bytes come back unchanged
/// when the string is written out again (`HTTP1Serializer.appendLatin1`). The one conversion the
/// HTTP/1.1 parser, the response-head ranges and the HTTP/2 session share. ASCII bytes, checked
/// here, become the string through the standard library's cheapest entry for their length: up to
/// 15 bytes, a small string built in place (no storage, no second check); longer, one more check
/// (`String(decoding:as:)`'s) and the storage.
func latin1String(_ p: UnsafePointer<UInt8>, _ n: Int) -> String {
    let buf = UnsafeBufferPointer(start: p, count: n)
    if isASCII(p, n) {
        if n <= 15 {
            return String(unsafeUninitializedCapacity: n) { out in
                out.baseAddress!.update(from: p, count: n)
                return n
            }
        }
        return String(decoding: buf, as: UTF8.self)
    }
    var scalars = String.UnicodeScalarView()
    for b in buf { scalars.append(Unicode.Scalar(b)) }
    return String(scalars)
}

/// A received field name as a string (`latin1String`), except that a name spelled exactly as one
/// of those heads commonly carry (byte for byte: case as received is kept) is that string literal:
/// no storage to allocate, check and free for it (a protected request's App Attest names are longer
/// than a small string's 15 bytes).
func fieldNameString(_ buf: UnsafeRawBufferPointer, _ r: Range<Int>) -> String {
    guard !r.isEmpty, let base = buf.baseAddress else { return "" }
    let p = base + r.lowerBound
    switch r.count {
    case 4: if spells(p, "Host") { return "Host" }
    case 6: if spells(p, "Accept") { return "Accept" }
    case 10:
        if spells(p, "User-Agent") { return "User-Agent" }
        if spells(p, "Connection") { return "Connection" }
    case 12: if spells(p, "Content-Type") { return "Content-Type" }
    case 13: if spells(p, "Authorization") { return "Authorization" }
    case 14: if spells(p, "Content-Length") { return "Content-Length" }
    case 15:
        if spells(p, "X-App-Assertion") { return "X-App-Assertion" }
        if spells(p, "Accept-Encoding") { return "Accept-Encoding" }
    case 17: if spells(p, "Transfer-Encoding") { return "Transfer-Encoding" }
    case 19: if spells(p, "X-App-Attest-Key-Id") { return "X-App-Attest-Key-Id" }
    case 22: if spells(p, "X-App-Attest-Challenge") { return "X-App-Attest-Challenge" }
    default: break
    }
    return latin1String(p.assumingMemoryBound(to: UInt8.self), r.count)
}

/// Whether the `s.utf8CodeUnitCount` bytes at `p` are `s`'s, exactly (eight at a time): the
/// received method and field names against their literals.
@inline(__always)
func spells(_ p: UnsafeRawPointer, _ s: StaticString) -> Bool {
    let q = UnsafeRawPointer(s.utf8Start)
    let n = s.utf8CodeUnitCount
    if n < 8 {
        for i in 0..<n where p.load(fromByteOffset: i, as: UInt8.self) != q.load(fromByteOffset: i, as: UInt8.self) { return false }
        return true
    }
    var i = 0
    while i + 8 <= n {
        if p.loadUnaligned(fromByteOffset: i, as: UInt64.self) != q.loadUnaligned(fromByteOffset: i, as: UInt64.self) { return false }
        i += 8
    }
    return i == n || p.loadUnaligned(fromByteOffset: n - 8, as: UInt64.self) == q.loadUnaligned(fromByteOffset: n - 8, as: UInt64.self)
}

/// Whether the `n` bytes at `p` are all ASCII: eight at a time (head fields are read as strings
/// on every protected request).
@inline(__always)
public func isASCII(_ p: UnsafePointer<UInt8>, _ n: Int) -> Bool {
    let raw = UnsafeRawPointer(p)
    var i = 0
    while i + 8 <= n {
        if raw.loadUnaligned(fromByteOffset: i, as: UInt64.self) & 0x8080_8080_8080_8080 != 0 { return false }
        i += 8
    }
    while i < n {
        if p[i] >= 0x80 { return false }
        i += 1
    }
    return true
}

/// The same for a range of a raw buffer.
func latin1String(_ buf: UnsafeRawBufferPointer, _ r: Range<Int>) -> String {
    guard !r.isEmpty, let base = buf.baseAddress else { return "" }
    return latin1String((base + r.lowerBound).assumingMemoryBound(to: UInt8.self), r.count)
}
