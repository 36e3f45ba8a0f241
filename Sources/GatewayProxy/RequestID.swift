import GatewayHTTP

/// One id per exchange (`X-Request-Id`), HTTP/1.1 and HTTP/2 alike: the client's own when it sent
/// exactly one valid `X-Request-Id` field, otherwise a new one (`RequestIDGenerator`). The id goes to
/// the upstream (the client's field never does as sent: `GatewayOwnedFields`; the gateway writes the
/// id it chose), back to the client on every response (proxied, local, errors), into the access
/// line, and names the exchange's `/explain` entry.
///
/// Valid (`isValid`): 1 to 128 bytes of `A-Z a-z 0-9 - _ . : + =`: UUIDs, ULIDs, hex and base64url
/// ids, `req_…`, `Root=1-…` trace ids; nothing that needs escaping in a header, a JSON string, a
/// log line or an admin URL path. Anything else (empty, longer, a space, a quote, `/`, several
/// fields) is replaced by a generated id, so that what the gateway logs and forwards is always safe.
///
/// A generated id is kept as its 15 ASCII bytes in two words, its text made only when asked
/// (`text`: a refusal's JSON, `/explain`); writers copy its bytes (`withBytes`).
public struct RequestID: Sendable, Equatable, CustomStringConvertible {
    @usableFromInline
    enum Storage: Sendable, Equatable {
        /// 15 ASCII bytes, little-endian in the two words (the 16th byte is 0).
        case generated(UInt64, UInt64)
        case text(String)
    }

    @usableFromInline let storage: Storage

    public static let field = "X-Request-Id"
    public static let maxBytes = 128

    init(generated low: UInt64, _ high: UInt64) { storage = .generated(low, high) }

    /// An id given as text (a client's, checked with `isValid`; tests).
    public init(_ text: String) { storage = .text(text) }

    /// The id's text.
    public var text: String {
        switch storage {
        case .text(let s): s
        case .generated: withBytes { String(decoding: $0, as: UTF8.self) }
        }
    }

    public var description: String { text }

    /// Calls `body` with the id's bytes (ASCII). Inlinable: the writers in other modules (the access
    /// line) get it specialized, without a generic call per line.
    @inlinable @inline(__always)
    public func withBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        switch storage {
        case .generated(let low, let high):
            let words = (low, high)
            return try withUnsafeBytes(of: words) { try body(UnsafeRawBufferPointer(rebasing: $0[0..<15])) }
        case .text(var s):
            return try s.withUTF8 { try body(UnsafeRawBufferPointer($0)) }
        }
    }

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

    /// The client's id in an HTTP/1.1 head (`HeadExtras` of it, ranges of `buf`): the value of its
    /// one `X-Request-Id` field when valid; nil when there is none, several, or an invalid one.
    static func fromClient(_ extras: HeadExtras, _ buf: UnsafeRawBufferPointer) -> RequestID? {
        guard extras.requestIDCount == 1, let r = extras.requestID else { return nil }
        let value = UnsafeRawBufferPointer(rebasing: buf[r])
        guard isValid(value) else { return nil }
        return RequestID(String(decoding: value, as: UTF8.self))  // ASCII: valid UTF-8 as it is
    }

    /// The same for a head of strings (HTTP/2).
    static func fromClient(_ head: HTTPRequestHead) -> RequestID? {
        var found: String?
        for f in head.headers where f.name.utf8.count == 12 && f.name.equalsIgnoringASCIICase(field) {
            if found != nil { return nil }
            found = f.value
        }
        guard let id = found, isValid(id) else { return nil }
        return RequestID(id)
    }
}

/// Makes request ids, one generator per listener and event loop (loop-confined): a random prefix
/// of 10 characters (60 bits from the system's CSPRNG) and a counter of 5 characters (2^30 ids,
/// then a new prefix), in the base64url alphabet: 15 characters. The prefix is encoded once; an id
/// costs its 5 counter characters. Unique within the process, and across a fleet unless two
/// generators draw the same 60-bit prefix.
public final class RequestIDGenerator {
    static let alphabet: [UInt8] = Array("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz-_".utf8)
    static let length = 15
    /// The prefix's 10 characters: bytes 0–7 in `low`, 8–9 in the first two bytes of `high`.
    private var low: UInt64 = 0
    private var high: UInt64 = 0
    private var counter: UInt32 = 0
    private let source: () -> UInt64

    /// - Parameter random: the prefix's source (tests pass a fixed one).
    public init(
        random: @escaping () -> UInt64 = {
            var g = SystemRandomNumberGenerator(); return g.next()
        }
    ) {
        source = random
        setPrefix(random())
    }

    private func setPrefix(_ p: UInt64) {
        var chars = [UInt8](repeating: 0, count: 10)
        for i in 0..<10 { chars[i] = Self.alphabet[Int((p >> UInt64(6 * i)) & 63)] }
        low = 0
        high = 0
        for i in 0..<8 { low |= UInt64(chars[i]) << UInt64(8 * i) }
        high = UInt64(chars[8]) | UInt64(chars[9]) << 8
    }

    public func next() -> RequestID {
        if counter == 1 << 30 {
            setPrefix(source())
            counter = 0
        }
        let n = counter
        counter &+= 1
        var h = high
        Self.alphabet.withUnsafeBufferPointer { a in
            // Bytes 10–14: the counter, most significant character first.
            for i in 0..<5 { h |= UInt64(a[Int((n >> UInt32(6 * (4 - i))) & 63)]) << UInt64(8 * (2 + i)) }
        }
        return RequestID(generated: low, h)
    }
}
