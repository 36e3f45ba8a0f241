import GatewayHTTP

/// One id per exchange (`X-Request-Id`), HTTP/1.1 and HTTP/2 alike: the client's own when it sent
/// exactly one valid `X-Request-Id` field, otherwise a new one. The id goes to the upstream (the
/// client's field never does as sent: `GatewayOwnedFields`; the gateway writes the id it chose),
/// back to the client on every response (proxied, local, errors), into the access line, and names
/// the exchange's `/explain` entry.
///
/// Valid (`isValid`): 1 to 128 bytes of `A-Z a-z 0-9 - _ . : + =`: UUIDs, ULIDs, hex and base64url
/// ids, `req_…`, `Root=1-…` trace ids; nothing that needs escaping in a header, a JSON string, a
/// log line or an admin URL path. Anything else (empty, longer, a space, a quote, `/`, several
/// fields) is replaced by a generated id, so that what the gateway logs and forwards is always safe.
public enum RequestID {
    public static let field = "X-Request-Id"
    public static let maxBytes = 128

    @inline(__always)
    static func isIDByte(_ c: UInt8) -> Bool {
        switch c {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
            UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."), UInt8(ascii: ":"), UInt8(ascii: "+"), UInt8(ascii: "="):
            true
        default: false
        }
    }

    public static func isValid(_ bytes: UnsafeRawBufferPointer) -> Bool {
        guard bytes.count >= 1 && bytes.count <= maxBytes else { return false }
        for c in bytes where !isIDByte(c) { return false }
        return true
    }

    public static func isValid(_ text: String) -> Bool {
        var text = text
        return text.withUTF8 { isValid(UnsafeRawBufferPointer($0)) }
    }

    /// The client's id in an HTTP/1.1 head (ranges of `buf`): the value of its one `X-Request-Id`
    /// field when valid; nil when there is none, several, or an invalid one.
    static func fromClient(_ head: HTTPRequestHeadLines, _ buf: UnsafeRawBufferPointer) -> String? {
        var found: Range<Int>?
        for f in head.fields where f.name.count == 12 {
            guard equalsIgnoringCase(UnsafeRawBufferPointer(rebasing: buf[f.name]), "X-Request-Id") else { continue }
            if found != nil { return nil }
            found = f.value
        }
        guard let r = found else { return nil }
        let value = UnsafeRawBufferPointer(rebasing: buf[r])
        guard isValid(value) else { return nil }
        return String(decoding: value, as: UTF8.self)  // ASCII: valid UTF-8 as it is
    }

    /// The same for a head of strings (HTTP/2).
    static func fromClient(_ head: HTTPRequestHead) -> String? {
        var found: String?
        for f in head.headers where f.name.utf8.count == 12 && f.name.equalsIgnoringASCIICase(field) {
            if found != nil { return nil }
            found = f.value
        }
        guard let id = found, isValid(id) else { return nil }
        return id
    }
}

/// Makes request ids, one generator per listener and event loop (loop-confined): a random prefix
/// of 10 characters (60 bits from the system's CSPRNG) and a counter of 5 characters (2^30 ids,
/// then a new prefix), in the base64url alphabet: 15 characters, which Swift keeps inline in the
/// `String` (no allocation per request). Unique within the process, and across a fleet unless two
/// generators draw the same 60-bit prefix.
public final class RequestIDGenerator {
    private static let alphabet: [UInt8] = Array("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz-_".utf8)
    static let length = 15
    private var prefix: UInt64 = 0
    private var counter: UInt32 = 0
    private var source: () -> UInt64

    /// - Parameter random: the prefix's source (tests pass a fixed one).
    public init(random: @escaping () -> UInt64 = { var g = SystemRandomNumberGenerator(); return g.next() }) {
        source = random
        prefix = random()
    }

    public func next() -> String {
        if counter == 1 << 30 {
            prefix = source()
            counter = 0
        }
        let n = counter
        counter &+= 1
        let p = prefix
        return String(unsafeUninitializedCapacity: Self.length) { out in
            Self.alphabet.withUnsafeBufferPointer { a in
                for i in 0..<10 { out[i] = a[Int((p >> UInt64(6 * i)) & 63)] }
                for i in 0..<5 { out[10 + i] = a[Int((n >> UInt32(6 * (4 - i))) & 63)] }
            }
            return Self.length
        }
    }
}
