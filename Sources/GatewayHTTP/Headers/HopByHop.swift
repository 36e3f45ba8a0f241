/// Hop-by-hop header rules (RFC 9110 §7.6.1), as Go's ReverseProxy applies them: the fixed list plus
/// every field named in Connection is removed before a message crosses the proxy; `TE: trailers` is
/// kept for requests.
public enum HopByHop {
    public static let fields = [
        "Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "TE", "Trailer",
        "Transfer-Encoding", "Upgrade",
    ]

    public static func strip(_ headers: inout HTTPFields, isRequest: Bool) {
        let keepTrailersTE = isRequest && headers.tokens("TE").contains("trailers")
        // A client may not make the proxy drop Host (or the framing fields, which are rewritten anyway).
        for name in headers.tokens("Connection") where !name.isEmpty && name != "host" { headers.remove(name) }
        for name in fields { headers.remove(name) }
        if keepTrailersTE { headers.append("TE", "trailers") }
    }
}
