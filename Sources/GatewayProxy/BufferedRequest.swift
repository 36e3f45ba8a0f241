import GatewayHTTP
import GatewayIO

extension BodyFraming {
    /// The framing of a body read whole (buffered for a local decision): its length, whatever
    /// framing it arrived with; none when it had none and is empty.
    static func whole(_ original: BodyFraming, count: Int) -> BodyFraming {
        original == .none && count == 0 ? .none : .contentLength(UInt64(count))
    }
}

/// The connection's peer as the forwarding rules see it (`UpstreamRequestHead`): the address that
/// goes last in `X-Forwarded-For`, and whether it is a trusted proxy (`TrustedProxies`).
public struct ForwardingPeer: Sendable {
    public var address: String
    public var trusted: Bool

    public init(address: String, trusted: Bool) {
        self.address = address
        self.trusted = trusted
    }
}

public struct BufferedRequest {
    public let head: HTTPRequestHead
    public let path: String
    public let body: [UInt8]
    /// The request's client (`ClientAddress`): the connection's peer, or the client a trusted proxy
    /// named in X-Forwarded-For. What rate limits and `/explain` count and show.
    public let peer: SocketAddress?
    /// `http` or `https` (a TLS listener): for X-Forwarded-Proto.
    public let scheme: String
    /// The listener's rule for foldable names (`DownstreamLimits.dropFoldableNames`), for a local
    /// handler that forwards (the demo upstream).
    public var dropFoldableNames: Bool = true
    /// The connection's peer when it is a trusted proxy (nil: `peer` is the connection's peer, not
    /// trusted), for a local handler that forwards (the demo upstream).
    public var forwardingPeer: ForwardingPeer? = nil
    /// The exchange's id: refusals are recorded for `/explain` under it.
    public var requestID = RequestID("")
}

public enum BufferedOutcome {
    case respond(LocalResponse)
    case forward(Forward)
}
