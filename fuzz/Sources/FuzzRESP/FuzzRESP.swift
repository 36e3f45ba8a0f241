// libFuzzer target: the Redis store's RESP2 reader (RESPReader, BufferedRESPReader) on arbitrary reply
// streams, differential against hiredis' reader (the tests' oracle, Tests/GatewayRedisTests).
//
// Input: [split selector] [stream bytes]; the selector picks up to 7 points where the stream is cut
// (FuzzInput.cuts): how the bytes arrive from the socket.
//
// Properties checked (a violation traps):
//   1. Nothing crashes; `used` never exceeds the bytes given.
//   2. The same replies, the same protocol error and the same bytes left over whether the stream comes
//      in one piece or in the cut pieces, and whether it is read through BufferedRESPReader (the
//      threaded connection) or in place with RESPReader (the loop connection).
//   3. hiredis reads the bytes of the accepted replies as exactly those replies, and nothing more.
//   4. A stream the reader waits on (no error) is one hiredis waits on too, after the same replies; a
//      stream the reader refuses for an unknown type byte is one hiredis refuses.
//   Where hiredis is not an oracle: it accepts what RESP2 does not (lax integers and lengths, no CR LF
//   check after a bulk string), which the reader refuses; it refuses arrays nested deeper than 7; it
//   allocates an array's element table from its declared count before the elements arrive. So a
//   refusal other than an unknown type is not compared, replies nested 8 deep end the comparison, and
//   hiredis never sees a declared count above 100,000.
import CFuzzHiredis
import FuzzSupport
@_spi(Fuzzing) import GatewayRedis

struct Reading: Equatable {
    var replies: [RedisValue] = []
    var error: String?
    /// Bytes given to the reader and not used (an unfinished element), and whether an array is half read.
    var pending = 0
    var midReply = false
}

/// Through BufferedRESPReader, fed piece by piece.
func buffered(_ stream: [UInt8], cuts: [Int]) -> Reading {
    var reader = BufferedRESPReader()
    var r = Reading()
    for piece in FuzzInput.pieces(stream[...], cuts: cuts) {
        piece.withUnsafeBytes { reader.feed($0) }
        drain: while true {
            switch reader.next() {
            case .failure(let e):
                r.error = e.why
                return r
            case .success(let v?):
                r.replies.append(v)
            case .success(nil):
                break drain
            }
        }
    }
    return r
}

/// In place with RESPReader: the input grows by each piece and loses what was used.
func inPlace(_ stream: [UInt8], cuts: [Int]) -> Reading {
    var reader = RESPReader()
    var input: [UInt8] = []
    var r = Reading()
    for piece in FuzzInput.pieces(stream[...], cuts: cuts) {
        input += piece
        while true {
            let step = input.withUnsafeBytes { reader.read($0) }
            switch step {
            case .malformed(let why):
                r.error = why
                return r
            case .incomplete(let used):
                guard used >= 0, used <= input.count else { fuzzFail("incomplete(used: \(used)) of \(input.count) bytes") }
                input.removeFirst(used)
            case .reply(let value, let used):
                guard used > 0, used <= input.count else { fuzzFail("reply used \(used) of \(input.count) bytes") }
                input.removeFirst(used)
                r.replies.append(value)
                continue
            }
            break
        }
    }
    r.pending = input.count
    r.midReply = reader.isMidReply
    return r
}

/// The stream's bytes taken by its complete replies (read in one piece, in place).
func acceptedPrefix(_ stream: [UInt8]) -> Int {
    var reader = RESPReader()
    var at = 0
    while at < stream.count {
        let step = stream.withUnsafeBytes { reader.read(UnsafeRawBufferPointer(rebasing: $0[at...])) }
        guard case .reply(_, let used) = step else { break }
        at += used
    }
    return at
}

enum Oracle: Equatable {
    /// The replies, and whether a reply was still being read at the end.
    case replies([RedisValue], waiting: Bool)
    case error(String)
}

/// What hiredis' reader makes of `stream`, fed in one piece.
func hiredis(_ stream: ArraySlice<UInt8>) -> Oracle {
    guard let reader = redisReaderCreate() else { fuzzFail("redisReaderCreate failed") }
    defer { redisReaderFree(reader) }
    func failure() -> Oracle {
        .error(withUnsafeBytes(of: reader.pointee.errstr) { String(cString: $0.baseAddress!.assumingMemoryBound(to: CChar.self)) })
    }
    let fed = stream.withUnsafeBytes { b in
        b.isEmpty || redisReaderFeed(reader, b.baseAddress!.assumingMemoryBound(to: CChar.self), b.count) == REDIS_OK
    }
    guard fed else { return failure() }
    var out: [RedisValue] = []
    while true {
        var raw: UnsafeMutableRawPointer?
        guard redisReaderGetReply(reader, &raw) == REDIS_OK else { return failure() }
        guard let raw else {
            // A reply begun: its type byte was read (a call with nothing to read sets up a task whose
            // type stays -1), or bytes are left.
            let r = reader.pointee
            return .replies(out, waiting: r.pos < r.len || (r.ridx >= 0 && r.rstack.0.type >= 0))
        }
        out.append(value(raw.assumingMemoryBound(to: redisReply.self)))
        freeReplyObject(raw)
    }
}

