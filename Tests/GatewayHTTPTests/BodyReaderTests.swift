import GatewayHTTP
import Testing

@Suite("BodyReader: a body of each framing over split buffers")
struct BodyReaderTests {
    /// Feeds `input` in pieces of `step` bytes, keeping unconsumed bytes like a connection buffer.
    static func run(_ framing: BodyFraming, _ input: String, step: Int) throws -> (body: String, done: Bool, rest: String) {
        var reader = BodyReader(framing)
        var pending: [UInt8] = []
        var body: [UInt8] = []
        var done = false
        var fed = 0
        let bytes = Array(input.utf8)
        while !done && fed < bytes.count {
            pending += bytes[fed..<min(fed + step, bytes.count)]
            fed = min(fed + step, bytes.count)
            let (used, finished) = try pending.withUnsafeBytes { buf in
                try reader.read(buf) { body += $0 }
            }
            pending.removeFirst(used)
            done = finished
        }
        let rest = pending + bytes[fed...]
        return (String(decoding: body, as: UTF8.self), done, String(decoding: rest, as: UTF8.self))
    }

    @Test func contentLengthStopsAtItsLength() throws {
        for step in [1, 3, 100] {
            let r = try Self.run(.contentLength(5), "hello GET / next", step: step)
            #expect(r.body == "hello" && r.done && r.rest == " GET / next", "step \(step)")
        }
    }

    @Test func chunkedIsDechunkedAndEndsAtTheLastChunk() throws {
        for step in [1, 2, 7, 100] {
            let r = try Self.run(.chunked, "5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: t\r\n\r\nNEXT", step: step)
            #expect(r.body == "hello world" && r.done && r.rest == "NEXT", "step \(step): \(r)")
        }
    }

    @Test func noneEndsAtOnceAndUntilCloseNever() throws {
        var none = BodyReader(.none)
        #expect(try [UInt8]("x".utf8).withUnsafeBytes { try none.read($0) { _ in Issue.record("no body expected") } } == (0, true))
        let r = try Self.run(.untilClose, "all of it", step: 4)
        #expect(r.body == "all of it" && !r.done)
    }

    @Test func aBadChunkSizeIsAnError() {
        #expect(throws: HTTPParseError.self) { _ = try Self.run(.chunked, "zz\r\nhello\r\n", step: 100) }
    }
}
