/// Hop-by-hop header rules (RFC 9110 §7.6.1), as Go's ReverseProxy applies them: the fixed list plus
/// every field named in Connection is removed before a message crosses the proxy; `TE: trailers` is
/// kept for requests.
/// The fixed list: Connection, Proxy-Connection, Keep-Alive, Proxy-Authenticate, Proxy-Authorization,
/// TE, Trailer, Transfer-Encoding, Upgrade (`isListed`).
public enum HopByHop {
    public static func strip(_ headers: inout HTTPFields, isRequest: Bool) {
        // Without a field of the fixed list there is no Connection field either: nothing to do.
        guard headers.contains(where: { isListed($0.name) }) else { return }
        let keepTrailersTE = isRequest && headers.hasToken("TE", "trailers")
        // Fields named in Connection go too, except Host: a client may not make the proxy drop it (nor
        // the framing fields, which are listed and rewritten anyway). Usually Connection names none
        // ("keep-alive", "close"), and the check below costs no allocation.
        var connection: [String] = []
        for f in headers where f.name.equalsIgnoringASCIICase("Connection") { connection.append(f.value) }
        headers.removeAll { f in
            if isListed(f.name) { return true }
            if connection.isEmpty || f.name.equalsIgnoringASCIICase("Host") { return false }
            return connection.contains { listContains($0, f.name) }
        }
        if keepTrailersTE { headers.append("TE", "trailers") }
    }

    /// The same for a name given as bytes (inlinable: the proxy's writers ask it per field).
    @inlinable
    public static func isListed(_ name: UnsafeRawBufferPointer) -> Bool {
        switch name.count {
        case 2: equalsIgnoringCase(name, "TE")
        case 7: equalsIgnoringCase(name, "Trailer") || equalsIgnoringCase(name, "Upgrade")
        case 10: equalsIgnoringCase(name, "Connection") || equalsIgnoringCase(name, "Keep-Alive")
        case 16: equalsIgnoringCase(name, "Proxy-Connection")
        case 17: equalsIgnoringCase(name, "Transfer-Encoding")
        case 18: equalsIgnoringCase(name, "Proxy-Authenticate")
        case 19: equalsIgnoringCase(name, "Proxy-Authorization")
        default: false
        }
    }

    /// Whether `name` is one of `fields` (case-insensitive), decided on its length first.
    public static func isListed(_ name: String) -> Bool {
        switch name.utf8.count {
        case 2: name.equalsIgnoringASCIICase("TE")
        case 7: name.equalsIgnoringASCIICase("Trailer") || name.equalsIgnoringASCIICase("Upgrade")
        case 10: name.equalsIgnoringASCIICase("Connection") || name.equalsIgnoringASCIICase("Keep-Alive")
        case 16: name.equalsIgnoringASCIICase("Proxy-Connection")
        case 17: name.equalsIgnoringASCIICase("Transfer-Encoding")
        case 18: name.equalsIgnoringASCIICase("Proxy-Authenticate")
        case 19: name.equalsIgnoringASCIICase("Proxy-Authorization")
        default: false
        }
    }
}
