import Testing

@_spi(Fuzzing) @testable import GatewayRedis

/// What fuzz/FuzzRESP found (its inputs are kept in fuzz/FailCases/FuzzRESP), pinned here.
@Suite("RESP reader: the fuzzer's cases")
struct RESPReaderFuzzCaseTests {
    static func read(_ bytes: [UInt8]) -> RESPReader.Step {
        var reader = RESPReader()
        return bytes.withUnsafeBytes { reader.read($0) }
    }

    /// fuzz/FailCases/FuzzRESP/crash-22eb422c…: the reader waited for the line's CR LF before looking
    /// at its type byte, where hiredis refuses at once; a peer that is not Redis (here a TLS alert)
    /// may never send a CR LF.
    @Test("an unknown type byte is refused at once, before its line ends, alone or inside an array")
    func unknownTypeBeforeLineEnd() {
        #expect(Self.read(Array("3870:913\r".utf8)) == .malformed("unknown reply type \"3\""))
        #expect(Self.read([0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x32]) == .malformed("unknown reply type \"\\x15\""))
        #expect(Self.read(Array("*2\r\n:1\r\n!".utf8)) == .malformed("unknown reply type \"!\""))
        // A known type still waits for its line.
        #expect(Self.read(Array("*2\r\n:1\r\n:2".utf8)) == .incomplete(used: 8))  // the finished element is used
        #expect(Self.read(Array("+OK".utf8)) == .incomplete(used: 0))
    }
}
