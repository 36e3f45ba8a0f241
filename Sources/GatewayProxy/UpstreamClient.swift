import GatewayHTTP
import GatewayIO

/// A request the gateway makes itself (to Apple's device services), sent whole.
public struct UpstreamRequest: Sendable {
    public var method: String
    /// The request-target, origin-form (`/v1/attestationData`).
    public var target: String
    /// The `Host` field.
    public var authority: String
    /// Further fields, as given (`Authorization`, `Content-Type`).
    public var fields: [(String, String)]
    public var body: [UInt8]

    public init(method: String, target: String, authority: String, fields: [(String, String)] = [], body: [UInt8] = []) {
        self.method = method
        self.target = target
        self.authority = authority
        self.fields = fields
        self.body = body
    }
}

/// A whole response to an `UpstreamRequest`.
public struct UpstreamResponse: Sendable {
    public var status: Int
    public var headers: HTTPFields
    public var body: [UInt8]
}

/// Why an `UpstreamRequest` got no response: the exchange's failure (`ProxyError`: connect, TLS,
/// timeout, a closed or bad response), or a body over the caller's bound.
public enum UpstreamClientError: Error, Equatable, Sendable, CustomStringConvertible {
    case exchange(ProxyError)
    case responseTooLarge(Int)

    public var description: String {
        switch self {
        case .exchange(let e): e.code
        case .responseTooLarge(let limit): "the response body is larger than \(limit) bytes"
        }
    }
}

/// The gateway's own requests through the proxy's upstream machinery: the same pooled keep-alive
/// connections (`UpstreamPool`, TLS from `TLSClientContext` with session resumption), the same
/// `UpstreamExchange` (acquire, head and whole body, response head and body, the acquire and
/// response timers, the one retry of an idempotent request on a reused connection), on the pool's
/// event loop. Each call is a small host of its own exchange that keeps the response instead of
/// streaming it to a client. Loop-confined: call `send` on the pool's loop; the completion runs
/// there.
public final class UpstreamClient {
    public let pool: UpstreamPool
    /// Response bodies larger than this fail the call (the connection is not reused).
    public let maxResponseBytes: Int
    private let forward: Forward
    private let parser = HTTP1Parser()
    /// Calls in flight, held until they complete.
    private var holders: [ObjectIdentifier: UpstreamCall] = [:]

    public init(pool: UpstreamPool, maxResponseBytes: Int = 64 * 1024) {
        self.pool = pool
        self.maxResponseBytes = maxResponseBytes
        forward = Forward(routeName: "client:" + pool.target.name, pool: pool, maxBody: .max)
    }

    public var inFlight: Int { holders.count }

    public func send(_ request: UpstreamRequest, completion: @escaping (Result<UpstreamResponse, UpstreamClientError>) -> Void) {
        let call = UpstreamCall(client: self, request: request, parser: parser, completion: completion)
        holders[ObjectIdentifier(call)] = call
        call.start(forward)
    }

    fileprivate func finished(_ call: UpstreamCall) { holders[ObjectIdentifier(call)] = nil }
}

/// One request of an `UpstreamClient`: the host of its `UpstreamExchange`.
private final class UpstreamCall: UpstreamExchangeHost {
    private unowned let client: UpstreamClient
    private let request: UpstreamRequest
    private let exchange: UpstreamExchange
    private var completion: ((Result<UpstreamResponse, UpstreamClientError>) -> Void)?
    private var status = 0
    private var headers = HTTPFields()
    private var body: [UInt8] = []
    /// The body outgrew the client's bound: the exchange is being failed for it.
    private var tooLarge = false
    private var timerDue: Int64 = .max

    init(
        client: UpstreamClient, request: UpstreamRequest, parser: HTTP1Parser,
        completion: @escaping (Result<UpstreamResponse, UpstreamClientError>) -> Void
    ) {
        self.client = client
        self.request = request
        self.completion = completion
        exchange = UpstreamExchange(loop: client.pool.loop, parser: parser)
    }

    func start(_ forward: Forward) {
        exchange.begin(method: request.method, framing: .contentLength(UInt64(request.body.count)))
        exchange.start(forward, body: request.body, self)
    }

    private func finish(_ result: Result<UpstreamResponse, UpstreamClientError>) {
        guard let done = completion else { return }
        completion = nil
        exchange.end()
        client.finished(self)
        done(result)
    }

    // MARK: UpstreamExchangeHost

    func writeUpstreamHead(_ forward: Forward, framing: BodyFraming, to out: inout HeadWriter) {
        out.appendLatin1(request.method)
        out.append(" ")
        out.appendLatin1(request.target)
        out.append(" HTTP/1.1")
        out.crlf()
        out.appendField("Host", request.authority)
        for (name, value) in request.fields { out.appendField(name, value) }
        if case .contentLength(let n) = framing { out.appendField("Content-Length", String(n)) }
        out.crlf()
    }

    func upstreamRequestDidStart() {}

    func requestAnsweredEarly() {}

    func sendResponseHead(_ head: HTTPResponseHeadLines, from buf: UnsafeRawBufferPointer) -> Bool {
        status = head.status
        headers = head.materialize(buf).headers
        return true
    }

    func sendResponseBody(_ data: UnsafeRawBufferPointer) -> Bool {
        guard body.count + data.count <= client.maxResponseBytes else {
            tooLarge = true  // the exchange fails (the connection is not reused): `exchangeDidFail`
            return false
        }
        body.append(contentsOf: data)
        return true
    }

    var downstreamIsFull: Bool { false }

    func responseDidComplete() {
        finish(.success(UpstreamResponse(status: status, headers: headers, body: body)))
    }

    func exchangeDidFail(_ error: ProxyError) {
        finish(.failure(tooLarge ? .responseTooLarge(client.maxResponseBytes) : .exchange(error)))
    }

    func scheduleTimerCheck(at due: Int64) {
        guard due < timerDue else { return }
        timerDue = due
        let timers = client.pool.loop.timers
        timers.schedule(afterMillis: max(1, due - timers.nowMillis)) { [weak self] in self?.timerCheck(due: due) }
    }

    private func timerCheck(due: Int64) {
        if due == timerDue { timerDue = .max }
        guard completion != nil else { return }
        let next = exchange.checkTimer(now: client.pool.loop.timers.nowMillis, self)
        if next != .max, completion != nil { scheduleTimerCheck(at: next) }
    }

    // MARK: ConnectionDelegate (the upstream connection, while the exchange holds it)

    func connectionDidRead(_ c: Connection) { exchange.upstreamDidRead(self) }
    func connectionDidReadEOF(_ c: Connection) { exchange.upstreamDidEnd(self) }
    func connectionDidDrain(_ c: Connection) {}
    func connectionDidClose(_ c: Connection, error: Socket.Error?) { exchange.upstreamDidEnd(self) }
}
