import GatewayWire
import Testing

@Suite("ByteArrays.make: byte arrays built on the stack (or in place above the limit)")
struct ByteArraysTests {
    private struct Stop: Error, Equatable { let at: Int }

    @Test("exactly the bytes written, for counts around the stack limit", arguments: [0, 1, 15, 16, 143, 1023, 1024, 1025, 4096])
    func written(capacity: Int) {
        let bytes = ByteArrays.make(capacity: capacity) { buffer in
            #expect(buffer.count >= capacity)
            for i in 0..<capacity { buffer[i] = UInt8(truncatingIfNeeded: i &* 31 &+ 7) }
            return capacity
        }
        #expect(bytes == (0..<capacity).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) })
    }

    @Test("fewer bytes than the capacity: the array has only those", arguments: [8, 2000])
    func fewer(capacity: Int) {
        let bytes = ByteArrays.make(capacity: capacity) { buffer in
            buffer[0] = 1
            buffer[1] = 2
            return 2
        }
        #expect(bytes == [1, 2])
    }

    @Test("an error thrown by the filler is the caller's, typed, on both paths", arguments: [100, 5000])
    func throwing(capacity: Int) {
        #expect(throws: Stop(at: capacity)) {
            _ = try ByteArrays.make(capacity: capacity) { (_: UnsafeMutableBufferPointer<UInt8>) throws(Stop) -> Int in
                throw Stop(at: capacity)
            }
        }
    }
}
