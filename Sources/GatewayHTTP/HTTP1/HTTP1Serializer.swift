/// HTTP/1.1 message heads and chunk framing as bytes. Field values were validated by the parser (or
/// are the gateway's own); they are written back as Latin-1 so obs-text passes through unchanged.
public enum HTTP1Serializer {
    public static func requestHead(method: String, target: String, headers: HTTPFields) -> [UInt8] {
        var out = [UInt8]()
        out.reserveCapacity(256 + headers.count * 32)
        appendLatin1(method, &out)
        out.append(0x20)
        appendLatin1(target, &out)
        out += Array(" HTTP/1.1\r\n".utf8)
        appendFields(headers, &out)
        return out
    }

    public static func responseHead(status: Int, reason: String? = nil, headers: HTTPFields, minorVersion: Int = 1) -> [UInt8] {
        var out = [UInt8]()
        out.reserveCapacity(128 + headers.count * 32)
        out += Array("HTTP/1.\(minorVersion) \(status) ".utf8)
        appendLatin1(reason ?? HTTPStatus.reason(status), &out)
        out += [0x0d, 0x0a]
        appendFields(headers, &out)
        return out
    }

    /// One chunk: hex size CRLF data CRLF (empty data writes nothing: use `lastChunk`).
    public static func chunk(_ data: ArraySlice<UInt8>) -> [UInt8] {
        guard !data.isEmpty else { return [] }
        var out = Array(String(data.count, radix: 16).utf8) + [0x0d, 0x0a]
        out.reserveCapacity(out.count + data.count + 2)
        out += data
        out += [0x0d, 0x0a]
        return out
    }

    public static let lastChunk: [UInt8] = Array("0\r\n\r\n".utf8)

    private static func appendFields(_ headers: HTTPFields, _ out: inout [UInt8]) {
        for f in headers {
            appendLatin1(f.name, &out)
            out += [0x3a, 0x20]
            appendLatin1(f.value, &out)
            out += [0x0d, 0x0a]
        }
        out += [0x0d, 0x0a]
    }

    static func appendLatin1(_ s: String, _ out: inout [UInt8]) {
        for u in s.unicodeScalars { out.append(u.value < 256 ? UInt8(u.value) : UInt8(ascii: "?")) }
    }
}

public enum HTTPStatus {
    public static func reason(_ status: Int) -> String {
        switch status {
        case 100: "Continue"
        case 200: "OK"
        case 201: "Created"
        case 204: "No Content"
        case 304: "Not Modified"
        case 400: "Bad Request"
        case 401: "Unauthorized"
        case 403: "Forbidden"
        case 404: "Not Found"
        case 405: "Method Not Allowed"
        case 408: "Request Timeout"
        case 411: "Length Required"
        case 413: "Content Too Large"
        case 414: "URI Too Long"
        case 417: "Expectation Failed"
        case 429: "Too Many Requests"
        case 431: "Request Header Fields Too Large"
        case 500: "Internal Server Error"
        case 501: "Not Implemented"
        case 502: "Bad Gateway"
        case 503: "Service Unavailable"
        case 504: "Gateway Timeout"
        case 505: "HTTP Version Not Supported"
        default: "Status \(status)"
        }
    }
}
