import GatewayIO
import Testing

@Suite("ByteBuffer")
struct ByteBufferTests {
    static func contents(_ b: ByteBuffer) -> [UInt8] { b.withReadableBytes { Array($0) } }

    @Test("appends and consumes in order across growth and compaction, against an Array model")
    func modelled() {
        let b = ByteBuffer()
        var model: [UInt8] = []
        var next: UInt8 = 0
        var seed: UInt64 = 42
        for step in 0..<5000 {
            seed = seed &* 6364136223846793005 &+ 1442695040888963407
            let r = Int(seed >> 33)
            if r % 3 != 0 {
                let n = r % 700
                var chunk = [UInt8](repeating: 0, count: n)
                for i in 0..<n {
                    chunk[i] = next
                    next &+= 1
                }
                chunk.withUnsafeBytes { b.append($0) }
                model += chunk
            } else {
                let n = model.isEmpty ? 0 : r % (model.count + 1)
                b.consume(n)
                model.removeFirst(n)
            }
            #expect(b.readableBytes == model.count)
            if step % 97 == 0 { #expect(Self.contents(b) == model) }
        }
        #expect(Self.contents(b) == model)
    }

    @Test("a fully consumed large buffer is freed; a small one is kept")
    func capacityPolicy() {
        let b = ByteBuffer()
        [UInt8](repeating: 1, count: 100).withUnsafeBytes { b.append($0) }
        b.consume(100)
        #expect(b.isEmpty && b.allocatedBytes > 0 && b.allocatedBytes <= 256)
        [UInt8](repeating: 1, count: 200_000).withUnsafeBytes { b.append($0) }
        b.consume(200_000)
        #expect(b.allocatedBytes == 0)
        b.append([1, 2, 3])
        b.clear()
        #expect(b.allocatedBytes == 0 && b.isEmpty)
    }

    @Test("changing the buffer while its bytes are lent out traps instead of freeing them")
    func mutationWhileLentTraps() async {
        await #expect(processExitsWith: .failure) {
            let b = ByteBuffer()
            b.append([1, 2, 3])
            b.withReadableBytes { _ in b.append([4]) }
        }
        await #expect(processExitsWith: .failure) {
            let b = ByteBuffer()
            b.append([1, 2, 3])
            b.withReadableBytes { _ in b.consume(1) }
        }
    }

    @Test("nested reads are allowed, and mutation works again after them")
    func nestedReads() {
        let b = ByteBuffer()
        b.append([1, 2, 3])
        let n = b.withReadableBytes { outer in b.withReadableBytes { inner in outer.count + inner.count } }
        #expect(n == 6)
        b.consume(1)
        #expect(Self.contents(b) == [2, 3])
    }
}
