import GatewayHTTP
import Testing

@Suite("HeadWriter")
struct HeadWriterTests {
    @Test("appends bytes, static strings, Latin-1 strings, decimals and CRLF; a piece that does not fit sets overflowed")
    func appendsAndOverflows() {
        let raw = UnsafeMutableRawBufferPointer.allocate(byteCount: 40, alignment: 8)
        defer { raw.deallocate() }
        var w = HeadWriter(raw)
        w.append("GET ")
        w.appendLatin1("/caf\u{E9}")
        w.append(0x20)
        w.appendDecimal(1_234_567)
        w.crlf()
        w.appendField("A", "b")
        #expect(Array(w.bytes) == Array("GET /caf".utf8) + [0xE9, 0x20] + Array("1234567\r\nA: b\r\n".utf8))
        #expect(!w.overflowed)
        let before = w.count
        w.append(UnsafeRawBufferPointer(start: raw.baseAddress, count: 30))  // does not fit
        #expect(w.overflowed && w.count == before)
    }

    @Test(
        "appendHead: the same bytes whether the head fits the stack buffer or needs heap buffers", arguments: [10, 1000, 1100, 9000, 70000])
    func appendHeadSizes(_ size: Int) {
        let value = String(repeating: "v", count: size)
        var out: [UInt8] = [9]
        HeadWriter.appendHead(to: &out) { w in
            w.appendStatusLineStart(status: 200)
            w.append("OK")
            w.crlf()
            w.appendField("X-Big", value)
            w.crlf()
        }
        #expect(out == [9] + Array("HTTP/1.1 200 OK\r\nX-Big: \(value)\r\n\r\n".utf8))
    }

    @Test("status line start, for 1xx to 9xx and out-of-range codes, HTTP/1.0 and 1.1")
    func statusLines() {
        for (status, minor, text) in [
            (200, 1, "HTTP/1.1 200 "), (999, 0, "HTTP/1.0 999 "), (42, 1, "HTTP/1.1 42 "), (1000, 1, "HTTP/1.1 1000 "),
        ] {
            var out: [UInt8] = []
            HeadWriter.appendHead(to: &out) { $0.appendStatusLineStart(status: status, minorVersion: minor) }
            #expect(out == Array(text.utf8))
        }
    }
}
