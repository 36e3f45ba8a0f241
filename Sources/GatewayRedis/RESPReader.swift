import GatewayWire
import Glibc

/// Redis replies read from a byte stream as its bytes arrive: RESP2, what a connection that never
/// sent `HELLO 3` receives (`+` status, `-` error, `:` integer, `$` bulk string, `*` array, and
/// the null bulk string and array `$-1` / `*-1`).
///
/// Resumable: `read` takes the bytes not yet used and answers a complete reply, or that more bytes
/// are needed, with the count of bytes it used either way. The elements of an array finished so
/// far are kept by the reader (their bytes are used), so a big reply arriving in many reads is
/// parsed once, not from its start at every read; the bytes of an unfinished element are not used
/// and come again with the next read.
///
/// Made for the gate's round trip: one reply is one pass over its bytes, a bulk string is one
/// copy, and nothing is allocated beyond the values themselves (hiredis' reader, used before, made
/// a reply tree of C objects that was then copied into `RedisValue`s and freed: per accepted
/// request ≈ 19 k instructions, the commit script's reply being an array of 16).
///
/// Anything else is a protocol error (the connection is then unusable and is closed): an unknown
/// type byte (RESP3 types included), a length or integer that is not a decimal number, a negative
/// length other than -1, a bulk string not followed by CR LF, a bulk string longer than Redis' own
/// limit (`proto-max-bulk-len` at most 512 MiB), an array of more than 2^32 - 1 elements or nested
/// deeper than 64, a line of more than 1 MiB without its end.
///
/// `@_spi(Fuzzing)`: fuzz/'s FuzzRESP holds it to hiredis' reader.
@_spi(Fuzzing) public struct RESPReader {
    public enum Step: Equatable {
        /// A complete reply, and the bytes used (from the start of the bytes given).
        case reply(RedisValue, used: Int)
        /// More bytes are needed; `used` bytes (finished elements of an array) are done with.
        case incomplete(used: Int)
        /// Not RESP2: the connection cannot be read any further.
        case malformed(String)
    }

    static let maxBulkLength = 512 * 1024 * 1024
    static let maxElements = (1 << 32) - 1
    static let maxDepth = 64
    static let maxLineLength = 1024 * 1024

    private struct OpenArray {
        var items: [RedisValue]
        var remaining: Int
    }

    /// Arrays begun and not finished, the innermost last.
    private var open: [OpenArray] = []

    /// True while an array is half read (its finished elements held here).
    public var isMidReply: Bool { !open.isEmpty }

    public init() {}

    /// Reads the next reply from `bytes` (the stream's bytes not used yet).
    public mutating func read(_ bytes: UnsafeRawBufferPointer) -> Step {
        var i = 0
        let n = bytes.count
        while true {
            guard i < n else { return .incomplete(used: i) }
            let type = bytes[i]
            // Refused at once, as hiredis does, not after the line's end: a peer that is not Redis (a
            // TLS alert, a banner) may send no CR LF at all.
            guard Self.isReplyType(type) else { return Self.unknownType(bytes, at: i) }
            guard let lineEnd = Self.lineEnd(bytes, from: i + 1) else {
                if n - i > Self.maxLineLength { return .malformed("a reply line of more than \(Self.maxLineLength) bytes") }
                return .incomplete(used: i)
            }
            let line = UnsafeRawBufferPointer(rebasing: bytes[(i + 1)..<lineEnd])
            var next = lineEnd + 2
            var value: RedisValue
            switch type {
            case UInt8(ascii: "+"):
                value = .status(String(decoding: line, as: UTF8.self))
            case UInt8(ascii: "-"):
                value = .error(String(decoding: line, as: UTF8.self))
            case UInt8(ascii: ":"):
                guard let integer = RedisValue.parseDecimal(line) else { return .malformed("bad integer \(Self.show(line))") }
                value = .integer(integer)
            case UInt8(ascii: "$"):
                guard let count = Self.length(line) else { return .malformed("bad bulk string length \(Self.show(line))") }
                if count == -1 {
                    value = .null
                    break
                }
                guard count <= Self.maxBulkLength else { return .malformed("a bulk string of \(count) bytes") }
                guard n - next >= count + 2 else { return .incomplete(used: i) }
                guard bytes[next + count] == 0x0d, bytes[next + count + 1] == 0x0a else {
                    return .malformed("a bulk string of \(count) bytes not followed by CR LF")
                }
                value = .string(Array(UnsafeRawBufferPointer(rebasing: bytes[next..<(next + count)])))
                next += count + 2
            case UInt8(ascii: "*"):
                guard let count = Self.length(line) else { return .malformed("bad array length \(Self.show(line))") }
                if count == -1 {
                    value = .null
                    break
                }
                guard count <= Self.maxElements else { return .malformed("an array of \(count) elements") }
                if count == 0 {
                    value = .array([])
                    break
                }
                guard open.count < Self.maxDepth else { return .malformed("arrays nested deeper than \(Self.maxDepth)") }
                var items: [RedisValue] = []
                items.reserveCapacity(min(count, 1024))
                open.append(OpenArray(items: items, remaining: count))
                i = next
                continue
            default:
                return Self.unknownType(bytes, at: i)
            }
            i = next
            // The value finishes the arrays it completes, innermost first.
            while !open.isEmpty {
                let last = open.count - 1
                open[last].items.append(value)
                open[last].remaining -= 1
                guard open[last].remaining == 0 else { break }
                value = .array(open.removeLast().items)
            }
            if open.isEmpty { return .reply(value, used: i) }
        }
    }

