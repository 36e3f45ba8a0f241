/// Why a request header block is malformed (RFC 9113 §8.1.1): the stream is reset with PROTOCOL_ERROR.
public enum HTTP2RequestViolation: Error, Equatable, Sendable, CustomStringConvertible {
    /// §8.2.1: names are lowercase tokens; values carry no NUL, CR, LF nor leading/trailing whitespace.
    case invalidName(String)
    case uppercaseName(String)
    case invalidValue(name: String)
    /// §8.3: only :method, :scheme, :authority, :path in requests.
    case unknownPseudoHeader(String)
    /// §8.3: each pseudo-header at most once.
    case repeatedPseudoHeader(String)
    /// §8.3: every pseudo-header precedes every regular field.
    case pseudoHeaderAfterRegular(String)
    /// §8.3.1: :method, :scheme and a non-empty :path are required (no CONNECT here).
    case missingPseudoHeader(String)
    /// §8.3.1: :path is an origin-form ("/…") or "*" for OPTIONS.
    case invalidPath(String)
    /// §8.2.2: connection-specific fields are malformed in HTTP/2.
    case connectionSpecificField(String)
    /// §8.2.2: TE may only say "trailers".
    case invalidTE(String)
    /// §8.3.1: some authority is needed, and Host may not contradict :authority.
    case missingAuthority
    case authorityMismatch(authority: String, host: String)
    /// RFC 9110 §8.6: one Content-Length value, digits only.
    case invalidContentLength(String)

    public var description: String {
        switch self {
        case .invalidName(let n): "invalid field name \(n.debugDescription)"
        case .uppercaseName(let n): "uppercase field name \(n.debugDescription)"
        case .invalidValue(let n): "invalid value for \(n)"
        case .unknownPseudoHeader(let n): "unknown pseudo-header \(n)"
        case .repeatedPseudoHeader(let n): "repeated pseudo-header \(n)"
        case .pseudoHeaderAfterRegular(let n): "pseudo-header \(n) after a regular field"
        case .missingPseudoHeader(let n): "missing \(n)"
        case .invalidPath(let p): "invalid :path \(p.debugDescription)"
        case .connectionSpecificField(let n): "connection-specific field \(n)"
        case .invalidTE(let v): "te: \(v.debugDescription) (only \"trailers\" is allowed)"
        case .missingAuthority: "neither :authority nor host"
        case .authorityMismatch(let a, let h): ":authority \(a) differs from host \(h)"
        case .invalidContentLength(let v): "invalid content-length \(v.debugDescription)"
        }
    }
}

/// RFC 9113 §8.3 request validation and the mapping of an HTTP/2 request to the gateway's
/// `HTTPRequestHead`, so that routing, assertion checks and proxying run unchanged on h2 streams:
/// method = :method, target = :path, a `Host` field from :authority (placed first; the proxy relies
/// on that), Cookie crumbs
/// joined with "; " (§8.2.3), framing from content-length (else `.none` when the HEADERS frame ended
/// the stream, `.chunked` — length unknown — otherwise). `minorVersion` is 1.
public enum HTTP2RequestHead {
    /// Connection-specific fields (connection, keep-alive, proxy-connection, transfer-encoding, upgrade)
    /// for a lowercase name, decided on its length first (no hashing).
    @inline(__always)
    static func isConnectionSpecific(_ name: String) -> Bool {
        switch name.utf8.count {
        case 7: name == "upgrade"
        case 10: name == "connection" || name == "keep-alive"
        case 16: name == "proxy-connection"
        case 17: name == "transfer-encoding"
        default: false
        }
    }

