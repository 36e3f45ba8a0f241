/// Walks a message body of known framing over the buffers it arrives in: bytes in, body slices out
/// (chunked bodies de-chunked, extensions and trailers not passed on). One reader per message; the
/// HTTP/1.1 and HTTP/2 downstream connections read upstream response bodies with it.
public struct BodyReader: Sendable {
    public let framing: BodyFraming
    private var remaining: UInt64
    private var decoder = ChunkedDecoder()

    public init(_ framing: BodyFraming) {
        self.framing = framing
        if case .contentLength(let n) = framing { remaining = n } else { remaining = 0 }
    }

    /// Hands the body bytes found in `buf` to `deliver`, in order. Returns how many bytes of `buf`
    /// were used (what follows belongs to the next message, or waits for more input) and whether the
    /// body ended. A close-delimited body never ends here: the connection's end is its end.
    public mutating func read(_ buf: UnsafeRawBufferPointer, _ deliver: (Slice<UnsafeRawBufferPointer>) -> Void)
        throws(HTTPParseError) -> (consumed: Int, done: Bool)
    {
        switch framing {
        case .none:
            return (0, true)
        case .contentLength:
            let take = Int(min(UInt64(buf.count), remaining))
            if take > 0 { deliver(buf[0..<take]) }
            remaining -= UInt64(take)
            return (take, remaining == 0)
        case .untilClose:
            if buf.count > 0 { deliver(buf[0..<buf.count]) }
            return (buf.count, false)
        case .chunked:
            var pos = 0
            while true {
                switch try decoder.next(buf, from: pos) {
                case .data(let r):
                    deliver(buf[r])
                    pos = r.upperBound
                case .needMore(let c):
                    return (c, false)
                case .end(let e):
                    return (e, true)
                }
            }
        }
    }
}
