import GatewayHTTP
import GatewayIO

/// The downstream half of one request: the phases every request goes through, whichever protocol
/// carried it; the twin of `UpstreamExchange`, which a forwarded request is handed to. HTTP/1.1
/// (`HTTP1ServerConnection`) and HTTP/2 (`HTTP2Stream`) are codecs: they parse and frame, keep
/// their flow control and timers, and call these phases in this order. Where the two differ, they
/// differ in their codecs only (docs/architecture.md, "The request's path").
///
/// 1. **check**: the target's path normalised for routing (`PathNormalizer`, here only), a method
///    override refused: `check(method:target:)`.
/// 2. **route**: the router's decision (`RouteDecision`): `route(_:)`, or the HTTP/1.1 entry that
///    builds strings only for the routes that need them.
/// 3. **admit**: the body's policy: a declared length above the route's `max_body` refused from the
///    head (413), and where the body goes: to the upstream as it comes, read whole for a local
///    decision, or nowhere (a local answer): `admit(_:framing:)`.
/// 4. **body**: each body byte counted against the limit, kept when read whole: `take(_:)`.
/// 5. **decide**: a request read whole goes to its route's handler (the attest endpoints, a
///    protected route's gate and the carry-out of its verdict, the demo upstream), which answers or
///    forwards: `decide(_:_:)`.
/// 6. **forward**: the upstream half, `UpstreamExchange`, started by the codec with the `Forward`.
/// 7. **respond**: a local answer's fields (`localFields(_:)`); the upstream's response head goes
///    through `DownstreamResponseHead`.
/// 8. **record**: the access line and metrics: `finish(error:…)` builds the `ExchangeRecord`, here
///    only, and hands it to the router.
///
/// One per HTTP/1.1 connection (`begin` starts each request) and one per HTTP/2 stream.
/// Loop-confined. Hot path: stored properties of a final class, references swapped by `replace`.
final class RequestExchange {
    let router: any RequestRouter

    init(router: any RequestRouter) {
        self.router = router
    }

    // MARK: - The request

    /// The exchange's id (`RequestID`): the client's valid `X-Request-Id`, or a new one.
    private(set) var requestID = RequestID("")
    private(set) var method = "-"
    private(set) var target = "-"
    /// The path routes saw (phase 1).
    private(set) var path = "/"
    private(set) var routeName = "-"
    private(set) var started: UInt64 = 0
    var requestBodyBytes = 0
    var responseBytes = 0
    var responseStatus = 0
    /// The verdict of a protected route's local answer (a refusal), for the access line.
    var responseVerdict: AccessVerdict?
    /// The request's client when a trusted peer named another one (nil: the connection's peer), and
    /// its text; set by the codec (`ClientAddress` over its head).
    var forwardedClient: SocketAddress?
    var forwardedClientHost = "-"

    /// Starts a request: what the codec read of its head (`method` and `target` are "-" for a head
    /// that could not be read).
    @inline(__always)
    func begin(method: String, target: String, requestID: RequestID) {
        replace(&self.method, with: method)
        replace(&self.target, with: target)
        replace(&self.requestID, with: requestID)
        replace(&routeName, with: "-")
        started = EventLoop.monotonicNanos()
        requestBodyBytes = 0
        responseBytes = 0
        responseStatus = 0
        replace(&responseVerdict, with: nil)
        bodyTarget = .discard
        bodyLimit = 0
        replace(&buffered, with: [])
        replace(&bufferedHandler, with: nil)
    }

    // MARK: - 1. Check

    /// The checks that come before routing: nil, with `path` set to the normalised path, or the
    /// error to answer (`ambiguous_path`, `method_override`).
    @inline(__always)
    func check(method: String, target: String) -> ProxyError? {
        guard let normalized = PathNormalizer.normalize(target) else { return .ambiguousPath }
        if RequestSyntax.hasMethodOverride(method: method, target: target) { return .methodOverride }
        replace(&path, with: normalized)
        return nil
    }

    // MARK: - 2. Route

    /// The router's decision for a head of strings (HTTP/2), for `peer` (the request's client).
    func route(_ head: HTTPRequestHead, peer: SocketAddress?) -> RouteDecision {
        router.route(head, path: path, peer: peer, requestID: requestID)
    }

    // MARK: - 3. Admit

    enum BodyTarget { case upstream, buffer, discard }

    /// Where the body goes (`admit`); `discard` for a local answer and once the body is not wanted.
    private(set) var bodyTarget: BodyTarget = .discard
    private(set) var bodyLimit = 0

    /// What the codec does with the request after `admit`.
    enum Admission {
        /// Answered from the head: the body, if any, is not wanted.
        case respond(LocalResponse)
        /// Refused from the head (413 for a declared length above the route's `max_body`).
        case refuse(ProxyError)
        /// To the upstream, the body streamed as it comes (`take`, then the codec writes it).
        case forward(Forward)
        /// The body read whole (`take`), then `decide`.
        case buffer
    }

