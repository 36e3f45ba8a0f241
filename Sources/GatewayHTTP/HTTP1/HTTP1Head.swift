/// A parsed HTTP/1.x request head (RFC 9112 §3).
public struct HTTPRequestHead: Sendable, Equatable {
    public var method: String
    /// The request-target exactly as in the request line.
    public var target: String
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    public var minorVersion: Int
    public var headers: HTTPFields
    public var framing: BodyFraming

    public init(method: String, target: String, minorVersion: Int, headers: HTTPFields, framing: BodyFraming) {
        self.method = method
        self.target = target
        self.minorVersion = minorVersion
        self.headers = headers
        self.framing = framing
    }

    /// Whether the connection stays open after this exchange (RFC 9112 §9.3).
    public var keepAlive: Bool { persistentConnection(headers, minorVersion: minorVersion) }

    public var expectsContinue: Bool {
        minorVersion == 1 && headers["Expect"].map { $0.lowercased() == "100-continue" } == true
    }
}

/// A parsed HTTP/1.x response head.
public struct HTTPResponseHead: Sendable, Equatable {
    public var status: Int
    public var reason: String
    public var minorVersion: Int
    public var headers: HTTPFields
    public var framing: BodyFraming

    public var keepAlive: Bool { persistentConnection(headers, minorVersion: minorVersion) }
}

/// RFC 9112 §9.3: "close" ends the connection; HTTP/1.1 persists by default, HTTP/1.0 only with keep-alive.
func persistentConnection(_ headers: HTTPFields, minorVersion: Int) -> Bool {
    if headers.hasToken("Connection", "close") { return false }
    return minorVersion == 1 || headers.hasToken("Connection", "keep-alive")
}

/// How the message body is delimited (RFC 9112 §6.3).
public enum BodyFraming: Sendable, Equatable {
    case none
    case contentLength(UInt64)
    case chunked
    /// Responses only: the body runs until the upstream closes.
    case untilClose
}

/// Why a message could not be read: what is wrong (`kind`, the code a server answers with; the
/// proxy's `ProxyError` table gives its status), where, and a detail for logs.
public struct HTTPParseError: Error, Equatable, Sendable, CustomStringConvertible {
    public enum Kind: String, Sendable, CaseIterable {
        case badRequestLine = "bad_request_line"
        case badStatusLine = "bad_status_line"
        case badHeader = "bad_header"
        case badFraming = "bad_framing"
        case badChunk = "bad_chunk"
        case unsupportedVersion = "unsupported_version"
        case requestLineTooLong = "request_line_too_long"
        case headersTooLarge = "headers_too_large"
        case tooManyHeaders = "too_many_headers"
        case unsupportedTransferCoding = "unsupported_transfer_coding"
        /// A method with characters other than `A-Z`, `-`, `_` (`RequestSyntax`).
        case badMethod = "bad_method"
        /// A request-target that is neither origin-form, `*` for OPTIONS, nor http(s) absolute-form
        /// without userinfo (`RequestSyntax`).
        case badTarget = "bad_target"
        /// No Host in HTTP/1.1, more than one Host, or a Host value that is not `host[:port]`.
        case badHost = "bad_host"
    }

    public let kind: Kind
    public let offset: Int
    public let detail: String

    public init(_ kind: Kind, at offset: Int, _ detail: String) {
        self.kind = kind
        self.offset = offset
        self.detail = detail
    }

    public var description: String { "\(kind.rawValue) at byte \(offset): \(detail)" }
}
