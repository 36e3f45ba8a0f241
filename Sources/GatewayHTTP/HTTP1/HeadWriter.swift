/// Writes a message head into a caller's fixed buffer: each append is a bounds check, a copy and an
/// index bump, where an `Array` append also checks uniqueness and capacity (about 90 instructions
/// per append, and a head takes 20 to 40 of them). A head larger than the buffer sets `overflowed`
/// and stops writing; the caller then writes it again into something larger (`appendHead`). The
/// small appends are inlinable: the proxy's writers (another module) call them per field.
public struct HeadWriter {
    public let base: UnsafeMutableRawPointer
    public let capacity: Int
    @usableFromInline var written = 0
    @usableFromInline var didOverflow = false
    /// The bytes written so far.
    @inlinable public var count: Int { written }
    /// Something did not fit: what was written is incomplete and must not be sent.
    @inlinable public var overflowed: Bool { didOverflow }

    public init(_ buffer: UnsafeMutableRawBufferPointer) {
        base = buffer.baseAddress!
        capacity = buffer.count
    }

    @inlinable @inline(__always)
    public mutating func append(_ byte: UInt8) {
        guard written < capacity else {
            didOverflow = true
            return
        }
        base.storeBytes(of: byte, toByteOffset: written, as: UInt8.self)
        written += 1
    }

    @inlinable @inline(__always)
    public mutating func append(_ bytes: UnsafeRawBufferPointer) {
        let n = bytes.count
        guard n > 0, let src = bytes.baseAddress else { return }
        guard capacity - written >= n else {
            didOverflow = true
            return
        }
        (base + written).copyMemory(from: src, byteCount: n)
        written += n
    }

    @inlinable @inline(__always)
    public mutating func append(_ s: StaticString) {
        append(UnsafeRawBufferPointer(start: s.utf8Start, count: s.utf8CodeUnitCount))
    }

    @inlinable @inline(__always)
    public mutating func crlf() {
        guard capacity - written >= 2 else {
            didOverflow = true
            return
        }
        base.storeBytes(of: 0x0a0d, toByteOffset: written, as: UInt16.self)  // CR LF, little-endian
        written += 2
    }

    /// Latin-1 bytes of `s` (see `HTTP1Serializer.appendLatin1`): its UTF-8 bytes when all are ASCII,
    /// else one byte per scalar (`?` above U+00FF, which the parser never produces).
    public mutating func appendLatin1(_ s: String) {
        let done: Bool? = s.utf8.withContiguousStorageIfAvailable { u in
            guard let base = u.baseAddress else { return true }
            guard isASCII(base, u.count) else { return false }
            append(UnsafeRawBufferPointer(u))
            return true
        }
        if done == true { return }
        for scalar in s.unicodeScalars { append(scalar.value < 256 ? UInt8(scalar.value) : UInt8(ascii: "?")) }
    }

    /// One field line: name ": " value CRLF.
    @inline(__always)
    public mutating func appendField(_ name: String, _ value: String) {
        appendLatin1(name)
        append(": ")
        appendLatin1(value)
        crlf()
    }

    /// The field line `f` of `buf` as "name: value" CRLF (OWS around the value dropped): one copy
    /// when the line is already written that way, as most are.
    @inlinable @inline(__always)
    public mutating func appendFieldLine(_ buf: UnsafeRawBufferPointer, _ f: HTTPFieldRange) {
        let colon = f.name.upperBound
        if f.value.lowerBound == colon + 2 && buf[colon + 1] == 0x20 {
            append(UnsafeRawBufferPointer(rebasing: buf[f.name.lowerBound..<f.value.upperBound]))
        } else {
            append(UnsafeRawBufferPointer(rebasing: buf[f.name]))
            append(": ")
            append(UnsafeRawBufferPointer(rebasing: buf[f.value]))
        }
        crlf()
    }

    /// The framing field of a request sent with `framing`: `Transfer-Encoding: chunked`, a
    /// `Content-Length`, or nothing.
    @inlinable
    public mutating func appendFraming(_ framing: BodyFraming) {
        switch framing {
        case .chunked: append("Transfer-Encoding: chunked\r\n")
        case .contentLength(let n):
            append("Content-Length: ")
            appendDecimal(n)
            crlf()
        case .none, .untilClose: break
        }
    }

    /// A decimal number without a String.
    @inlinable
    public mutating func appendDecimal(_ n: UInt64) {
        var divisor: UInt64 = 1
        while n / divisor >= 10 { divisor *= 10 }
        repeat {
            append(UInt8(0x30 + (n / divisor) % 10))
            divisor /= 10
        } while divisor > 0
    }

    /// "HTTP/1.x NNN " (the reason phrase and CRLF follow).
    @inlinable
    public mutating func appendStatusLineStart(status: Int, minorVersion: Int = 1) {
        append(minorVersion == 0 ? "HTTP/1.0 " : "HTTP/1.1 ")
        if (100...999).contains(status) {
            append(UInt8(0x30 + status / 100))
            append(UInt8(0x30 + status / 10 % 10))
            append(UInt8(0x30 + status % 10))
        } else {
            appendDecimal(UInt64(max(0, status)))
        }
        append(0x20)
    }

    /// The written bytes.
    public var bytes: UnsafeRawBufferPointer { UnsafeRawBufferPointer(start: base, count: count) }

    /// Runs `write` into a temporary buffer and appends the result to `out`: 1 KiB on the stack
    /// first, then heap buffers of growing size until the head fits. For callers without a
    /// scratch buffer of their own (tests, local answers); `write` must give the same bytes each run.
    public static func appendHead(to out: inout [UInt8], _ write: (inout HeadWriter) -> Void) {
        let done: Bool = withUnsafeTemporaryAllocation(byteCount: 1024, alignment: 8) { raw in
            var w = HeadWriter(raw)
            write(&w)
            guard !w.overflowed else { return false }
            out.append(contentsOf: w.bytes)
            return true
        }
        if done { return }
        var size = 8192
        while true {
            let raw = UnsafeMutableRawBufferPointer.allocate(byteCount: size, alignment: 8)
            defer { raw.deallocate() }
            var w = HeadWriter(raw)
            write(&w)
            if !w.overflowed {
                out.append(contentsOf: w.bytes)
                return
            }
            size *= 4
        }
    }
}