    /// `+ - : $ *`: the RESP2 types.
    private static func isReplyType(_ b: UInt8) -> Bool {
        b == UInt8(ascii: "+") || b == UInt8(ascii: "-") || b == UInt8(ascii: ":") || b == UInt8(ascii: "$") || b == UInt8(ascii: "*")
    }

    private static func unknownType(_ bytes: UnsafeRawBufferPointer, at i: Int) -> Step {
        .malformed("unknown reply type \(show(UnsafeRawBufferPointer(rebasing: bytes[i..<(i + 1)])))")
    }

    /// Forgets a half-read reply (the connection is closed and a new one starts from nothing).
    public mutating func reset() { open.removeAll() }

    /// A bulk string's or an array's length line: a count, or -1 (the null reply); nil for
    /// anything else (another negative number, not a number, beyond Int64).
    private static func length(_ line: UnsafeRawBufferPointer) -> Int? {
        guard let n = RedisValue.parseDecimal(line), n >= -1 else { return nil }
        return Int(n)
    }

    /// The index of the CR of the first CR LF at or after `from`, or nil.
    private static func lineEnd(_ bytes: UnsafeRawBufferPointer, from: Int) -> Int? {
        guard let base = bytes.baseAddress else { return nil }
        var i = from
        while i < bytes.count {
            guard let cr = memchr(base + i, 0x0d, bytes.count - i) else { return nil }
            let at = base.distance(to: UnsafeRawPointer(cr))
            guard at + 1 < bytes.count else { return nil }
            if bytes[at + 1] == 0x0a { return at }
            i = at + 1
        }
        return nil
    }

    /// At most 32 bytes of `bytes` for an error message, non-printable bytes escaped.
    private static func show(_ bytes: UnsafeRawBufferPointer) -> String {
        var s = "\""
        for b in bytes.prefix(32) {
            if b >= 0x20 && b < 0x7f && b != UInt8(ascii: "\"") && b != UInt8(ascii: "\\") {
                s.unicodeScalars.append(Unicode.Scalar(b))
            } else {
                s += "\\x" + Hex.encode([b])
            }
        }
        return s + (bytes.count > 32 ? "…\"" : "\"")
    }
}

/// A reader with its own buffer, for a connection that reads into a buffer of its own (the
/// threaded `RedisConnection`): `feed` the bytes read, then take replies with `next` until it
/// answers nil.
@_spi(Fuzzing) public struct BufferedRESPReader {
    private var reader = RESPReader()
    private var pending: [UInt8] = []
    private var start = 0

    public init() {}

    public mutating func feed(_ bytes: UnsafeRawBufferPointer) {
        if start > 0 && start == pending.count {
            pending.removeAll(keepingCapacity: pending.capacity <= 64 * 1024)
            start = 0
        } else if start >= 4096 && start * 2 >= pending.count {
            pending.removeFirst(start)
            start = 0
        }
        pending.append(contentsOf: bytes)
    }

    /// The next complete reply, nil when more bytes are needed, or the protocol error.
    public mutating func next() -> Result<RedisValue?, RESPProtocolError> {
        let step = pending.withUnsafeBytes { all in reader.read(UnsafeRawBufferPointer(rebasing: all[start...])) }
        switch step {
        case .reply(let value, let used):
            start += used
            return .success(value)
        case .incomplete(let used):
            start += used
            return .success(nil)
        case .malformed(let why):
            return .failure(RESPProtocolError(why: why))
        }
    }

    /// Forgets everything buffered (a new connection).
    public mutating func reset() {
        reader.reset()
        pending.removeAll(keepingCapacity: false)
        start = 0
    }
}

@_spi(Fuzzing) public struct RESPProtocolError: Error, Equatable {
    public let why: String
}