    public static func make(fields: [HTTPFields.Field], endStream: Bool) throws(HTTP2RequestViolation) -> HTTPRequestHead {
        var method: String?
        var scheme: String?
        var authority: String?
        var path: String?
        // The mapped fields: Host first (its value is known at the end), then the regular fields.
        var regular: [HTTPFields.Field] = []
        regular.reserveCapacity(fields.count + 1)
        regular.append(HTTPFields.Field("Host", ""))
        var cookies: [String] = []
        var cookieIndex: Int?
        var host: String?
        var contentLength: UInt64?
        var sawRegular = false

        for field in fields {
            let name = field.name
            guard !name.isEmpty else { throw .invalidName(name) }
            guard validValue(field.value) else { throw .invalidValue(name: name) }
            if name.utf8.first == UInt8(ascii: ":") {
                guard !sawRegular else { throw .pseudoHeaderAfterRegular(name) }
                func set(_ slot: inout String?) throws(HTTP2RequestViolation) {
                    guard slot == nil else { throw .repeatedPseudoHeader(name) }
                    slot = field.value
                }
                switch name {
                case ":method": try set(&method)
                case ":scheme": try set(&scheme)
                case ":authority": try set(&authority)
                case ":path": try set(&path)
                default: throw .unknownPseudoHeader(name)
                }
                continue
            }
            sawRegular = true
            try checkName(name)
            if isConnectionSpecific(name) { throw .connectionSpecificField(name) }
            switch name {
            case "te":
                guard field.value.lowercased() == "trailers" else { throw .invalidTE(field.value) }
            case "host":
                guard host == nil || host == field.value else { throw .authorityMismatch(authority: host!, host: field.value) }
                host = field.value
                continue
            case "cookie":
                if cookieIndex == nil { cookieIndex = regular.count }
                cookies.append(field.value)
                continue
            case "content-length":
                guard !field.value.isEmpty, field.value.utf8.count <= 19,
                    field.value.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), let n = UInt64(field.value),
                    contentLength == nil || contentLength == n
                else { throw .invalidContentLength(field.value) }
                if contentLength != nil { continue }
                contentLength = n
            default: break
            }
            regular.append(field)
        }

        guard let method else { throw .missingPseudoHeader(":method") }
        guard !method.isEmpty, method.utf8.allSatisfy(HTTPChar.isTchar) else { throw .invalidValue(name: ":method") }
        // CONNECT (§8.5) would make the gateway a tunnel: not offered, so it lacks :scheme/:path like any request.
        guard let scheme, !scheme.isEmpty else { throw .missingPseudoHeader(":scheme") }
        guard let path, !path.isEmpty else { throw .missingPseudoHeader(":path") }
        guard path.utf8.first == UInt8(ascii: "/") || (path == "*" && method == "OPTIONS") else { throw .invalidPath(path) }
        guard path.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7f }) else { throw .invalidPath(path) }
        let effectiveHost: String
        switch (authority, host) {
        case (nil, nil): throw .missingAuthority
        case (let a?, let h?):
            guard a.equalsIgnoringASCIICase(h) else { throw .authorityMismatch(authority: a, host: h) }
            effectiveHost = a
        case (let a?, nil): effectiveHost = a
        case (nil, let h?): effectiveHost = h
        }
        // Its syntax (`RequestSyntax.hostLength`) is checked by the proxy, which answers 400 bad_host
        // as HTTP/1.1 does.

        // Empty crumbs are left out: joined, they would end the value in a space, which no field value
        // may (RFC 9110 §5.5), and an HTTP/1.1 upstream would read another value (found by fuzz/FuzzHTTP2).
        if let cookieIndex {
            regular.insert(HTTPFields.Field("cookie", cookies.filter { !$0.isEmpty }.joined(separator: "; ")), at: cookieIndex)
        }
        regular[0].value = effectiveHost
        let headers = HTTPFields(regular)
        let framing: BodyFraming =
            if let contentLength { .contentLength(contentLength) } else if endStream { .none } else { .chunked }
        return HTTPRequestHead(method: method, target: path, minorVersion: 1, headers: headers, framing: framing)
    }

    static func checkName(_ name: String) throws(HTTP2RequestViolation) {
        for c in name.utf8 {
            if c >= 0x41 && c <= 0x5a { throw .uppercaseName(name) }
            guard HTTPChar.isTchar(c) else { throw .invalidName(name) }
        }
    }

    /// RFC 9113 §8.2.1: no NUL, CR or LF; no leading or trailing SP/HTAB.
    static func validValue(_ value: String) -> Bool {
        if let valid = value.utf8.withContiguousStorageIfAvailable({ b -> Bool in
            guard let f = b.first, let l = b.last else { return true }
            if f == 0x20 || f == 0x09 || l == 0x20 || l == 0x09 { return false }
            for c in b where c == 0 || c == 0x0a || c == 0x0d { return false }
            return true
        }) {
            return valid
        }
        let u = value.utf8
        if let f = u.first, f == 0x20 || f == 0x09 { return false }
        if let l = u.last, l == 0x20 || l == 0x09 { return false }
        return !u.contains { $0 == 0 || $0 == 0x0a || $0 == 0x0d }
    }
}
