/// A growable byte buffer with a read index: appends at the end, consumes from the front, compacts
/// when it needs room, so that consuming is O(1).
///
/// A reference type over raw memory, so that a connection's hot path touches it through plain loads
/// and stores: the stored properties are private and every access to them is a scalar one, which
/// lets the compiler drop the dynamic exclusivity checks that an `Array` property of a class costs
/// on each access. The one hazard of raw memory (a mutation that reallocates while the bytes are
/// lent to `withReadableBytes`) is checked instead by `lent`: such a mutation traps, as the
/// exclusivity check would have, and never frees bytes still in use.
public final class ByteBuffer {
    private var base: UnsafeMutableRawPointer?
    private var capacity = 0
    private var readIndex = 0
    private var writeIndex = 0
    /// True while `withReadableBytes` runs: appending, consuming or clearing then would move or free
    /// the bytes lent out.
    private var lent = false

    /// Capacity kept after everything was consumed; a larger buffer is freed (an idle connection
    /// then holds no large allocation).
    static let keptCapacity = 64 * 1024

    public init() {}

    deinit { base?.deallocate() }

    public var readableBytes: Int { writeIndex - readIndex }
    public var isEmpty: Bool { writeIndex == readIndex }
    /// Bytes allocated (for tests and memory accounting).
    public var allocatedBytes: Int { capacity }

    public func append(_ bytes: UnsafeRawBufferPointer) {
        precondition(!lent, "ByteBuffer: append while its bytes are lent out")
        let n = bytes.count
        guard n > 0, let src = bytes.baseAddress else { return }
        let at = reserve(n)
        at.copyMemory(from: src, byteCount: n)
        writeIndex += n
    }

    public func append(_ bytes: some Sequence<UInt8>) {
        let array = Array(bytes)
        array.withUnsafeBytes { append($0) }
    }

    public func consume(_ n: Int) {
        precondition(!lent, "ByteBuffer: consume while its bytes are lent out")
        precondition(n >= 0 && n <= writeIndex - readIndex, "ByteBuffer: consuming \(n) of \(writeIndex - readIndex)")
        readIndex += n
        if readIndex == writeIndex {
            readIndex = 0
            writeIndex = 0
            if capacity > Self.keptCapacity { release() }
        }
    }

    public func clear() {
        precondition(!lent, "ByteBuffer: clear while its bytes are lent out")
        readIndex = 0
        writeIndex = 0
        release()
    }

    /// The readable bytes, for parsers (offsets are relative to the first readable byte). Valid only
    /// inside `body`; the buffer cannot be changed meanwhile (it traps).
    public func withReadableBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        let outer = lent
        lent = true
        defer { lent = outer }
        return try body(UnsafeRawBufferPointer(start: base.map { $0 + readIndex }, count: writeIndex - readIndex))
    }

    /// Room for `n` more bytes at the end; returns where they go.
    private func reserve(_ n: Int) -> UnsafeMutableRawPointer {
        if let base, writeIndex + n <= capacity { return base + writeIndex }
        let live = writeIndex - readIndex
        if let base, live + n <= capacity {
            // Room at the front: move the live bytes down.
            if live > 0 { base.copyMemory(from: base + readIndex, byteCount: live) }
            readIndex = 0
            writeIndex = live
            return base + live
        }
        // Grow: at least double, and round small buffers up to 64 bytes (reads are usually small).
        let needed = live + n
        let newCapacity = max(capacity * 2, 128, (needed + 63) & ~63)
        let fresh = UnsafeMutableRawPointer.allocate(byteCount: newCapacity, alignment: 16)
        if let base {
            if live > 0 { fresh.copyMemory(from: base + readIndex, byteCount: live) }
            base.deallocate()
        }
        base = fresh
        capacity = newCapacity
        readIndex = 0
        writeIndex = live
        return fresh + live
    }

    private func release() {
        base?.deallocate()
        base = nil
        capacity = 0
    }
}
