/// Incremental decoder of the chunked transfer coding (RFC 9112 §7.1), strict: hex sizes without
/// sign, white space or overflow, CRLF everywhere, chunk extensions without control characters,
/// trailer fields parsed like headers and bounded.
public struct ChunkedDecoder: Sendable {
    public enum Event: Equatable, Sendable {
        /// Body bytes at this range of the input.
        case data(Range<Int>)
        /// Nothing more can be decoded from the input; bytes before this offset are consumed.
        case needMore(consumedTo: Int)
        /// The last chunk and the trailers are done; the message ends just before this offset.
        case end(Int)
    }

    private enum State: Sendable, Equatable {
        case size
        case data(remaining: UInt64)
        case dataCRLF
        case trailers
        case done
    }

    private var state: State = .size
    private var trailerBytes = 0
    public let maxLineBytes: Int
    public let maxTrailerBytes: Int
    public private(set) var trailers = HTTPFields()

    public init(maxLineBytes: Int = 4096, maxTrailerBytes: Int = 16 * 1024) {
        self.maxLineBytes = maxLineBytes
        self.maxTrailerBytes = maxTrailerBytes
    }

    public var isDone: Bool { state == .done }

    /// Decodes from `buf[start...]`. Call repeatedly: each `.data` range is body; on `.needMore`, keep
    /// the unconsumed bytes and call again when more arrive.
    public mutating func next(_ buf: UnsafeRawBufferPointer, from start: Int) throws(HTTPParseError) -> Event {
        var p = start
        while true {
            switch state {
            case .done:
                return .end(p)
            case .size:
                guard let lineEnd = try findCRLF(buf, from: p) else { return .needMore(consumedTo: p) }
                var size: UInt64 = 0
                var i = p
                while i < lineEnd, let d = Self.hexValue(buf[i]) {
                    guard i - p < 16 else { throw HTTPParseError(.badChunk, at: i, "chunk size overflows") }
                    size = size << 4 | UInt64(d)
                    i += 1
                }
                guard i > p else { throw HTTPParseError(.badChunk, at: p, "chunk size must start with a hex digit") }
                if i < lineEnd {
                    // chunk-ext: BWS ";" … — accepted when free of control characters.
                    var k = i
                    while k < lineEnd, buf[k] == 0x20 || buf[k] == 0x09 { k += 1 }
                    guard k < lineEnd, buf[k] == UInt8(ascii: ";") else {
                        throw HTTPParseError(.badChunk, at: i, "unexpected character after the chunk size")
                    }
                    for q in k..<lineEnd where !HTTPChar.isFieldValueChar(buf[q]) {
                        throw HTTPParseError(.badChunk, at: q, "control character in a chunk extension")
                    }
                }
                p = lineEnd + 2
                state = size == 0 ? .trailers : .data(remaining: size)
            case .data(let remaining):
                let available = buf.count - p
                if available == 0 { return .needMore(consumedTo: p) }
                let take = Int(min(UInt64(available), remaining))
                let left = remaining - UInt64(take)
                state = left == 0 ? .dataCRLF : .data(remaining: left)
                return .data(p..<(p + take))
            case .dataCRLF:
                guard buf.count - p >= 2 else { return .needMore(consumedTo: p) }
                guard buf[p] == 0x0d, buf[p + 1] == 0x0a else {
                    throw HTTPParseError(.badChunk, at: p, "chunk data not followed by CRLF")
                }
                p += 2
                state = .size
            case .trailers:
                guard let lineEnd = try findCRLF(buf, from: p) else { return .needMore(consumedTo: p) }
                if lineEnd == p {
                    state = .done
                    return .end(p + 2)
                }
                trailerBytes += lineEnd - p + 2
                guard trailerBytes <= maxTrailerBytes else {
                    throw HTTPParseError(.headersTooLarge, at: p, "trailers larger than \(maxTrailerBytes) bytes")
                }
                let line = [p..<lineEnd]
                let f = try line.withUnsafeBufferPointer { lines throws(HTTPParseError) in try HTTP1Parser.parseFields(buf, lines[...]) }
                for field in f { trailers.append(field.name, field.value) }
                p = lineEnd + 2
            }
        }
    }

    /// The offset of the CR of the next CRLF, nil if not there yet; bare CR/LF and long lines are errors.
    private func findCRLF(_ buf: UnsafeRawBufferPointer, from p: Int) throws(HTTPParseError) -> Int? {
        var i = p
        while i < buf.count {
            let c = buf[i]
            if c == 0x0a { throw HTTPParseError(.badChunk, at: i, "bare LF in chunked framing") }
            if c == 0x0d {
                guard i + 1 < buf.count else { return nil }
                guard buf[i + 1] == 0x0a else { throw HTTPParseError(.badChunk, at: i, "bare CR in chunked framing") }
                return i
            }
            i += 1
            guard i - p <= maxLineBytes else { throw HTTPParseError(.badChunk, at: p, "chunk line longer than \(maxLineBytes) bytes") }
        }
        return nil
    }

    static func hexValue(_ c: UInt8) -> UInt8? {
        switch c {
        case 0x30...0x39: c - 0x30
        case 0x41...0x46: c - 0x41 + 10
        case 0x61...0x66: c - 0x61 + 10
        default: nil
        }
    }
}
