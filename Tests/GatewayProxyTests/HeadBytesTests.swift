import Testing

@_spi(Fuzzing) @testable import GatewayProxy

/// The per-connection copy of a request head's bytes (`HeadBytes`): reused, bounded, and never
/// changed while the head's ranges are being read.
@Suite("Request head bytes")
struct HeadBytesTests {
    @Test("holds the last head; a large head's buffer is released after the exchange")
    func setAndTrim() {
        let h = HeadBytes()
        Array("GET / HTTP/1.1\r\n\r\n".utf8).withUnsafeBytes { h.set($0) }
        #expect(h.with { Array($0) } == Array("GET / HTTP/1.1\r\n\r\n".utf8))
        Array("PUT /x".utf8).withUnsafeBytes { h.set($0) }
        #expect(h.with { Array($0) } == Array("PUT /x".utf8))
        h.trim()
        #expect(h.with { $0.count } == 0)
        let big = [UInt8](repeating: 0x61, count: 20_000)
        big.withUnsafeBytes { h.set($0) }
        #expect(h.with { Array($0) } == big)
        h.trim()
        Array("GET".utf8).withUnsafeBytes { h.set($0) }
        #expect(h.with { Array($0) } == Array("GET".utf8))
    }

    @Test("changing the bytes while they are lent traps")
    func changeWhileLentTraps() async {
        await #expect(processExitsWith: .failure) {
            let h = HeadBytes()
            Array("abc".utf8).withUnsafeBytes { h.set($0) }
            h.with { _ in Array("d".utf8).withUnsafeBytes { h.set($0) } }
        }
        await #expect(processExitsWith: .failure) {
            let h = HeadBytes()
            h.with { _ in h.trim() }
        }
    }
}
