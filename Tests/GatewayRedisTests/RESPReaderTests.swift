import CGatewayHiredis
import Testing

@_spi(Fuzzing) @testable import GatewayRedis

/// The store's RESP reader against its definition (hand-written replies, every malformed form it
/// refuses) and against hiredis' reader, the one it replaced, on random reply streams cut at random
/// places.
@Suite("RESP reader (no server)")
struct RESPReaderTests {
    /// Every reply in `stream`, read as a connection reads: the bytes arrive in `cuts` pieces.
    static func readAll(_ stream: [UInt8], cuts: [Int]) -> (replies: [RedisValue], error: String?) {
        var reader = BufferedRESPReader()
        var replies: [RedisValue] = []
        var from = 0
        for end in cuts + [stream.count] where end >= from {
            stream.withUnsafeBytes { reader.feed(UnsafeRawBufferPointer(rebasing: $0[from..<end])) }
            from = end
            drain: while true {
                switch reader.next() {
                case .failure(let e): return (replies, e.why)
                case .success(let value?): replies.append(value)
                case .success(nil): break drain
                }
            }
        }
        return (replies, nil)
    }

    /// The same, the way the loop connection reads: straight from its input, consuming what was used.
    static func readInPlace(_ stream: [UInt8], cuts: [Int]) -> (replies: [RedisValue], error: String?) {
        var reader = RESPReader()
        var input: [UInt8] = []
        var replies: [RedisValue] = []
        var from = 0
        for end in cuts + [stream.count] where end >= from {
            input += stream[from..<end]
            from = end
            while true {
                let step = input.withUnsafeBytes { reader.read($0) }
                switch step {
                case .malformed(let why): return (replies, why)
                case .incomplete(let used):
                    input.removeFirst(used)
                case .reply(let value, let used):
                    input.removeFirst(used)
                    replies.append(value)
                    continue
                }
                break
            }
        }
        return (replies, input.isEmpty && !reader.isMidReply ? nil : "left over")
    }

    /// What hiredis' reader makes of `stream` (fed in one piece).
    static func hiredis(_ stream: [UInt8]) -> [RedisValue]? {
        guard let reader = redisReaderCreate() else { return nil }
        defer { redisReaderFree(reader) }
        let fed = stream.withUnsafeBytes { b in
            b.isEmpty || redisReaderFeed(reader, b.baseAddress!.assumingMemoryBound(to: CChar.self), b.count) == REDIS_OK
        }
        guard fed else { return nil }
        var out: [RedisValue] = []
        while true {
            var raw: UnsafeMutableRawPointer?
            guard redisReaderGetReply(reader, &raw) == REDIS_OK else { return nil }
            guard let raw else { return out }
            out.append(value(raw.assumingMemoryBound(to: redisReply.self)))
            freeReplyObject(raw)
        }
    }

    static func value(_ r: UnsafeMutablePointer<redisReply>) -> RedisValue {
        let reply = r.pointee
        let bytes = reply.str == nil ? [] : Array(UnsafeRawBufferPointer(start: reply.str, count: Int(reply.len)))
        switch reply.type {
        case REDIS_REPLY_STRING: return .string(bytes)
        case REDIS_REPLY_INTEGER: return .integer(Int64(reply.integer))
        case REDIS_REPLY_ARRAY: return .array((0..<Int(reply.elements)).map { i in reply.element[i].map(value) ?? .null })
        case REDIS_REPLY_STATUS: return .status(String(decoding: bytes, as: UTF8.self))
        case REDIS_REPLY_ERROR: return .error(String(decoding: bytes, as: UTF8.self))
        default: return .null
        }
    }

    /// The RESP2 bytes of a reply, as a server writes them.
    static func encode(_ v: RedisValue, into out: inout [UInt8]) {
        switch v {
        case .string(let b):
            out += Array("$\(b.count)\r\n".utf8) + b + [0x0d, 0x0a]
        case .integer(let n):
            out += Array(":\(n)\r\n".utf8)
        case .array(let items):
            out += Array("*\(items.count)\r\n".utf8)
            for item in items { encode(item, into: &out) }
        case .status(let s):
            out += Array("+\(s)\r\n".utf8)
        case .error(let s):
            out += Array("-\(s)\r\n".utf8)
        case .null:
            out += Array("$-1\r\n".utf8)
        }
    }

