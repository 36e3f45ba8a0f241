import GatewayHTTP
import GatewayIO

/// The request fields an upstream sees: hop-by-hop fields removed (Go's ReverseProxy rules),
/// forwarding fields set from what the gateway knows rather than what the client claims, Via added.
public enum ForwardedHeaders {
    public static let via = "1.1 attest-gateway"

    /// `X-Forwarded-For` is appended to (a client's list is kept, its own address added), while
    /// `X-Forwarded-Proto` and `X-Forwarded-Host` are replaced: only the gateway knows them. The
    /// gateway-owned fields (`GatewayOwnedFields`) go, and client fields with foldable names (`_`,
    /// `.`…: all of them with `dropFoldableNames`, else those that fold into a field the gateway
    /// interprets: `FoldedNames`).
    public static func rewriteRequest(_ fields: inout HTTPFields, peer: SocketAddress?, proto: String, host: String?,
                                      dropFoldableNames: Bool = true)
    {
        rewriteRequest(&fields, client: peer?.host ?? "unknown", proto: proto, host: host, dropFoldableNames: dropFoldableNames)
    }

    /// The same, with the client's address already formatted (a connection formats it once).
    public static func rewriteRequest(_ fields: inout HTTPFields, client: String, proto: String, host: String?,
                                      dropFoldableNames: Bool = true)
    {
        if fields.contains(where: { FoldedNames.isFoldable($0.name) }) {
            fields.removeAll { FoldedNames.isFoldable($0.name) && (dropFoldableNames || FoldedNames.isInterpretedWhenFolded($0.name)) }
        }
        HopByHop.strip(&fields, isRequest: true)
        // One pass removes the forwarding fields, collecting the lists that are extended.
        var prior = ""
        var via = ""
        if fields.contains(where: { isForwardingField($0.name) }) {
            var priorSeen = false
            var viaSeen = false
            for f in fields {
                if f.name.equalsIgnoringASCIICase("X-Forwarded-For") {
                    prior = priorSeen ? prior + ", " + f.value : f.value
                    priorSeen = true
                } else if f.name.equalsIgnoringASCIICase("Via") {
                    via = viaSeen ? via + ", " + f.value : f.value
                    viaSeen = true
                }
            }
            fields.removeAll { isForwardingField($0.name) }
        }
        fields.removeAll { GatewayOwnedFields.all.contains($0.name) }
        fields.append("X-Forwarded-For", prior.isEmpty ? client : prior + ", " + client)
        fields.append("X-Forwarded-Proto", proto)
        if let host { fields.append("X-Forwarded-Host", host) }
        fields.append("Via", via.isEmpty ? Self.via : via + ", " + Self.via)
    }

    /// The response fields a client sees: hop-by-hop fields removed, Content-Length once
    /// (`HTTPFields.collapseContentLength`), Via added.
    public static func rewriteResponse(_ fields: inout HTTPFields) {
        HopByHop.strip(&fields, isRequest: false)
        fields.collapseContentLength()
        guard fields.contains("Via") else {
            fields.append("Via", Self.via)
            return
        }
        let via = fields.values("Via").joined(separator: ", ")
        fields.remove("Via")
        fields.append("Via", via.isEmpty ? Self.via : "\(via), \(Self.via)")
    }

    /// X-Forwarded-For, -Proto, -Host, Forwarded and Via: the fields the gateway rewrites.
    static func isForwardingField(_ name: String) -> Bool {
        switch name.utf8.count {
        case 3: name.equalsIgnoringASCIICase("Via")
        case 9: name.equalsIgnoringASCIICase("Forwarded")
        case 15: name.equalsIgnoringASCIICase("X-Forwarded-For")
        case 16: name.equalsIgnoringASCIICase("X-Forwarded-Host")
        case 17: name.equalsIgnoringASCIICase("X-Forwarded-Proto")
        default: false
        }
    }
}
