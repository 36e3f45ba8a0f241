import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// A refusal as the gateway sent it (docs/client-contract.md, sections 4 and "Limits"):
/// `{"error":"<code>","action":"…","requestId":"…"}`, with `Retry-After` on 429.
public struct GatewayRefusal: Sendable, Equatable, CustomStringConvertible {
    /// Which exchange the gateway refused.
    public enum Endpoint: String, Sendable {
        case challenge
        case register
        case protected
    }

    /// What the contract tells the app to do.
    public enum Action: Sendable, Equatable {
        case rechallenge
        case reattest
        case none
        case retryLater
        /// An action this library does not know.
        case other(String)

        init(_ text: String) {
            switch text {
            case "rechallenge": self = .rechallenge
            case "reattest": self = .reattest
            case "none": self = .none
            case "retry_later": self = .retryLater
            default: self = .other(text)
            }
        }
    }

    public let endpoint: Endpoint
    public let status: Int
    /// The `error` code (`bad_signature`, `rate_limited`, `store_unavailable`…).
    public let code: String
    /// The `action`, when the gateway sent one (`503 upstream_busy` carries none).
    public let action: Action?
    /// The gateway's `requestId` (JSON, else `X-Request-Id`): `GET /explain/<requestId>` on the
    /// gateway's admin listener tells the operator why.
    public let requestID: String?
    /// `Retry-After` in seconds (or the JSON `retryAfter`), when given.
    public let retryAfter: TimeInterval?
    /// `client` or `registration` for a 429.
    public let limit: String?

    public init(
        endpoint: Endpoint, status: Int, code: String, action: Action?, requestID: String?, retryAfter: TimeInterval?,
        limit: String?
    ) {
        self.endpoint = endpoint
        self.status = status
        self.code = code
        self.action = action
        self.requestID = requestID
        self.retryAfter = retryAfter
        self.limit = limit
    }

    /// The refusal a response carries: a status of 400 or more with the gateway's JSON refusal
    /// (an object with a string `error` and a string `action`), or a `429`/`503` with a string
    /// `error` (the gateway's `upstream_busy` has no action); nil for anything else: an upstream's
    /// own answer (`{"error":"out_of_stock"}`), or a proxy error such as `502 upstream_unavailable`,
    /// which the app gets as a response.
    public init?(endpoint: Endpoint, data: Data, response: HTTPURLResponse, now: Date = Date()) {
        let status = response.statusCode
        guard status >= 400,
            let object = (try? JSONSerialization.jsonObject(with: data)) as? [String: Any],
            let code = object["error"] as? String,
            object["action"] is String || status == 429 || status == 503
        else { return nil }
        let header = response.value(forHTTPHeaderField: "Retry-After").flatMap { Self.retryAfter($0, now: now) }
        self.init(
            endpoint: endpoint, status: response.statusCode, code: code, action: (object["action"] as? String).map(Action.init),
            requestID: object["requestId"] as? String ?? response.value(forHTTPHeaderField: "X-Request-Id"),
            retryAfter: header ?? (object["retryAfter"] as? NSNumber).map { $0.doubleValue },
            limit: object["limit"] as? String)
    }

    /// `Retry-After`: delay-seconds, or an HTTP-date (RFC 9110 §10.2.3) as seconds from `now`.
    public static func retryAfter(_ value: String, now: Date) -> TimeInterval? {
        let v = value.trimmingCharacters(in: .whitespaces)
        if let seconds = Int(v), seconds >= 0 { return TimeInterval(seconds) }
        let f = DateFormatter()
        f.locale = Locale(identifier: "en_US_POSIX")
        f.timeZone = TimeZone(identifier: "GMT")
        f.dateFormat = "EEE, dd MMM yyyy HH:mm:ss zzz"
        guard let date = f.date(from: v) else { return nil }
        return max(0, date.timeIntervalSince(now))
    }

    public var description: String {
        var s = "\(endpoint.rawValue) \(status) \(code)"
        if let requestID { s += " (requestId \(requestID))" }
        return s
    }
}

/// Everything `AppAttestClient` throws.
public enum AppAttestClientError: Error, Sendable, CustomStringConvertible {
    /// App Attest is not available on this device (and `Configuration.whenUnsupported` is `.fail`).
    case unsupported
    /// The gateway refused, with a code the client does not resolve itself (or resolved once already:
    /// a second `rechallenge` or `reattest` in one send). Carries the gateway's `requestId`.
    case refused(GatewayRefusal)
    /// Still `429`/`503` after `RetryPolicy.maxWaits` waits.
    case rateLimited(GatewayRefusal)
    /// A registration of this account's key failed recently; the client does not attest again before
    /// `until` (`RetryPolicy.registrationCooldown`), so that a failing app does not call Apple's
    /// attestation service at every request.
    case registrationDeferred(until: Date, lastFailure: String)
    /// Apple's attestation service stayed unavailable (`DCError.serverUnavailable`) after
    /// `RetryPolicy.maxWaits` waits.
    case attestationServiceUnavailable
    /// The request cannot be signed as given (a streamed body, a URL whose target or host the
    /// contract cannot bind, a `bind: body` route with a challenge and no `makeBody`…).
    case invalidRequest(String)
    /// The challenge or register endpoint answered outside the contract (e.g. 201 without a challenge).
    case unexpectedResponse(endpoint: GatewayRefusal.Endpoint, status: Int, body: String)
    /// The HTTP exchange failed (`URLError`…). A protected request is not sent again: it may have
    /// reached the gateway.
    case transport(any Error)
    /// The App Attest service failed otherwise (e.g. `DCError.unknownSystemFailure`).
    case service(any Error)
    /// The key id store failed (a Keychain `OSStatus`, a file error).
    case keyStore(any Error)
    /// `makeBody` threw.
    case body(any Error)
    /// The calling task was cancelled.
    case cancelled

    /// The gateway's request id, for refusals.
    public var requestID: String? {
        switch self {
        case .refused(let r), .rateLimited(let r): r.requestID
        default: nil
        }
    }

    /// The gateway's refusal, if this is one.
    public var refusal: GatewayRefusal? {
        switch self {
        case .refused(let r), .rateLimited(let r): r
        default: nil
        }
    }

    public var description: String {
        switch self {
        case .unsupported: "App Attest is not supported on this device"
        case .refused(let r): "refused by the gateway: \(r)"
        case .rateLimited(let r): "still rate limited after waiting: \(r)"
        case .registrationDeferred(let until, let last): "registration deferred until \(until) after: \(last)"
        case .attestationServiceUnavailable: "Apple's attestation service is unavailable"
        case .invalidRequest(let why): "cannot sign this request: \(why)"
        case .unexpectedResponse(let e, let status, let body):
            "\(e.rawValue) endpoint answered \(status) outside the contract: \(body.prefix(200))"
        case .transport(let e): "transport: \(e)"
        case .service(let e): "App Attest service: \(e)"
        case .keyStore(let e): "key id store: \(e)"
        case .body(let e): "makeBody: \(e)"
        case .cancelled: "cancelled"
        }
    }
}