    static func random(depth: Int, using rng: inout SystemRandomNumberGenerator) -> RedisValue {
        switch Int.random(in: 0..<(depth > 0 ? 7 : 6), using: &rng) {
        case 0, 1:
            // Any bytes, CR LF and NUL included; mostly short, sometimes long.
            let n = Bool.random(using: &rng) ? Int.random(in: 0...24, using: &rng) : Int.random(in: 0...3_000, using: &rng)
            let alphabet: [UInt8] = [0x00, 0x0d, 0x0a, 0x24, 0x2a, 0x3a, 0x2d, 0x2b, 0x61, 0xff]
            return .string(
                (0..<n).map { _ in Bool.random(using: &rng) ? alphabet.randomElement(using: &rng)! : UInt8.random(in: 0...255, using: &rng)
                })
        case 2:
            let n: Int64 = [Int64.min, Int64.max, 0, -1][Int.random(in: 0..<4, using: &rng)]
            return .integer(
                Bool.random(using: &rng) ? n : Int64.random(in: Int64.min...Int64.max, using: &rng) >> Int64.random(in: 0...63, using: &rng)
            )
        case 3:
            // A status or an error: one line, any printable text (a lone CR too: only CR LF ends it).
            let text = String(
                decoding: (0..<Int.random(in: 0...40, using: &rng)).map { _ in
                    Int.random(in: 0..<20, using: &rng) == 0 ? UInt8(0x0d) : UInt8.random(in: 0x20...0x7e, using: &rng)
                }, as: UTF8.self)
            if text.hasSuffix("\r") { return .status(text + "x") }
            return Bool.random(using: &rng) ? .status(text) : .error("ERR " + text)
        case 4:
            return .null
        case 5:
            return .array([])
        default:
            let n = Int.random(in: 1...(Bool.random(using: &rng) ? 4 : 40), using: &rng)
            return .array((0..<n).map { _ in random(depth: depth - 1, using: &rng) })
        }
    }

    @Test("each reply type, read as hiredis reads it: status, error, integer, bulk string, null, arrays nested and empty")
    func eachType() throws {
        let cases: [(String, RedisValue)] = [
            ("+OK\r\n", .status("OK")),
            ("+\r\n", .status("")),
            ("-NOSCRIPT No matching script. Please use EVAL.\r\n", .error("NOSCRIPT No matching script. Please use EVAL.")),
            (":0\r\n", .integer(0)),
            (":-9223372036854775808\r\n", .integer(Int64.min)),
            (":9223372036854775807\r\n", .integer(Int64.max)),
            ("$0\r\n\r\n", .string([])),
            ("$-1\r\n", .null),
            ("*-1\r\n", .null),
            ("*0\r\n", .array([])),
            ("$6\r\na\r\nb\r\n\r\n", .string(Array("a\r\nb\r\n".utf8))),
            (
                "*3\r\n+committed\r\n:41\r\n*2\r\n$3\r\nctr\r\n$-1\r\n",
                .array([.status("committed"), .integer(41), .array([.string(Array("ctr".utf8)), .null])])
            ),
            ("*2\r\n*1\r\n*0\r\n:1\r\n", .array([.array([.array([])]), .integer(1)])),
        ]
        for (text, expected) in cases {
            let bytes = Array(text.utf8)
            let read = Self.readAll(bytes, cuts: [])
            #expect(read.error == nil, "\(text.debugDescription)")
            #expect(read.replies == [expected], "\(text.debugDescription)")
            #expect(Self.hiredis(bytes) == [expected], "hiredis: \(text.debugDescription)")
            // Every cut of the bytes in two gives the same reply.
            for cut in 0...bytes.count {
                #expect(Self.readAll(bytes, cuts: [cut]).replies == [expected], "\(text.debugDescription) cut at \(cut)")
                #expect(Self.readInPlace(bytes, cuts: [cut]).replies == [expected], "\(text.debugDescription) cut at \(cut), in place")
            }
        }
    }

    @Test("2,000 random reply streams cut in random places: the replies hiredis reads, both ways of feeding")
    func againstHiredis() throws {
        var rng = SystemRandomNumberGenerator()
        for round in 0..<2_000 {
            let values = (0..<Int.random(in: 1...6, using: &rng)).map { _ in Self.random(depth: 3, using: &rng) }
            var stream: [UInt8] = []
            for v in values { Self.encode(v, into: &stream) }
            let cuts = (0..<Int.random(in: 0...12, using: &rng)).map { _ in Int.random(in: 0...stream.count, using: &rng) }.sorted()
            let oracle = try #require(Self.hiredis(stream), "round \(round)")
            #expect(oracle == values, "round \(round): the generator and hiredis agree")
            let buffered = Self.readAll(stream, cuts: cuts)
            #expect(buffered.error == nil && buffered.replies == oracle, "round \(round), cuts \(cuts)")
            let inPlace = Self.readInPlace(stream, cuts: cuts)
            #expect(inPlace.error == nil && inPlace.replies == oracle, "round \(round), cuts \(cuts), in place")
        }
    }

