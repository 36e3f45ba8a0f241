import CGatewayNGHTTP2

/// A response header list for nghttp2, built in one reused byte buffer: names and values side by
/// side, `spans` locating them. It applies the rules of a response head that HTTP/2 can carry (RFC
/// 9113 §8.2): names lowercased, fields whose name is not a token, `host`, or whose value has NUL, CR,
/// LF or leading/trailing SP/HTAB are dropped. Latin-1 text stays the same bytes (the HTTP/1.1 parser
/// reads bytes as Latin-1). One per session: after the first responses it allocates nothing. A proxy
/// fills one through `HTTP2ServerSession.submitResponse(streamID:status:endStream:fields:)`.
public struct HTTP2HeaderBlock {
    private(set) var bytes: [UInt8] = []
    /// (name start, name length, value start, value length) in `bytes`.
    private(set) var spans: [(Int, Int, Int, Int)] = []
    private var nva: [nghttp2_nv] = []

    mutating func reset() {
        bytes.removeAll(keepingCapacity: true)
        spans.removeAll(keepingCapacity: true)
    }

    /// `:status` (three digits for 100...999).
    mutating func appendStatus(_ status: Int) {
        let n = bytes.count
        bytes.append(contentsOf: [0x3a, 0x73, 0x74, 0x61, 0x74, 0x75, 0x73])  // ":status"
        let v = bytes.count
        if status >= 100 && status <= 999 {
            bytes.append(UInt8(0x30 + status / 100))
            bytes.append(UInt8(0x30 + status / 10 % 10))
            bytes.append(UInt8(0x30 + status % 10))
        } else {
            HTTP1Serializer.appendLatin1(String(status), &bytes)
        }
        spans.append((n, v - n, v, bytes.count - v))
    }

    /// A field from strings (local answers, fields set by configuration), dropped when HTTP/2 cannot
    /// carry it; returns whether it was kept.
    @discardableResult
    public mutating func append(name: String, value: String) -> Bool {
        let n = bytes.count
        HTTP1Serializer.appendLatin1(name, &bytes)
        let v = bytes.count
        HTTP1Serializer.appendLatin1(value, &bytes)
        return commit(nameStart: n, valueStart: v)
    }

    /// A field from raw bytes (a proxied response head), dropped when HTTP/2 cannot carry it.
    @discardableResult
    public mutating func append(name: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) -> Bool {
        let n = bytes.count
        bytes.append(contentsOf: name)
        let v = bytes.count
        bytes.append(contentsOf: value)
        return commit(nameStart: n, valueStart: v)
    }

    /// Starts a field whose value is appended piece by piece (`appendValue`), then `commit`ted.
    public mutating func beginField(name: StaticString) -> (Int, Int) {
        let n = bytes.count
        bytes.append(contentsOf: UnsafeBufferPointer(start: name.utf8Start, count: name.utf8CodeUnitCount))
        return (n, bytes.count)
    }

    public mutating func appendValue(_ piece: UnsafeRawBufferPointer) { bytes.append(contentsOf: piece) }
    public mutating func appendValue(_ piece: String) { HTTP1Serializer.appendLatin1(piece, &bytes) }

    /// Validates the field whose name starts at `nameStart` and value at `valueStart` (running to the
    /// end of `bytes`): lowercases the name and keeps the field, or removes its bytes.
    @discardableResult
    public mutating func commit(nameStart n: Int, valueStart v: Int) -> Bool {
        let end = bytes.count
        let ok: Bool = bytes.withUnsafeMutableBufferPointer { buf in
            guard v > n, let b = buf.baseAddress else { return false }
            for i in n..<v {
                let c = b[i]
                guard HTTPChar.isTchar(c) else { return false }
                if c >= 0x41 && c <= 0x5a { b[i] = c | 0x20 }
            }
            // "host" is the request's (:authority); it has no place in a response.
            if v - n == 4 && b[n] == 0x68 && b[n + 1] == 0x6f && b[n + 2] == 0x73 && b[n + 3] == 0x74 { return false }
            if end > v {
                let f = b[v]
                let l = b[end - 1]
                if f == 0x20 || f == 0x09 || l == 0x20 || l == 0x09 { return false }
                for i in v..<end {
                    let c = b[i]
                    if c == 0 || c == 0x0a || c == 0x0d { return false }
                }
            }
            return true
        }
        if ok {
            spans.append((n, v - n, v, end - v))
        } else {
            bytes.removeSubrange(n..<end)
        }
        return ok
    }

    /// Calls `body` with the nghttp2 name/value array; its pointers are valid only inside `body`
    /// (nghttp2 copies them during the submit call).
    mutating func withNVArray<R>(_ body: (UnsafeBufferPointer<nghttp2_nv>) -> R) -> R {
        bytes.append(0)  // never empty, so there is a base address
        var nva = self.nva  // taken out, so that the closure below touches one stored property only
        self.nva = []
        nva.removeAll(keepingCapacity: true)
        let spans = self.spans
        let result = bytes.withUnsafeMutableBufferPointer { b -> R in
            let base = b.baseAddress!
            for s in spans {
                nva.append(
                    nghttp2_nv(
                        name: base + s.0, value: base + s.2, namelen: s.1, valuelen: s.3,
                        flags: UInt8(NGHTTP2_NV_FLAG_NONE.rawValue)))
            }
            return nva.withUnsafeBufferPointer(body)
        }
        bytes.removeLast()
        self.nva = nva
        return result
    }

    /// The pairs as strings (tests).
    var pairs: [(String, String)] {
        spans.map { s in
            (latin1String(bytes, s.0, s.1), latin1String(bytes, s.2, s.3))
        }
    }

    private func latin1String(_ b: [UInt8], _ start: Int, _ count: Int) -> String {
        b.withUnsafeBufferPointer { GatewayHTTP.latin1String($0.baseAddress! + start, count) }
    }
}
