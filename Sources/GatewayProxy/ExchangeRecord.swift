import GatewayHTTP
import GatewayIO

/// A protected route's verdict as the access line shows it: `verdict` (`accepted`, `refused`,
/// `would_refuse`, `fail_open`) and `reason` (`ok` or the refusal's code). Never assertion bytes.
/// A class: one reference in the answers that carry it (`LocalResponse`, `Forward`), which every
/// request's decision copies.
public final class AccessVerdict: Sendable {
    public let verdict: String
    public let reason: String
    /// A decision recorded for `/explain` whose request was forwarded anyway (shadowed, failed
    /// open, flagged): its entry learns the status the client was sent when the exchange ends.
    public let forwardedRecorded: Bool

    public init(verdict: String, reason: String, forwardedRecorded: Bool = false) {
        self.verdict = verdict
        self.reason = reason
        self.forwardedRecorded = forwardedRecorded
    }
}

/// One finished exchange, for the access log and metrics. Made on the exchange's loop and read
/// there, during `exchangeDidFinish` only: `fields` may point into the connection's buffers.
public struct ExchangeRecord {
    public var route: String
    public var method: String
    public var target: String
    public var status: Int
    public var requestBytes: Int
    public var responseBytes: Int
    public var durationSeconds: Double
    public var upstream: String?
    public var upstreamSeconds: Double?
    /// The client's address as text (`-` when unknown): the one value the access line and
    /// X-Forwarded-For take the client from.
    public var peer: String
    public var error: String?
    /// `http1` or `h2`.
    public var protocolName: String
    /// The exchange's id.
    public var requestID = RequestID("")
    /// `HTTP/1.0`, `HTTP/1.1` or `HTTP/2.0`, as nginx's `$server_protocol` says it.
    public var httpVersion: StaticString = "HTTP/1.1"
    /// Host, User-Agent and Referer as the client sent them.
    public var fields = LoggedFields()
    /// On a protected route: the verdict and its reason.
    public var verdict: AccessVerdict?
}

/// A request field's value for the access line, without a copy: Latin-1 bytes of the connection's
/// head (HTTP/1.1, valid only during `exchangeDidFinish`), or the string of an HTTP/2 head.
public enum LoggedValue {
    case none
    case bytes(UnsafeRawBufferPointer)
    case string(String)
}

/// The request fields the access line shows.
public struct LoggedFields {
    public var host: LoggedValue = .none
    public var userAgent: LoggedValue = .none
    public var referer: LoggedValue = .none

    public init(host: LoggedValue = .none, userAgent: LoggedValue = .none, referer: LoggedValue = .none) {
        self.host = host
        self.userAgent = userAgent
        self.referer = referer
    }

    /// From an HTTP/1.1 head (ranges of `buf`) and what `HeadExtras` found in it.
    static func of(_ head: HTTPRequestHeadLines, _ extras: HeadExtras, _ buf: UnsafeRawBufferPointer) -> LoggedFields {
        func value(_ r: Range<Int>?) -> LoggedValue { r.map { .bytes(UnsafeRawBufferPointer(rebasing: buf[$0])) } ?? .none }
        return LoggedFields(host: value(head.host), userAgent: value(extras.userAgent), referer: value(extras.referer))
    }

    /// From a head of strings (HTTP/2: the authority is the first field, as Host).
    static func of(_ head: HTTPRequestHead) -> LoggedFields {
        var out = LoggedFields()
        if let host = head.headers.fields.first?.value { out.host = .string(host) }
        for f in head.headers {
            switch f.name.utf8.count {
            case 10:
                if case .none = out.userAgent, f.name.equalsIgnoringASCIICase("User-Agent") { out.userAgent = .string(f.value) }
            case 7:
                if case .none = out.referer, f.name.equalsIgnoringASCIICase("Referer") { out.referer = .string(f.value) }
            default: break
            }
        }
        return out
    }
}

/// What the HTTP/1.1 connection reads of a head besides what the parser found (`HTTPRequestHeadLines`),
/// in one pass over its field lines when the head arrives: its `X-Request-Id` fields (`RequestID`),
/// the first `User-Agent` and the first `Referer` (the access line). Ranges of the head's bytes.
struct HeadExtras {
    var requestID: Range<Int>?
    /// How many `X-Request-Id` fields (more than one: none is the client's id).
    var requestIDCount = 0
    var userAgent: Range<Int>?
    var referer: Range<Int>?

    static let none = HeadExtras()

    static func scan(_ head: HTTPRequestHeadLines, _ buf: UnsafeRawBufferPointer) -> HeadExtras {
        var out = HeadExtras()
        for f in head.fields {
            // Names of other lengths (most) are passed over without a look at their bytes.
            switch f.name.count {
            case 12:
                if equalsIgnoringCase(UnsafeRawBufferPointer(rebasing: buf[f.name]), "X-Request-Id") {
                    out.requestIDCount += 1
                    out.requestID = f.value
                }
            case 10:
                if out.userAgent == nil, equalsIgnoringCase(UnsafeRawBufferPointer(rebasing: buf[f.name]), "User-Agent") {
                    out.userAgent = f.value
                }
            case 7:
                if out.referer == nil, equalsIgnoringCase(UnsafeRawBufferPointer(rebasing: buf[f.name]), "Referer") {
                    out.referer = f.value
                }
            default: break
            }
        }
        return out
    }
}
