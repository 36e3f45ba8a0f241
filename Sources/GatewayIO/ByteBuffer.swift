/// A growable byte buffer with a read index: appends at the end, consumes from the front, compacts
/// lazily so that consuming is O(1) amortised.
public struct ByteBuffer: Sendable {
    public private(set) var storage: [UInt8] = []
    public private(set) var readIndex = 0

    public init() {}

    public var readableBytes: Int { storage.count - readIndex }
    public var isEmpty: Bool { readableBytes == 0 }

    public mutating func append(_ bytes: UnsafeRawBufferPointer) {
        compactIfWorthIt()
        storage.append(contentsOf: bytes)
    }

    public mutating func append(_ bytes: some Sequence<UInt8>) {
        compactIfWorthIt()
        storage.append(contentsOf: bytes)
    }

    public mutating func consume(_ n: Int) {
        precondition(n <= readableBytes, "ByteBuffer: consuming \(n) of \(readableBytes)")
        readIndex += n
        if readIndex == storage.count {
            storage.removeAll(keepingCapacity: storage.capacity <= 64 * 1024)
            readIndex = 0
        }
    }

    public mutating func clear() {
        storage.removeAll(keepingCapacity: false)
        readIndex = 0
    }

    /// The readable bytes, for parsers (offsets are relative to the first readable byte).
    public func withReadableBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try storage.withUnsafeBytes { try body(UnsafeRawBufferPointer(rebasing: $0[readIndex...])) }
    }

    private mutating func compactIfWorthIt() {
        if readIndex > 0 && readIndex >= storage.count / 2 {
            storage.removeFirst(readIndex)
            readIndex = 0
        }
    }
}