    @Test("a long array arriving a few bytes at a time: its finished elements are used as they come, not read again")
    func longArrayInPieces() throws {
        var stream = Array("*10000\r\n".utf8)
        for i in 0..<10_000 { stream += Array(":\(i)\r\n".utf8) }
        var reader = RESPReader()
        var input: [UInt8] = []
        var reply: RedisValue?
        var largestLeftOver = 0
        var from = 0
        while from < stream.count {
            let end = min(stream.count, from + 7)
            input += stream[from..<end]
            from = end
            switch input.withUnsafeBytes({ reader.read($0) }) {
            case .malformed(let why): Issue.record("\(why)"); return
            case .incomplete(let used): input.removeFirst(used)
            case .reply(let value, let used):
                input.removeFirst(used)
                reply = value
            }
            largestLeftOver = max(largestLeftOver, input.count)
        }
        #expect(reply == .array((0..<10_000).map { .integer(Int64($0)) }))
        // Never more than one unfinished element (":9999\r" and a piece) waits in the input.
        #expect(largestLeftOver < 14)
        #expect(input.isEmpty && !reader.isMidReply)
    }

    @Test("what is not RESP2 is a protocol error that names it; nothing before it is lost")
    func malformed() {
        let cases: [(String, String)] = [
            ("!5\r\nhello\r\n", "unknown reply type \"!\""),
            ("%1\r\n+a\r\n+b\r\n", "unknown reply type \"%\""),
            ("_\r\n", "unknown reply type \"_\""),
            (":12a\r\n", "bad integer \"12a\""),
            (":\r\n", "bad integer \"\""),
            (":99999999999999999999\r\n", "bad integer \"99999999999999999999\""),
            ("$x\r\n", "bad bulk string length \"x\""),
            ("$-2\r\n", "bad bulk string length \"-2\""),
            ("$3\r\nabcXY", "a bulk string of 3 bytes not followed by CR LF"),
            ("$536870913\r\n", "a bulk string of 536870913 bytes"),
            ("*-5\r\n", "bad array length \"-5\""),
            ("*4294967296\r\n", "an array of 4294967296 elements"),
            ("*1\r\n*1\r\n\u{7}\r\n", "unknown reply type \"\\x07\""),
        ]
        for (text, why) in cases {
            let stream = Array("+OK\r\n".utf8) + Array(text.utf8)
            let read = Self.readAll(stream, cuts: [])
            #expect(read.replies == [.status("OK")], "\(text.debugDescription)")
            #expect(read.error == why, "\(text.debugDescription)")
        }
        // Nested deeper than 64 arrays.
        let deep = Array(String(repeating: "*1\r\n", count: 65).utf8) + Array(":1\r\n".utf8)
        #expect(Self.readAll(deep, cuts: []).error == "arrays nested deeper than 64")
        let deepest = Array(String(repeating: "*1\r\n", count: 64).utf8) + Array(":1\r\n".utf8)
        #expect(Self.readAll(deepest, cuts: []).error == nil)
        #expect(Self.readAll(deepest, cuts: []).replies.count == 1)
        // A line that never ends, past 1 MiB.
        let endless = Array("+".utf8) + Array(repeating: UInt8(ascii: "a"), count: RESPReader.maxLineLength + 1)
        #expect(Self.readAll(endless, cuts: [100, 500_000]).error == "a reply line of more than 1048576 bytes")
        let long = Array("+".utf8) + Array(repeating: UInt8(ascii: "a"), count: RESPReader.maxLineLength - 8)
        #expect(Self.readAll(long, cuts: []).error == nil, "long, not yet too long: more bytes are awaited")
    }

    @Test("reset forgets a half-read array: the next connection's replies start from nothing")
    func reset() {
        var reader = BufferedRESPReader()
        Array("*3\r\n:1\r\n:2\r\n".utf8).withUnsafeBytes { reader.feed($0) }
        #expect(reader.next() == .success(nil))
        reader.reset()
        Array(":7\r\n".utf8).withUnsafeBytes { reader.feed($0) }
        #expect(reader.next() == .success(.integer(7)))
        #expect(reader.next() == .success(nil))
    }
}
