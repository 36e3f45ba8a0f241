/// Listen addresses (`HOST:PORT`, `[IPv6]:PORT`, `:PORT`) and the URLs of upstreams and Redis.
enum AddressSyntax {
    static func socketAddress(_ text: String) throws(ValueProblem) -> SocketAddressSpec {
        let expected = "must be HOST:PORT, [IPv6]:PORT or :PORT (e.g. 0.0.0.0:8080), got \(quoted(text))"
        guard let (host, portText) = HostSyntax.splitHostPort(Substring(text)) else {
            if text.filter({ $0 == ":" }).count > 1 && !text.hasPrefix("[") {
                throw ValueProblem("needs brackets around an IPv6 address (e.g. [::1]:8080), got \(quoted(text))")
            }
            throw ValueProblem(expected)
        }
        guard let portText else { throw ValueProblem("needs a port: \(expected)") }
        guard let port = HostSyntax.port(portText, allowZero: true) else {
            throw ValueProblem("has an invalid port \(quoted(String(portText))) (0 to 65535), got \(quoted(text))")
        }
        let bracketed = text.hasPrefix("[")
        guard host.isEmpty && !bracketed || (bracketed ? HostSyntax.isIPv6(host) : HostSyntax.isHost(host)) else {
            throw ValueProblem("has an invalid host \(quoted(String(host))), got \(quoted(text))")
        }
        return SocketAddressSpec(host: String(host), port: port)
    }

    /// `demo`, or `http://host[:port][/path]` / `https://…` (ports default to 80 and 443).
    static func upstreamTarget(_ text: String) throws(ValueProblem) -> UpstreamTarget {
        if text == "demo" { return .demo }
        let expected =
            "must be \"demo\" or an http:// or https:// url (e.g. http://127.0.0.1:8081), got \(quoted(text))"
        guard let (scheme, rest) = splitScheme(text) else { throw ValueProblem(expected) }
        let parsedScheme: UpstreamURL.Scheme
        switch scheme {
        case "http": parsedScheme = .http
        case "https": parsedScheme = .https
        default: throw ValueProblem(expected)
        }
        let (host, port, path) = try authorityAndPath(rest, defaultPort: parsedScheme == .https ? 443 : 80, url: text)
        guard path.isEmpty || URLPathSyntax.isPath(path) else {
            throw ValueProblem("has an invalid path \(quoted(path)), got \(quoted(text))")
        }
        return .url(UpstreamURL(scheme: parsedScheme, host: host, port: port, path: path))
    }

    /// `redis://host[:port][/db]`: port defaults to 6379, database to 0.
    static func redisURL(_ text: String) throws(ValueProblem) -> RedisURL {
        let expected = "must be a url redis://HOST[:PORT][/DB] (e.g. redis://127.0.0.1:6379/0), got \(quoted(text))"
        guard let (scheme, rest) = splitScheme(text), scheme == "redis" else { throw ValueProblem(expected) }
        let (host, port, path) = try authorityAndPath(rest, defaultPort: 6379, url: text)
        var database = 0
        if !path.isEmpty && path != "/" {
            let digits = path.dropFirst()
            guard digits.count <= 5, digits.allSatisfy({ $0.isASCII && $0.isNumber }), let number = Int(digits) else {
                throw ValueProblem("has an invalid database number \(quoted(String(digits))), got \(quoted(text))")
            }
            database = number
        }
        return RedisURL(host: host, port: port, database: database)
    }

    private static func splitScheme(_ text: String) -> (scheme: String, rest: Substring)? {
        guard let range = text.firstRange(of: "://") else { return nil }
        return (String(text[..<range.lowerBound]).lowercased(), text[range.upperBound...])
    }

    private static func authorityAndPath(
        _ rest: Substring,
        defaultPort: UInt16,
        url: String
    ) throws(ValueProblem) -> (host: String, port: UInt16, path: String) {
        if rest.contains("?") || rest.contains("#") {
            throw ValueProblem("must not have a query or a fragment, got \(quoted(url))")
        }
        let slash = rest.firstIndex(of: "/") ?? rest.endIndex
        let authority = rest[..<slash]
        let path = String(rest[slash...])
        if authority.contains("@") {
            throw ValueProblem("must not contain credentials (user@), got \(quoted(url))")
        }
        guard let (host, portText) = HostSyntax.splitHostPort(authority), !host.isEmpty else {
            throw ValueProblem("has no valid host, got \(quoted(url))")
        }
        let bracketed = authority.hasPrefix("[")
        guard bracketed ? HostSyntax.isIPv6(host) : HostSyntax.isHost(host) else {
            throw ValueProblem("has an invalid host \(quoted(String(host))), got \(quoted(url))")
        }
        var port = defaultPort
        if let portText {
            guard let value = HostSyntax.port(portText, allowZero: false) else {
                throw ValueProblem("has an invalid port \(quoted(String(portText))) (1 to 65535), got \(quoted(url))")
            }
            port = value
        }
        return (String(host).lowercased(), port, path)
    }
}
