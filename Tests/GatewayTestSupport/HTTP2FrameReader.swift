import Glibc

/// Reads HTTP/2 frames off a blocking loopback socket; nil at EOF (or the socket's timeout).
public struct HTTP2FrameReader {
    public let client: LoopbackClient
    var buffer: [UInt8] = []

    public init(client: LoopbackClient) { self.client = client }

    public struct Frame: Sendable {
        public var type: UInt8
        public var flags: UInt8
        public var stream: UInt32
        public var payload: [UInt8]
    }

    public mutating func next() -> Frame? {
        while true {
            if buffer.count >= 9 {
                let len = Int(buffer[0]) << 16 | Int(buffer[1]) << 8 | Int(buffer[2])
                if buffer.count >= 9 + len {
                    let f = Frame(
                        type: buffer[3], flags: buffer[4],
                        stream: UInt32(buffer[5] & 0x7f) << 24 | UInt32(buffer[6]) << 16 | UInt32(buffer[7]) << 8 | UInt32(buffer[8]),
                        payload: Array(buffer[9..<(9 + len)]))
                    buffer.removeFirst(9 + len)
                    return f
                }
            }
            let chunk = client.receiveSome()
            if chunk.isEmpty { return nil }
            buffer += chunk
        }
    }
}

/// Client bytes: the connection preface and an empty SETTINGS frame (RFC 9113 §3.4).
public let http2ClientPreface: [UInt8] = Array("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".utf8) + [0, 0, 0, 0x4, 0, 0, 0, 0, 0]

/// Answers the server's frames that need an answer (SETTINGS → ACK, PING → ACK) and collects the
/// GOAWAY last-stream ids until EOF.
public func http2CollectGoaways(_ reader: inout HTTP2FrameReader) -> [UInt32] {
    var goaways: [UInt32] = []
    while let fr = reader.next() {
        if fr.type == 0x7, fr.payload.count >= 8 {
            goaways.append(
                UInt32(fr.payload[0] & 0x7f) << 24 | UInt32(fr.payload[1]) << 16 | UInt32(fr.payload[2]) << 8 | UInt32(fr.payload[3]))
        }
        if fr.type == 0x6 && fr.flags & 1 == 0 { reader.client.send([0, 0, 8, 0x6, 0x1, 0, 0, 0, 0] + fr.payload) }
        if fr.type == 0x4 && fr.flags & 1 == 0 { reader.client.send([0, 0, 0, 0x4, 0x1, 0, 0, 0, 0]) }
    }
    return goaways
}
