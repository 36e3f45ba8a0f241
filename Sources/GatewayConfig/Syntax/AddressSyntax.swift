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

    /// `redis://[user[:password]@]host[:port][/db]` or `rediss://…` (TLS): port defaults to 6379,
    /// database to 0. User and password are percent-decoded (`%40` for `@`); messages never show
    /// the password (it is replaced by `***` in the quoted url).
    static func redisURL(_ text: String) throws(ValueProblem) -> RedisURL {
        let shown = redactedRedisURL(text)
        let expected =
            "must be a url redis://[USER:PASSWORD@]HOST[:PORT][/DB] or rediss://… for TLS (e.g. redis://127.0.0.1:6379/0), got \(quoted(shown))"
        guard let (scheme, rest) = splitScheme(text), scheme == "redis" || scheme == "rediss" else { throw ValueProblem(expected) }
        var authorityAndRest = rest
        var username: String?
        var password: RedisSecret?
        let authorityEnd = rest.firstIndex(where: { $0 == "/" || $0 == "?" || $0 == "#" }) ?? rest.endIndex
        let authority = rest[..<authorityEnd]
        if let at = authority.lastIndex(of: "@") {
            let userinfo = authority[..<at]
            if userinfo.contains("@") {
                throw ValueProblem("has more than one \"@\": write an \"@\" in the user or password as %40, got \(quoted(shown))")
            }
            let colon = userinfo.firstIndex(of: ":")
            let userText = userinfo[..<(colon ?? userinfo.endIndex)]
            if !userText.isEmpty {
                guard let decoded = percentDecoded(userText), !decoded.isEmpty,
                    decoded.allSatisfy({ $0 > 0x20 && $0 < 0x7f })
                else {
                    throw ValueProblem(
                        "has an invalid user (visible ASCII characters, percent-encoded where needed), got \(quoted(shown))")
                }
                username = String(decoding: decoded, as: UTF8.self)
            }
            if let colon {
                let passwordText = userinfo[userinfo.index(after: colon)...]
                guard let decoded = percentDecoded(passwordText) else {
                    throw ValueProblem("has an invalid percent-escape in the password (%XX with two hex digits), got \(quoted(shown))")
                }
                guard !decoded.isEmpty else {
                    throw ValueProblem("has an empty password after \"\(username ?? ""):\", got \(quoted(shown))")
                }
                guard decoded.allSatisfy({ $0 >= 0x20 && $0 != 0x7f }) else {
                    throw ValueProblem("has a control character in the password, got \(quoted(shown))")
                }
                password = RedisSecret(decoded)
            } else if username == nil {
                throw ValueProblem("has an empty user before \"@\", got \(quoted(shown))")
            }
            authorityAndRest = rest[rest.index(after: at)...]
        }
        let (host, port, path) = try authorityAndPath(authorityAndRest, defaultPort: 6379, url: shown)
        var database = 0
        if !path.isEmpty && path != "/" {
            let digits = path.dropFirst()
            guard digits.count <= 5, digits.allSatisfy({ $0.isASCII && $0.isNumber }), let number = Int(digits) else {
                throw ValueProblem("has an invalid database number \(quoted(String(digits))), got \(quoted(shown))")
            }
            database = number
        }
        return RedisURL(host: host, port: port, database: database, tls: scheme == "rediss", username: username, password: password)
    }

    /// A Redis url as messages show it: whatever follows the first ':' of the user information
    /// (the password) replaced by `***`.
    static func redactedRedisURL(_ text: String) -> String {
        guard let schemeEnd = text.firstRange(of: "://") else { return text }
        let rest = text[schemeEnd.upperBound...]
        let authorityEnd = rest.firstIndex(where: { $0 == "/" || $0 == "?" || $0 == "#" }) ?? rest.endIndex
        guard let at = rest[..<authorityEnd].lastIndex(of: "@") else { return text }
        let userinfo = rest[..<at]
        guard let colon = userinfo.firstIndex(of: ":") else { return text }
        return String(text[..<colon]) + ":***" + String(rest[at...])
    }

    /// RFC 3986 percent-decoding; nil for a malformed escape.
    static func percentDecoded(_ text: Substring) -> [UInt8]? {
        var out: [UInt8] = []
        var bytes = Array(text.utf8)[...]
        while let b = bytes.popFirst() {
            guard b == UInt8(ascii: "%") else {
                out.append(b)
                continue
            }
            guard bytes.count >= 2, let hi = hexValue(bytes.removeFirst()), let lo = hexValue(bytes.removeFirst()) else { return nil }
            out.append(hi << 4 | lo)
        }
        return out
    }

    private static func hexValue(_ b: UInt8) -> UInt8? {
        switch b {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): b - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): b - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): b - UInt8(ascii: "A") + 10
        default: nil
        }
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
