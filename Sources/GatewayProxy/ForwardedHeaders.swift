import GatewayHTTP
import GatewayIO

/// The request fields an upstream sees: hop-by-hop fields removed (Go's ReverseProxy rules),
/// forwarding fields set from what the gateway knows rather than what the client claims, Via added.
public enum ForwardedHeaders {
    public static let via = "1.1 attest-gateway"

    /// `X-Forwarded-For` is appended to (a client's list is kept, its own address added), while
    /// `X-Forwarded-Proto` and `X-Forwarded-Host` are replaced: only the gateway knows them.
    public static func rewriteRequest(_ fields: inout HTTPFields, peer: SocketAddress?, proto: String, host: String?) {
        HopByHop.strip(&fields, isRequest: true)
        let client = peer?.host ?? "unknown"
        let prior = fields.values("X-Forwarded-For").joined(separator: ", ")
        fields.remove("X-Forwarded-For")
        fields.append("X-Forwarded-For", prior.isEmpty ? client : "\(prior), \(client)")
        fields.set("X-Forwarded-Proto", proto)
        if let host { fields.set("X-Forwarded-Host", host) } else { fields.remove("X-Forwarded-Host") }
        fields.remove("Forwarded")
        let via = fields.values("Via").joined(separator: ", ")
        fields.remove("Via")
        fields.append("Via", via.isEmpty ? Self.via : "\(via), \(Self.via)")
    }

    public static func rewriteResponse(_ fields: inout HTTPFields) {
        HopByHop.strip(&fields, isRequest: false)
        let via = fields.values("Via").joined(separator: ", ")
        fields.remove("Via")
        fields.append("Via", via.isEmpty ? Self.via : "\(via), \(Self.via)")
    }
}
