/// HTTP/2 error codes (RFC 9113 §7).
public struct HTTP2ErrorCode: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public var rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }
    public init(_ rawValue: UInt32) { self.rawValue = rawValue }

    public static let noError = HTTP2ErrorCode(0x0)
    public static let protocolError = HTTP2ErrorCode(0x1)
    public static let internalError = HTTP2ErrorCode(0x2)
    public static let flowControlError = HTTP2ErrorCode(0x3)
    public static let settingsTimeout = HTTP2ErrorCode(0x4)
    public static let streamClosed = HTTP2ErrorCode(0x5)
    public static let frameSizeError = HTTP2ErrorCode(0x6)
    public static let refusedStream = HTTP2ErrorCode(0x7)
    public static let cancel = HTTP2ErrorCode(0x8)
    public static let compressionError = HTTP2ErrorCode(0x9)
    public static let connectError = HTTP2ErrorCode(0xa)
    public static let enhanceYourCalm = HTTP2ErrorCode(0xb)
    public static let inadequateSecurity = HTTP2ErrorCode(0xc)
    public static let http11Required = HTTP2ErrorCode(0xd)

    public var description: String {
        let names = [
            "NO_ERROR", "PROTOCOL_ERROR", "INTERNAL_ERROR", "FLOW_CONTROL_ERROR", "SETTINGS_TIMEOUT",
            "STREAM_CLOSED", "FRAME_SIZE_ERROR", "REFUSED_STREAM", "CANCEL", "COMPRESSION_ERROR",
            "CONNECT_ERROR", "ENHANCE_YOUR_CALM", "INADEQUATE_SECURITY", "HTTP_1_1_REQUIRED",
        ]
        return rawValue < names.count ? names[Int(rawValue)] : "0x\(String(rawValue, radix: 16))"
    }
}

/// What an `HTTP2ServerSession` reports to the event loop, in the order it happened.
public enum HTTP2Event: Sendable, Equatable {
    /// A valid request head (RFC 9113 §8.3 checked) mapped for the HTTP/1.1 router/proxy pipeline.
    case request(streamID: Int32, head: HTTPRequestHead)
    /// A request whose header list went past `maxHeaderListSize` (RFC 9113 §6.5.2; decoded to keep
    /// HPACK in sync, nothing kept): delivered without a head, to be answered 431
    /// `headers_too_large` as HTTP/1.1 answers it. `endStream`: the HEADERS frame ended the stream.
    case requestHeadTooLarge(streamID: Int32, endStream: Bool)
    /// A piece of request body. Its bytes stay counted against the client's flow-control window
    /// until the consumer calls `consume(streamID:count:)`.
    case requestData(streamID: Int32, bytes: [UInt8])
    /// The client ended the request (END_STREAM); trailers, if any, are not passed on.
    case requestEnd(streamID: Int32)
    /// The client sent RST_STREAM for a stream whose request had been delivered.
    case streamReset(streamID: Int32, code: HTTP2ErrorCode)
    /// A delivered stream is closed (response complete, reset either way, or connection gone):
    /// the loop releases whatever it holds for it. The last event for a stream.
    case streamClosed(streamID: Int32, code: HTTP2ErrorCode)
    /// The stream's buffered response went back below `responseHighWater`: read the upstream again.
    case responseWritable(streamID: Int32)
    /// The client sent GOAWAY: no stream above `lastStreamID` will be processed by the client.
    case goaway(lastStreamID: Int32, code: HTTP2ErrorCode)
    /// The connection is being torn down because of the client (a GOAWAY with `code` is queued when
    /// possible): write what `pullOutput` still gives, then close.
    case connectionError(code: HTTP2ErrorCode, detail: String)
}

/// A misuse of the session API, or a session that could not be built. Client misbehaviour is never
/// thrown: it becomes RST_STREAM, GOAWAY and `.connectionError`.
public struct HTTP2SessionError: Error, Equatable, Sendable, CustomStringConvertible {
    public enum Kind: String, Sendable {
        case invalidSettings = "invalid_settings"
        case unknownStream = "unknown_stream"
        case responseAlreadySubmitted = "response_already_submitted"
        case noResponse = "no_response"
        case bodyAlreadyEnded = "body_already_ended"
        case invalidStatus = "invalid_status"
        case sessionClosed = "session_closed"
        case library = "nghttp2"
    }

    public let kind: Kind
    public let detail: String

    public init(_ kind: Kind, _ detail: String) {
        self.kind = kind
        self.detail = detail
    }

    public var description: String { "\(kind.rawValue): \(detail)" }
}