func value(_ r: UnsafeMutablePointer<redisReply>) -> RedisValue {
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

/// hiredis' refusals of a number that RESP's grammar allows (see property 3).
let numberErrors: Set<String> = ["Bad integer value", "Bad bulk string length", "Bad multi-bulk length"]

/// The RESP2 bytes of a reply as a server writes them (as RESPReaderTests.encode).
func encode(_ v: RedisValue, into out: inout [UInt8]) {
    switch v {
    case .string(let b): out += Array("$\(b.count)\r\n".utf8) + b + [0x0d, 0x0a]
    case .integer(let n): out += Array(":\(n)\r\n".utf8)
    case .array(let items):
        out += Array("*\(items.count)\r\n".utf8)
        for item in items { encode(item, into: &out) }
    case .status(let s): out += Array("+\(s)\r\n".utf8)
    case .error(let s): out += Array("-\(s)\r\n".utf8)
    case .null: out += Array("$-1\r\n".utf8)
    }
}

/// Arrays on the deepest path of `v` (a null may have been `*-1`: it counts as one).
func depth(_ v: RedisValue) -> Int {
    switch v {
    case .array(let items): 1 + (items.map(depth).max() ?? 0)
    case .null: 1
    default: 0
    }
}

/// Whether some `*` or `$` in `bytes` is followed by a number above 100,000 (or one that overflows):
/// hiredis would allocate for it, or overflow its length arithmetic.
func declaresHugeCount(_ bytes: ArraySlice<UInt8>) -> Bool {
    var i = bytes.startIndex
    while i < bytes.endIndex {
        if bytes[i] == UInt8(ascii: "*") || bytes[i] == UInt8(ascii: "$") {
            var j = i + 1
            if j < bytes.endIndex, bytes[j] == UInt8(ascii: "-") || bytes[j] == UInt8(ascii: "+") { j += 1 }
            var n = 0
            var digits = 0
            while j < bytes.endIndex, bytes[j] >= 0x30, bytes[j] <= 0x39 {
                n = n * 10 + Int(bytes[j] - 0x30)
                digits += 1
                if digits > 6 { return true }
                j += 1
            }
            if n > 100_000 { return true }
        }
        i += 1
    }
    return false
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let input = FuzzInput.bytes(data, size)
    guard let selector = input.first else { return 0 }
    let stream = Array(input.dropFirst())
    let cuts = FuzzInput.cuts(selector: selector, count: stream.count)

    // Property 2.
    let whole = inPlace(stream, cuts: [])
    let pieces = inPlace(stream, cuts: cuts)
    guard pieces == whole else { fuzzFail("in place, cut at \(cuts): \(pieces); in one piece: \(whole)") }
    var viaBuffer = buffered(stream, cuts: cuts)
    viaBuffer.pending = whole.pending
    viaBuffer.midReply = whole.midReply
    guard viaBuffer == whole else { fuzzFail("BufferedRESPReader, cut at \(cuts): \(viaBuffer); in place: \(whole)") }

    // Property 3: the accepted replies, up to the first one nested too deep for hiredis.
    let accepted = acceptedPrefix(stream)
    let comparable = whole.replies.prefix { depth($0) < 8 }
    if comparable.count == whole.replies.count {
        let oracle = hiredis(stream[0..<accepted])
        if oracle != .replies(whole.replies, waiting: false) {
            // hiredis holds numbers to Redis' own string2ll (no sign on a length, no "+", no leading
            // zero, no "-0"), stricter than RESP's grammar (`:[<+|->]<value>`), which the reader
            // follows: then the replies written canonically must read the same in hiredis.
            guard case .error(let e) = oracle, numberErrors.contains(e) else {
                fuzzFail("hiredis reads the \(accepted) accepted bytes as \(oracle), the reader as \(whole.replies)")
            }
            var canonical: [UInt8] = []
            for v in whole.replies { encode(v, into: &canonical) }
            guard canonical != Array(stream[0..<accepted]), hiredis(canonical[...]) == .replies(whole.replies, waiting: false) else {
                fuzzFail("hiredis refuses (\(e)) replies the reader reads as \(whole.replies)")
            }
        }
    }

    // Property 4.
    guard comparable.count == whole.replies.count, !declaresHugeCount(stream[accepted...]) else { return 0 }
    let oracle = hiredis(stream[...])
    if let why = whole.error {
        guard why.hasPrefix("unknown reply type") else { return 0 }
        if case .error = oracle { return 0 }
        fuzzFail("the reader refuses (\(why)), hiredis reads \(oracle)")
    }
    switch oracle {
    case .replies(let replies, let waiting) where replies == whole.replies:
        guard waiting == (whole.pending > 0 || whole.midReply) else {
            fuzzFail(
                "after the same replies, hiredis \(waiting ? "waits" : "does not wait"), the reader has \(whole.pending) bytes pending")
        }
        return 0
    case .error(let e) where e.contains("depth") || numberErrors.contains(e):
        return 0  // an unfinished array nested deeper than hiredis goes, or a number it holds stricter
    default:
        fuzzFail("the reader waits after \(whole.replies) (\(whole.pending) bytes pending), hiredis reads \(oracle)")
    }
}
