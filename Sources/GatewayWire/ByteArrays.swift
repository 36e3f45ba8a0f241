/// Byte arrays made on the request path.
///
/// `[UInt8](unsafeUninitializedCapacity:initializingWith:)` allocates through the standard library's
/// unspecialised `Array._allocateBufferUninitialized(minimumCapacity:)`, which looks the storage
/// class's generic metadata up at run time on every call: about 350 instructions before a byte is
/// written (callgrind, Swift 6.3 release build). An array made from a buffer instead
/// (`Array(UnsafeBufferPointer)`, specialised in the caller) allocates with the metadata known at
/// compile time. For the small arrays of a request (hashes, decoded headers, tokens) filling a
/// stack buffer and copying it costs far less than that lookup.
public enum ByteArrays {
    /// Largest count built on the stack; larger arrays are written in place (the lookup then costs
    /// less than the copy would).
    public static let stackLimit = 1024

    /// An array of at most `capacity` bytes: `fill` writes into uninitialised memory of `capacity`
    /// bytes and returns how many it initialised (at most `capacity`).
    @inlinable
    public static func make<E: Error>(
        capacity: Int, _ fill: (UnsafeMutableBufferPointer<UInt8>) throws(E) -> Int
    ) throws(E) -> [UInt8] {
        if capacity > stackLimit {
            var result: Result<Int, E> = .success(0)
            let array = [UInt8](unsafeUninitializedCapacity: capacity) { buffer, initialized in
                result = Result { () throws(E) in try fill(buffer) }
                initialized = (try? result.get()) ?? 0
                precondition(initialized <= capacity)
            }
            _ = try result.get()
            return array
        }
        return try withUnsafeTemporaryAllocation(of: UInt8.self, capacity: Swift.max(capacity, 1)) { buffer throws(E) in
            let count = try fill(buffer)
            precondition(count >= 0 && count <= capacity)
            return [UInt8](UnsafeBufferPointer(rebasing: buffer[..<count]))
        }
    }
}