    /// The decision's body policy for a request framed as `framing`.
    @inline(__always)
    func admit(_ decision: consuming RouteDecision, framing: BodyFraming) -> Admission {
        switch decision {
        case .respond(let name, let r):
            replace(&routeName, with: name)
            bodyTarget = .discard
            return .respond(r)
        case .forward(let f):
            replace(&routeName, with: f.routeName)
            if Self.declaresMore(framing, than: f.maxBody) { return .refuse(.bodyTooLarge) }
            bodyTarget = .upstream
            bodyLimit = f.maxBody
            return .forward(f)
        case .buffer(let maxBody, let name, let handler):
            replace(&routeName, with: name)
            if Self.declaresMore(framing, than: maxBody) { return .refuse(.bodyTooLarge) }
            bodyTarget = .buffer
            bodyLimit = maxBody
            replace(&bufferedHandler, with: handler)
            return .buffer
        }
    }

    /// A Content-Length above the route's limit is refused before any of the body is read.
    private static func declaresMore(_ framing: BodyFraming, than limit: Int) -> Bool {
        if case .contentLength(let n) = framing, n > UInt64(limit) { return true }
        return false
    }

    /// The body is not wanted any more (answered early, or reset): what still comes is dropped.
    @inline(__always)
    func discardBody() {
        bodyTarget = .discard
        replace(&buffered, with: [])
    }

    // MARK: - 4. Body

    /// Body bytes received: counted against the route's limit (false: over it, the codec fails the
    /// request with 413), and kept when the body is read whole.
    @inline(__always)
    func take(_ data: UnsafeRawBufferPointer) -> Bool {
        requestBodyBytes += data.count
        switch bodyTarget {
        case .discard:
            return true
        case .upstream:
            return requestBodyBytes <= bodyLimit
        case .buffer:
            guard requestBodyBytes <= bodyLimit else { return false }
            var b = replace(&buffered, with: [])
            b.append(contentsOf: data)
            replace(&buffered, with: b)
            return true
        }
    }

    // MARK: - 5. Decide

    /// The body read whole (bounded by the route's limit) for the handler.
    private var buffered: [UInt8] = []
    /// The route's handler for a request read whole.
    private var bufferedHandler: ((BufferedRequest, @escaping (BufferedOutcome) -> Void) -> Void)?

    /// Whether a handler waits for the body (a buffered route whose body has not ended yet).
    var awaitsBody: Bool { bufferedHandler != nil }

    /// The request read whole, as its handler gets it: `head` (strings), the body kept, the client
    /// (`forwardedClient`, else `peer`), the forwarding rules of the listener.
    func bufferedRequest(
        head: HTTPRequestHead, peer: SocketAddress?, scheme: String, limits: DownstreamLimits, forwardingPeer: ForwardingPeer?
    ) -> BufferedRequest {
        BufferedRequest(
            head: head, path: path, body: buffered, peer: forwardedClient ?? peer, scheme: scheme,
            dropFoldableNames: limits.dropFoldableNames, forwardingPeer: forwardingPeer, requestID: requestID)
    }

    /// Hands `request` to the route's handler (once); `done` gets its outcome, on the loop.
    func decide(_ request: BufferedRequest, _ done: @escaping (BufferedOutcome) -> Void) {
        guard let handler = replace(&bufferedHandler, with: nil) else { return }
        handler(request, done)
    }

    /// A decided request forwarded: its body, read whole, goes with it (it is the exchange's no more).
    func forwardDecided(_ f: Forward) -> [UInt8] {
        replace(&routeName, with: f.routeName)
        bodyTarget = .discard
        return replace(&buffered, with: [])
    }

    // MARK: - 7. Respond

    /// A local answer's fields as the client gets them: its own, `Content-Length` and the
    /// exchange's `X-Request-Id`. Records its status and verdict.
    @inline(__always)
    func localFields(_ r: LocalResponse) -> HTTPFields {
        var fields = r.headers
        fields.set("Content-Length", String(r.body.count))
        fields.set(RequestID.field, requestID.text)
        responseStatus = r.status
        replace(&responseVerdict, with: r.verdict)
        return fields
    }

    // MARK: - 8. Record

    /// The exchange ended (`error`: why it did not end well): its `ExchangeRecord`, the one place it
    /// is built, goes to the router (access line, metrics, a forwarded decision's `/explain` entry).
    /// `peerHost`: the connection's peer as text (the client, unless a trusted proxy named another).
    @inline(__always)
    func finish(
        error: ProxyError?, upstream: UpstreamExchange, peerHost: String, protocolName: String, httpVersion: StaticString,
        fields: consuming LoggedFields
    ) {
        let now = EventLoop.monotonicNanos()
        let record = ExchangeRecord(
            route: routeName, method: method, target: target, status: responseStatus,
            requestBytes: requestBodyBytes, responseBytes: responseBytes, durationSeconds: Double(now - started) / 1e9,
            upstream: upstream.forward?.pool.target.name, upstreamSeconds: upstream.upstreamSeconds,
            peer: forwardedClient == nil ? peerHost : forwardedClientHost,
            error: error?.code, protocolName: protocolName, requestID: requestID, httpVersion: httpVersion, fields: fields,
            verdict: upstream.forward?.verdict ?? responseVerdict)
        router.exchangeDidFinish(record)
    }
}
